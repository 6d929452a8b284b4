//! The plugin APIs' protos compiled with protoc (hack/install-deps.sh
//! installs protobuf-compiler), as kubelet-cri compiles the CRI's.
//! `proto/podresources.proto` is k8s.io/kubelet v0.37.2's
//! `pkg/apis/podresources/v1/api.proto` and `proto/deviceplugin.proto` its
//! `pkg/apis/deviceplugin/v1beta1/api.proto`, `proto/dra.proto` its
//! `pkg/apis/dra/v1/api.proto` and `proto/dra_health.proto` its
//! `pkg/apis/dra-health/v1/api.proto` (Apache-2.0), unchanged. The last is
//! compiled apart (its package, `v1`, is podresources' too).
fn main() {
    tonic_prost_build::configure()
        .compile_protos(
            &[
                "proto/pluginregistration.proto",
                "proto/csi.proto",
                "proto/podresources.proto",
                "proto/deviceplugin.proto",
                "proto/dra.proto",
            ],
            &["proto/"],
        )
        .expect("compiling the plugin protos");
    let health = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("dra_health");
    std::fs::create_dir_all(&health).expect("the dra-health output directory");
    tonic_prost_build::configure()
        .out_dir(health)
        .compile_protos(&["proto/dra_health.proto"], &["proto/"])
        .expect("compiling the dra-health proto");
}
