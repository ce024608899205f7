//! What a tenant may do on the host: the part of a Tenant's spec the syncer and the tenant's pod
//! admission enforce. Built by the tenant manager from the Tenant object; plain data here.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Toleration;

/// How a tenant's GPU requests (`nvidia.com/gpu: N`) are served on the host.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum GpuSharing {
    /// One whole physical GPU per requested GPU (`nvidia.com/gpu`).
    #[default]
    Whole,
    /// One MIG instance of this profile (for example `1g.18gb`) per requested GPU
    /// (`nvidia.com/mig-<profile>`).
    Mig(String),
    /// One capped share of a GPU per requested GPU, enforced by the node agent
    /// (`fabrik.dev/shared-gpu-<MiB>mib-<pct>pct`).
    Shared {
        /// GPU memory of one share, in MiB.
        memory_mib: u64,
        /// Compute of one share, in percent of the GPU's SMs.
        compute_pct: u32,
    },
    /// One time-sliced replica of a GPU per requested GPU (`nvidia.com/gpu.shared`).
    TimeSliced,
}

/// The tenant's isolation policy. `Default` is the most restrictive: nothing privileged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Policy {
    /// Node selector of the tenant's node pool, put on every host pod (wins over the tenant's
    /// own keys).
    pub node_selector: BTreeMap<String, String>,
    /// Tolerations of the tenant's node pool, put on every host pod (a tenant pod's own stay
    /// in the tenant).
    pub tolerations: Vec<Toleration>,
    /// RuntimeClass every host pod runs with (replaces the tenant's).
    pub runtime_class: Option<String>,
    /// Privileged containers, capabilities beyond the baseline set, unconfined seccomp /
    /// AppArmor, unmasked `/proc`.
    pub allow_privileged: bool,
    /// `hostNetwork`, `hostPID`, `hostIPC` and container `hostPort`s.
    pub allow_host_namespaces: bool,
    /// `hostPath` volumes.
    pub allow_host_path: bool,
    /// How GPU requests are mapped.
    pub gpu_sharing: GpuSharing,
    /// Further GPU kinds its pods may request by NVIDIA's names (`nvidia.com/mig-<profile>`,
    /// `nvidia.com/gpu.shared`, `nvidia.com/gpu` when the default is another kind).
    pub gpu_types: Vec<GpuSharing>,
    /// PriorityClasses the tenant's pods may name (none by default).
    pub allowed_priority_classes: Vec<String>,
    /// The tenant's DNS server; when set, host pods get `dnsPolicy: None` with this nameserver
    /// and the tenant's search path.
    pub dns_nameserver: Option<String>,
    /// Whether the tenant's Ingresses are synced to the host (its Ingresses are then checked
    /// against [`Policy::ingress_classes`] at admission).
    pub sync_ingresses: bool,
    /// Host IngressClasses the tenant's synced Ingresses may name (none by default). An Ingress
    /// without a class gets the first one on the host.
    pub ingress_classes: Vec<String>,
    /// The Gateway API route kinds synced to the host ([`Kind::HttpRoute`],
    /// [`Kind::GrpcRoute`]); their routes are then checked at admission.
    pub synced_routes: Vec<crate::kinds::Kind>,
    /// Host Gateways (`namespace/name`) synced routes may attach to (none by default).
    pub gateways: Vec<String>,
    /// Hostnames synced routes may claim (`*.example.com`: every name under it); empty: any.
    pub route_hostnames: Vec<String>,
    /// DNS names `ExternalName` Services may point at (none by default); `*.example.com`
    /// allows every name under `example.com`.
    pub external_names: Vec<String>,
    /// Where the tenant's pods reach their tenant API. When set, every host container gets the
    /// `kubernetes` Service's environment (`KUBERNETES_SERVICE_HOST`, ...) pointing here; when
    /// not, host containers see whatever the host's kubelet gives them.
    pub api_address: Option<ApiAddress>,
    /// Whether the host's DeviceClasses are mirrored into the tenant (it may claim devices:
    /// its quota allows GPUs).
    pub device_classes: bool,
    /// Whether host pods that ask for GPUs are held by the GPU queue's scheduling gate
    /// ([`fabrik_api::QUEUE_GATE`]) until the queue admits them.
    pub gpu_queue: bool,
}

/// The address tenant pods reach their tenant API at: a host Service in front of the Fabrik
/// server. Requests there carry no `/clusters/<tenant>` prefix; the server routes them by the
/// issuer of their bearer token (the tenant's service-account issuer), so a pod holding a token
/// of its tenant reaches its tenant's API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ApiAddress {
    /// Host name or IP address (an IPv6 address without brackets).
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Policy {
    /// Whether a host Node (as JSON) is in the tenant's node pool: its labels match the pool's
    /// selector and the pool's tolerations tolerate every taint that keeps pods off it. The
    /// tenant sees these Nodes (and those its pods run on), so that a DaemonSet has a node to
    /// put a pod on before any of its pods runs.
    pub fn pool_includes(&self, node: &serde_json::Value) -> bool {
        let labels = &node["metadata"]["labels"];
        let selected = self
            .node_selector
            .iter()
            .all(|(k, v)| labels[k].as_str() == Some(v.as_str()));
        let tolerations: Vec<serde_json::Value> = self
            .tolerations
            .iter()
            .filter_map(|t| serde_json::to_value(t).ok())
            .collect();
        let tolerated = node["spec"]["taints"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|t| fabrik_machinery::scheduling::blocks_scheduling(t))
            .all(|taint| {
                tolerations
                    .iter()
                    .any(|t| fabrik_machinery::scheduling::tolerates(t, taint))
            });
        selected && tolerated
    }

    /// Whether an `ExternalName` Service may point at `name` (compared without case and
    /// without a trailing dot; `*.example.com` matches names under `example.com`, not
    /// `example.com` itself).
    pub fn allows_external_name(&self, name: &str) -> bool {
        let name = normal_dns_name(name);
        if name.is_empty() {
            return false;
        }
        self.external_names.iter().any(|allowed| {
            let allowed = normal_dns_name(allowed);
            match allowed.strip_prefix("*.") {
                Some(domain) => {
                    !domain.is_empty()
                        && name
                            .strip_suffix(domain)
                            .is_some_and(|head| head.len() > 1 && head.ends_with('.'))
                }
                None => !allowed.is_empty() && allowed == name,
            }
        })
    }

    /// Whether a synced route may attach to host Gateway `namespace/name`.
    pub fn allows_gateway(&self, namespace: &str, name: &str) -> bool {
        self.gateways
            .iter()
            .any(|g| g.split_once('/') == Some((namespace, name)))
    }

    /// Whether a synced route may claim `hostname` (itself `*.`-prefixed for a wildcard): any
    /// when no list is set; else one equal to an entry, or under an entry `*.<domain>`.
    pub fn allows_route_hostname(&self, hostname: &str) -> bool {
        if self.route_hostnames.is_empty() {
            return true;
        }
        let hostname = normal_dns_name(hostname);
        let bare = hostname.strip_prefix("*.").unwrap_or(&hostname);
        self.route_hostnames.iter().any(|allowed| {
            let allowed = normal_dns_name(allowed);
            match allowed.strip_prefix("*.") {
                Some(domain) => {
                    hostname == allowed
                        || (!domain.is_empty()
                            && bare
                                .strip_suffix(domain)
                                .is_some_and(|head| head.len() > 1 && head.ends_with('.')))
                }
                None => hostname == allowed,
            }
        })
    }

    /// Whether a synced Ingress may name host IngressClass `class`.
    pub fn allows_ingress_class(&self, class: &str) -> bool {
        self.ingress_classes.iter().any(|c| c == class)
    }
}

/// A DNS name compared as DNS does: lower case, without the root's trailing dot.
pub fn normal_dns_name(name: &str) -> String {
    name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn route_hostnames_match_exactly_or_under_a_wildcard() {
        let p = Policy {
            route_hostnames: vec!["*.acme.example.com".into(), "api.example.com".into()],
            ..Default::default()
        };
        for ok in [
            "llm.acme.example.com",
            "a.b.acme.example.com",
            "*.acme.example.com",
            "*.team.acme.example.com",
            "api.example.com",
        ] {
            assert!(p.allows_route_hostname(ok), "{ok}");
        }
        for no in [
            "acme.example.com",
            "*.example.com",
            "xacme.example.com",
            "www.example.com",
            "*.api.example.com",
        ] {
            assert!(!p.allows_route_hostname(no), "{no}");
        }
        assert!(Policy::default().allows_route_hostname("any.example.org"));
        let g = Policy {
            gateways: vec!["infra/shared".into()],
            ..Default::default()
        };
        assert!(g.allows_gateway("infra", "shared"));
        assert!(!g.allows_gateway("infra", "other") && !g.allows_gateway("default", "shared"));
    }

    #[test]
    fn external_names_match_exactly_or_under_a_wildcard() {
        let p = Policy {
            external_names: vec!["db.example.com".into(), "*.svc.example.org".into()],
            ..Default::default()
        };
        for ok in [
            "db.example.com",
            "DB.Example.com.",
            "a.svc.example.org",
            "a.b.svc.example.org",
        ] {
            assert!(p.allows_external_name(ok), "{ok}");
        }
        for bad in [
            "svc.example.org",
            "xsvc.example.org",
            "example.com",
            "db.example.com.evil.net",
            "evil-db.example.com",
            "kubernetes.default.svc",
            "",
            ".",
        ] {
            assert!(!p.allows_external_name(bad), "{bad}");
        }
        assert!(!Policy::default().allows_external_name("db.example.com"));
    }

    #[test]
    fn the_pool_is_the_selected_nodes_whose_blocking_taints_it_tolerates() {
        let policy = Policy {
            node_selector: [("pool".to_string(), "a".to_string())].into(),
            tolerations: vec![Toleration {
                key: Some("dedicated".into()),
                operator: Some("Equal".into()),
                value: Some("team-a".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            ..Default::default()
        };
        let node = |labels: serde_json::Value, taints: serde_json::Value| serde_json::json!({"metadata": {"labels": labels}, "spec": {"taints": taints}});
        let pool_a = serde_json::json!({"pool": "a"});
        assert!(policy.pool_includes(&node(pool_a.clone(), serde_json::json!([]))));
        assert!(policy.pool_includes(&node(
            pool_a.clone(),
            serde_json::json!([
            {"key": "dedicated", "value": "team-a", "effect": "NoSchedule"},
            {"key": "soft", "effect": "PreferNoSchedule"}])
        )));
        assert!(!policy.pool_includes(&node(
            pool_a,
            serde_json::json!([
            {"key": "dedicated", "value": "team-b", "effect": "NoSchedule"}])
        )));
        assert!(!policy.pool_includes(&node(
            serde_json::json!({"pool": "b"}),
            serde_json::json!([])
        )));
        // No selector, no tolerations: every untainted node.
        assert!(
            Policy::default().pool_includes(&node(serde_json::json!({}), serde_json::Value::Null))
        );
    }
}
