//! What admission may read: the narrow, read-only view of a cluster's objects that plugins
//! (and the webhook caller, resolving a Service) get with every request. The registry
//! implements it; admission knows nothing else of the registry, so the two do not import each
//! other (the registry calls admission, admission reads through this trait).

use std::sync::Arc;

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::{Catalog, ResourceDef};

/// A read-only view of the cluster's objects.
#[async_trait::async_trait]
pub trait Objects: Send + Sync {
    /// The served resources.
    fn catalog(&self) -> &Arc<Catalog>;

    /// The served resource `group/version/plural`, if any.
    fn resource(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceDef>> {
        self.catalog().get(group, version, plural)
    }

    /// One object (`NotFound` when absent).
    async fn get(&self, def: &ResourceDef, ns: Option<&str>, name: &str)
        -> Result<Value, ApiError>;

    /// Every object of `def` (in `ns`, or in all namespaces).
    async fn list(&self, def: &ResourceDef, ns: Option<&str>) -> Result<Vec<Value>, ApiError>;

    /// The objects of a kind admission reads on every write — admission configurations
    /// (`admissionregistration.k8s.io`) and PriorityClasses (`scheduling.k8s.io`), at `v1` —
    /// current with every write through this server and within a second of other replicas';
    /// none when the kind is not served or not one of those.
    async fn admission_objects(
        &self,
        group: &str,
        plural: &str,
    ) -> Result<Arc<Vec<Value>>, ApiError>;

    /// `objects` converted to `def`'s version `desired`, as the registry converts them (the
    /// CRD's conversion webhook, or the same fields under the other `apiVersion`).
    async fn convert(
        &self,
        def: &ResourceDef,
        objects: Vec<Value>,
        desired: &str,
    ) -> Result<Vec<Value>, ApiError>;

    /// Lock `name` (key-safe text) over every server of the cluster — all replicas writing its
    /// store — until the returned guard is dropped: for admission that must see every other
    /// replica's admitted writes before it admits one more (exact quotas).
    async fn exclusive(&self, name: &str) -> Result<Box<dyn std::any::Any + Send>, ApiError>;
}
