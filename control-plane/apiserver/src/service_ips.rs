//! Where a cluster's Service IPs come from when they are not its own to choose.
//!
//! A cluster allocates cluster IPs from its own range (10.96.0.0/12) by default. A tenant
//! cluster whose pods run on a host takes the address of its Service's host copy instead: the
//! address `kubectl get svc` shows in the tenant is then the one that works in its pods (in
//! their DNS answers and service environment). The source is asked once per new address, while
//! the Service is being created (or turned into one that needs an address).

use async_trait::async_trait;
use serde_json::Value;

use crate::error::ApiError;

/// A source of cluster IPs other than the cluster's own range.
#[async_trait]
pub trait ServiceIps: Send + Sync + std::fmt::Debug {
    /// The cluster IP of Service `svc`: its namespace, name, UID and spec as they are about to
    /// be stored (`spec.clusterIP` is what the client asked for, if anything). `Ok(None)`:
    /// allocate from the cluster's own range as usual. An error fails the write.
    async fn allocate(&self, svc: &Value) -> Result<Option<String>, ApiError>;
}
