//! The kubelet's API-server client: a kube client from a kubeconfig (client
//! certificates or bearer tokens), every request first taking a token from a
//! kubeAPIQPS/kubeAPIBurst bucket, and typed errors that keep the HTTP code.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kubelet_core::metrics::KubeletMetrics;
use tokio::time::Instant;

use crate::metrics::RequestMetricsLayer;

/// A failed API request: the verb, what it was about, and why.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ApiError {
    #[error("kubeconfig {path}: {message}")]
    Kubeconfig { path: String, message: String },
    #[error("{verb} {what}: HTTP {code} {reason}: {message}")]
    Status {
        verb: &'static str,
        what: String,
        code: u16,
        reason: String,
        message: String,
    },
    #[error("{verb} {what}: {message}")]
    Transport {
        verb: &'static str,
        what: String,
        message: String,
    },
}

impl ApiError {
    /// Wrap a kube error for `verb` on `what`; a 403 is logged with what was
    /// asked, since under NodeRestriction it means the kubelet overstepped.
    pub fn from_kube(verb: &'static str, what: impl Into<String>, e: kube::Error) -> Self {
        let what = what.into();
        match e {
            kube::Error::Api(s) => {
                if s.code == 403 {
                    tracing::error!(verb, %what, message = %s.message, "forbidden by the API server");
                }
                ApiError::Status {
                    verb,
                    what,
                    code: s.code,
                    reason: s.reason.clone(),
                    message: s.message.clone(),
                }
            }
            other => ApiError::Transport {
                verb,
                what,
                message: other.to_string(),
            },
        }
    }

    pub fn code(&self) -> Option<u16> {
        match self {
            ApiError::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    pub fn is_not_found(&self) -> bool {
        self.code() == Some(404)
    }

    /// 409: AlreadyExists on create, Conflict on update.
    pub fn is_conflict(&self) -> bool {
        self.code() == Some(409)
    }

    /// 422: the API server's validation refused the request; sending it
    /// again changes nothing.
    pub fn is_invalid(&self) -> bool {
        self.code() == Some(422)
    }
}

/// A token bucket: `qps` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub struct RateLimiter {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl RateLimiter {
    pub fn new(qps: u32, burst: u32) -> Self {
        let burst = f64::from(burst.max(1));
        RateLimiter {
            qps: f64::from(qps),
            burst,
            state: Mutex::new((burst, Instant::now())),
        }
    }

    /// Wait for a token. A qps of 0 means unlimited, as upstream.
    pub async fn acquire(&self) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut s = self.state.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                s.0 = (s.0 + now.duration_since(s.1).as_secs_f64() * self.qps).min(self.burst);
                s.1 = now;
                if s.0 >= 1.0 {
                    s.0 -= 1.0;
                    return;
                }
                Duration::from_secs_f64((1.0 - s.0) / self.qps)
            };
            tokio::time::sleep(wait).await;
        }
    }
}

/// The API client every kubelet request goes through.
#[derive(Clone)]
pub struct ApiClient {
    client: kube::Client,
    limiter: Arc<RateLimiter>,
}

impl ApiClient {
    pub fn new(client: kube::Client, qps: u32, burst: u32) -> Self {
        ApiClient {
            client,
            limiter: Arc::new(RateLimiter::new(qps, burst)),
        }
    }

    /// A client from a kubeconfig file (its current context); every
    /// response is counted in `metrics` (rest_client_requests_total).
    pub async fn from_kubeconfig(
        path: &Path,
        qps: u32,
        burst: u32,
        metrics: KubeletMetrics,
    ) -> Result<Self, ApiError> {
        let err = |message: String| ApiError::Kubeconfig {
            path: path.display().to_string(),
            message,
        };
        let kc = kube::config::Kubeconfig::read_from(path).map_err(|e| err(e.to_string()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kc, &kube::config::KubeConfigOptions::default())
                .await
                .map_err(|e| err(e.to_string()))?;
        let layer = RequestMetricsLayer {
            metrics,
            host: config
                .cluster_url
                .authority()
                .map(|a| a.to_string())
                .unwrap_or_default(),
        };
        let client = kube::client::ClientBuilder::try_from(config)
            .map_err(|e| err(e.to_string()))?
            .with_layer(&layer)
            .build();
        Ok(ApiClient::new(client, qps, burst))
    }

    /// The same connection with a budget of its own (events use
    /// eventRecordQPS/eventBurst, apart from kubeAPIQPS).
    pub fn with_limits(&self, qps: u32, burst: u32) -> Self {
        ApiClient::new(self.client.clone(), qps, burst)
    }

    /// The kube client, once the rate limiter allows one more request.
    pub async fn ready(&self) -> &kube::Client {
        self.limiter.acquire().await;
        &self.client
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn bucket_allows_burst_then_qps() {
        let l = RateLimiter::new(5, 2);
        let start = Instant::now();
        l.acquire().await;
        l.acquire().await;
        assert_eq!(start.elapsed(), Duration::ZERO, "the burst is free");
        l.acquire().await;
        let after_third = start.elapsed();
        assert!(
            after_third >= Duration::from_millis(199) && after_third <= Duration::from_millis(201),
            "{after_third:?}"
        );
        for _ in 0..5 {
            l.acquire().await;
        }
        let total = start.elapsed();
        assert!(total >= Duration::from_millis(1199), "{total:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn zero_qps_is_unlimited() {
        let l = RateLimiter::new(0, 1);
        let start = Instant::now();
        for _ in 0..100 {
            l.acquire().await;
        }
        assert_eq!(start.elapsed(), Duration::ZERO);
    }
}
