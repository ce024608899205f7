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
    printcolumn = r#"{"name":"Pods","type":"integer","jsonPath":".status.usage.pods"}"#,
    printcolumn = r#"{"name":"GPUs-Used","type":"integer","jsonPath":".status.usage.gpus"}"#,
    printcolumn = r#"{"name":"GPU-Seconds","type":"integer","jsonPath":".status.usage.gpuSeconds"}"#,
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
    /// The tenant's place in the shared GPU queue: `quota.gpus` is its guaranteed share; this
    /// says how far beyond it the tenant may borrow idle GPUs, how much of its own idle share
    /// others may borrow, and its weight when several borrow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<TenantQueue>,
}

impl TenantSpec {
    /// The GPUs of each kind the tenant is guaranteed (`quota.gpus`); `None`: no GPU quota.
    pub fn gpu_guarantee(&self) -> Option<i64> {
        self.quota.as_ref().and_then(|q| q.gpus).map(|g| g.max(0))
    }

    /// The most GPUs of each kind the tenant may hold (and its quota allows): its guarantee
    /// plus its borrowing limit; `None`: no GPU quota.
    pub fn gpu_cap(&self) -> Option<i64> {
        let borrow = self
            .queue
            .as_ref()
            .and_then(|q| q.borrowing_limit)
            .unwrap_or(0)
            .max(0);
        self.gpu_guarantee().map(|g| g.saturating_add(borrow))
    }
}

/// A tenant's GPU queue settings (see docs/user-guide.md, "GPU queues").
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantQueue {
    /// GPUs of each of its kinds the tenant may hold beyond its guarantee (`quota.gpus`)
    /// while others leave theirs idle; borrowed GPUs are reclaimed when their owners need them.
    /// 0 when unset: no borrowing. Raises the tenant's quota to `gpus + borrowingLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub borrowing_limit: Option<i64>,
    /// Of its idle guaranteed GPUs, how many of each kind others may borrow. Unset: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub lending_limit: Option<i64>,
    /// The tenant's weight when idle GPUs are shared among borrowers (1 when unset): a tenant
    /// of weight 2 gets twice the borrowed share of a tenant of weight 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 1000))]
    pub weight: Option<i64>,
    /// The group (a department of several tenants) the tenant's queue belongs to: the idle
    /// guaranteed GPUs of a group's members go to its other members first, and the group
    /// shares what the rest of the factory leaves idle as one claimant, with the weight the
    /// platform's queue policy gives it (1 by default). A DNS label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 63))]
    pub parent: Option<String>,
}

/// Resource limits of a tenant, enforced on the host and at the tenant's admission.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantQuota {
    /// CPU requests, as a quantity (`16`, `500m`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUANTITY_PATTERN))]
    pub cpu: Option<String>,
    /// Memory requests, as a quantity (`64Gi`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUANTITY_PATTERN))]
    pub memory: Option<String>,
    /// Number of pods.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub pods: Option<i64>,
    /// GPUs (whole GPUs, MIG slices or shared slices, per `gpuSharing`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub gpus: Option<i64>,
    /// What the tenant's `nvidia.com/gpu` is: `whole`, `mig:<profile>` (e.g. `mig:1g.18gb`),
    /// `share:<memory MiB>,<compute %>` or `timeslice` (a time-sliced replica).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(GPU_SHARING_PATTERN))]
    pub gpu_sharing: Option<String>,
    /// Further GPU kinds the tenant's pods may request by NVIDIA's names, in the same syntax:
    /// `whole` as `nvidia.com/gpu`, `mig:1g.18gb` as `nvidia.com/mig-1g.18gb`, `share:…` or
    /// `timeslice` as `nvidia.com/gpu.shared` (one of the two). `gpus` counts every device
    /// of every kind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(inner(pattern(GPU_SHARING_PATTERN)))]
    pub gpu_types: Vec<String>,
    /// `NodePort` (and `LoadBalancer`, which holds node ports too) Services the tenant may have
    /// (`services.nodeports`; host node ports are shared by every tenant). 0 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub node_ports: Option<i64>,
    /// `LoadBalancer` Services the tenant may have (`services.loadbalancers`). 0 when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub load_balancers: Option<i64>,
    /// Bytes the tenant's objects may take in the control plane's store, as a quantity
    /// (`512Mi`). A default applies when unset (see docs/security.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(QUANTITY_PATTERN))]
    pub storage: Option<String>,
    /// Objects the tenant may keep in the control plane's store. A default applies when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub objects: Option<i64>,
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
    /// Host IngressClasses the tenant's synced Ingresses may name (none by default).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ingress_classes: Vec<String>,
    /// Host Gateways (`namespace/name`) the tenant's synced HTTPRoutes and GRPCRoutes may
    /// attach to (none by default). A route's `parentRefs` name them as they are on the host;
    /// the Gateway's listeners must also allow routes from the tenant's host namespace.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gateways: Vec<String>,
    /// Hostnames the tenant's synced Ingresses and routes may claim on shared ingress
    /// controllers and Gateways; `*.example.com` allows every name under `example.com`. A route
    /// naming no hostname gets these on the host; an Ingress rule without a host is refused.
    /// Empty: whatever the controllers and Gateways' listeners accept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub route_hostnames: Vec<String>,
    /// DNS names the tenant's `ExternalName` Services may point at (none by default). An entry
    /// `*.example.com` allows every name under `example.com`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub external_names: Vec<String>,
    /// Where the tenant's `url` admission webhooks may call (none by default; `service`
    /// webhooks call the tenant's own Services and need no entry): DNS names, `*.example.com`
    /// for every name under `example.com`, IP addresses or CIDRs. Loopback, link-local and
    /// the control plane's own addresses are never called; private ranges only where an entry
    /// names them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub webhook_targets: Vec<String>,
}

/// The tenant's network segment.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantNetwork {
    /// Segment identifier (a VXLAN VNI or VLAN id on the fast fabric).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 16_777_215))]
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
    /// The tenant's GPU queue, per host GPU resource, as the queue controller last decided.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue: Vec<QueueStatus>,
}

/// One GPU resource of a tenant's queue (devices of that host resource).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QueueStatus {
    /// The host resource (`nvidia.com/gpu`, `nvidia.com/mig-1g.18gb`, ...).
    pub resource: String,
    /// Its guaranteed share.
    #[serde(default)]
    pub guaranteed: i64,
    /// Held by its admitted pods (running or about to be).
    #[serde(default)]
    pub admitted: i64,
    /// Of `admitted`, held beyond its guarantee.
    #[serde(default)]
    pub borrowed: i64,
    /// Of `admitted`, held as backfill: GPUs the queue would otherwise leave idle, taken past
    /// the tenant's fair share or on nodes reserved for another workload — the first to be
    /// preempted.
    #[serde(default)]
    pub backfill: i64,
    /// Of its idle guarantee, held by other tenants.
    #[serde(default)]
    pub lent: i64,
    /// Asked for by its pods waiting in the queue.
    #[serde(default)]
    pub pending: i64,
    /// Its fair share under the current demand: what reclaim gives back to it.
    #[serde(default)]
    pub fair_share: i64,
}

/// A Secret by namespace and name.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
pub struct SecretRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// Usage figures, kept current by the control plane (at most one write per tenant every few
/// seconds).
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TenantUsage {
    /// The tenant's host pods that are not finished (phase neither `Succeeded` nor `Failed`).
    #[serde(default)]
    pub pods: i64,
    /// GPU devices (whole GPUs, MIG devices or shared slices) requested by the tenant's running
    /// host pods.
    #[serde(default)]
    pub gpus: i64,
    /// GPU(-device)-seconds allocated so far, as the node agents metered them (never
    /// decreases).
    #[serde(default)]
    pub gpu_seconds: i64,
    /// Allocated GPU-seconds weighted by the GPUs' utilization so far (never decreases).
    #[serde(default)]
    pub gpu_seconds_utilized: i64,
}

/// The host namespace where node agents publish their GPU-second counters.
pub const USAGE_NAMESPACE: &str = "fabrik-system";
/// Name prefix of the per-node usage ConfigMaps (`fabrik-gpu-usage-<node>`).
pub const USAGE_CONFIGMAP_PREFIX: &str = "fabrik-gpu-usage-";
/// Label on the usage ConfigMaps (value: the node name).
pub const LABEL_GPU_USAGE_NODE: &str = "fabrik.dev/gpu-usage-node";
/// The usage ConfigMap's data key holding a JSON [`NodeGpuUsage`].
pub const USAGE_DATA_KEY: &str = "usage.json";

/// The usage ConfigMap of a node.
pub fn usage_configmap_name(node: &str) -> String {
    format!("{USAGE_CONFIGMAP_PREFIX}{node}")
}

/// One node's GPU-second counters as its agent publishes them (the usage ConfigMap's
/// `usage.json`): per tenant, and per pod series for cost allocation.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct NodeGpuUsage {
    /// The node.
    pub node: String,
    /// Per tenant (`""` for pods without a tenant label): totals of its series.
    #[serde(default)]
    pub tenants: std::collections::BTreeMap<String, GpuSeconds>,
    /// Per pod and partition.
    #[serde(default)]
    pub series: Vec<GpuSeries>,
}

/// Allocated and utilization-weighted GPU(-device)-seconds.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GpuSeconds {
    /// Allocated device-seconds.
    pub allocated: f64,
    /// Allocated device-seconds weighted by utilization.
    pub utilized: f64,
}

/// One pod's counters on one partition kind.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GpuSeries {
    /// Tenant (`fabrik.dev/tenant`, or `""`).
    pub tenant: String,
    /// The tenant namespace (`fabrik.dev/namespace`, or the host pod's namespace).
    pub namespace: String,
    /// The host pod.
    pub pod: String,
    /// GPU model (`H200-141GB`).
    pub gpu_model: String,
    /// `whole`, `mig-<profile>` or `shared-<MiB>mib-<pct>pct`.
    pub partition: String,
    /// The counters.
    #[serde(flatten)]
    pub seconds: GpuSeconds,
}

/// The host namespace of a tenant.
pub use crate::naming::host_namespace;

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
        assert_eq!(v.additional_printer_columns.as_ref().map(Vec::len), Some(7));
    }
}

/// How a tenant's GPUs are handed out (`spec.quota.gpuSharing`), parsed once by
/// [`GpuSharingMode::parse`] for every place that reads it (the CLI, the Terraform provider,
/// the tenant manager).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum GpuSharingMode {
    /// `whole`: one physical GPU per requested GPU.
    Whole,
    /// `mig:<N>g.<M>gb`: one MIG instance of this profile per requested GPU.
    Mig {
        /// Compute slices, 1 to 7 (a GPU has seven).
        slices: u8,
        /// Memory of the instance in GB, more than 0.
        memory_gb: u32,
    },
    /// `share:<MiB>,<percent>`: a capped share of a GPU per requested GPU.
    Share {
        /// GPU memory of one share in MiB, more than 0.
        memory_mib: u64,
        /// Compute of one share, 1 to 100 percent.
        compute_pct: u8,
    },
    /// `timeslice`: a time-sliced replica of a GPU (no memory or fault isolation) per
    /// requested GPU.
    TimeSlice,
}

impl GpuSharingMode {
    /// Parses a `gpuSharing` value; the error names the value and the expected form.
    pub fn parse(mode: &str) -> Result<GpuSharingMode, String> {
        if mode == "whole" {
            return Ok(GpuSharingMode::Whole);
        }
        if mode == "timeslice" {
            return Ok(GpuSharingMode::TimeSlice);
        }
        if let Some(profile) = mode.strip_prefix("mig:") {
            let parsed = profile.split_once('.').and_then(|(slices, memory)| {
                let slices = u8::try_from(number(slices.strip_suffix('g')?, 1)?).ok()?;
                let memory_gb = u32::try_from(number(memory.strip_suffix("gb")?, 6)?).ok()?;
                ((1..=7).contains(&slices) && memory_gb > 0)
                    .then_some(GpuSharingMode::Mig { slices, memory_gb })
            });
            return parsed.ok_or_else(|| {
                format!(
                    "{mode:?}: a MIG profile looks like mig:1g.18gb (1 to 7 slices, memory > 0)"
                )
            });
        }
        if let Some(rest) = mode.strip_prefix("share:") {
            let parsed = rest.split_once(',').and_then(|(memory, compute)| {
                let memory_mib = number(memory, 9)?;
                let compute_pct = u8::try_from(number(compute, 3)?).ok()?;
                (memory_mib > 0 && (1..=100).contains(&compute_pct)).then_some(
                    GpuSharingMode::Share {
                        memory_mib,
                        compute_pct,
                    },
                )
            });
            return parsed.ok_or_else(|| {
                format!(
                    "{mode:?}: a shared slice looks like share:8192,25 (memory MiB > 0, compute % from 1 to 100)"
                )
            });
        }
        Err(format!(
            "{mode:?}: use whole, mig:<profile> (e.g. mig:1g.18gb), share:<memory MiB>,<compute %> or timeslice"
        ))
    }
}

impl GpuSharingMode {
    /// The resource name a tenant's pods request this kind of GPU by, as NVIDIA's device
    /// plugin names it: `nvidia.com/gpu`, `nvidia.com/mig-<profile>`, and
    /// `nvidia.com/gpu.shared` for shared and time-sliced GPUs (its `renameByDefault` name).
    pub fn tenant_resource(&self) -> String {
        match self {
            GpuSharingMode::Whole => crate::RESOURCE_GPU.to_string(),
            GpuSharingMode::Mig { slices, memory_gb } => {
                format!("nvidia.com/mig-{slices}g.{memory_gb}gb")
            }
            GpuSharingMode::Share { .. } | GpuSharingMode::TimeSlice => {
                crate::RESOURCE_GPU_SHARED.to_string()
            }
        }
    }
}

/// `spec.quota.gpuSharing` as the Tenant CRD's schema checks it: exactly the values
/// [`GpuSharingMode::parse`] accepts.
pub const GPU_SHARING_PATTERN: &str =
    r"^(whole|timeslice|mig:[1-7]g\.[1-9][0-9]{0,5}gb|share:[1-9][0-9]{0,8},([1-9][0-9]?|100))$";

/// A non-negative quantity (`16`, `500m`, `64Gi`, `1e3`): upstream's quantity syntax without a
/// minus sign, for the Tenant CRD's schema.
pub const QUANTITY_PATTERN: &str = r"^\+?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$";

/// A decimal number written plainly (digits only, no sign, no leading zero) with at most
/// `max_digits` digits.
fn number(text: &str, max_digits: usize) -> Option<u64> {
    let plain = !text.is_empty()
        && text.len() <= max_digits
        && text.bytes().all(|b| b.is_ascii_digit())
        && !(text.len() > 1 && text.starts_with('0'));
    plain.then(|| text.parse().ok()).flatten()
}

/// The longest tenant name: its host namespace (`fabrik-<name>`) and the host names derived
/// from it must stay within Kubernetes' 63-character labels.
pub const MAX_TENANT_NAME: usize = 40;

/// Checks `spec.owners`: each a user name, or `group:<name>`, neither empty.
pub fn check_owners(owners: &[String]) -> Result<(), String> {
    for owner in owners {
        let name = owner.strip_prefix("group:").unwrap_or(owner);
        if name.trim().is_empty() {
            return Err(format!(
                "owner {owner:?}: give a user name or group:<name>, not an empty name"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod gpu_sharing_tests {
    use super::*;

    #[test]
    fn gpu_sharing_modes_parse_once_for_everyone() {
        assert_eq!(GpuSharingMode::parse("whole"), Ok(GpuSharingMode::Whole));
        assert_eq!(
            GpuSharingMode::parse("timeslice"),
            Ok(GpuSharingMode::TimeSlice)
        );
        assert_eq!(
            GpuSharingMode::parse("mig:1g.18gb"),
            Ok(GpuSharingMode::Mig {
                slices: 1,
                memory_gb: 18
            })
        );
        assert_eq!(
            GpuSharingMode::parse("share:8192,25"),
            Ok(GpuSharingMode::Share {
                memory_mib: 8192,
                compute_pct: 25
            })
        );
        for bad in [
            "half",
            "mig:0g.5gb",
            "mig:8g.10gb",
            "mig:1g.0gb",
            "mig:big",
            "share:8192",
            "share:0,10",
            "share:100,0",
            "share:100,101",
            "",
        ] {
            assert!(GpuSharingMode::parse(bad).is_err(), "{bad}");
        }
        assert!(check_owners(&["alice".into(), "group:team".into()]).is_ok());
        // Written plainly: no sign, no leading zero, no overflow.
        for bad in [
            "mig:01g.18gb",
            "mig:1g.018gb",
            "share:+5,10",
            "share:5,010",
            "mig:1g.99999999999gb",
        ] {
            assert!(GpuSharingMode::parse(bad).is_err(), "{bad}");
        }
        for bad in ["", "group:", "  "] {
            assert!(check_owners(&[bad.to_string()]).is_err(), "{bad:?}");
        }
    }

    /// The CRD's pattern and the parser agree on every value: the server, the CLI, the
    /// Terraform provider and the manager give one verdict.
    #[test]
    fn the_crd_pattern_accepts_exactly_what_parse_accepts() {
        let pattern = regex::Regex::new(GPU_SHARING_PATTERN).expect("pattern compiles");
        let mut values: Vec<String> = [
            "whole",
            "Whole",
            "whole ",
            "",
            "mig:",
            "share:",
            "mig:big",
            "timeslice",
            "timeslice:2",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        let numbers = [
            "0",
            "1",
            "7",
            "8",
            "01",
            "10",
            "18",
            "99",
            "100",
            "101",
            "+5",
            "-1",
            "999999",
            "1000000",
            "999999999",
            "1000000000",
            "4294967296",
            "1.5",
            "a",
            "",
        ];
        for a in numbers {
            for b in numbers {
                values.push(format!("mig:{a}g.{b}gb"));
                values.push(format!("share:{a},{b}"));
            }
        }
        for v in &values {
            assert_eq!(
                pattern.is_match(v),
                GpuSharingMode::parse(v).is_ok(),
                "{v:?}"
            );
        }
    }
}
