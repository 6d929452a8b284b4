//! Service account tokens for projected volumes (upstream's
//! pkg/kubelet/token): one TokenRequest per (account, audience, lifetime,
//! pod), cached and asked again once 80 % of its lifetime has passed or it
//! is 24 hours old, whichever comes first. The token itself is never logged.

use parking_lot::Mutex;
use std::collections::HashMap;
use std::sync::Arc;

use kubelet_api::objects::request_token;
use kubelet_api::{ApiClient, ApiError};
use kubelet_core::types::PodUid;

use crate::clock::Clock;

/// A token is asked again at the latest this long after it was issued.
const MAX_TTL_SECS: i64 = 24 * 60 * 60;

/// What a projection asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TokenSpec {
    pub namespace: String,
    pub service_account: String,
    pub audience: Option<String>,
    pub expiration_seconds: i64,
    pub pod_name: String,
    pub pod_uid: PodUid,
}

#[derive(Clone)]
struct Cached {
    token: String,
    /// Unix seconds.
    expires: i64,
    /// The lifetime the API server granted, in seconds.
    lifetime: i64,
}

/// Whether a token issued with `lifetime` that expires at `expires` must be
/// asked again at `now` (upstream's requiresRefresh, without its jitter).
pub fn requires_refresh(now: i64, expires: i64, lifetime: i64) -> bool {
    let issued = expires - lifetime;
    now > issued + MAX_TTL_SECS || now > expires - lifetime * 20 / 100
}

#[derive(Clone)]
pub struct TokenManager {
    api: ApiClient,
    clock: Clock,
    cache: Arc<Mutex<HashMap<TokenSpec, Cached>>>,
}

impl TokenManager {
    pub fn new(api: ApiClient, clock: Clock) -> Self {
        TokenManager {
            api,
            clock,
            cache: Arc::default(),
        }
    }

    /// The token for `spec`: the cached one while it is fresh, else a new
    /// one. A failed request falls back to a cached token not yet expired.
    pub async fn get(&self, spec: &TokenSpec) -> Result<String, TokenError> {
        Ok(self.get_expiring(spec).await?.0)
    }

    /// As [`TokenManager::get`], with when the token expires (Unix seconds).
    pub async fn get_expiring(&self, spec: &TokenSpec) -> Result<(String, i64), TokenError> {
        let now = self.clock.now_nanos() / 1_000_000_000;
        let cached = self.cache.lock().get(spec).cloned();
        if let Some(c) = &cached
            && !requires_refresh(now, c.expires, c.lifetime)
        {
            return Ok((c.token.clone(), c.expires));
        }
        let result = request_token(
            &self.api,
            &spec.namespace,
            &spec.service_account,
            spec.audience.iter().cloned().collect(),
            spec.expiration_seconds,
            &spec.pod_name,
            spec.pod_uid.as_str(),
        )
        .await;
        let tr = match result {
            Ok(tr) => tr,
            Err(e) => {
                return match cached {
                    Some(c) if now < c.expires => {
                        tracing::warn!(error = %e, account = %spec.service_account, "refreshing a service account token failed: keeping the current one");
                        Ok((c.token, c.expires))
                    }
                    _ => Err(TokenError::Request(e)),
                };
            }
        };
        let status = tr.status.unwrap_or_default();
        let Some(token) = status.token.filter(|t| !t.is_empty()) else {
            return Err(TokenError::Empty);
        };
        let lifetime = tr
            .spec
            .and_then(|s| s.expiration_seconds)
            .unwrap_or(spec.expiration_seconds);
        let expires = status
            .expiration_timestamp
            .map_or(now + lifetime, |t| t.0.as_second());
        self.cache.lock().insert(
            spec.clone(),
            Cached {
                token: token.clone(),
                expires,
                lifetime,
            },
        );
        Ok((token, expires))
    }

    /// The clock its tokens' lifetimes are read on.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    /// Forget the tokens of a pod that is gone.
    pub fn forget_pod(&self, uid: &PodUid) {
        self.cache.lock().retain(|k, _| &k.pod_uid != uid);
    }
}

/// Why a service account token could not be had (the API server may
/// answer later: retried with back-off).
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    #[error("failed to fetch token: {0}")]
    Request(#[source] ApiError),
    #[error("failed to fetch token: the API server returned none")]
    Empty,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_refreshed_at_80_percent_or_after_a_day() {
        let hour = 3600;
        let cases = [
            // An hour-long token: fresh until 48 minutes in.
            (0, hour, hour, false),
            (48 * 60 - 1, hour, hour, false),
            (48 * 60 + 1, hour, hour, true),
            // A year-long token (the API server's extended kube-api-access
            // tokens): asked again after 24 hours.
            (23 * hour, 365 * 24 * hour, 365 * 24 * hour, false),
            (24 * hour + 1, 365 * 24 * hour, 365 * 24 * hour, true),
        ];
        for (now, expires, lifetime, want) in cases {
            assert_eq!(
                requires_refresh(now, expires, lifetime),
                want,
                "now {now} expires {expires} lifetime {lifetime}"
            );
        }
    }
}
