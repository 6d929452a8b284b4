//! klog's JSON log format (`logging.format: json`, component-base's
//! logs/json): one object per line, `ts` (milliseconds since the epoch, a
//! float), `caller` (`dir/file:line`), `msg`, then `v` for info lines (the
//! klog level: info 0, debug 4, trace 5; none for warnings and errors),
//! then the span's and the event's fields, and last an error's `err`.
//! Written by hand over serde_json: tracing-subscriber's own JSON format
//! needs a crate the lockfile does not have, and its keys are not klog's.

use std::io::Write as _;
use std::time::SystemTime;

use serde_json::Value;
use tracing::field::{Field, Visit};
use tracing::{Level, Metadata, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::Context;
use tracing_subscriber::registry::LookupSpan;

/// A span's or an event's fields, in order.
#[derive(Default)]
struct Fields(Vec<(&'static str, Value)>);

impl Fields {
    fn set(&mut self, name: &'static str, value: Value) {
        match self.0.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => self.0.push((name, value)),
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field.name(), Value::from(value));
    }
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field.name(), Value::from(value));
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field.name(), Value::from(value));
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.set(field.name(), Value::from(value));
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.set(field.name(), Value::from(value));
    }
    fn record_error(&mut self, field: &Field, value: &(dyn std::error::Error + 'static)) {
        self.set(field.name(), Value::from(value.to_string()));
    }
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.set(field.name(), Value::from(format!("{value:?}")));
    }
}

/// The layer writing JSON lines to `writer` (per level: a split stream
/// sends errors one way, the rest another).
pub struct JsonLayer<W> {
    writer: W,
}

impl<W> JsonLayer<W> {
    pub fn new(writer: W) -> Self {
        JsonLayer { writer }
    }
}

impl<S, W> Layer<S> for JsonLayer<W>
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    W: for<'w> MakeWriter<'w> + 'static,
{
    fn on_new_span(
        &self,
        attrs: &tracing::span::Attributes<'_>,
        id: &tracing::span::Id,
        ctx: Context<'_, S>,
    ) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(fields);
        }
    }

    fn on_record(
        &self,
        id: &tracing::span::Id,
        values: &tracing::span::Record<'_>,
        ctx: Context<'_, S>,
    ) {
        if let Some(span) = ctx.span(id)
            && let Some(fields) = span.extensions_mut().get_mut::<Fields>()
        {
            values.record(fields);
        }
    }

    fn on_event(&self, event: &tracing::Event<'_>, ctx: Context<'_, S>) {
        let mut context = Vec::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(fields) = span.extensions().get::<Fields>() {
                    context.extend(fields.0.iter().cloned());
                }
            }
        }
        let mut fields = Fields::default();
        event.record(&mut fields);
        let millis = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0.0, |d| d.as_nanos() as f64 / 1e6);
        let mut line = render(event.metadata(), millis, context, fields.0);
        line.push('\n');
        let _ = self
            .writer
            .make_writer_for(event.metadata())
            .write_all(line.as_bytes());
    }
}

/// klog's verbosity of a level; none for warnings and errors.
fn klog_v(level: &Level) -> Option<u8> {
    match *level {
        Level::ERROR | Level::WARN => None,
        Level::INFO => Some(0),
        Level::DEBUG => Some(4),
        Level::TRACE => Some(5),
    }
}

/// `dir/file:line`, as zap's short caller.
fn caller(meta: &Metadata<'_>) -> String {
    let file = meta.file().unwrap_or("unknown");
    let mut parts = file.rsplit('/');
    let name = parts.next().unwrap_or(file);
    let short = match parts.next() {
        Some(dir) => format!("{dir}/{name}"),
        None => name.to_owned(),
    };
    format!("{short}:{}", meta.line().unwrap_or(0))
}

/// One line: `ts`, `caller`, `msg`, `v`, the span's fields, the event's,
/// and an error's `err` last.
fn render(
    meta: &Metadata<'_>,
    millis: f64,
    context: Vec<(&'static str, Value)>,
    fields: Vec<(&'static str, Value)>,
) -> String {
    let mut msg = Value::from("");
    let mut err = None;
    let mut rest = context;
    for (name, value) in fields {
        match name {
            "message" => msg = value,
            "error" | "err" => err = Some(value),
            _ => rest.push((name, value)),
        }
    }
    let mut out = format!(
        "{{\"ts\":{},\"caller\":{},\"msg\":{msg}",
        Value::from(millis),
        Value::from(caller(meta))
    );
    if let Some(v) = klog_v(meta.level()) {
        out.push_str(&format!(",\"v\":{v}"));
    }
    rest.extend(err.map(|e| ("err", e)));
    for (name, value) in &rest {
        out.push_str(&format!(",{}:{value}", Value::from(*name)));
    }
    out.push('}');
    out
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use parking_lot::Mutex;

    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    /// Lines written, for the test to read.
    #[derive(Clone, Default)]
    struct Lines(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Lines {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.lock().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl<'a> MakeWriter<'a> for Lines {
        type Writer = Lines;
        fn make_writer(&'a self) -> Lines {
            self.clone()
        }
    }

    #[test]
    fn lines_carry_klogs_keys_in_klogs_order() {
        let lines = Lines::default();
        let subscriber = tracing_subscriber::registry().with(JsonLayer::new(lines.clone()));
        tracing::subscriber::with_default(subscriber, || {
            let span = tracing::info_span!("pod_worker", pod = "default/web", attempt = 2);
            let _in = span.enter();
            tracing::info!(container = "app", "started container");
            tracing::debug!("probe passed");
            let e = std::io::Error::other("timeout");
            tracing::error!(error = %e, count = 1, "Failed to update pod status");
            tracing::warn!("low on disk");
        });
        let text = String::from_utf8(lines.0.lock().clone()).unwrap();
        let got: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // serde_json sorts an object's keys: the order is read off the text.
        let order: Vec<Vec<&str>> = text
            .lines()
            .map(|l| {
                let mut names = Vec::new();
                let mut rest = l;
                while let Some(i) = rest.find("\":") {
                    let start = rest[..i].rfind('"').unwrap();
                    names.push(&rest[start + 1..i]);
                    rest = &rest[i + 2..];
                }
                names
            })
            .collect();
        assert_eq!(
            order[0],
            ["ts", "caller", "msg", "v", "pod", "attempt", "container"]
        );
        assert_eq!(got[0]["msg"], "started container");
        assert_eq!(got[0]["v"], 0);
        assert_eq!(got[0]["pod"], "default/web");
        assert_eq!(got[0]["attempt"], 2);
        assert!(
            got[0]["caller"]
                .as_str()
                .unwrap()
                .starts_with("src/jsonlog.rs:")
        );
        assert!(got[0]["ts"].as_f64().unwrap() > 1.7e12, "milliseconds");
        assert_eq!(got[1]["v"], 4);
        assert_eq!(
            order[2],
            ["ts", "caller", "msg", "pod", "attempt", "count", "err"]
        );
        assert_eq!(got[2]["err"], "timeout");
        assert!(got[3].get("v").is_none(), "no v on a warning");
    }
}
