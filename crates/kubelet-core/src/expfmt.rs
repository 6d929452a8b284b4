//! The Prometheus text exposition format as client_golang's gatherer
//! writes it, for the collectors that build their families at each scrape
//! (`/metrics/resource`, `/metrics/cadvisor`): families sorted by name,
//! each with its HELP (behind the stability level where the family has
//! one, as component-base writes it) and TYPE, samples sorted by label
//! values, label names sorted, values as Go formats them, timestamps in
//! milliseconds where a sample has one. A family with no sample is left
//! out.

use std::borrow::Cow;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::metrics::{escape_help, format_float};

/// One metric family: the kubelet's own by static names, or one a
/// runtime describes (CRI metrics) by names it gives.
pub struct Family {
    name: Cow<'static, str>,
    help: Cow<'static, str>,
    /// "STABLE" or "ALPHA" (component-base's), printed in brackets before
    /// the help; None for a raw family (cAdvisor's).
    stability: Option<&'static str>,
    kind: &'static str,
    samples: Vec<Sample>,
}

struct Sample {
    /// Label pairs, sorted by label name.
    labels: Vec<(Cow<'static, str>, String)>,
    value: f64,
    timestamp_ms: Option<i64>,
}

impl Family {
    /// A raw family: `kind` is "counter" or "gauge".
    pub fn new(
        name: impl Into<Cow<'static, str>>,
        kind: &'static str,
        help: impl Into<Cow<'static, str>>,
    ) -> Self {
        Family {
            name: name.into(),
            help: help.into(),
            stability: None,
            kind,
            samples: Vec::new(),
        }
    }

    /// A family registered with a stability level.
    pub fn stable(
        name: &'static str,
        stability: &'static str,
        kind: &'static str,
        help: &'static str,
    ) -> Self {
        Family {
            stability: Some(stability),
            ..Family::new(name, kind, help)
        }
    }

    /// A sample; `labels` sorted by name.
    pub fn push(
        &mut self,
        labels: Vec<(&'static str, String)>,
        value: f64,
        at: Option<SystemTime>,
    ) {
        let labels = labels.into_iter().map(|(k, v)| (Cow::Borrowed(k), v));
        self.push_sample(labels.collect(), value, at);
    }

    /// A sample whose label names are given at run time (a runtime's
    /// metrics); `labels` sorted by name.
    pub fn push_named(
        &mut self,
        labels: Vec<(String, String)>,
        value: f64,
        at: Option<SystemTime>,
    ) {
        let labels = labels.into_iter().map(|(k, v)| (Cow::Owned(k), v));
        self.push_sample(labels.collect(), value, at);
    }

    fn push_sample(
        &mut self,
        labels: Vec<(Cow<'static, str>, String)>,
        value: f64,
        at: Option<SystemTime>,
    ) {
        self.samples.push(Sample {
            labels,
            value,
            timestamp_ms: at.map(unix_millis),
        });
    }
}

/// Milliseconds since the epoch, as client_golang stamps a sample.
fn unix_millis(t: SystemTime) -> i64 {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => i64::try_from(d.as_millis()).unwrap_or(i64::MAX),
        Err(e) => -i64::try_from(e.duration().as_millis()).unwrap_or(i64::MAX),
    }
}

/// The families' text.
pub fn render(mut families: Vec<Family>) -> String {
    families.sort_by(|a, b| a.name.cmp(&b.name));
    let mut out = String::new();
    for family in &mut families {
        if family.samples.is_empty() {
            continue;
        }
        family.samples.sort_by(|a, b| {
            a.labels
                .iter()
                .map(|(_, v)| v)
                .cmp(b.labels.iter().map(|(_, v)| v))
                .then(a.timestamp_ms.cmp(&b.timestamp_ms))
        });
        match family.stability {
            Some(level) => {
                let _ = writeln!(
                    out,
                    "# HELP {} [{level}] {}",
                    family.name,
                    escape_help(&family.help)
                );
            }
            None => {
                let _ = writeln!(out, "# HELP {} {}", family.name, escape_help(&family.help));
            }
        }
        let _ = writeln!(out, "# TYPE {} {}", family.name, family.kind);
        for sample in &family.samples {
            out.push_str(&family.name);
            if !sample.labels.is_empty() {
                out.push('{');
                for (i, (name, value)) in sample.labels.iter().enumerate() {
                    if i > 0 {
                        out.push(',');
                    }
                    let _ = write!(out, "{name}=\"{}\"", escape_label_value(value));
                }
                out.push('}');
            }
            out.push(' ');
            out.push_str(&format_float(sample.value));
            if let Some(ms) = sample.timestamp_ms {
                let _ = write!(out, " {ms}");
            }
            out.push('\n');
        }
    }
    out
}

/// Escape a label value for the text format: backslash, double quote, newline.
fn escape_label_value(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for ch in value.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}
