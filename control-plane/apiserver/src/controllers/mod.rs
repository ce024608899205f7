//! Controllers that run inside a cluster's API server process.
//!
//! For now only namespace finalization lives here, written against the registry directly;
//! the workload controllers (Deployments, Jobs, garbage collection) come as kube-runtime
//! controllers over an in-process client.

pub mod crd;
pub mod namespace;
