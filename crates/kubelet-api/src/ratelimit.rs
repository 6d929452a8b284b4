//! kubeAPIQPS/kubeAPIBurst as client-go's token bucket applies them: a tower
//! layer under the kube client, so every request (GETs, watches and their
//! relists, patches) waits for a token and none can forget to. governor
//! keeps the bucket (GCRA, the same admission as a token bucket); it is read
//! on tokio's clock, so tests with paused time see the waits, and the wait
//! is a tokio sleep inside `poll_ready`: the kube client's buffer hands
//! requests over in order, one token each.

use std::future::Future;
use std::num::NonZeroU32;
use std::ops::Add;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use governor::clock::{Clock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::{Instant, Sleep};
use tower::{Layer, Service};

/// tokio's clock for governor: paused time in tests pauses the bucket too.
#[derive(Clone, Copy, Debug, Default)]
pub struct TokioClock;

/// An instant on tokio's clock.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TokioInstant(Instant);

impl Add<Nanos> for TokioInstant {
    type Output = TokioInstant;
    fn add(self, d: Nanos) -> TokioInstant {
        TokioInstant(self.0 + std::time::Duration::from(d))
    }
}

impl Reference for TokioInstant {
    fn duration_since(&self, earlier: Self) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, d: Nanos) -> Self {
        self.0.checked_sub(d.into()).map_or(*self, TokioInstant)
    }
}

impl Clock for TokioClock {
    type Instant = TokioInstant;
    fn now(&self) -> TokioInstant {
        TokioInstant(Instant::now())
    }
}

/// A token bucket on tokio's clock.
pub type Bucket = RateLimiter<NotKeyed, InMemoryState, TokioClock, NoOpMiddleware<TokioInstant>>;

/// `qps` tokens a second, `burst` at once (at least one).
pub fn token_bucket(qps: NonZeroU32, burst: u32) -> Bucket {
    let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
    RateLimiter::direct_with_clock(Quota::per_second(qps).allow_burst(burst), TokioClock)
}

/// `qps` requests a second, `burst` at once; a qps of 0 means unlimited, as
/// upstream.
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    bucket: Option<Arc<Bucket>>,
}

impl RateLimitLayer {
    pub fn new(qps: u32, burst: u32) -> Self {
        let bucket = NonZeroU32::new(qps).map(|qps| Arc::new(token_bucket(qps, burst)));
        RateLimitLayer { bucket }
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimit<S>;

    fn layer(&self, inner: S) -> RateLimit<S> {
        RateLimit {
            inner,
            bucket: self.bucket.clone(),
            wait: None,
            token: false,
        }
    }
}

pub struct RateLimit<S> {
    inner: S,
    bucket: Option<Arc<Bucket>>,
    /// Waiting for the next token.
    wait: Option<Pin<Box<Sleep>>>,
    /// A token is held for the next call.
    token: bool,
}

impl<S, R> Service<R> for RateLimit<S>
where
    S: Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        if let Some(bucket) = &self.bucket {
            while !self.token {
                if let Some(wait) = &mut self.wait {
                    ready!(wait.as_mut().poll(cx));
                    self.wait = None;
                }
                match bucket.check() {
                    Ok(()) => self.token = true,
                    Err(later) => {
                        let d = later.wait_time_from(TokioClock.now());
                        self.wait = Some(Box::pin(tokio::time::sleep(d)));
                    }
                }
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: R) -> S::Future {
        self.token = false;
        self.inner.call(req)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tower::ServiceExt;

    use super::*;

    /// Sends `n` requests one after the other and returns how long they took.
    async fn send(layer: &RateLimitLayer, n: usize) -> Duration {
        let mut svc = layer.layer(tower::service_fn(|()| async { Ok::<_, ()>(()) }));
        let start = Instant::now();
        for _ in 0..n {
            svc.ready().await.unwrap().call(()).await.unwrap();
        }
        start.elapsed()
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_qps() {
        let layer = RateLimitLayer::new(5, 2);
        assert_eq!(send(&layer, 2).await, Duration::ZERO, "the burst is free");
        let third = send(&layer, 1).await;
        assert!(
            third >= Duration::from_millis(199) && third <= Duration::from_millis(201),
            "{third:?}"
        );
        let five = send(&layer, 5).await;
        assert!(five >= Duration::from_millis(999), "{five:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn clones_share_one_bucket() {
        let layer = RateLimitLayer::new(1, 1);
        assert_eq!(send(&layer, 1).await, Duration::ZERO);
        let other = layer.clone();
        assert!(send(&other, 1).await >= Duration::from_millis(999));
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_is_unlimited() {
        assert_eq!(send(&RateLimitLayer::new(0, 1), 100).await, Duration::ZERO);
    }
}
