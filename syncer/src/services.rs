//! Services, Endpoints and EndpointSlices: tenant object → host object, by allow-list.
//!
//! A Service's selector is rewritten to match the host pods of the same tenant namespace (the
//! tenant's labels plus `fabrik.dev/tenant` and `fabrik.dev/namespace`), so it can never select
//! another tenant's pods or pods of another namespace. `externalIPs`, `loadBalancerIP`, node
//! ports and `externalName` (which would let a tenant claim host addresses or names) are not
//! copied; an `ExternalName` Service becomes a selector-less `ClusterIP` one. Endpoints and
//! EndpointSlices are synced only for Services without a selector (for the others the host
//! computes them), keeping addresses and ports and dropping node names and target references.

use serde_json::{json, Map, Value};

use crate::naming;
use crate::pods::host_selector;

/// The host Service for a tenant Service. `host_cluster_ip` is the existing host object's
/// `spec.clusterIP` (immutable on the host), if there is one.
pub fn host_service(svc: &Value, tenant: &str, host_cluster_ip: Option<&Value>) -> Value {
    let ns = svc["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &svc["spec"];
    let mut out = Map::new();
    let t = spec["type"]
        .as_str()
        .filter(|t| matches!(*t, "NodePort" | "LoadBalancer"))
        .unwrap_or("ClusterIP");
    out.insert("type".into(), json!(t));
    if let Some(ports) = spec["ports"].as_array() {
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
        out.insert("ports".into(), Value::Array(ports));
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
    } else if let Some(ip) = host_cluster_ip.filter(|ip| !ip.is_null()) {
        out.insert("clusterIP".into(), ip.clone());
    }
    let meta = naming::host_metadata(
        svc,
        tenant,
        naming::tenant_labels(svc),
        naming::tenant_annotations(svc),
    );
    json!({"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": out})
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

fn address(a: &Value) -> Value {
    let mut o = Map::new();
    for f in ["ip", "hostname"] {
        if !a[f].is_null() {
            o.insert(f.into(), a[f].clone());
        }
    }
    Value::Object(o)
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

/// The host Endpoints for a tenant Endpoints object (same name as its Service).
pub fn host_endpoints(ep: &Value, tenant: &str) -> Value {
    let subsets: Vec<Value> = ep["subsets"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|s| {
            json!({"addresses": list(&s["addresses"], address),
                "notReadyAddresses": list(&s["notReadyAddresses"], address),
                "ports": list(&s["ports"], port)})
        })
        .collect();
    let meta = naming::host_metadata(ep, tenant, naming::tenant_labels(ep), Default::default());
    json!({"apiVersion": "v1", "kind": "Endpoints", "metadata": meta, "subsets": subsets})
}

/// The Service an EndpointSlice belongs to.
pub fn slice_service(slice: &Value) -> Option<&str> {
    slice["metadata"]["labels"]["kubernetes.io/service-name"].as_str()
}

/// The host EndpointSlice for a tenant EndpointSlice of a selector-less Service.
pub fn host_endpoint_slice(slice: &Value, tenant: &str) -> Value {
    let ns = slice["metadata"]["namespace"].as_str().unwrap_or("");
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
    let endpoints: Vec<Value> = slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|e| {
            let mut o = Map::new();
            for f in ["addresses", "conditions", "hostname", "zone"] {
                if !e[f].is_null() {
                    o.insert(f.into(), e[f].clone());
                }
            }
            Value::Object(o)
        })
        .collect();
    let meta = naming::host_metadata(slice, tenant, labels, Default::default());
    json!({"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice", "metadata": meta,
        "addressType": slice["addressType"], "endpoints": endpoints,
        "ports": list(&slice["ports"], port)})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_match_only_the_tenant_namespace() {
        let svc = json!({"metadata": {"name": "web", "namespace": "prod"}, "spec": {
            "type": "LoadBalancer", "selector": {"app": "web", "fabrik.dev/tenant": "b"},
            "ports": [{"port": 80, "targetPort": 8080, "nodePort": 31000}],
            "externalIPs": ["10.0.0.1"], "loadBalancerIP": "1.2.3.4", "clusterIP": "10.96.0.9"}});
        let h = host_service(&svc, "a", Some(&json!("10.100.0.7")));
        let s = &h["spec"];
        assert_eq!(
            s["selector"],
            json!({"app": "web", "fabrik.dev/tenant": "a", "fabrik.dev/namespace": "prod"})
        );
        assert_eq!(s["ports"], json!([{"port": 80, "targetPort": 8080}]));
        assert!(s.get("externalIPs").is_none());
        assert!(s.get("loadBalancerIP").is_none());
        assert_eq!(s["clusterIP"], "10.100.0.7");
        assert_eq!(h["metadata"]["name"], "web-x-prod-x-a");
    }

    #[test]
    fn external_names_become_cluster_ip() {
        let svc = json!({"metadata": {"name": "db", "namespace": "n"}, "spec": {
            "type": "ExternalName", "externalName": "kubernetes.default.svc"}});
        let h = host_service(&svc, "a", None);
        assert_eq!(h["spec"]["type"], "ClusterIP");
        assert!(h["spec"].get("externalName").is_none());
        assert!(!has_selector(&svc));
    }

    #[test]
    fn endpoints_keep_addresses_only() {
        let ep = json!({"metadata": {"name": "db", "namespace": "n"}, "subsets": [{
            "addresses": [{"ip": "10.1.2.3", "nodeName": "x", "targetRef": {"kind": "Pod", "name": "p"}}],
            "ports": [{"port": 5432}]}]});
        let h = host_endpoints(&ep, "a");
        assert_eq!(h["metadata"]["name"], "db-x-n-x-a");
        assert_eq!(h["subsets"][0]["addresses"], json!([{"ip": "10.1.2.3"}]));
        let slice = json!({"metadata": {"name": "db-abc", "namespace": "n",
                "labels": {"kubernetes.io/service-name": "db"}},
            "addressType": "IPv4", "endpoints": [{"addresses": ["10.1.2.3"], "nodeName": "x",
                "targetRef": {"kind": "Pod"}}], "ports": [{"port": 5432}]});
        let h = host_endpoint_slice(&slice, "a");
        assert_eq!(
            h["metadata"]["labels"]["kubernetes.io/service-name"],
            "db-x-n-x-a"
        );
        assert_eq!(h["endpoints"], json!([{"addresses": ["10.1.2.3"]}]));
    }
}
