//! Services, Endpoints and EndpointSlices: tenant object → host object, by allow-list.
//!
//! A Service's selector is rewritten to match the host pods of the same tenant namespace (the
//! tenant's labels plus `fabrik.dev/tenant` and `fabrik.dev/namespace`), so it can never select
//! another tenant's pods or pods of another namespace. The cluster IP is the host's: a tenant
//! Service takes its address from its host copy ([`crate::service_ips`]), so a new copy asks
//! the host for the tenant's address and the host refuses one that is not free. What else the
//! tenant chose of the host's address space is never copied: `externalIPs`, `loadBalancerIP`, `loadBalancerSourceRanges`,
//! `loadBalancerClass`, node ports, `healthCheckNodePort`, `externalTrafficPolicy`, and none of
//! the tenant's annotations (load-balancer controllers read addresses from them). An
//! `ExternalName` Service is copied as such only when its name is on the Tenant's
//! `externalNames` list (the admission refuses the others); otherwise it becomes a
//! selector-less `ClusterIP` one.
//!
//! Endpoints and EndpointSlices are synced only for Services without a selector (for the others
//! the host computes them). Their addresses are kept only where they are the tenant's own live
//! pods ([`crate::addresses`]); the rest is left out and returned to the caller to report.
//! Node names, zones, hints and target references are never the tenant's: the host copy names
//! the host pod (and its node) that holds the address.

use serde_json::{json, Map, Value};

use crate::addresses::{self, PodAddresses};
use crate::naming;
use crate::pods::host_selector;
use crate::policy::{normal_dns_name, Policy};

/// Whether `s` is a DNS-1123 label (lower case alphanumerics and `-`, at most 63).
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// Whether `s` is a DNS-1123 subdomain (dot-separated labels, at most 253).
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The `ExternalName` a Service may keep on the host: a DNS name on the Tenant's list.
pub fn allowed_external_name(svc: &Value, policy: &Policy) -> Option<String> {
    if svc["spec"]["type"].as_str() != Some("ExternalName") {
        return None;
    }
    let name = normal_dns_name(svc["spec"]["externalName"].as_str()?);
    (is_dns_subdomain(&name)
        && addresses::parse_ip(&name).is_none()
        && policy.allows_external_name(&name))
    .then_some(name)
}

fn service_ports(spec: &Value) -> Option<Value> {
    let ports = spec["ports"].as_array()?;
    let ports: Vec<Value> = ports
        .iter()
        .map(|p| {
            let mut o = Map::new();
            for f in ["name", "protocol", "port", "targetPort", "appProtocol"] {
                if !p[f].is_null() {
                    o.insert(f.into(), p[f].clone());
                }
            }
            Value::Object(o)
        })
        .collect();
    Some(Value::Array(ports))
}

/// The host Service for a tenant Service. `host_cluster_ip` is the existing host object's
/// `spec.clusterIP` (immutable on the host), if there is one.
pub fn host_service(
    svc: &Value,
    tenant: &str,
    host_cluster_ip: Option<&Value>,
    policy: &Policy,
) -> Value {
    // No tenant annotation: load-balancer controllers take addresses and sharing from them
    // (`metallb.universe.tf/loadBalancerIPs`, `.../allow-shared-ip`, `lbipam.cilium.io/ips`,
    // `kube-vip.io/loadbalancerIPs`, cloud load-balancer settings), as `loadBalancerIP`.
    let meta = naming::host_metadata(svc, tenant, naming::tenant_labels(svc), Default::default());
    let ns = svc["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &svc["spec"];
    let mut out = Map::new();
    if let Some(name) = allowed_external_name(svc, policy) {
        out.insert("type".into(), json!("ExternalName"));
        out.insert("externalName".into(), json!(name));
        if let Some(ports) = service_ports(spec) {
            out.insert("ports".into(), ports);
        }
        return json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": out});
    }
    let t = spec["type"]
        .as_str()
        .filter(|t| matches!(*t, "NodePort" | "LoadBalancer"))
        .unwrap_or("ClusterIP");
    out.insert("type".into(), json!(t));
    if let Some(ports) = service_ports(spec) {
        out.insert("ports".into(), ports);
    }
    let selector = naming::string_map(&spec["selector"]);
    if !selector.is_empty() && spec["type"].as_str() != Some("ExternalName") {
        out.insert(
            "selector".into(),
            json!(host_selector(&selector, ns, tenant)),
        );
    }
    for f in [
        "sessionAffinity",
        "sessionAffinityConfig",
        "publishNotReadyAddresses",
        "ipFamilyPolicy",
        "ipFamilies",
        "internalTrafficPolicy",
    ] {
        if !spec[f].is_null() {
            out.insert(f.into(), spec[f].clone());
        }
    }
    if spec["clusterIP"].as_str() == Some("None") {
        out.insert("clusterIP".into(), json!("None"));
    } else if let Some(ip) = host_cluster_ip.filter(|ip| ip.is_string()) {
        // The host's allocation (immutable).
        out.insert("clusterIP".into(), ip.clone());
    } else if let Some(ip) = spec["clusterIP"]
        .as_str()
        .filter(|ip| addresses::parse_ip(ip).is_some())
    {
        // A new copy asks for the tenant's address, which came from the host (see
        // [`crate::service_ips`]): the copy made when the Service was created and deleted
        // before the tenant stored it, or a Service of a tenant from before. The host refuses
        // an address that is not free; the copy is then made without one.
        out.insert("clusterIP".into(), json!(ip));
    }
    json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": out})
}

/// Whether `ns/name` is the tenant's `kubernetes` Service (or its Endpoints / EndpointSlice):
/// the tenant's own API, which its control plane keeps; never copied to the host.
pub fn is_api_service(ns: &str, name: &str) -> bool {
    ns == "default" && name == "kubernetes"
}

/// Whether a tenant Service has a selector (its endpoints then come from the host).
pub fn has_selector(svc: &Value) -> bool {
    svc["spec"]["selector"]
        .as_object()
        .is_some_and(|s| !s.is_empty())
}

/// The tenant Service status for a host Service (its load balancer).
pub fn tenant_service_status(host: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    if !host["status"]["loadBalancer"].is_null() {
        out.insert(
            "loadBalancer".into(),
            host["status"]["loadBalancer"].clone(),
        );
    }
    out
}

fn port(p: &Value) -> Value {
    let mut o = Map::new();
    for f in ["name", "port", "protocol", "appProtocol"] {
        if !p[f].is_null() {
            o.insert(f.into(), p[f].clone());
        }
    }
    Value::Object(o)
}

fn list(v: &Value, f: fn(&Value) -> Value) -> Value {
    Value::Array(v.as_array().into_iter().flatten().map(f).collect())
}

/// What a host Endpoints or EndpointSlice is built from, besides the tenant object.
pub struct AddressContext<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The addresses its host copies may name.
    pub pods: &'a PodAddresses,
}

impl AddressContext<'_> {
    fn target_ref(&self, pod: &addresses::PodRef) -> Value {
        json!({"kind": "Pod", "namespace": naming::host_namespace(self.tenant),
            "name": pod.name, "uid": pod.uid})
    }
}

/// A host copy and the tenant's addresses left out of it.
pub struct Built {
    /// The host object, `None` when none may exist.
    pub object: Option<Value>,
    /// The addresses (as the tenant wrote them) that are not the tenant's pods'.
    pub refused: Vec<String>,
}

/// The host Endpoints for a tenant Endpoints object (same name as its Service): only the
/// addresses of the tenant's own pods.
pub fn host_endpoints(ep: &Value, ctx: &AddressContext<'_>) -> Built {
    let mut refused = Vec::new();
    let mut addresses = |list: &Value| -> Value {
        let mut out = Vec::new();
        for a in list.as_array().into_iter().flatten() {
            let ip = a["ip"].as_str().unwrap_or("");
            let Some(pod) = ctx.pods.get(ip) else {
                refused.push(ip.to_string());
                continue;
            };
            let mut o = Map::new();
            o.insert("ip".into(), json!(ip));
            if let Some(h) = a["hostname"].as_str().filter(|h| is_dns_label(h)) {
                o.insert("hostname".into(), json!(h));
            }
            if !pod.node.is_empty() {
                o.insert("nodeName".into(), json!(pod.node));
            }
            o.insert("targetRef".into(), ctx.target_ref(pod));
            out.push(Value::Object(o));
        }
        Value::Array(out)
    };
    let subsets: Vec<Value> = ep["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            json!({"addresses": addresses(&s["addresses"]),
                "notReadyAddresses": addresses(&s["notReadyAddresses"]),
                "ports": list(&s["ports"], port)})
        })
        // A subset left with no address is invalid on a real API server ("must specify
        // `addresses` or `notReadyAddresses`"): it is left out.
        .filter(|s| {
            ["addresses", "notReadyAddresses"]
                .iter()
                .any(|l| s[*l].as_array().is_some_and(|a| !a.is_empty()))
        })
        .collect();
    let meta = naming::host_metadata(
        ep,
        ctx.tenant,
        naming::tenant_labels(ep),
        Default::default(),
    );
    Built {
        object: Some(
            json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": subsets}),
        ),
        refused,
    }
}

/// The Service an EndpointSlice belongs to.
pub fn slice_service(slice: &Value) -> Option<&str> {
    slice["metadata"]["labels"]["kubernetes.io/service-name"].as_str()
}

/// The host EndpointSlice for a tenant EndpointSlice of a selector-less Service: only the
/// addresses of the tenant's own pods, of the slice's address type. `FQDN` slices (names, not
/// addresses) are never synced.
pub fn host_endpoint_slice(slice: &Value, ctx: &AddressContext<'_>) -> Built {
    let tenant = ctx.tenant;
    let ns = slice["metadata"]["namespace"].as_str().unwrap_or("");
    let address_type = slice["addressType"].as_str().unwrap_or("");
    let mut refused = Vec::new();
    if !matches!(address_type, "IPv4" | "IPv6") {
        for e in slice["endpoints"].as_array().into_iter().flatten() {
            for a in e["addresses"].as_array().into_iter().flatten() {
                refused.push(a.as_str().unwrap_or("").to_string());
            }
        }
        return Built {
            object: None,
            refused,
        };
    }
    let mut labels = naming::tenant_labels(slice);
    if let Some(svc) = slice_service(slice) {
        labels.insert(
            "kubernetes.io/service-name".into(),
            naming::host_name(svc, ns, tenant),
        );
    }
    labels.insert(
        "endpointslice.kubernetes.io/managed-by".into(),
        "syncer.fabrik.dev".into(),
    );
    let mut endpoints = Vec::new();
    for e in slice["endpoints"].as_array().into_iter().flatten() {
        let mut kept = Vec::new();
        let mut holder = None;
        for a in e["addresses"].as_array().into_iter().flatten() {
            let text = a.as_str().unwrap_or("");
            let family_ok = match addresses::parse_ip(text) {
                Some(std::net::IpAddr::V4(_)) => address_type == "IPv4",
                Some(std::net::IpAddr::V6(_)) => address_type == "IPv6",
                None => false,
            };
            match ctx.pods.get(text).filter(|_| family_ok) {
                Some(pod) => {
                    kept.push(json!(text));
                    holder.get_or_insert(pod);
                }
                None => refused.push(text.to_string()),
            }
        }
        let Some(pod) = holder else {
            continue;
        };
        let mut o = Map::new();
        o.insert("addresses".into(), Value::Array(kept));
        let mut conditions = Map::new();
        for c in ["ready", "serving", "terminating"] {
            if let Some(b) = e["conditions"][c].as_bool() {
                conditions.insert(c.into(), json!(b));
            }
        }
        if !conditions.is_empty() {
            o.insert("conditions".into(), Value::Object(conditions));
        }
        if let Some(h) = e["hostname"].as_str().filter(|h| is_dns_label(h)) {
            o.insert("hostname".into(), json!(h));
        }
        if !pod.node.is_empty() {
            o.insert("nodeName".into(), json!(pod.node));
        }
        o.insert("targetRef".into(), ctx.target_ref(pod));
        endpoints.push(Value::Object(o));
    }
    let meta = naming::host_metadata(slice, tenant, labels, Default::default());
    Built {
        object: Some(
            json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
                "addressType": address_type, "endpoints": endpoints,
                "ports": list(&slice["ports"], port)}),
        ),
        refused,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn pods() -> PodAddresses {
        let pod = |name: &str, ip: &str| {
            Arc::new(
                json!({"metadata": {"name": name, "uid": format!("u-{name}"),
                    "labels": {"fabrik.dev/tenant": "a"}},
                "spec": {"nodeName": "gpu-1"},
                "status": {"phase": "Running", "podIP": ip, "podIPs": [{"ip": ip}]}}),
            )
        };
        PodAddresses::from_host_pods(
            &[
                pod("db-0-x-n-x-a", "10.244.1.5"),
                pod("v6-x-n-x-a", "fd00::5"),
            ],
            "a",
        )
    }

    #[test]
    fn tenant_chosen_host_addresses_are_never_copied() {
        let svc = json!({"metadata": {"name": "web", "namespace": "prod"}, "spec": {
            "type": "LoadBalancer", "selector": {"app": "web", "fabrik.dev/tenant": "b"},
            "ports": [{"port": 80, "targetPort": 8080, "nodePort": 31000}],
            "externalIPs": ["10.0.0.1"], "loadBalancerIP": "1.2.3.4", "clusterIP": "10.96.0.9",
            "clusterIPs": ["10.96.0.9"], "loadBalancerSourceRanges": ["0.0.0.0/0"],
            "healthCheckNodePort": 32000, "externalTrafficPolicy": "Local",
            "loadBalancerClass": "evil.example/lb", "allocateLoadBalancerNodePorts": true}});
        let h = host_service(&svc, "a", Some(&json!("10.100.0.7")), &Policy::default());
        let s = &h["spec"];
        assert_eq!(
            s["selector"],
            json!({"app": "web", "fabrik.dev/tenant": "a", "fabrik.dev/namespace": "prod"})
        );
        assert_eq!(s["ports"], json!([{"port": 80, "targetPort": 8080}]));
        for f in [
            "externalIPs",
            "loadBalancerIP",
            "clusterIPs",
            "loadBalancerSourceRanges",
            "healthCheckNodePort",
            "externalTrafficPolicy",
            "loadBalancerClass",
            "allocateLoadBalancerNodePorts",
        ] {
            assert!(s.get(f).is_none(), "{f} reached the host");
        }
        assert_eq!(s["clusterIP"], "10.100.0.7");
        assert_eq!(h["metadata"]["name"], "web-x-prod-x-a");
        // A new copy asks for the tenant's address (which the host gave it: see
        // `service_ips`); the host refuses one that is not free. Nothing that is no address
        // is asked for.
        let first = host_service(&svc, "a", None, &Policy::default());
        assert_eq!(first["spec"]["clusterIP"], svc["spec"]["clusterIP"]);
        let mut odd = svc.clone();
        odd["spec"]["clusterIP"] = json!("10.96.0.0/12");
        let first = host_service(&odd, "a", None, &Policy::default());
        assert!(first["spec"].get("clusterIP").is_none());
    }

    #[test]
    fn load_balancer_annotations_are_never_copied() {
        let svc = json!({"metadata": {"name": "lb", "namespace": "n", "annotations": {
                "metallb.universe.tf/loadBalancerIPs": "192.0.2.10",
                "metallb.universe.tf/allow-shared-ip": "victim-key",
                "lbipam.cilium.io/ips": "192.0.2.11",
                "kube-vip.io/loadbalancerIPs": "192.0.2.12",
                "cloud.google.com/load-balancer-type": "Internal",
                "service.beta.kubernetes.io/aws-load-balancer-internal": "true"}},
            "spec": {"type": "LoadBalancer", "ports": [{"port": 80}]}});
        let h = host_service(&svc, "a", None, &Policy::default());
        let annotations = h["metadata"]["annotations"]
            .as_object()
            .expect("annotations");
        assert!(
            annotations.keys().all(|k| k.starts_with("fabrik.dev/")),
            "{annotations:?}"
        );
    }

    #[test]
    fn external_names_are_kept_only_when_allowed() {
        let svc = json!({"metadata": {"name": "db", "namespace": "n"}, "spec": {
            "type": "ExternalName", "externalName": "kubernetes.default.svc.cluster.local"}});
        let h = host_service(&svc, "a", None, &Policy::default());
        assert_eq!(h["spec"]["type"], "ClusterIP");
        assert!(h["spec"].get("externalName").is_none());
        assert!(!has_selector(&svc));
        let policy = Policy {
            external_names: vec!["*.rds.example.com".into()],
            ..Default::default()
        };
        let h = host_service(&svc, "a", None, &policy);
        assert_eq!(h["spec"]["type"], "ClusterIP");
        let allowed = json!({"metadata": {"name": "db", "namespace": "n"}, "spec": {
            "type": "ExternalName", "externalName": "Main.RDS.example.com.",
            "clusterIP": "10.96.0.1", "ports": [{"port": 5432}]}});
        let h = host_service(&allowed, "a", Some(&json!("10.100.0.3")), &policy);
        assert_eq!(
            h["spec"],
            json!({"type": "ExternalName", "externalName": "main.rds.example.com",
                "ports": [{"port": 5432}]})
        );
    }

    #[test]
    fn endpoints_keep_only_the_tenant_pods() {
        let ep = json!({"metadata": {"name": "db", "namespace": "n"}, "subsets": [{
            "addresses": [
                {"ip": "10.244.1.5", "hostname": "db-0", "nodeName": "victim",
                 "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": "etcd"}},
                {"ip": "127.0.0.1"}, {"ip": "169.254.169.254"}, {"ip": "10.96.0.1"},
                {"ip": "10.244.9.9"}],
            "notReadyAddresses": [{"ip": "10.244.1.5", "hostname": "Not_A_Label"}],
            "ports": [{"port": 5432}]}]});
        let p = pods();
        let ctx = AddressContext {
            tenant: "a",
            pods: &p,
        };
        let built = host_endpoints(&ep, &ctx);
        let h = built.object.expect("an Endpoints");
        assert_eq!(h["metadata"]["name"], "db-x-n-x-a");
        let target = json!({"kind": "Pod", "namespace": "fabrik-a", "name": "db-0-x-n-x-a",
            "uid": "u-db-0-x-n-x-a"});
        assert_eq!(
            h["subsets"][0]["addresses"],
            json!([{"ip": "10.244.1.5", "hostname": "db-0", "nodeName": "gpu-1",
                "targetRef": target}])
        );
        assert_eq!(
            h["subsets"][0]["notReadyAddresses"],
            json!([{"ip": "10.244.1.5", "nodeName": "gpu-1", "targetRef": target}])
        );
        assert_eq!(
            built.refused,
            vec!["127.0.0.1", "169.254.169.254", "10.96.0.1", "10.244.9.9"]
        );
        // A subset left with no address is no subset (a real API server refuses it).
        let only_foreign = json!({"metadata": {"name": "db", "namespace": "n"}, "subsets": [
            {"addresses": [{"ip": "10.96.0.1"}], "ports": [{"port": 443}]}]});
        let built = host_endpoints(&only_foreign, &ctx);
        assert_eq!(built.object.expect("an Endpoints")["subsets"], json!([]));
        assert_eq!(built.refused, vec!["10.96.0.1"]);
    }

    #[test]
    fn slices_keep_only_the_tenant_pods_of_their_family() {
        let p = pods();
        let ctx = AddressContext {
            tenant: "a",
            pods: &p,
        };
        let slice = json!({"metadata": {"name": "db-abc", "namespace": "n",
                "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4", "endpoints": [
                {"addresses": ["10.244.1.5"], "nodeName": "x", "zone": "evil",
                 "hints": {"forZones": [{"name": "z"}]}, "conditions": {"ready": true, "x": 1},
                 "targetRef": {"kind": "Pod", "namespace": "kube-system", "name": "etcd"}},
                {"addresses": ["169.254.169.254"]},
                {"addresses": ["fd00::5"]}],
            "ports": [{"port": 5432}]});
        let built = host_endpoint_slice(&slice, &ctx);
        let h = built.object.expect("a slice");
        assert_eq!(
            h["metadata"]["labels"]["kubernetes.io/service-name"],
            "db-x-n-x-a"
        );
        assert_eq!(
            h["endpoints"],
            json!([{"addresses": ["10.244.1.5"], "conditions": {"ready": true},
                "nodeName": "gpu-1", "targetRef": {"kind": "Pod", "namespace": "fabrik-a",
                    "name": "db-0-x-n-x-a", "uid": "u-db-0-x-n-x-a"}}])
        );
        assert_eq!(built.refused, vec!["169.254.169.254", "fd00::5"]);
        let fqdn = json!({"metadata": {"name": "db-f", "namespace": "n",
                "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "FQDN", "endpoints": [{"addresses": ["metadata.google.internal"]}]});
        let built = host_endpoint_slice(&fqdn, &ctx);
        assert!(built.object.is_none());
        assert_eq!(built.refused, vec!["metadata.google.internal"]);
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("db-0"));
        assert!(!is_dns_label("-a") && !is_dns_label("A") && !is_dns_label(""));
        assert!(is_dns_subdomain("a.b-c.d"));
        assert!(!is_dns_subdomain("a..b") && !is_dns_subdomain(".a"));
    }
}
