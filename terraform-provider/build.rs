//! Generates the gRPC server code for Terraform's plugin protocol and go-plugin's services,
//! with the `protoc` shipped by `protoc-bin-vendored` (nothing to install on a fresh machine).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protoc = protoc_bin_vendored::protoc_bin_path()?;
    let mut config = tonic_prost_build::Config::new();
    config.protoc_executable(protoc);
    tonic_prost_build::configure()
        .build_client(false)
        .build_server(true)
        .compile_with_config(
            config,
            &["proto/tfplugin6.proto", "proto/plugin.proto"],
            &["proto"],
        )?;
    Ok(())
}
