//! kubelet-cri: the CRI v1 boundary. `v1` is the API, compiled from
//! k8s.io/cri-api's proto; `client` is the kubelet's typed CRI
//! client over a unix socket; `instrumented` counts and times each of its
//! calls into the kubelet's metrics; `fake` (the cargo feature of that name) is an
//! in-memory runtime serving the same gRPC API on a temp socket, with fault
//! injection, for tests and the bench.

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
pub mod client;

/// The CRI v1 API (k8s.io/cri-api v0.37.2): messages, the RuntimeService
/// and ImageService clients and servers.
#[allow(clippy::all, clippy::pedantic)]
pub mod v1 {
    tonic::include_proto!("runtime.v1");
}
#[cfg(feature = "fake")]
pub mod fake;
pub mod instrumented;
