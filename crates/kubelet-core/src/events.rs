//! The event correlator (client-go's `tools/record/events_cache.go`, which upstream's
//! kubelet records every event through): before an event is written,
//!
//! - the **aggregator** counts, per source, object, type and reason, the distinct messages
//!   seen within 10 minutes of each other: from the 10th on, the event is replaced by one
//!   whose message is `(combined from similar events): <message>`;
//! - the **logger** (dedup) recognises an event seen before (same source, object, field
//!   path, type, reason and message; a combined one by its aggregate): it is written as a
//!   patch of the existing object with count + 1 and a new lastTimestamp, not as a new one;
//! - the **spam filter** gives each object (and event type) a token bucket of 25, refilled
//!   one every 5 minutes; an event without a token is dropped.
//!
//! Each cache keeps its 4096 most recently used keys. Pure: times are nanoseconds since the
//! epoch, passed in; the event sender does the writing and reports back what the API server
//! holds ([`EventCorrelator::update_state`]).

use std::collections::BTreeSet;
use std::num::NonZeroUsize;

use k8s_openapi::api::core::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use lru::LruCache;

use crate::flowcontrol::TokenBucket;

/// Keys each cache remembers (upstream's maxLruCacheEntries).
pub const CACHE_ENTRIES: usize = 4096;
/// Distinct messages of similar events before they are combined (defaultAggregateMaxEvents).
pub const AGGREGATE_MAX_EVENTS: usize = 10;
/// How long similar events count towards combining (defaultAggregateIntervalInSeconds).
pub const AGGREGATE_INTERVAL_NANOS: i64 = 600 * 1_000_000_000;
/// Events an object may have at once (defaultSpamBurst).
pub const SPAM_BURST: f64 = 25.0;
/// Tokens an object gets back per second (defaultSpamQPS: one every 5 minutes).
pub const SPAM_QPS: f64 = 1.0 / 300.0;

/// The prefix of a combined event's message (EventAggregatorByReasonMessageFunc).
pub const COMBINED_PREFIX: &str = "(combined from similar events): ";

/// What to write for a recorded event.
#[derive(Clone, Debug, PartialEq)]
pub enum Correlated {
    /// Create this event.
    Create(Event),
    /// The event was seen before: patch the object named in `event` with `patch` (its
    /// count, lastTimestamp and message); should that object be gone, create `event`.
    Patch {
        event: Event,
        patch: serde_json::Value,
    },
    /// Dropped by the spam filter.
    Skip,
}

#[derive(Clone, Debug)]
struct AggregateRecord {
    messages: BTreeSet<String>,
    last: i64,
}

/// What the logger remembers of an event it let through.
#[derive(Clone, Debug)]
struct EventLog {
    count: i32,
    first_timestamp: Option<Time>,
    name: String,
    resource_version: Option<String>,
}

impl EventLog {
    fn of(e: &Event) -> Self {
        EventLog {
            count: e.count.unwrap_or(1),
            first_timestamp: e.first_timestamp.clone(),
            name: e.metadata.name.clone().unwrap_or_default(),
            resource_version: e.metadata.resource_version.clone(),
        }
    }
}

/// The correlator: one per event sender, fed every event in order.
#[derive(Debug)]
pub struct EventCorrelator {
    aggregates: LruCache<String, AggregateRecord>,
    logs: LruCache<String, EventLog>,
    spam: LruCache<String, TokenBucket>,
}

impl Default for EventCorrelator {
    fn default() -> Self {
        let entries = NonZeroUsize::new(CACHE_ENTRIES).expect("CACHE_ENTRIES > 0");
        EventCorrelator {
            aggregates: LruCache::new(entries),
            logs: LruCache::new(entries),
            spam: LruCache::new(entries),
        }
    }
}

fn opt(s: &Option<String>) -> &str {
    s.as_deref().unwrap_or("")
}

/// Source, involved object (without its field path) and type: what the keys below share.
fn object_key_parts(e: &Event) -> Vec<&str> {
    let source = e.source.as_ref();
    let o = &e.involved_object;
    vec![
        source.map_or("", |s| opt(&s.component)),
        source.map_or("", |s| opt(&s.host)),
        opt(&o.kind),
        opt(&o.namespace),
        opt(&o.name),
        opt(&o.uid),
        opt(&o.api_version),
        opt(&e.type_),
    ]
}

/// Upstream's getEventKey: the event exactly (object with its field path, reason, message).
pub fn event_key(e: &Event) -> String {
    let mut parts = object_key_parts(e);
    parts.extend([
        opt(&e.involved_object.field_path),
        opt(&e.reason),
        opt(&e.message),
    ]);
    parts.join("\0")
}

/// Upstream's EventAggregatorByReasonFunc: similar events share this key.
pub fn aggregate_key(e: &Event) -> String {
    let mut parts = object_key_parts(e);
    parts.extend([
        opt(&e.reason),
        opt(&e.reporting_component),
        opt(&e.reporting_instance),
    ]);
    parts.join("\0")
}

/// Upstream's getSpamKey: the object and the event type.
pub fn spam_key(e: &Event) -> String {
    object_key_parts(e).join("\0")
}

fn time_at(now: i64) -> Time {
    Time(Timestamp::from_second(now.div_euclid(1_000_000_000)).unwrap_or(Timestamp::UNIX_EPOCH))
}

impl EventCorrelator {
    /// Decides what to write for `event`, recorded at `now`.
    pub fn correlate(&mut self, event: Event, now: i64) -> Correlated {
        let (event, key) = self.aggregate(event, now);
        let (event, patch) = self.observe(event, key);
        if !self
            .spam
            .get_or_insert_mut(spam_key(&event), || {
                TokenBucket::full(SPAM_QPS, SPAM_BURST, now)
            })
            .try_take(now)
        {
            return Correlated::Skip;
        }
        match patch {
            Some(patch) => Correlated::Patch { event, patch },
            None => Correlated::Create(event),
        }
    }

    /// Records what the API server holds after a write (name, resourceVersion, count), so
    /// the next occurrence patches that object.
    pub fn update_state(&mut self, written: &Event) {
        self.logs.put(event_key(written), EventLog::of(written));
    }

    /// Upstream's EventAggregate: the event itself and its key for the logger, or, for the
    /// 10th distinct message of similar events within the interval, a combined event and
    /// the aggregate key. Of the messages counted, the newest is forgotten when combining
    /// (upstream forgets an arbitrary one), so the first nine keep being told apart.
    fn aggregate(&mut self, event: Event, now: i64) -> (Event, String) {
        let key = aggregate_key(&event);
        let message = opt(&event.message).to_owned();
        let record = self
            .aggregates
            .get_or_insert_mut(key.clone(), || AggregateRecord {
                messages: BTreeSet::new(),
                last: now,
            });
        if now.saturating_sub(record.last) > AGGREGATE_INTERVAL_NANOS {
            record.messages.clear();
        }
        let new_message = record.messages.insert(message.clone());
        record.last = now;
        if record.messages.len() < AGGREGATE_MAX_EVENTS {
            let key = event_key(&event);
            return (event, key);
        }
        if new_message {
            record.messages.remove(&message);
        }
        let involved = event.involved_object.name.clone().unwrap_or_default();
        let combined = Event {
            metadata: ObjectMeta {
                name: Some(format!("{involved}.{:x}", now)),
                namespace: event.metadata.namespace.clone(),
                ..Default::default()
            },
            count: Some(1),
            first_timestamp: Some(time_at(now)),
            last_timestamp: Some(time_at(now)),
            message: Some(format!("{COMBINED_PREFIX}{message}")),
            involved_object: event.involved_object,
            type_: event.type_,
            reason: event.reason,
            source: event.source,
            ..Default::default()
        };
        (combined, key)
    }

    /// Upstream's eventObserve: an event seen before under `key` takes the existing
    /// object's name, resourceVersion and firstTimestamp and the next count, and comes with
    /// the patch that writes it.
    fn observe(&mut self, mut event: Event, key: String) -> (Event, Option<serde_json::Value>) {
        let mut patch = None;
        if let Some(last) = self.logs.get(&key).filter(|l| l.count > 0) {
            event.metadata.name = Some(last.name.clone());
            event.metadata.resource_version = last.resource_version.clone();
            event.first_timestamp = last.first_timestamp.clone();
            event.count = Some(last.count.saturating_add(1));
            patch = Some(serde_json::json!({
                "count": event.count,
                "lastTimestamp": event.last_timestamp,
                "message": event.message,
            }));
        }
        self.logs.put(key, EventLog::of(&event));
        (event, patch)
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{EventSource, ObjectReference};

    use super::*;

    const SEC: i64 = 1_000_000_000;
    const T0: i64 = 1_700_000_000 * SEC;

    /// An event as the kubelet's recorder makes it, at `at`.
    fn event(pod: &str, container: Option<&str>, reason: &str, message: &str, at: i64) -> Event {
        Event {
            metadata: ObjectMeta {
                name: Some(format!("{pod}.{at:x}")),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Pod".into()),
                name: Some(pod.into()),
                namespace: Some("default".into()),
                uid: Some(format!("uid-{pod}")),
                field_path: container.map(|c| format!("spec.containers{{{c}}}")),
                ..Default::default()
            },
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some("Warning".into()),
            source: Some(EventSource {
                component: Some("kubelet".into()),
                host: Some("node1".into()),
            }),
            first_timestamp: Some(time_at(at)),
            last_timestamp: Some(time_at(at)),
            count: Some(1),
            reporting_component: Some("kubelet".into()),
            reporting_instance: Some("node1".into()),
            ..Default::default()
        }
    }

    fn failed(message: &str, at: i64) -> Event {
        event("p", Some("c"), "Failed", message, at)
    }

    #[test]
    fn keys() {
        let base = failed("Error: x", T0);
        // (what differs, same event key, same aggregate key, same spam key)
        let cases = [
            ("the time", failed("Error: x", T0 + SEC), true, true, true),
            ("the message", failed("Error: y", T0), false, true, true),
            (
                "the container",
                event("p", Some("d"), "Failed", "Error: x", T0),
                false,
                true,
                true,
            ),
            (
                "the reason",
                event("p", Some("c"), "BackOff", "Error: x", T0),
                false,
                false,
                true,
            ),
            (
                "the pod",
                event("q", Some("c"), "Failed", "Error: x", T0),
                false,
                false,
                false,
            ),
        ];
        for (what, other, same_event, same_aggregate, same_spam) in cases {
            assert_eq!(event_key(&other) == event_key(&base), same_event, "{what}");
            assert_eq!(
                aggregate_key(&other) == aggregate_key(&base),
                same_aggregate,
                "{what}"
            );
            assert_eq!(spam_key(&other) == spam_key(&base), same_spam, "{what}");
        }
        let mut normal = base.clone();
        normal.type_ = Some("Normal".into());
        assert_ne!(spam_key(&normal), spam_key(&base));
    }

    #[test]
    fn a_repeated_event_patches_the_first_one() {
        let mut c = EventCorrelator::default();
        let first = failed("Error: x", T0);
        assert_eq!(
            c.correlate(first.clone(), T0),
            Correlated::Create(first.clone())
        );
        // The API server's copy has a resourceVersion.
        let mut written = first.clone();
        written.metadata.resource_version = Some("7".into());
        c.update_state(&written);
        for (n, at) in [(2, T0 + SEC), (3, T0 + 60 * SEC)] {
            let Correlated::Patch { event, patch } = c.correlate(failed("Error: x", at), at) else {
                panic!("occurrence {n} is a patch");
            };
            assert_eq!(event.metadata.name, first.metadata.name);
            assert_eq!(event.first_timestamp, first.first_timestamp);
            assert_eq!(event.count, Some(n));
            let want = serde_json::json!({
                "count": n,
                "lastTimestamp": time_at(at),
                "message": "Error: x",
            });
            assert_eq!(patch, want);
            assert_eq!(event.metadata.resource_version.as_deref(), Some("7"));
        }
        // Another message is another event.
        let other = failed("Error: y", T0 + 61 * SEC);
        assert_eq!(
            c.correlate(other.clone(), T0 + 61 * SEC),
            Correlated::Create(other)
        );
    }

    #[test]
    fn similar_events_are_combined_from_the_tenth_message() {
        let mut c = EventCorrelator::default();
        let mut at = T0;
        for i in 0..9 {
            at += SEC;
            let e = failed(&format!("Error: {i}"), at);
            assert_eq!(
                c.correlate(e.clone(), at),
                Correlated::Create(e),
                "message {i}"
            );
        }
        // The tenth distinct message: a combined event.
        at += SEC;
        let Correlated::Create(combined) = c.correlate(failed("Error: 9", at), at) else {
            panic!("the combined event is created");
        };
        assert_eq!(
            combined.message.as_deref(),
            Some("(combined from similar events): Error: 9")
        );
        assert_eq!(
            (combined.count, combined.reason.as_deref()),
            (Some(1), Some("Failed"))
        );
        assert_eq!(combined.metadata.name, Some(format!("p.{at:x}")));
        assert_eq!(combined.metadata.namespace.as_deref(), Some("default"));
        // More new messages patch the combined event; an old one still patches its own.
        at += SEC;
        let Correlated::Patch { event, patch } = c.correlate(failed("Error: 10", at), at) else {
            panic!("a patch of the combined event");
        };
        assert_eq!(
            (event.metadata.name, event.count),
            (combined.metadata.name.clone(), Some(2))
        );
        assert_eq!(
            patch["message"],
            "(combined from similar events): Error: 10"
        );
        at += SEC;
        let Correlated::Patch { event, .. } = c.correlate(failed("Error: 3", at), at) else {
            panic!("a patch of the event of message 3");
        };
        assert_eq!(event.message.as_deref(), Some("Error: 3"));
        assert_eq!(event.count, Some(2));
        // Ten quiet minutes later the count starts over.
        at += AGGREGATE_INTERVAL_NANOS + SEC;
        let e = failed("Error: 11", at);
        assert_eq!(c.correlate(e.clone(), at), Correlated::Create(e));
    }

    #[test]
    fn spam_filter_allows_25_then_one_per_5_minutes_per_object() {
        let mut c = EventCorrelator::default();
        let reasons = ["Failed", "BackOff", "Pulling", "Killing", "Unhealthy"];
        let mut written = 0;
        for i in 0..30 {
            // Distinct reasons and messages: neither combined nor deduplicated.
            let e = event("p", None, reasons[i % 5], &format!("m{i}"), T0);
            if c.correlate(e, T0) != Correlated::Skip {
                written += 1;
            }
        }
        assert_eq!(written, 25);
        // Another object has its own bucket.
        let other = event("q", None, "Failed", "m", T0);
        assert!(matches!(c.correlate(other, T0), Correlated::Create(_)));
        // One token back after 5 minutes, not before.
        let at = T0 + 299 * SEC;
        assert_eq!(
            c.correlate(event("p", None, "Failed", "late", at), at),
            Correlated::Skip
        );
        let at = T0 + 301 * SEC;
        assert!(matches!(
            c.correlate(event("p", None, "Failed", "later", at), at),
            Correlated::Create(_)
        ));
        assert_eq!(
            c.correlate(event("p", None, "Failed", "again", at), at),
            Correlated::Skip
        );
    }
}
