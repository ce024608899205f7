//! Swagger 2.0 as client-go requests it: gnostic's `openapi.v2.Document` in protobuf
//! (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`).

mod gnostic;
mod wire;

pub use gnostic::v2_protobuf;
