//! The `Tenant` resource (`tenants.fabrik.dev/v1alpha1`, cluster-scoped): one team's cluster
//! on the shared host. The platform team writes `spec`; the tenant manager reports `status`.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// What a tenant gets.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "fabrik.dev",
    version = "v1alpha1",
    kind = "Tenant",
    plural = "tenants",
    singular = "tenant",
    shortname = "tn",
    status = "TenantStatus",
    printcolumn = r#"{"name":"Phase","type":"string","jsonPath":".status.phase"}"#,
    printcolumn = r#"{"name":"GPUs","type":"string","jsonPath":".spec.quota.gpus"}"#,
    printcolumn = r#"{"name":"Endpoint","type":"string","jsonPath":".status.endpoint","priority":1}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct TenantSpec {
    /// Users (`alice`, OIDC names such as `oidc:alice@example.com`) and groups (`group:ml`)
    /// who are `cluster-admin` inside the tenant.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub owners: Vec<String>,
    /// Resources the tenant may use on the host.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<TenantQuota>,
    /// Where and how the tenant's pods run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub isolation: Option<TenantIsolation>,
    /// The tenant's network segment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<TenantNetwork>,
    /// What is synced besides the built-in kinds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sync: Option<TenantSync>,
}

/// Resource limits of a tenant, enforced on the host and at the tenant's admission.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantQuota {
    /// CPU requests, as a quantity (`16`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Memory requests, as a quantity (`64Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory: Option<String>,
    /// Number of pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<i64>,
    /// GPUs (whole GPUs, MIG slices or shared slices, per `gpuSharing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpus: Option<i64>,
    /// `whole`, `mig:<profile>` (e.g. `mig:1g.18gb`) or `share:<memory MiB>,<compute %>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_sharing: Option<String>,
}

/// Placement and privileges.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantIsolation {
    /// Node labels the tenant's pods are pinned to (its node pool).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub node_selector: std::collections::BTreeMap<String, String>,
    /// Whether the pool's nodes are the tenant's alone (tainted for it).
    #[serde(default)]
    pub dedicated_nodes: bool,
    /// RuntimeClass of the tenant's pods (e.g. a sandboxed runtime).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class: Option<String>,
    /// Privileges allowed (none by default): `privileged`, `hostNamespaces`, `hostPath`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub allow: Vec<String>,
}

/// The tenant's network segment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNetwork {
    /// Segment identifier (a VXLAN VNI or VLAN id on the fast fabric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub segment: Option<i64>,
}

/// Extra kinds to sync.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantSync {
    /// `<resource>.<group>` of kinds synced down besides the built-in set.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_kinds: Vec<String>,
}

/// What the tenant manager reports.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantStatus {
    /// `Pending`, `Ready`, `Terminating`, `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// The tenant API's URL (`https://<listener>/clusters/<tenant>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// The host Secret holding the tenant's admin kubeconfig (key `kubeconfig`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubeconfig_secret: Option<SecretRef>,
    /// `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// What the tenant uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<TenantUsage>,
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}

/// A Secret by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Usage figures.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantUsage {
    /// Pods running on the host.
    #[serde(default)]
    pub pods: i64,
    /// GPUs in use.
    #[serde(default)]
    pub gpus: i64,
    /// GPU-seconds allocated so far.
    #[serde(default)]
    pub gpu_seconds: i64,
}

/// The host namespace of a tenant.
pub fn host_namespace(tenant: &str) -> String {
    format!("fabrik-{tenant}")
}

/// Finalizer the tenant manager keeps on Tenants until their host side is torn down.
pub const TENANT_FINALIZER: &str = "fabrik.dev/tenant-cleanup";

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    #[test]
    fn crd_is_cluster_scoped_with_status_and_columns() {
        let crd = Tenant::crd();
        assert_eq!(crd.metadata.name.as_deref(), Some("tenants.fabrik.dev"));
        assert_eq!(crd.spec.scope, "Cluster");
        let v = &crd.spec.versions[0];
        assert!(v.subresources.as_ref().is_some_and(|s| s.status.is_some()));
        assert_eq!(v.additional_printer_columns.as_ref().map(Vec::len), Some(4));
    }
}
