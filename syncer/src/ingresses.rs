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
//!
//! IngressClasses: a synced Ingress may name only a host IngressClass on the Tenant's
//! `isolation.ingressClasses` list, in `spec.ingressClassName` or in the legacy
//! `kubernetes.io/ingress.class` annotation (both set: they must agree). An Ingress naming no
//! class gets the first class on the list on the host — never no class, which the host's
//! default-class admission would fill with a class the tenant was not given. With an empty list
//! no Ingress is synced. The tenant's admission refuses the others ([`check_ingress`]); the
//! builder refuses them again ([`host_ingress`] returns `None`).
//!
//! Hosts and paths are checked as upstream's validation does (DNS names, a wildcard only as the
//! first label, no IP; paths absolute, without `//`, `/./`, `/../`, `%2f` for `Exact` and
//! `Prefix`), and further: no whitespace, control characters, quotes, `;`, `{`, `}` or `\` in a
//! path (an ingress controller may paste paths into its server configuration). A rule or path
//! that fails is left out of the host copy.
//!
//! Hostnames on a shared ingress controller: with the Tenant's `isolation.routeHostnames` set
//! (the names its Ingresses and Gateway API routes may claim), a rule's or TLS entry's host
//! must be under it, and a rule without a host (every hostname of the controller) or a
//! default backend is refused — so that a tenant cannot take another's traffic.

use serde_json::{json, Map, Value};

use crate::naming;
use crate::policy::Policy;
use crate::services::is_dns_subdomain;

/// The reason of the tenant Event about an Ingress not synced for its class.
pub const REASON_CLASS_REFUSED: &str = "IngressClassRefused";

/// The legacy annotation naming an Ingress's class.
pub const CLASS_ANNOTATION: &str = "kubernetes.io/ingress.class";

/// The host IngressClass of a tenant Ingress, or why it may have none.
pub fn ingress_class(ing: &Value, policy: &Policy) -> Result<String, String> {
    let field = ing["spec"]["ingressClassName"].as_str();
    let annotation = ing["metadata"]["annotations"][CLASS_ANNOTATION].as_str();
    let (path, class) = match (field, annotation) {
        (Some(f), Some(a)) if f != a => {
            return Err(format!(
                "metadata.annotations[{CLASS_ANNOTATION}]: Invalid value: {a:?}: can not be set \
                 when the class field is also set to another class ({f:?})"
            ))
        }
        (Some(f), _) => ("spec.ingressClassName", f),
        (None, Some(a)) => ("metadata.annotations[kubernetes.io/ingress.class]", a),
        (None, None) => {
            return policy.ingress_classes.first().cloned().ok_or_else(|| {
                "spec.ingressClassName: Forbidden: this tenant may use no host IngressClass \
                 (the Tenant's spec.isolation.ingressClasses is empty)"
                    .to_string()
            })
        }
    };
    if policy.allows_ingress_class(class) {
        Ok(class.to_string())
    } else {
        Err(format!(
            "{path}: Forbidden: IngressClass {class:?} is not one of this tenant's ({})",
            if policy.ingress_classes.is_empty() {
                "none".to_string()
            } else {
                policy.ingress_classes.join(", ")
            }
        ))
    }
}

/// Upstream's host check: a DNS subdomain, `*` only as the whole first label, not an IP.
fn host_error(host: &str) -> Option<&'static str> {
    let bare = host.strip_prefix("*.").unwrap_or(host);
    if crate::addresses::parse_ip(host).is_some() {
        Some("must be a DNS name, not an IP address")
    } else if !is_dns_subdomain(bare) {
        Some("a lowercase RFC 1123 subdomain (a wildcard only as the first label) is required")
    } else {
        None
    }
}

/// Upstream's path check, and the characters a path may not hold here.
pub(crate) fn path_error(path: &str, path_type: &str) -> Option<&'static str> {
    if path.chars().any(|c| {
        c.is_control()
            || c.is_whitespace()
            || matches!(c, '"' | '\'' | ';' | '{' | '}' | '\\' | '`')
    }) {
        return Some(
            "must not contain whitespace, control characters, quotes, ';', '{', '}', '\\' or '`'",
        );
    }
    if path_type == "ImplementationSpecific" {
        return (!path.is_empty() && !path.starts_with('/')).then_some("must be an absolute path");
    }
    if !path.starts_with('/') {
        return Some("must be an absolute path");
    }
    if ["//", "/./", "/../", "%2f", "%2F"]
        .iter()
        .any(|s| path.contains(s))
        || path.ends_with("/..")
        || path.ends_with("/.")
    {
        return Some("must not contain '//', '/./', '/../' or '%2f', nor end with '/.' or '/..'");
    }
    None
}

fn path_type(p: &Value) -> &str {
    p["pathType"].as_str().unwrap_or("ImplementationSpecific")
}

/// Why a host may not be claimed under the Tenant's `routeHostnames`, if it may not; a rule
/// without a host (`None`) claims every hostname.
fn claim_error(host: Option<&str>, policy: &Policy) -> Option<String> {
    if policy.route_hostnames.is_empty() {
        return None;
    }
    let names = policy.route_hostnames.join(", ");
    match host {
        None => Some(format!(
            "Forbidden: a rule without a host claims every hostname of the ingress controller; \
             this tenant may claim only {names}"
        )),
        Some(h) if !policy.allows_route_hostname(h) => Some(format!(
            "Forbidden: {h:?} is not a hostname this tenant may claim ({names})"
        )),
        Some(_) => None,
    }
}

/// Checks a tenant Ingress that will be synced; `Err` lists every refused field.
pub fn check_ingress(ing: &Value, policy: &Policy) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    if let Err(e) = ingress_class(ing, policy) {
        errs.push(e);
    }
    let spec = &ing["spec"];
    if !spec["defaultBackend"].is_null() {
        if let Some(why) = claim_error(None, policy) {
            errs.push(format!("spec.defaultBackend: {why}"));
        }
    }
    for (i, r) in spec["rules"].as_array().into_iter().flatten().enumerate() {
        if let Some(h) = r["host"].as_str() {
            if let Some(why) = host_error(h) {
                errs.push(format!("spec.rules[{i}].host: Invalid value: {h:?}: {why}"));
            }
        }
        if let Some(why) = claim_error(r["host"].as_str(), policy) {
            errs.push(format!("spec.rules[{i}].host: {why}"));
        }
        for (j, p) in r["http"]["paths"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let path = p["path"].as_str().unwrap_or("");
            if let Some(why) = path_error(path, path_type(p)) {
                errs.push(format!(
                    "spec.rules[{i}].http.paths[{j}].path: Invalid value: {path:?}: {why}"
                ));
            }
        }
    }
    for (i, t) in spec["tls"].as_array().into_iter().flatten().enumerate() {
        for (j, h) in t["hosts"].as_array().into_iter().flatten().enumerate() {
            let h = h.as_str().unwrap_or("");
            if let Some(why) = host_error(h) {
                errs.push(format!(
                    "spec.tls[{i}].hosts[{j}]: Invalid value: {h:?}: {why}"
                ));
            } else if let Some(why) = claim_error(Some(h), policy) {
                errs.push(format!("spec.tls[{i}].hosts[{j}]: {why}"));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

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

/// The host Ingress for a tenant Ingress; `None` when it may name no host IngressClass.
pub fn host_ingress(ing: &Value, tenant: &str, policy: &Policy) -> Option<Value> {
    let ns = ing["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &ing["spec"];
    let mut out = Map::new();
    let class = ingress_class(ing, policy).ok()?;
    out.insert("ingressClassName".into(), json!(class));
    if claim_error(None, policy).is_none() {
        if let Some(b) = backend(&spec["defaultBackend"], ns, tenant) {
            out.insert("defaultBackend".into(), b);
        }
    }
    let rules: Vec<Value> = spec["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["host"].as_str().is_none_or(|h| host_error(h).is_none()))
        .filter(|r| claim_error(r["host"].as_str(), policy).is_none())
        .map(|r| {
            let mut rule = Map::new();
            if let Some(h) = r["host"].as_str() {
                rule.insert("host".into(), json!(h));
            }
            let paths: Vec<Value> = r["http"]["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|p| path_error(p["path"].as_str().unwrap_or(""), path_type(p)).is_none())
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
                let hosts: Vec<&str> = hosts
                    .iter()
                    .filter_map(Value::as_str)
                    .filter(|h| host_error(h).is_none() && claim_error(Some(h), policy).is_none())
                    .collect();
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
    Some(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": naming::host_metadata(
            ing,
            tenant,
            naming::tenant_labels(ing),
            Default::default(),
        ),
        "spec": out,
    }))
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
        let policy = Policy {
            ingress_classes: vec!["nginx".into()],
            ..Default::default()
        };
        let h = host_ingress(&ing, "acme", &policy).expect("an allowed class");
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

    fn ingress(class: Option<&str>, annotation: Option<&str>) -> Value {
        let mut ing = json!({"metadata": {"name": "web", "namespace": "shop"},
            "spec": {"rules": [{"host": "shop.example.com", "http": {"paths": [
                {"path": "/", "pathType": "Prefix",
                 "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}]}});
        if let Some(c) = class {
            ing["spec"]["ingressClassName"] = json!(c);
        }
        if let Some(a) = annotation {
            ing["metadata"]["annotations"] = json!({CLASS_ANNOTATION: a});
        }
        ing
    }

    #[test]
    fn only_the_tenant_classes_are_named_on_the_host() {
        let policy = Policy {
            ingress_classes: vec!["tenant-nginx".into(), "tenant-alb".into()],
            ..Default::default()
        };
        // (class field, annotation, host class or the refused field)
        type Row<'a> = (Option<&'a str>, Option<&'a str>, Result<&'a str, &'a str>);
        let table: &[Row] = &[
            (Some("tenant-alb"), None, Ok("tenant-alb")),
            (None, Some("tenant-alb"), Ok("tenant-alb")),
            (Some("tenant-alb"), Some("tenant-alb"), Ok("tenant-alb")),
            (None, None, Ok("tenant-nginx")),
            (
                Some("platform-internal"),
                None,
                Err("spec.ingressClassName: Forbidden"),
            ),
            (
                None,
                Some("platform-internal"),
                Err("metadata.annotations[kubernetes.io/ingress.class]: Forbidden"),
            ),
            (
                Some("tenant-alb"),
                Some("platform-internal"),
                Err("metadata.annotations[kubernetes.io/ingress.class]: Invalid"),
            ),
        ];
        for (class, annotation, want) in table {
            let ing = ingress(*class, *annotation);
            let host = host_ingress(&ing, "t", &policy);
            let checked = check_ingress(&ing, &policy);
            match want {
                Ok(c) => {
                    assert_eq!(checked, Ok(()), "{class:?} {annotation:?}");
                    let h = host.expect("a host Ingress");
                    assert_eq!(h["spec"]["ingressClassName"], *c);
                    assert!(h["metadata"]["annotations"][CLASS_ANNOTATION].is_null());
                }
                Err(e) => {
                    assert!(host.is_none(), "{class:?} {annotation:?} was synced");
                    let errs = checked.expect_err("refused");
                    assert!(errs.len() == 1 && errs[0].starts_with(e), "{errs:?}");
                }
            }
        }
        // No class allowed: nothing is synced, and the message says why.
        let none = Policy::default();
        assert!(host_ingress(&ingress(None, None), "t", &none).is_none());
        let errs = check_ingress(&ingress(None, None), &none).expect_err("refused");
        assert!(errs[0].contains("ingressClasses is empty"), "{errs:?}");
    }

    #[test]
    fn hostile_hosts_and_paths_are_refused_and_left_out() {
        let policy = Policy {
            ingress_classes: vec!["c".into()],
            ..Default::default()
        };
        let table: &[(&str, &str, &str, &str)] = &[
            // (host, path, pathType, refused field)
            ("10.0.0.1", "/", "Prefix", "spec.rules[0].host"),
            ("a.*.example.com", "/", "Prefix", "spec.rules[0].host"),
            ("Shop.example.com", "/", "Prefix", "spec.rules[0].host"),
            (
                "shop.example.com",
                "/a/../b",
                "Prefix",
                "spec.rules[0].http.paths[0].path",
            ),
            (
                "shop.example.com",
                "relative",
                "Exact",
                "spec.rules[0].http.paths[0].path",
            ),
            (
                "shop.example.com",
                "/a%2fb",
                "Prefix",
                "spec.rules[0].http.paths[0].path",
            ),
            (
                "shop.example.com",
                "/x { return 200; }",
                "ImplementationSpecific",
                "spec.rules[0].http.paths[0].path",
            ),
            (
                "shop.example.com",
                "/x\nlocation",
                "ImplementationSpecific",
                "spec.rules[0].http.paths[0].path",
            ),
        ];
        for (host, path, path_type, field) in table {
            let mut ing = ingress(Some("c"), None);
            ing["spec"]["rules"][0]["host"] = json!(host);
            ing["spec"]["rules"][0]["http"]["paths"][0]["path"] = json!(path);
            ing["spec"]["rules"][0]["http"]["paths"][0]["pathType"] = json!(path_type);
            let errs = check_ingress(&ing, &policy).expect_err(path);
            assert!(
                errs.len() == 1 && errs[0].starts_with(field),
                "{host} {path}: {errs:?}"
            );
            let h = host_ingress(&ing, "t", &policy).expect("a host Ingress");
            let copied = h["spec"]["rules"].to_string();
            assert!(
                !copied.contains(&json!(host).to_string())
                    || !copied.contains(&json!(path).to_string()),
                "{host} {path} reached the host: {copied}"
            );
        }
        let mut wildcard = ingress(Some("c"), None);
        wildcard["spec"]["rules"][0]["host"] = json!("*.shop.example.com");
        assert_eq!(check_ingress(&wildcard, &policy), Ok(()));
    }

    #[test]
    fn hostnames_are_kept_to_the_tenants_on_a_shared_controller() {
        let policy = Policy {
            ingress_classes: vec!["shared".into()],
            route_hostnames: vec!["*.acme.example.com".into()],
            ..Default::default()
        };
        let ing = json!({"metadata": {"name": "web", "namespace": "shop", "uid": "u"},
        "spec": {
            "defaultBackend": {"service": {"name": "all", "port": {"number": 80}}},
            "rules": [
                {"host": "web.acme.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
                {"host": "bank.example.com", "http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}},
                {"http": {"paths": [{"path": "/", "pathType": "Prefix",
                    "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}
            ],
            "tls": [{"hosts": ["web.acme.example.com", "bank.example.com"], "secretName": "t"}]
        }});
        let errs = check_ingress(&ing, &policy).expect_err("refused");
        let fields: Vec<&str> = errs
            .iter()
            .map(|e| e.split(':').next().unwrap_or(""))
            .collect();
        assert_eq!(
            fields,
            [
                "spec.defaultBackend",
                "spec.rules[1].host",
                "spec.rules[2].host",
                "spec.tls[0].hosts[1]"
            ],
            "{errs:?}"
        );
        let h = host_ingress(&ing, "acme", &policy).expect("a host Ingress");
        let text = h.to_string();
        assert!(!text.contains("bank.example.com"), "{text}");
        assert!(h["spec"]["defaultBackend"].is_null(), "{text}");
        assert_eq!(
            h["spec"]["rules"].as_array().map(Vec::len),
            Some(1),
            "{text}"
        );
        // Without a list, the controller's own configuration decides, as before.
        let open = Policy {
            ingress_classes: vec!["shared".into()],
            ..Default::default()
        };
        assert_eq!(check_ingress(&ing, &open), Ok(()));
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
