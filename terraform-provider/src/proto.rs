//! Code generated from `proto/` at build time: Terraform's plugin protocol 6 (`tfplugin6`) and
//! go-plugin's controller and stdio services (`plugin`).

/// Terraform plugin protocol, version 6.
#[allow(clippy::all, missing_docs, dead_code, clippy::unwrap_used)]
pub mod tfplugin6 {
    tonic::include_proto!("tfplugin6");
}

/// go-plugin's own services.
#[allow(clippy::all, missing_docs, dead_code, clippy::unwrap_used)]
pub mod plugin {
    tonic::include_proto!("plugin");
}
