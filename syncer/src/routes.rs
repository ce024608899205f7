//! Gateway API routes (`gateway.networking.k8s.io/v1` HTTPRoute and GRPCRoute), extra kinds a
//! Tenant opts into (`spec.sync.extraKinds: [httproutes.gateway.networking.k8s.io,
//! grpcroutes.gateway.networking.k8s.io]`): tenant route → host route, by allow-list; status
//! back.
//!
//! **Parents.** A route attaches to the host Gateways on the Tenant's `isolation.gateways`
//! list (`namespace/name`), named in its `parentRefs` as they are on the host (a parentRef
//! without a namespace means the route's own namespace, as upstream). Only those parentRefs
//! reach the host copy, with the namespace written out; the others are the tenant's own
//! (Gateways of a controller running inside the tenant) and stay there. A route naming no
//! allowed Gateway is not synced, and an Event says so.
//!
//! **Hostnames.** With `isolation.routeHostnames` set, a synced route may claim only names
//! under it, and a route claiming none gets that list on the host — never "every hostname of
//! the listener", which could take another tenant's traffic on a shared Gateway.
//!
//! **Rules.** The Gateway API's standard channel is copied: matches and timeouts, and filters
//! of the standard types that carry data only (header modifiers, redirects, rewrites); a
//! `RequestMirror`'s backend is rewritten as a backend. Experimental rule fields (`name`,
//! `retry`, `sessionPersistence`) are left out and said so. `ExtensionRef` and other
//! implementation-specific or experimental filters (CORS) may refer to host objects outside
//! the tenant or are unknown to the host: a route holding one is not synced at all (dropping
//! only the filter — an authentication step, say — would change what the route lets through).
//!
//! **Backends.** Every `backendRef` becomes this tenant's host copy of the Service it names, in
//! the tenant's host namespace; weights, ports and per-backend filters are kept, so a weighted
//! split (canary, the inference routing of AI conformance) stays the same split. A backend in
//! another tenant namespace needs a ReferenceGrant there, as upstream. A backend that is not a
//! Service, or not granted, keeps its weight but points at [`REFUSED_BACKEND`], a Service that
//! never exists: the host's Gateway answers its share of requests with an error, as upstream
//! implementations do for an invalid reference, instead of sending it to the other backends.
//!
//! **Status.** The host Gateway controller's `status.parents` entries come back, each under the
//! tenant's parentRef as written; entries of the tenant's own parents are kept.

use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::kinds::Kind;
use crate::naming;
use crate::policy::Policy;

/// The Gateway API group.
pub const GROUP: &str = "gateway.networking.k8s.io";

/// The reason of the tenant Event about a route (or part of one) not synced.
pub const REASON_REFUSED: &str = "RouteNotSynced";

/// The Service a refused backend reference points at on the host: never a copy's name (a
/// copy's name holds `-x-` or ends in hex digits), so it never exists.
pub const REFUSED_BACKEND: &str = "fabrik-backend-not-permitted";

/// The CRDs of the Gateway API a tenant gets from the host when its routes are synced.
pub const CRDS: [&str; 5] = [
    "gatewayclasses.gateway.networking.k8s.io",
    "gateways.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
    "grpcroutes.gateway.networking.k8s.io",
    "referencegrants.gateway.networking.k8s.io",
];

/// Filter types copied to the host (the standard channel's), with the field holding their
/// configuration.
const DATA_FILTERS: [(&str, &str); 5] = [
    ("RequestHeaderModifier", "requestHeaderModifier"),
    ("ResponseHeaderModifier", "responseHeaderModifier"),
    ("RequestRedirect", "requestRedirect"),
    ("URLRewrite", "urlRewrite"),
    ("RequestMirror", "requestMirror"),
];

/// Rule fields copied as they are (besides filters and backends).
const RULE_FIELDS: [&str; 2] = ["matches", "timeouts"];

/// Rule fields of the experimental channel: not copied (a host serving the standard CRDs would
/// drop them, and the copy would never look up to date), and said so.
const EXPERIMENTAL_RULE_FIELDS: [&str; 3] = ["name", "retry", "sessionPersistence"];

/// The route's kind name (`HTTPRoute`, `GRPCRoute`).
fn kind_name(kind: Kind) -> String {
    kind.api_resource().kind
}

/// The (namespace, name) of the Gateway a parentRef names, if it names a Gateway.
fn gateway_of(p: &Value, route_ns: &str) -> Option<(String, String)> {
    let group = p["group"].as_str().unwrap_or(GROUP);
    let kind = p["kind"].as_str().unwrap_or("Gateway");
    if group != GROUP || kind != "Gateway" {
        return None;
    }
    let name = p["name"].as_str()?;
    let ns = p["namespace"].as_str().unwrap_or(route_ns);
    Some((ns.to_string(), name.to_string()))
}

/// A parentRef with its defaults written out, as the host copy (and its status) holds it; `None`
/// when it names no host Gateway the tenant may attach to.
fn host_parent(p: &Value, route_ns: &str, policy: &Policy) -> Option<Value> {
    let (ns, name) = gateway_of(p, route_ns)?;
    if !policy.allows_gateway(&ns, &name) {
        return None;
    }
    let mut out = json!({"group": GROUP, "kind": "Gateway", "namespace": ns, "name": name});
    for f in ["sectionName", "port"] {
        if !p[f].is_null() {
            out[f] = p[f].clone();
        }
    }
    Some(out)
}

/// Upstream's hostname check for a route: a DNS subdomain, `*` only as the whole first label,
/// not an IP address.
fn hostname_error(h: &str) -> Option<&'static str> {
    let bare = h.strip_prefix("*.").unwrap_or(h);
    if crate::addresses::parse_ip(h).is_some() {
        Some("must be a DNS name, not an IP address")
    } else if !crate::services::is_dns_subdomain(bare) {
        Some("a lowercase RFC 1123 subdomain (a wildcard only as the first label) is required")
    } else {
        None
    }
}

/// Why a backendRef (or a mirror's) may not be synced as it is, if it may not.
fn backend_refusal(b: &Value, kind: Kind, route_ns: &str, grants: &[Arc<Value>]) -> Option<String> {
    if let Some(why) = not_a_service(b) {
        return Some(why);
    }
    let name = b["name"].as_str().unwrap_or("");
    let ns = b["namespace"].as_str().unwrap_or(route_ns);
    if ns != route_ns && !granted(grants, &kind_name(kind), route_ns, ns, name) {
        return Some(format!(
            "Service {ns}/{name} is in another namespace and no ReferenceGrant there allows \
             {} from namespace {route_ns:?}",
            kind_name(kind)
        ));
    }
    None
}

/// Why a backendRef is not a core Service, if it is not.
fn not_a_service(b: &Value) -> Option<String> {
    let group = b["group"].as_str().unwrap_or("");
    let bkind = b["kind"].as_str().unwrap_or("Service");
    if group.is_empty() && bkind == "Service" {
        return None;
    }
    let what = if group.is_empty() {
        bkind.to_string()
    } else {
        format!("{group}/{bkind}")
    };
    let name = b["name"].as_str().unwrap_or("");
    Some(format!(
        "only Services are synced to the host as backends, not {what} {name:?}"
    ))
}

/// Whether a ReferenceGrant in `to_ns` lets a `route_kind` of `from_ns` name Service `name`.
pub fn granted(
    grants: &[Arc<Value>],
    route_kind: &str,
    from_ns: &str,
    to_ns: &str,
    name: &str,
) -> bool {
    grants
        .iter()
        .filter(|g| g["metadata"]["namespace"].as_str() == Some(to_ns))
        .any(|g| {
            let from = g["spec"]["from"].as_array().into_iter().flatten().any(|f| {
                f["group"].as_str() == Some(GROUP)
                    && f["kind"].as_str() == Some(route_kind)
                    && f["namespace"].as_str() == Some(from_ns)
            });
            let to = g["spec"]["to"].as_array().into_iter().flatten().any(|t| {
                t["group"].as_str().unwrap_or("").is_empty()
                    && t["kind"].as_str() == Some("Service")
                    && t["name"].as_str().is_none_or(|n| n.is_empty() || n == name)
            });
            from && to
        })
}

/// The host form of a backendRef: the tenant's host copy of the Service, or [`REFUSED_BACKEND`].
fn host_backend(
    b: &Value,
    kind: Kind,
    route_ns: &str,
    tenant: &str,
    grants: &[Arc<Value>],
) -> Value {
    let name = b["name"].as_str().unwrap_or("");
    let ns = b["namespace"].as_str().unwrap_or(route_ns);
    let host = match backend_refusal(b, kind, route_ns, grants) {
        Some(_) => REFUSED_BACKEND.to_string(),
        None => naming::host_name(name, ns, tenant),
    };
    let mut out = json!({"name": host});
    for f in ["port", "weight"] {
        if !b[f].is_null() {
            out[f] = b[f].clone();
        }
    }
    out
}

/// The host form of a filter; `Err` names the type when it may not be synced.
fn host_filter(
    f: &Value,
    kind: Kind,
    route_ns: &str,
    tenant: &str,
    grants: &[Arc<Value>],
) -> Result<Value, String> {
    let ty = f["type"].as_str().unwrap_or("");
    let Some((_, field)) = DATA_FILTERS.iter().find(|(t, _)| *t == ty) else {
        return Err(ty.to_string());
    };
    let mut conf = f[*field].clone();
    if ty == "RequestMirror" {
        conf["backendRef"] = host_backend(&conf["backendRef"], kind, route_ns, tenant, grants);
    }
    Ok(json!({"type": ty, *field: conf}))
}

/// The values a route hands its Gateway that fail its checks, as field errors: paths (match
/// values, the rewrites and redirects of its filters) that fail the checks synced Ingresses'
/// paths pass ([`crate::ingresses`]: absolute, no `//`, `/../`, `%2f`, no whitespace, quotes,
/// `;`, braces or backslashes, which some Gateway implementations paste into proxy
/// configuration), and header and query parameter names and values with control characters
/// (a line break would end a proxy's header directive).
fn unsafe_values(route: &Value) -> Vec<String> {
    let mut errs = Vec::new();
    let mut check = |at: String, path: &Value, path_type: &str| {
        let Some(p) = path.as_str() else { return };
        // A regular expression needs its braces and backslashes; nothing that ends a
        // configuration statement or string.
        let why = if path_type == "Header" {
            p.chars()
                .any(char::is_control)
                .then_some("must not contain control characters")
        } else if path_type == "RegularExpression" {
            p.chars()
                .any(|c| c.is_control() || c.is_whitespace() || matches!(c, '"' | '\'' | ';' | '`'))
                .then_some("must not contain whitespace, control characters, quotes, ';' or '`'")
        } else {
            crate::ingresses::path_error(p, path_type)
        };
        if let Some(why) = why {
            errs.push(format!("{at}: Invalid value: {p:?}: {why}"));
        }
    };
    for (i, rule) in route["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, m) in rule["matches"].as_array().into_iter().flatten().enumerate() {
            let ty = match m["path"]["type"].as_str().unwrap_or("PathPrefix") {
                "Exact" => "Exact",
                "PathPrefix" => "Prefix",
                _ => "RegularExpression",
            };
            check(
                format!("spec.rules[{i}].matches[{j}].path.value"),
                &m["path"]["value"],
                ty,
            );
            for list in ["headers", "queryParams"] {
                for (k, h) in m[list].as_array().into_iter().flatten().enumerate() {
                    for f in ["name", "value"] {
                        let at = format!("spec.rules[{i}].matches[{j}].{list}[{k}].{f}");
                        check(at, &h[f], "Header");
                    }
                }
            }
        }
        for (path, f) in filters_of(rule, &format!("spec.rules[{i}]")) {
            for field in ["urlRewrite", "requestRedirect"] {
                let p = &f[field]["path"];
                for replace in ["replaceFullPath", "replacePrefixMatch"] {
                    check(
                        format!("{path}.{field}.path.{replace}"),
                        &p[replace],
                        "Prefix",
                    );
                }
            }
        }
    }
    errs
}

/// Every filter of a rule, with where it is: the rule's own and its backends'.
fn filters_of(rule: &Value, at: &str) -> Vec<(String, Value)> {
    let mut out = Vec::new();
    for (j, f) in rule["filters"].as_array().into_iter().flatten().enumerate() {
        out.push((format!("{at}.filters[{j}]"), f.clone()));
    }
    for (k, b) in rule["backendRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        for (j, f) in b["filters"].as_array().into_iter().flatten().enumerate() {
            out.push((format!("{at}.backendRefs[{k}].filters[{j}]"), f.clone()));
        }
    }
    out
}

/// The parentRefs of a route that name host Gateways the tenant may attach to.
pub fn host_parents(route: &Value, policy: &Policy) -> Vec<Value> {
    let ns = route["metadata"]["namespace"].as_str().unwrap_or("");
    route["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| host_parent(p, ns, policy))
        .collect()
}

/// A route's host copy, and what of it is not synced.
#[derive(Debug, Default)]
pub struct Built {
    /// The host route; `None` when none may exist.
    pub object: Option<Value>,
    /// What was left out or refused, one line per field.
    pub refused: Vec<String>,
}

/// Builds the host copy of a tenant route of `kind` (see the module docs).
pub fn host_route(
    kind: Kind,
    route: &Value,
    tenant: &str,
    policy: &Policy,
    grants: &[Arc<Value>],
) -> Built {
    let mut refused = Vec::new();
    let ns = route["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &route["spec"];
    let parents = host_parents(route, policy);
    if parents.is_empty() {
        refused.push(format!(
            "spec.parentRefs: names no host Gateway this tenant may attach to ({})",
            if policy.gateways.is_empty() {
                "none: the Tenant's spec.isolation.gateways is empty".to_string()
            } else {
                policy.gateways.join(", ")
            }
        ));
        return Built {
            object: None,
            refused,
        };
    }
    let mut out = Map::new();
    out.insert("parentRefs".into(), Value::Array(parents));

    let asked: Vec<&str> = spec["hostnames"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
        .collect();
    let mut hostnames = Vec::new();
    for (i, h) in asked.iter().enumerate() {
        if let Some(why) = hostname_error(h) {
            refused.push(format!("spec.hostnames[{i}]: {h:?}: {why}"));
        } else if !policy.allows_route_hostname(h) {
            refused.push(format!(
                "spec.hostnames[{i}]: {h:?} is not a hostname this tenant may claim ({})",
                policy.route_hostnames.join(", ")
            ));
        } else {
            hostnames.push(json!(h));
        }
    }
    if !asked.is_empty() && hostnames.is_empty() {
        refused.push("spec.hostnames: no hostname it may claim is left".into());
        return Built {
            object: None,
            refused,
        };
    }
    if asked.is_empty() {
        hostnames = policy.route_hostnames.iter().map(|h| json!(h)).collect();
    }
    if !hostnames.is_empty() {
        out.insert("hostnames".into(), Value::Array(hostnames));
    }

    let mut rules = Vec::new();
    let mut unsyncable = false;
    for (i, rule) in spec["rules"].as_array().into_iter().flatten().enumerate() {
        let at = format!("spec.rules[{i}]");
        let mut r = Map::new();
        for f in RULE_FIELDS {
            if !rule[f].is_null() {
                r.insert(f.into(), rule[f].clone());
            }
        }
        for f in EXPERIMENTAL_RULE_FIELDS {
            if !rule[f].is_null() {
                refused.push(format!(
                    "{at}.{f}: left out (only the Gateway API's standard channel is synced)"
                ));
            }
        }
        let mut filters = Vec::new();
        for (j, f) in rule["filters"].as_array().into_iter().flatten().enumerate() {
            match host_filter(f, kind, ns, tenant, grants) {
                Ok(f) => filters.push(f),
                Err(ty) => {
                    unsyncable = true;
                    refused.push(filter_refusal(&format!("{at}.filters[{j}]"), &ty));
                }
            }
        }
        if !filters.is_empty() {
            r.insert("filters".into(), Value::Array(filters));
        }
        let mut backends = Vec::new();
        for (k, b) in rule["backendRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            if let Some(why) = backend_refusal(b, kind, ns, grants) {
                refused.push(format!("{at}.backendRefs[{k}]: {why}"));
            }
            let mut hb = host_backend(b, kind, ns, tenant, grants);
            let mut bfilters = Vec::new();
            for (j, f) in b["filters"].as_array().into_iter().flatten().enumerate() {
                match host_filter(f, kind, ns, tenant, grants) {
                    Ok(f) => bfilters.push(f),
                    Err(ty) => {
                        unsyncable = true;
                        refused.push(filter_refusal(
                            &format!("{at}.backendRefs[{k}].filters[{j}]"),
                            &ty,
                        ));
                    }
                }
            }
            if !bfilters.is_empty() {
                hb["filters"] = Value::Array(bfilters);
            }
            backends.push(hb);
        }
        if !backends.is_empty() {
            r.insert("backendRefs".into(), Value::Array(backends));
        }
        rules.push(Value::Object(r));
    }
    if unsyncable {
        refused.push("the route is not synced while it holds a filter the host may not see".into());
        return Built {
            object: None,
            refused,
        };
    }
    let paths = unsafe_values(route);
    if !paths.is_empty() {
        refused.extend(paths);
        refused.push(
            "the route is not synced while it holds a path or header the host may not see".into(),
        );
        return Built {
            object: None,
            refused,
        };
    }
    if !rules.is_empty() {
        out.insert("rules".into(), Value::Array(rules));
    }
    let object = json!({
        "apiVersion": format!("{GROUP}/v1"),
        "kind": kind_name(kind),
        "metadata": naming::host_metadata(
            route,
            tenant,
            naming::tenant_labels(route),
            Default::default(),
        ),
        "spec": out,
    });
    Built {
        object: Some(object),
        refused,
    }
}

fn filter_refusal(at: &str, ty: &str) -> String {
    format!(
        "{at}: filter type {ty:?} is not synced to the host (ExtensionRef and \
         implementation-specific filters refer to host objects outside the tenant)"
    )
}

/// Checks a tenant route that will be synced (it names a host Gateway the tenant may attach
/// to): hostnames it may claim, filters the host may see, Services as backends. `Err` lists
/// every refused field. A route for the tenant's own Gateways only is not checked.
pub fn check_route(route: &Value, policy: &Policy) -> Result<(), Vec<String>> {
    if host_parents(route, policy).is_empty() {
        return Ok(());
    }
    let mut errs = unsafe_values(route);
    for (i, h) in route["spec"]["hostnames"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let h = h.as_str().unwrap_or("");
        if let Some(why) = hostname_error(h) {
            errs.push(format!("spec.hostnames[{i}]: Invalid value: {h:?}: {why}"));
        } else if !policy.allows_route_hostname(h) {
            errs.push(format!(
                "spec.hostnames[{i}]: Forbidden: {h:?} is not a hostname this tenant may claim \
                 on the host's Gateways ({})",
                policy.route_hostnames.join(", ")
            ));
        }
    }
    for (i, rule) in route["spec"]["rules"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        let at = format!("spec.rules[{i}]");
        for (path, f) in filters_of(rule, &at) {
            let ty = f["type"].as_str().unwrap_or("");
            if !DATA_FILTERS.iter().any(|(t, _)| *t == ty) {
                errs.push(format!(
                    "{path}.type: Forbidden: {ty:?} filters are not allowed in a route attached \
                     to a host Gateway (they refer to host objects outside the tenant)"
                ));
            }
        }
        // Backends, and the backends of mirror filters, with where each is.
        let mut refs: Vec<(String, &Value)> = Vec::new();
        for (k, b) in rule["backendRefs"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            refs.push((format!("{at}.backendRefs[{k}]"), b));
        }
        for (j, f) in rule["filters"].as_array().into_iter().flatten().enumerate() {
            if f["type"] == "RequestMirror" {
                refs.push((
                    format!("{at}.filters[{j}].requestMirror.backendRef"),
                    &f["requestMirror"]["backendRef"],
                ));
            }
        }
        for (path, b) in refs {
            if let Some(why) = not_a_service(b) {
                errs.push(format!("{path}: Forbidden: {why}"));
            }
        }
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// The tenant route's status from its host copy's: the host controllers' entries for the host
/// parents, each under the tenant's parentRef as written, and the tenant's entries for its
/// other parents as they are. Empty when there is nothing to say.
pub fn tenant_route_status(route: &Value, host: &Value, policy: &Policy) -> Map<String, Value> {
    let ns = route["metadata"]["namespace"].as_str().unwrap_or("");
    let refs: Vec<&Value> = route["spec"]["parentRefs"]
        .as_array()
        .into_iter()
        .flatten()
        .collect();
    let is_host = |p: &Value| host_parent(p, ns, policy).is_some();
    let mut parents: Vec<Value> = route["status"]["parents"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| !is_host(&e["parentRef"]))
        .cloned()
        .collect();
    for entry in host["status"]["parents"].as_array().into_iter().flatten() {
        let host_ref = &entry["parentRef"];
        let host_ns = host_ref["namespace"].as_str().unwrap_or("");
        let Some(tenant_ref) = refs.iter().find(|p| {
            is_host(p)
                && gateway_of(p, ns) == gateway_of(host_ref, host_ns)
                && p["sectionName"] == host_ref["sectionName"]
                && p["port"] == host_ref["port"]
        }) else {
            continue;
        };
        let mut e = Map::new();
        e.insert("parentRef".into(), (*tenant_ref).clone());
        for f in ["controllerName", "conditions"] {
            if !entry[f].is_null() {
                e.insert(f.into(), entry[f].clone());
            }
        }
        parents.push(Value::Object(e));
    }
    let mut out = Map::new();
    if !parents.is_empty() || !route["status"]["parents"].is_null() {
        out.insert("parents".into(), Value::Array(parents));
    }
    out
}

/// Gives the tenant the host's Gateway API CRDs it lacks ([`CRDS`]), so that its routes are
/// checked by the schema the host's Gateway controller reads. A CRD the tenant has (a newer
/// release it installed itself, say) is left alone; one the host lacks is not made (the routes
/// then wait, unsynced, for the host to serve it). Returns whether the tenant has them all, or
/// the first failure; the caller tries again later (and says so once per different failure).
pub async fn ensure_tenant_crds(
    host: &kube::Client,
    tenant: &kube::Client,
) -> Result<bool, String> {
    use kube::api::{Api, DynamicObject, PostParams};
    let resource = kube::api::ApiResource::from_gvk_with_plural(
        &kube::api::GroupVersionKind::gvk("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
        "customresourcedefinitions",
    );
    let host_crds: Api<DynamicObject> = Api::all_with(host.clone(), &resource);
    let tenant_crds: Api<DynamicObject> = Api::all_with(tenant.clone(), &resource);
    let mut all = true;
    let mut failure = None;
    for name in CRDS {
        let outcome = async {
            if tenant_crds.get_opt(name).await?.is_some() {
                return Ok(false);
            }
            let Some(crd) = host_crds.get_opt(name).await? else {
                all = false;
                return Ok(false);
            };
            let copy = tenant_crd(&serde_json::to_value(crd).map_err(kube::Error::SerdeError)?);
            let copy: DynamicObject =
                serde_json::from_value(copy).map_err(kube::Error::SerdeError)?;
            match tenant_crds.create(&PostParams::default(), &copy).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            }
        }
        .await;
        match outcome {
            Ok(true) => tracing::info!(crd = name, "gave the tenant the host's CRD"),
            Ok(false) => {}
            Err(e) => {
                failure.get_or_insert_with(|| format!("{name}: {}", crate::reconcile::brief(&e)));
            }
        }
    }
    match failure {
        Some(f) => Err(f),
        None => Ok(all),
    }
}

/// The tenant's copy of one of the host's Gateway API CRDs: its name, labels, annotations and
/// spec (status and server fields are the tenant's server's own).
pub fn tenant_crd(host_crd: &Value) -> Value {
    let meta = &host_crd["metadata"];
    let mut spec = host_crd["spec"].clone();
    // A conversion webhook of the host is not the tenant's to call.
    if spec["conversion"]["strategy"] == "Webhook" {
        spec["conversion"] = json!({"strategy": "None"});
    }
    let mut metadata = json!({"name": meta["name"]});
    for f in ["labels", "annotations"] {
        if let Some(m) = meta[f].as_object() {
            let kept: Map<String, Value> = m
                .iter()
                .filter(|(k, _)| !k.starts_with("kubectl.kubernetes.io/"))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            if !kept.is_empty() {
                metadata[f] = Value::Object(kept);
            }
        }
    }
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": metadata,
        "spec": spec,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> Policy {
        Policy {
            gateways: vec!["infra/shared".into()],
            route_hostnames: vec!["*.acme.example.com".into()],
            ..Default::default()
        }
    }

    fn route() -> Value {
        json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
            "metadata": {"name": "llm", "namespace": "serving", "uid": "u1",
                "labels": {"app": "llm"},
                "annotations": {"gateway.example.com/snippet": "evil"}},
            "spec": {
                "parentRefs": [
                    {"name": "shared", "namespace": "infra", "sectionName": "http"},
                    {"name": "own"}
                ],
                "hostnames": ["llm.acme.example.com"],
                "rules": [{
                    "matches": [{"path": {"type": "PathPrefix", "value": "/v1"},
                                 "headers": [{"name": "x-model", "value": "big"}]}],
                    "filters": [{"type": "RequestHeaderModifier",
                                 "requestHeaderModifier": {"set": [{"name": "x", "value": "1"}]}}],
                    "backendRefs": [
                        {"name": "llm-a", "port": 8000, "weight": 90},
                        {"name": "llm-b", "port": 8000, "weight": 10}
                    ],
                    "timeouts": {"request": "30s"}
                }]
            }
        })
    }

    #[test]
    fn parents_backends_and_weights_are_rewritten() {
        let b = host_route(Kind::HttpRoute, &route(), "acme", &policy(), &[]);
        assert_eq!(b.refused, Vec::<String>::new());
        let h = b.object.expect("a host route");
        assert_eq!(h["kind"], "HTTPRoute");
        assert_eq!(h["metadata"]["namespace"], "fabrik-acme");
        assert_eq!(h["metadata"]["name"], "llm-x-serving-x-acme");
        assert!(h["metadata"]["annotations"]["gateway.example.com/snippet"].is_null());
        assert_eq!(
            h["spec"]["parentRefs"],
            json!([{"group": GROUP, "kind": "Gateway", "namespace": "infra", "name": "shared",
                    "sectionName": "http"}])
        );
        assert_eq!(h["spec"]["hostnames"], json!(["llm.acme.example.com"]));
        let rule = &h["spec"]["rules"][0];
        assert_eq!(
            rule["backendRefs"],
            json!([{"name": "llm-a-x-serving-x-acme", "port": 8000, "weight": 90},
                   {"name": "llm-b-x-serving-x-acme", "port": 8000, "weight": 10}])
        );
        assert_eq!(rule["matches"], route()["spec"]["rules"][0]["matches"]);
        assert_eq!(rule["filters"], route()["spec"]["rules"][0]["filters"]);
        assert_eq!(rule["timeouts"], json!({"request": "30s"}));
    }

    #[test]
    fn a_route_for_no_allowed_gateway_is_not_synced() {
        let mut r = route();
        r["spec"]["parentRefs"] = json!([{"name": "shared"}]);
        let b = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[]);
        assert!(b.object.is_none());
        assert!(b.refused[0].contains("infra/shared"), "{:?}", b.refused);
        assert_eq!(
            check_route(&r, &policy()),
            Ok(()),
            "the tenant's own Gateway"
        );
    }

    #[test]
    fn hostnames_are_kept_to_the_tenants() {
        let mut r = route();
        r["spec"]["hostnames"] = json!(["llm.acme.example.com", "bank.example.com"]);
        let b = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[]);
        let h = b.object.expect("one hostname is left");
        assert_eq!(h["spec"]["hostnames"], json!(["llm.acme.example.com"]));
        assert!(
            b.refused[0].starts_with("spec.hostnames[1]"),
            "{:?}",
            b.refused
        );
        let errs = check_route(&r, &policy()).expect_err("refused at admission");
        assert!(
            errs[0].starts_with("spec.hostnames[1]: Forbidden"),
            "{errs:?}"
        );

        r["spec"]["hostnames"] = json!(["bank.example.com"]);
        assert!(host_route(Kind::HttpRoute, &r, "acme", &policy(), &[])
            .object
            .is_none());

        // No hostname: the tenant's names, never every name of the listener.
        r["spec"].as_object_mut().map(|s| s.remove("hostnames"));
        let h = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[])
            .object
            .expect("synced");
        assert_eq!(h["spec"]["hostnames"], json!(["*.acme.example.com"]));
        // Without a list, the listener decides.
        let open = Policy {
            gateways: vec!["infra/shared".into()],
            ..Default::default()
        };
        let h = host_route(Kind::HttpRoute, &r, "acme", &open, &[])
            .object
            .expect("synced");
        assert!(h["spec"]["hostnames"].is_null());
    }

    #[test]
    fn extension_filters_keep_the_route_off_the_host() {
        let mut r = route();
        r["spec"]["rules"][0]["backendRefs"][0]["filters"] = json!([
            {"type": "ExtensionRef", "extensionRef": {"group": "x.io", "kind": "Auth", "name": "a"}}
        ]);
        let b = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[]);
        assert!(b.object.is_none());
        assert!(
            b.refused[0].contains("backendRefs[0].filters[0]"),
            "{:?}",
            b.refused
        );
        let errs = check_route(&r, &policy()).expect_err("refused at admission");
        assert!(
            errs[0].contains("\"ExtensionRef\" filters are not allowed"),
            "{errs:?}"
        );
    }

    #[test]
    fn paths_the_gateway_would_paste_are_checked_as_ingress_paths() {
        let mut r = route();
        r["spec"]["rules"][0]["matches"][0]["path"]["value"] = json!("/v1;\n  return 200");
        r["spec"]["rules"][0]["filters"] = json!([{"type": "URLRewrite",
            "urlRewrite": {"path": {"type": "ReplacePrefixMatch", "replacePrefixMatch": "/../admin"}}}]);
        let errs = check_route(&r, &policy()).expect_err("refused at admission");
        assert!(
            errs[0].starts_with("spec.rules[0].matches[0].path.value"),
            "{errs:?}"
        );
        assert!(
            errs[1].starts_with("spec.rules[0].filters[0].urlRewrite.path.replacePrefixMatch"),
            "{errs:?}"
        );
        let b = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[]);
        assert!(b.object.is_none(), "never reaches the host");
        // Regular expressions may hold what paths may not, but not the characters that break out.
        let mut re = route();
        re["spec"]["rules"][0]["matches"][0]["path"] =
            json!({"type": "RegularExpression", "value": "/v\\d{1,2}/.*"});
        assert_eq!(check_route(&re, &policy()), Ok(()));
        re["spec"]["rules"][0]["matches"][0]["path"]["value"] = json!("/x\"; evil");
        assert!(check_route(&re, &policy()).is_err());
        // A header value may hold anything but a line break.
        let mut h = route();
        h["spec"]["rules"][0]["matches"][0]["headers"][0]["value"] = json!("big; \"quoted\"");
        assert_eq!(check_route(&h, &policy()), Ok(()));
        h["spec"]["rules"][0]["matches"][0]["headers"][0]["value"] = json!("big\r\nX-Admin: 1");
        let errs = check_route(&h, &policy()).expect_err("refused");
        assert!(
            errs[0].starts_with("spec.rules[0].matches[0].headers[0].value"),
            "{errs:?}"
        );
    }

    #[test]
    fn cross_namespace_backends_need_a_grant() {
        let mut r = route();
        r["spec"]["rules"][0]["backendRefs"][1]["namespace"] = json!("models");
        let b = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[]);
        let h = b.object.expect("synced");
        assert_eq!(
            h["spec"]["rules"][0]["backendRefs"][1],
            json!({"name": REFUSED_BACKEND, "port": 8000, "weight": 10}),
            "the share stays a share, of errors"
        );
        assert!(b.refused[0].contains("ReferenceGrant"), "{:?}", b.refused);
        let grant = Arc::new(json!({
            "metadata": {"name": "g", "namespace": "models"},
            "spec": {"from": [{"group": GROUP, "kind": "HTTPRoute", "namespace": "serving"}],
                     "to": [{"group": "", "kind": "Service"}]}
        }));
        let b = host_route(
            Kind::HttpRoute,
            &r,
            "acme",
            &policy(),
            std::slice::from_ref(&grant),
        );
        assert_eq!(
            b.object.expect("synced")["spec"]["rules"][0]["backendRefs"][1]["name"],
            "llm-b-x-models-x-acme"
        );
        // A grant for GRPCRoutes does not cover an HTTPRoute.
        assert!(!granted(
            &[grant],
            "GRPCRoute",
            "serving",
            "models",
            "llm-b"
        ));
        // Not a Service: refused at admission, an error share on the host.
        r["spec"]["rules"][0]["backendRefs"][0] =
            json!({"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"});
        assert!(check_route(&r, &policy()).is_err());
        let h = host_route(Kind::HttpRoute, &r, "acme", &policy(), &[])
            .object
            .expect("synced");
        assert_eq!(
            h["spec"]["rules"][0]["backendRefs"][0]["name"],
            REFUSED_BACKEND
        );
    }

    #[test]
    fn status_comes_back_under_the_tenants_parent_refs() {
        let mut r = route();
        r["status"] = json!({"parents": [
            {"parentRef": {"name": "own"}, "controllerName": "tenant.example.com/gw",
             "conditions": [{"type": "Accepted", "status": "True"}]},
            {"parentRef": {"name": "shared", "namespace": "infra", "sectionName": "http"},
             "controllerName": "stale", "conditions": []}
        ]});
        let host = json!({"status": {"parents": [{
            "parentRef": {"group": GROUP, "kind": "Gateway", "namespace": "infra",
                          "name": "shared", "sectionName": "http"},
            "controllerName": "fabrik.dev/simulated-gateway",
            "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted"}]
        }]}});
        let s = tenant_route_status(&r, &host, &policy());
        let parents = s["parents"].as_array().expect("parents");
        assert_eq!(parents.len(), 2);
        assert_eq!(parents[0]["controllerName"], "tenant.example.com/gw");
        assert_eq!(
            parents[1]["parentRef"],
            json!({"name": "shared", "namespace": "infra", "sectionName": "http"})
        );
        assert_eq!(parents[1]["controllerName"], "fabrik.dev/simulated-gateway");
    }

    #[test]
    fn grpc_routes_are_built_the_same_way() {
        let r = json!({
            "metadata": {"name": "g", "namespace": "serving", "uid": "u2"},
            "spec": {"parentRefs": [{"name": "shared", "namespace": "infra"}],
                     "hostnames": ["grpc.acme.example.com"],
                     "rules": [{"matches": [{"method": {"service": "inference.v1.Predict"}}],
                                "backendRefs": [{"name": "triton", "port": 8001}]}]}
        });
        let h = host_route(Kind::GrpcRoute, &r, "acme", &policy(), &[])
            .object
            .expect("synced");
        assert_eq!(h["kind"], "GRPCRoute");
        assert_eq!(h["apiVersion"], "gateway.networking.k8s.io/v1");
        assert_eq!(
            h["spec"]["rules"][0]["backendRefs"],
            json!([{"name": "triton-x-serving-x-acme", "port": 8001}])
        );
    }

    #[test]
    fn tenant_crds_drop_the_hosts_conversion_webhook() {
        let crd = json!({"metadata": {"name": "httproutes.gateway.networking.k8s.io",
                "uid": "x", "resourceVersion": "9",
                "annotations": {"gateway.networking.k8s.io/bundle-version": "v1.2.0",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"group": GROUP, "conversion": {"strategy": "Webhook", "webhook": {}}},
            "status": {"acceptedNames": {}}});
        let t = tenant_crd(&crd);
        assert_eq!(t["spec"]["conversion"], json!({"strategy": "None"}));
        assert!(t["status"].is_null() && t["metadata"]["uid"].is_null());
        assert_eq!(
            t["metadata"]["annotations"],
            json!({"gateway.networking.k8s.io/bundle-version": "v1.2.0"})
        );
    }
}
