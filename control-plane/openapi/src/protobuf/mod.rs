//! Protocol buffers: Swagger 2.0 as client-go requests it (gnostic's `openapi.v2.Document`,
//! `application/com.github.proto-openapi.spec.v2@v1.0+protobuf`), and the decoding of
//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`).

mod decode;
mod gnostic;
mod wire;

pub use decode::{decode_k8s_protobuf, ProtobufDecodeError, K8S_PROTOBUF_MAGIC};
pub use gnostic::v2_protobuf;
