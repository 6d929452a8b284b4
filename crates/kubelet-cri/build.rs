//! CRI v1 compiled with protoc (hack/install-deps.sh installs
//! protobuf-compiler). `proto/runtime/v1/api.proto` is the API definition
//! of k8s.io/cri-api v0.37.2 (`pkg/apis/runtime/v1/api.proto`, Apache-2.0),
//! unchanged: the CRI as the v1.37 kubelet speaks it (image volume subPath,
//! container stop signals), which the k8s-cri crate's older copy lacks.
//!
//! Debian's protoc (3.21) predates the `debug_redact` field option the file
//! puts on AuthConfig's secrets; it only changes how other languages print
//! them, so the copy compiled (in OUT_DIR) goes without it.
use std::path::PathBuf;

const PROTO: &str = "proto/runtime/v1/api.proto";
const REDACT: &str = " [debug_redact = true]";

fn main() {
    println!("cargo:rerun-if-changed={PROTO}");
    let text = std::fs::read_to_string(PROTO).expect("reading the CRI proto");
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("proto");
    let file = out.join("runtime/v1/api.proto");
    std::fs::create_dir_all(file.parent().expect("a parent")).expect("making OUT_DIR/proto");
    std::fs::write(&file, text.replace(REDACT, "")).expect("writing the CRI proto");
    tonic_prost_build::configure()
        .compile_protos(&[file], &[out])
        .expect("compiling the CRI proto");
}
