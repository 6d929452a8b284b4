//! The plugin APIs' protos compiled with protoc (hack/install-deps.sh
//! installs protobuf-compiler), as k8s-cri compiles the CRI's.
fn main() {
    tonic_prost_build::configure()
        .compile_protos(
            &["proto/pluginregistration.proto", "proto/csi.proto"],
            &["proto/"],
        )
        .expect("compiling the plugin protos");
}
