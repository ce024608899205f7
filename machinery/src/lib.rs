//! Kubernetes API machinery without I/O.
//!
//! The API server keeps objects as `serde_json::Value`; this crate holds the pure functions
//! that interpret them the way upstream `k8s.io/apimachinery` does:
//!
//! - [`labels`]: label selectors (`labelSelector=` strings and `metav1.LabelSelector` objects);
//! - [`fields`]: field selectors (`fieldSelector=`), evaluated through a caller-supplied getter;
//! - [`validation`]: name, label and annotation rules with upstream error messages, and the
//!   [`validation::FieldError`] type the API server turns into `Status.details.causes`;
//! - [`patch`]: JSON patch (RFC 6902), JSON merge patch (RFC 7386) and strategic merge patch;
//! - [`apply`]: server-side apply and `metadata.managedFields` bookkeeping (field sets in the
//!   `fieldsV1` format, ownership, conflicts);
//! - [`quantity`]: resource quantities (`100m`, `1Gi`, `1e3`) with exact arithmetic;
//! - [`resources`]: a pod's requests and limits (sidecars included) and the rules on
//!   containers' `resources`;
//! - [`quota`]: what an object counts against a ResourceQuota, and quota scopes;
//! - [`pod_security`]: the Pod Security Standards' lists that several checks share;
//! - [`scheduling`]: tolerations against taints, node selector terms against nodes;
//! - [`net`]: address ranges and host patterns of allow-lists.
//!
//! What this crate does not do: it performs no I/O, knows no concrete Kubernetes kinds beyond
//! the pod, Service and claim fields quota counts and the scheduling fields (tolerations, taints,
//! node selector terms) (the strategic merge patch schema is
//! supplied through [`patch::PatchSchema`]), and never panics on
//! input: every malformed selector, patch or quantity is reported as a typed error.
#![forbid(unsafe_code)]

pub mod apply;
pub mod fields;
pub mod labels;
pub mod net;
pub mod patch;
pub mod pod_security;
pub mod quantity;
pub mod quota;
pub mod resources;
pub mod scheduling;
pub mod validation;
