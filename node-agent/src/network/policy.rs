//! The policies that keep tenants' pods apart on the cluster (primary) network: Kubernetes
//! NetworkPolicies for the tenant's host namespace `fabrik-<tenant>`, and the same rules as a
//! CiliumNetworkPolicy for clusters running Cilium. Pure functions; the tenant manager applies
//! the objects.
//!
//! The rules: deny everything by default; allow traffic among the tenant's own pods (its
//! namespace), DNS to the cluster DNS in `kube-system`, and egress to addresses outside the
//! private ranges (the internet: registries, model hubs). Other tenants' namespaces are
//! private-range pod addresses, so they are neither reachable nor able to reach in.
//!
//! Caveat: NetworkPolicies apply to the primary interface only; Multus secondary interfaces
//! (the tenant segment) are not covered. Isolation there comes from the segment itself: one
//! VXLAN VNI and bridge per tenant ([`super::vxlan`]), attachable only from the tenant's
//! namespace ([`super::nad`]).

use serde_json::{json, Value};

use super::segment::host_namespace;

/// Private IPv4 ranges (RFC 1918) excluded from the "internet" egress rule.
pub const PRIVATE_RANGES: [&str; 3] = ["10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"];

fn policy(tenant: &str, name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {
            "name": name,
            "namespace": host_namespace(tenant),
            "labels": { fabrik_api::LABEL_TENANT: tenant },
        },
        "spec": spec,
    })
}

fn dns_ports() -> Value {
    json!([{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}])
}

/// The tenant's NetworkPolicies (`networking.k8s.io/v1`), in `fabrik-<tenant>`:
/// `fabrik-default-deny`, `fabrik-allow-same-tenant`, `fabrik-allow-dns`,
/// `fabrik-allow-internet-egress`.
pub fn isolation_policies(tenant: &str) -> Vec<Value> {
    vec![
        policy(
            tenant,
            "fabrik-default-deny",
            json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        ),
        policy(
            tenant,
            "fabrik-allow-same-tenant",
            json!({
                "podSelector": {},
                "policyTypes": ["Ingress", "Egress"],
                // A bare podSelector peer means "pods of this namespace" only.
                "ingress": [{"from": [{"podSelector": {}}]}],
                "egress": [{"to": [{"podSelector": {}}]}],
            }),
        ),
        policy(
            tenant,
            "fabrik-allow-dns",
            json!({
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{
                    "to": [{
                        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
                        "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
                    }],
                    "ports": dns_ports(),
                }],
            }),
        ),
        policy(
            tenant,
            "fabrik-allow-internet-egress",
            json!({
                "podSelector": {},
                "policyTypes": ["Egress"],
                "egress": [{"to": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": PRIVATE_RANGES}}]}],
            }),
        ),
    ]
}

/// The same rules as one `cilium.io/v2` CiliumNetworkPolicy, in `fabrik-<tenant>`.
pub fn cilium_isolation_policy(tenant: &str) -> Value {
    let ns = host_namespace(tenant);
    json!({
        "apiVersion": "cilium.io/v2",
        "kind": "CiliumNetworkPolicy",
        "metadata": {
            "name": "fabrik-tenant-isolation",
            "namespace": ns,
            "labels": { fabrik_api::LABEL_TENANT: tenant },
        },
        "spec": {
            "endpointSelector": {},
            "ingress": [{"fromEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": ns}}]}],
            "egress": [
                {"toEndpoints": [{"matchLabels": {"k8s:io.kubernetes.pod.namespace": ns}}]},
                {
                    "toEndpoints": [{"matchLabels": {
                        "k8s:io.kubernetes.pod.namespace": "kube-system",
                        "k8s:k8s-app": "kube-dns",
                    }}],
                    "toPorts": [{"ports": [{"port": "53", "protocol": "ANY"}]}],
                },
                {"toEntities": ["world"]},
            ],
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named<'a>(policies: &'a [Value], name: &str) -> &'a Value {
        policies
            .iter()
            .find(|p| p["metadata"]["name"] == name)
            .unwrap_or_else(|| panic!("no policy {name}"))
    }

    #[test]
    fn policies_deny_by_default_and_allow_only_the_tenant_namespace() {
        let ps = isolation_policies("team-a");
        assert_eq!(ps.len(), 4);
        for p in &ps {
            assert_eq!(p["apiVersion"], "networking.k8s.io/v1");
            assert_eq!(p["kind"], "NetworkPolicy");
            assert_eq!(p["metadata"]["namespace"], "fabrik-team-a");
            assert_eq!(p["spec"]["podSelector"], json!({}));
        }
        let deny = named(&ps, "fabrik-default-deny");
        assert_eq!(deny["spec"]["policyTypes"], json!(["Ingress", "Egress"]));
        assert!(deny["spec"].get("ingress").is_none() && deny["spec"].get("egress").is_none());
        let same = named(&ps, "fabrik-allow-same-tenant");
        // No namespaceSelector anywhere: peers are this namespace's pods only.
        assert_eq!(
            same["spec"]["ingress"],
            json!([{"from": [{"podSelector": {}}]}])
        );
        assert_eq!(
            same["spec"]["egress"],
            json!([{"to": [{"podSelector": {}}]}])
        );
        let dns = named(&ps, "fabrik-allow-dns");
        assert_eq!(dns["spec"]["egress"][0]["ports"][0]["port"], 53);
        let internet = named(&ps, "fabrik-allow-internet-egress");
        assert_eq!(
            internet["spec"]["egress"][0]["to"][0]["ipBlock"]["except"],
            json!(PRIVATE_RANGES)
        );
        assert!(!serde_json::to_string(&ps).expect("json").contains("team-b"));
    }

    #[test]
    fn cilium_variant_scopes_to_the_tenant_namespace() {
        let p = cilium_isolation_policy("team-b");
        assert_eq!(p["kind"], "CiliumNetworkPolicy");
        assert_eq!(p["metadata"]["namespace"], "fabrik-team-b");
        assert_eq!(
            p["spec"]["ingress"][0]["fromEndpoints"][0]["matchLabels"]
                ["k8s:io.kubernetes.pod.namespace"],
            "fabrik-team-b"
        );
        assert_eq!(p["spec"]["egress"][2]["toEntities"], json!(["world"]));
    }
}
