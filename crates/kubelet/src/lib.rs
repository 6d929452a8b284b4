//! kubelet: the moving parts of rkubelet, named after upstream's packages.
//! Pure decisions live in `kubelet-core`; this crate performs them against
//! the world (files, the CRI runtime, HTTP) on tokio.
//!
//! Three owners of state: the pod manager (desired), the pod workers
//! (actual), the status manager (reported).

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
pub mod allocation;
pub mod certificate;
pub mod clock;
pub mod cm;
pub mod config;
pub mod cpumanager;
pub mod credentialprovider;
pub mod devicemanager;
pub mod dirwatch;
pub mod dra;
pub mod error;
pub mod events;
pub mod eviction;
pub mod files;
pub mod imagegc;
pub mod kubelet;
pub mod kuberuntime;
pub mod logs;
pub mod memorymanager;
pub mod nodeshutdown;
pub mod nodestatus;
pub mod oomwatcher;
pub mod pleg;
pub mod pluginmanager;
pub mod pod_workers;
pub mod podenv;
pub mod podmanager;
pub mod podresources;
pub mod prober;
pub mod pullmanager;
pub mod runtime_state;
pub mod runtimeclass;
pub mod server;
pub mod stats;
pub mod status_manager;
pub mod status_sync;
pub mod sync;
pub mod systemd;
#[cfg(test)]
mod testutil;
pub mod topologymanager;
pub mod userns;
pub mod volumes;

pub use kubelet::{Kubelet, KubeletError, KubeletOptions};
