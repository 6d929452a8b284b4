//! kubelet-cri: the CRI v1 boundary. `client` is the kubelet's typed CRI
//! client over a unix socket; `instrumented` counts and times each of its
//! calls into the kubelet's metrics; `fake` (the cargo feature of that name) is an
//! in-memory runtime serving the same gRPC API on a temp socket, with fault
//! injection, for tests and the bench.

#![cfg_attr(test, allow(clippy::too_many_lines, reason = "table-driven tests"))]
pub mod client;
#[cfg(feature = "fake")]
pub mod fake;
pub mod instrumented;
