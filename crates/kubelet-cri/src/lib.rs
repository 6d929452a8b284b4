//! kubelet-cri: the CRI v1 boundary. `client` is the kubelet's typed CRI
//! client over a unix socket; `fake` is an in-memory runtime serving the
//! same gRPC API on a temp socket, with fault injection, for tests.

pub mod client;
pub mod fake;
