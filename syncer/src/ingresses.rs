//! Ingresses (networking.k8s.io/v1), an extra kind a Tenant opts into
//! (`spec.sync.extraKinds: [ingresses.networking.k8s.io]`): tenant object → host object, by
//! allow-list.
//!
//! What is copied: the ingress class, rules (host, paths with their type) and TLS hosts, with
//! every reference rewritten to the tenant namespace's host copies — a backend Service and a TLS
//! Secret name the host objects of *this* tenant namespace, never another's. What is not: the
//! tenant's annotations (ingress controllers read configuration from them, some of it able to
//! inject server configuration — `nginx.ingress.kubernetes.io/configuration-snippet` — so none
//! reaches the host), and `resource` backends (a reference to an arbitrary object kind).
//! Status (the load balancer's addresses) comes back up.

use serde_json::{json, Map, Value};

use crate::naming;

/// The `<resource>.<group>` a Tenant names to sync Ingresses.
pub const EXTRA_KIND: &str = "ingresses.networking.k8s.io";

fn backend(b: &Value, ns: &str, tenant: &str) -> Option<Value> {
    let svc = &b["service"];
    let name = svc["name"].as_str()?;
    let mut port = Map::new();
    for f in ["name", "number"] {
        if !svc["port"][f].is_null() {
            port.insert(f.into(), svc["port"][f].clone());
        }
    }
    Some(json!({"service": {"name": naming::host_name(name, ns, tenant), "port": port}}))
}

/// The host Ingress for a tenant Ingress.
pub fn host_ingress(ing: &Value, tenant: &str) -> Value {
    let ns = ing["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &ing["spec"];
    let mut out = Map::new();
    if let Some(class) = spec["ingressClassName"].as_str() {
        out.insert("ingressClassName".into(), json!(class));
    }
    if let Some(b) = backend(&spec["defaultBackend"], ns, tenant) {
        out.insert("defaultBackend".into(), b);
    }
    let rules: Vec<Value> = spec["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| {
            let mut rule = Map::new();
            if let Some(h) = r["host"].as_str() {
                rule.insert("host".into(), json!(h));
            }
            let paths: Vec<Value> = r["http"]["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| {
                    let b = backend(&p["backend"], ns, tenant)?;
                    let mut path = Map::new();
                    if let Some(s) = p["path"].as_str() {
                        path.insert("path".into(), json!(s));
                    }
                    path.insert(
                        "pathType".into(),
                        json!(p["pathType"].as_str().unwrap_or("ImplementationSpecific")),
                    );
                    path.insert("backend".into(), b);
                    Some(Value::Object(path))
                })
                .collect();
            if !paths.is_empty() {
                rule.insert("http".into(), json!({"paths": paths}));
            }
            Value::Object(rule)
        })
        .collect();
    if !rules.is_empty() {
        out.insert("rules".into(), Value::Array(rules));
    }
    let tls: Vec<Value> = spec["tls"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|t| {
            let mut o = Map::new();
            if let Some(hosts) = t["hosts"].as_array() {
                let hosts: Vec<&str> = hosts.iter().filter_map(Value::as_str).collect();
                o.insert("hosts".into(), json!(hosts));
            }
            if let Some(secret) = t["secretName"].as_str() {
                o.insert(
                    "secretName".into(),
                    json!(naming::host_name(secret, ns, tenant)),
                );
            }
            Value::Object(o)
        })
        .collect();
    if !tls.is_empty() {
        out.insert("tls".into(), Value::Array(tls));
    }
    json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": naming::host_metadata(
            ing,
            tenant,
            naming::tenant_labels(ing),
            Default::default(),
        ),
        "spec": out,
    })
}

/// The status of a host Ingress, for its tenant Ingress: its load balancer, as a Service's.
pub fn tenant_ingress_status(host: &Value) -> Map<String, Value> {
    crate::services::tenant_service_status(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_are_rewritten_and_the_rest_dropped() {
        let ing = json!({
            "metadata": {"name": "web", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web", "fabrik.dev/tenant": "other"},
                "annotations": {"nginx.ingress.kubernetes.io/configuration-snippet": "evil",
                                "team": "x"}},
            "spec": {
                "ingressClassName": "nginx",
                "defaultBackend": {"service": {"name": "fallback", "port": {"number": 80}}},
                "rules": [{"host": "shop.example.com", "http": {"paths": [
                    {"path": "/", "pathType": "Prefix",
                     "backend": {"service": {"name": "web", "port": {"name": "http"}}}},
                    {"path": "/x", "pathType": "Prefix",
                     "backend": {"resource": {"apiGroup": "k8s.example.com", "kind": "Bucket", "name": "b"}}}
                ]}}],
                "tls": [{"hosts": ["shop.example.com"], "secretName": "shop-tls"}],
                "unknown": {"field": true}
            }
        });
        let h = host_ingress(&ing, "acme");
        assert_eq!(h["metadata"]["name"], "web-x-shop-x-acme");
        assert_eq!(h["metadata"]["namespace"], "fabrik-acme");
        assert_eq!(h["metadata"]["labels"]["fabrik.dev/tenant"], "acme");
        assert_eq!(h["metadata"]["labels"]["app"], "web");
        let annotations = h["metadata"]["annotations"]
            .as_object()
            .expect("annotations");
        assert!(
            annotations.keys().all(|k| k.starts_with("fabrik.dev/")),
            "{annotations:?}"
        );
        let spec = &h["spec"];
        assert_eq!(spec["ingressClassName"], "nginx");
        assert_eq!(
            spec["defaultBackend"]["service"]["name"],
            "fallback-x-shop-x-acme"
        );
        let paths = spec["rules"][0]["http"]["paths"].as_array().expect("paths");
        assert_eq!(paths.len(), 1, "the resource backend is dropped: {paths:?}");
        assert_eq!(paths[0]["backend"]["service"]["name"], "web-x-shop-x-acme");
        assert_eq!(paths[0]["backend"]["service"]["port"]["name"], "http");
        assert_eq!(spec["tls"][0]["secretName"], "shop-tls-x-shop-x-acme");
        assert!(spec["unknown"].is_null());
    }

    #[test]
    fn status_comes_back() {
        let host = json!({"status": {"loadBalancer": {"ingress": [{"ip": "10.0.0.9"}]}}});
        assert_eq!(
            tenant_ingress_status(&host)["loadBalancer"]["ingress"][0]["ip"],
            "10.0.0.9"
        );
        assert!(tenant_ingress_status(&json!({})).is_empty());
    }
}
