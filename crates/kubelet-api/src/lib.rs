//! kubelet-api: the API-server boundary. Operations only — the `kubelet`
//! crate runs the loops (node status, lease, status manager sync) that call
//! them. Every request is rate limited (kubeAPIQPS/kubeAPIBurst) and is one
//! the Node authorizer allows a kubelet to make.

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
pub mod client;
pub mod csr;
pub mod metrics;
pub mod node;
pub mod objects;
pub mod pods;
pub mod ratelimit;
pub mod storage;
mod watch;

pub use client::{ApiClient, ApiError};
