//! The Kubernetes-compatible API server of a Fabrik cluster.
//!
//! Every cluster (the embedded host, later every tenant) is this server over its own store
//! keyspace. A request flows through one pipeline, each stage one module:
//!
//! ```text
//! server (TLS, identity) → handler → request_info (route) → negotiation (decode)
//!   → registry (generic verbs) → strategy (per kind) → store → handler (encode: JSON, YAML, Table)
//! ```
//!
//! Requests from the network are authenticated ([`auth`]: client certificates, service-account
//! tokens, OIDC), authorized ([`rbac`]) and admitted ([`admission`]) before the registry acts.

pub mod admission;
pub mod aggregation;
pub mod auth;
pub mod cel_limits;
pub mod client;
pub mod cluster;
pub mod controllers;
pub mod crd;
pub mod discovery;
pub mod error;
pub mod fairness;
pub mod handler;
pub mod jsonpath;
pub mod kubeconfig;
pub mod metrics;
pub mod negotiation;
pub mod object;
pub mod openapi;
pub mod pki;
pub mod pod_streams;
pub mod rbac;
pub mod registry;
pub mod request_info;
pub mod resource_metrics;
pub mod resources;
pub mod reviews;
pub mod router;
pub mod server;
pub mod service_ips;
pub mod strategy;
pub mod table;
pub mod webhook;

pub use cluster::{bind, url_of, Bound, Cluster, ClusterBuilder, Listener, StartError};
pub use error::{ApiError, GroupResource};
pub use server::Settings;
