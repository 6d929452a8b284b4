//! The kubelet's watches (its pods, its Node): kube's watcher, resuming from
//! the last resource version and relisting on 410 Gone, with the kubelet's
//! back-off after a failure: 200 ms doubling to 5 s, so changes are seen
//! within seconds of the API server's return (kube's default climbs to
//! 30 s). The back-off is reset by an event that shows the watch works (an
//! object changed, a relist done), not by the `Init` kube yields before each
//! relist: kube's `StreamBackoff` resets on that too, which keeps a failing
//! list at the first delay for as long as it fails.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::Resource;
use kube::api::Api;
use kube::runtime::watcher::{self, Event};
use kubelet_core::backoff::Backoff;
use serde::de::DeserializeOwned;
use tokio_util::sync::CancellationToken;

pub(crate) struct Watch<K> {
    stream: BoxStream<'static, watcher::Result<Event<K>>>,
    backoff: Backoff,
    /// After a failure: wait this long before the next try.
    wait: Option<Duration>,
}

impl<K> Watch<K>
where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
{
    pub(crate) fn new(api: Api<K>, config: watcher::Config) -> Self {
        Watch {
            stream: watcher::watcher(api, config).boxed(),
            backoff: Backoff::new(Duration::from_millis(200), Duration::from_secs(5)),
            wait: None,
        }
    }

    /// The next event or failure (the next call waits out the back-off);
    /// None once `cancel` fires or the stream ends.
    pub(crate) async fn next(
        &mut self,
        cancel: &CancellationToken,
    ) -> Option<watcher::Result<Event<K>>> {
        if let Some(wait) = self.wait.take() {
            tokio::select! {
                _ = cancel.cancelled() => return None,
                _ = tokio::time::sleep(wait) => {}
            }
        }
        let event = tokio::select! {
            _ = cancel.cancelled() => return None,
            e = self.stream.next() => e?,
        };
        match &event {
            Err(_) => self.wait = Some(self.backoff.next_delay()),
            Ok(Event::Init | Event::InitApply(_)) => {}
            Ok(Event::InitDone | Event::Apply(_) | Event::Delete(_)) => self.backoff.reset(),
        }
        Some(event)
    }
}

/// Watch every object `api` lists under `config` and hand the whole set
/// (in `key` order) to `publish` after each relist and each change; ends
/// when `cancel` fires or `publish` returns false.
pub(crate) async fn watch_set<K, F, Fut>(
    api: Api<K>,
    config: watcher::Config,
    what: &str,
    key: impl Fn(&K) -> String,
    mut publish: F,
    cancel: &CancellationToken,
) where
    K: Resource + Clone + DeserializeOwned + Debug + Send + 'static,
    F: FnMut(Vec<K>) -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let mut watch = Watch::new(api, config);
    let mut set: BTreeMap<String, K> = BTreeMap::new();
    let mut listing: Option<BTreeMap<String, K>> = None;
    while let Some(event) = watch.next(cancel).await {
        let changed = match event {
            Ok(Event::Init) => {
                listing = Some(BTreeMap::new());
                false
            }
            Ok(Event::InitApply(o)) => {
                if let Some(l) = listing.as_mut() {
                    l.insert(key(&o), o);
                }
                false
            }
            Ok(Event::InitDone) => {
                set = listing.take().unwrap_or_default();
                true
            }
            Ok(Event::Apply(o)) => {
                set.insert(key(&o), o);
                true
            }
            Ok(Event::Delete(o)) => set.remove(&key(&o)).is_some(),
            Err(e) => {
                tracing::warn!(error = %e, "watching {what}");
                false
            }
        };
        if changed && !publish(set.values().cloned().collect()).await {
            return;
        }
    }
}
