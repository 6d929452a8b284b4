//! kubelet-core: the pure heart of rkubelet. Everything here is deterministic
//! and free of I/O (no tokio, no tonic, no kube): KubeletConfiguration,
//! static-pod manifests and defaults, the config mux's merge, the pod worker
//! state machine, compute-pod-actions, PLEG diffing, status synthesis and
//! backoff. The `kubelet` crate drives these against the world.

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
// configz's serde_json::json! object has more fields than the default
// macro recursion limit allows.
#![recursion_limit = "256"]

pub mod actions;
pub mod admission;
pub mod backoff;
pub mod cadvisor;
pub mod certificate;
pub mod cgroups;
pub mod checkpoint;
pub mod claim;
pub mod config;
pub mod cpumanager;
pub mod cpuset;
pub mod credentialprovider;
pub mod credentials;
pub mod crilog;
pub mod csi;
pub mod devices;
pub mod dns;
pub mod downward;
pub mod dra;
pub mod duration;
pub mod env;
pub mod envfile;
pub mod events;
pub mod eviction;
pub mod expansion;
pub mod expfmt;
pub mod failure;
pub mod final_status;
pub mod flowcontrol;
pub mod gc;
pub mod imagegc;
pub mod lifecycle;
pub mod logrotation;
pub mod manifest;
pub mod memorymanager;
pub mod metrics;
pub mod nodeshutdown;
pub mod nodestatus;
pub mod oom;
pub mod phase;
pub mod pleg;
pub mod plugins;
pub mod podcert;
pub mod podconfig;
pub mod podspec;
pub mod probe;
pub mod pullrecords;
pub mod qos;
pub mod quantity;
pub mod reference;
pub mod resize;
pub mod resources;
pub mod runtime;
pub mod security;
pub mod stats;
pub mod status;
pub mod strconv;
pub mod swap;
pub mod sysctl;
pub mod systemd;
#[cfg(any(test, feature = "testing"))]
pub mod testing;
pub mod timefmt;
pub mod topologymanager;
pub mod types;
pub mod userns;
pub mod volume;
pub mod workqueue;
