//! Discovery documents: the legacy `/api`, `/apis`, `/api/v1`, `/apis/<g>/<v>` documents and
//! aggregated discovery (`apidiscovery.k8s.io/v2` and `v2beta1`), both built from the catalog so
//! they can never disagree with what is served.

use serde_json::{json, Value};

use crate::resources::{Catalog, ResourceDef, Subresource};

fn subresource_kind(def: &ResourceDef, sub: Subresource) -> (String, String, String) {
    match sub {
        Subresource::Scale => ("autoscaling".into(), "v1".into(), "Scale".into()),
        Subresource::Binding => (String::new(), "v1".into(), "Binding".into()),
        Subresource::Eviction => ("policy".into(), "v1".into(), "Eviction".into()),
        Subresource::Log => (String::new(), "v1".into(), "Pod".into()),
        Subresource::Exec => (String::new(), "v1".into(), "PodExecOptions".into()),
        Subresource::Attach => (String::new(), "v1".into(), "PodAttachOptions".into()),
        Subresource::PortForward => (String::new(), "v1".into(), "PodPortForwardOptions".into()),
        Subresource::Token => (
            "authentication.k8s.io".into(),
            "v1".into(),
            "TokenRequest".into(),
        ),
        Subresource::Status | Subresource::Finalize => {
            (def.group.clone(), def.version.clone(), def.kind.clone())
        }
    }
}

fn subresource_verbs(sub: Subresource) -> Vec<&'static str> {
    match sub {
        Subresource::Status | Subresource::Scale => vec!["get", "patch", "update"],
        Subresource::Binding | Subresource::Eviction | Subresource::Token => vec!["create"],
        Subresource::Log => vec!["get"],
        Subresource::Exec | Subresource::Attach | Subresource::PortForward => vec!["create", "get"],
        Subresource::Finalize => vec!["update"],
    }
}

/// `GET /api`.
pub fn core_versions(server_address: &str) -> Value {
    json!({
        "kind": "APIVersions",
        "versions": ["v1"],
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

fn group_json(group: &str, versions: &[String]) -> Value {
    let vs: Vec<Value> = versions
        .iter()
        .map(|v| json!({"groupVersion": format!("{group}/{v}"), "version": v}))
        .collect();
    json!({
        "name": group,
        "versions": vs,
        "preferredVersion": vs.first().cloned().unwrap_or(Value::Null),
    })
}

fn groups(catalog: &Catalog) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for (g, v) in catalog.group_versions() {
        if g.is_empty() {
            continue;
        }
        match out.iter_mut().find(|(name, _)| *name == g) {
            Some((_, vs)) => vs.push(v),
            None => out.push((g, vec![v])),
        }
    }
    out
}

/// `GET /apis`.
pub fn group_list(catalog: &Catalog) -> Value {
    let groups: Vec<Value> = groups(catalog)
        .iter()
        .map(|(g, vs)| group_json(g, vs))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /apis/<group>`, None when the group is not served.
pub fn group(catalog: &Catalog, name: &str) -> Option<Value> {
    groups(catalog)
        .into_iter()
        .find(|(g, _)| g == name)
        .map(|(g, vs)| {
            let mut doc = group_json(&g, &vs);
            doc["kind"] = json!("APIGroup");
            doc["apiVersion"] = json!("v1");
            doc
        })
}

/// `GET /api/v1` or `/apis/<g>/<v>`, None when not served.
pub fn resource_list(catalog: &Catalog, group: &str, version: &str) -> Option<Value> {
    let defs: Vec<_> = catalog
        .all()
        .into_iter()
        .filter(|d| d.group == group && d.version == version)
        .collect();
    if defs.is_empty() {
        return None;
    }
    let mut resources = Vec::new();
    for def in &defs {
        resources.push(json!({
            "name": def.plural,
            "singularName": def.singular,
            "namespaced": def.namespaced,
            "kind": def.kind,
            "verbs": def.verbs(),
            "shortNames": def.short_names,
            "categories": def.categories,
            "storageVersionHash": storage_hash(def),
        }));
        for sub in &def.subresources {
            let (g, v, kind) = subresource_kind(def, *sub);
            let mut entry = json!({
                "name": format!("{}/{}", def.plural, sub.name()),
                "singularName": "",
                "namespaced": def.namespaced,
                "kind": kind,
                "verbs": subresource_verbs(*sub),
            });
            if g != def.group || v != def.version {
                entry["group"] = json!(g);
                entry["version"] = json!(v);
            }
            resources.push(entry);
        }
    }
    let gv = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Some(
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": gv, "resources": resources}),
    )
}

/// A short stable hash of the resource's identity (clients only compare it).
fn storage_hash(def: &ResourceDef) -> String {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (&def.group, &def.version, &def.kind).hash(&mut h);
    let bytes = h.finish().to_be_bytes();
    base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &bytes[..8])
        .trim_end_matches('=')
        .to_string()
}

fn discovery_resource(def: &ResourceDef) -> Value {
    let subs: Vec<Value> = def
        .subresources
        .iter()
        .map(|sub| {
            let (g, v, kind) = subresource_kind(def, *sub);
            json!({
                "subresource": sub.name(),
                "responseKind": {"group": g, "version": v, "kind": kind},
                "verbs": subresource_verbs(*sub),
            })
        })
        .collect();
    let mut r = json!({
        "resource": def.plural,
        "responseKind": {"group": def.group, "version": def.version, "kind": def.kind},
        "scope": if def.namespaced { "Namespaced" } else { "Cluster" },
        "singularResource": def.singular,
        "verbs": def.verbs(),
    });
    if !def.short_names.is_empty() {
        r["shortNames"] = json!(def.short_names);
    }
    if !def.categories.is_empty() {
        r["categories"] = json!(def.categories);
    }
    if !subs.is_empty() {
        r["subresources"] = json!(subs);
    }
    r
}

/// Aggregated discovery for the core group (`/api`, `core == true`) or the named groups.
pub fn aggregated(catalog: &Catalog, core: bool, version: &str) -> Value {
    let mut items = Vec::new();
    let all = catalog.all();
    // Groups in order, each with its versions by priority (the first is the preferred one).
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for (g, v) in catalog.group_versions() {
        if g.is_empty() != core {
            continue;
        }
        match groups.iter_mut().find(|(name, _)| *name == g) {
            Some((_, vs)) => vs.push(v),
            None => groups.push((g, vec![v])),
        }
    }
    for (g, versions) in groups {
        let vs: Vec<Value> = versions
            .iter()
            .map(|v| {
                let resources: Vec<Value> = all
                    .iter()
                    .filter(|d| d.group == g && &d.version == v)
                    .map(|d| discovery_resource(d))
                    .collect();
                json!({"version": v, "resources": resources, "freshness": "Current"})
            })
            .collect();
        items.push(json!({"metadata": {"name": g, "creationTimestamp": null}, "versions": vs}));
    }
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

/// One group version an APIService serves, with its backend's discovery document when known.
pub struct Aggregated {
    /// Group.
    pub group: String,
    /// Version.
    pub version: String,
    /// The backend's `APIResourceList`, when the last check got one.
    pub resources: Option<Value>,
}

/// Adds the group versions of APIServices (in priority order) to the `/apis` group list;
/// a version of a group served here is added to that group.
pub fn add_aggregated_groups(list: &mut Value, served: &[Aggregated]) {
    let Some(groups) = list["groups"].as_array_mut() else {
        return;
    };
    for a in served {
        let gv =
            json!({"groupVersion": format!("{}/{}", a.group, a.version), "version": a.version});
        match groups.iter_mut().find(|g| g["name"] == a.group.as_str()) {
            Some(g) => {
                if let Some(vs) = g["versions"].as_array_mut() {
                    if !vs.iter().any(|v| v["version"] == a.version.as_str()) {
                        vs.push(gv);
                    }
                }
            }
            None => groups.push(json!({
                "name": a.group, "versions": [gv.clone()], "preferredVersion": gv,
            })),
        }
    }
}

/// The `/apis/<group>` document of a group only APIServices serve, None when none does.
pub fn aggregated_group(name: &str, served: &[Aggregated]) -> Option<Value> {
    let versions: Vec<String> = served
        .iter()
        .filter(|a| a.group == name)
        .map(|a| a.version.clone())
        .collect();
    if versions.is_empty() {
        return None;
    }
    let mut doc = group_json(name, &versions);
    doc["kind"] = json!("APIGroup");
    doc["apiVersion"] = json!("v1");
    Some(doc)
}

/// One `APIResourceList` entry as an aggregated-discovery resource (its subresources in
/// `subs`).
fn from_resource_list(group: &str, version: &str, r: &Value, subs: &[&Value]) -> Value {
    let kind_of = |e: &Value| {
        json!({
            "group": e["group"].as_str().unwrap_or(group),
            "version": e["version"].as_str().unwrap_or(version),
            "kind": e["kind"],
        })
    };
    let name = r["name"].as_str().unwrap_or("");
    let mut out = json!({
        "resource": name,
        "responseKind": kind_of(r),
        "scope": if r["namespaced"].as_bool() == Some(true) { "Namespaced" } else { "Cluster" },
        "singularResource": r["singularName"],
        "verbs": r["verbs"],
    });
    for f in ["shortNames", "categories"] {
        if r[f].as_array().is_some_and(|a| !a.is_empty()) {
            out[f] = r[f].clone();
        }
    }
    let subs: Vec<Value> = subs
        .iter()
        .map(|sub| {
            let n = sub["name"].as_str().unwrap_or("");
            json!({
                "subresource": n.split_once('/').map_or(n, |(_, s)| s),
                "responseKind": kind_of(sub),
                "verbs": sub["verbs"],
            })
        })
        .collect();
    if !subs.is_empty() {
        out["subresources"] = json!(subs);
    }
    out
}

/// Adds the groups APIServices serve to an aggregated discovery document: each version with
/// the resources its backend last listed (`freshness: Current`), or none (`Stale`) while the
/// backend is not available.
pub fn add_aggregated_items(doc: &mut Value, served: &[Aggregated]) {
    let Some(items) = doc["items"].as_array_mut() else {
        return;
    };
    for a in served {
        let resources: Vec<Value> = match &a.resources {
            Some(list) => {
                let all: Vec<&Value> = list["resources"].as_array().into_iter().flatten().collect();
                all.iter()
                    .filter(|r| !r["name"].as_str().unwrap_or("").contains('/'))
                    .map(|r| {
                        let prefix = format!("{}/", r["name"].as_str().unwrap_or(""));
                        let subs: Vec<&Value> = all
                            .iter()
                            .filter(|s| s["name"].as_str().is_some_and(|n| n.starts_with(&prefix)))
                            .copied()
                            .collect();
                        from_resource_list(&a.group, &a.version, r, &subs)
                    })
                    .collect()
            }
            None => Vec::new(),
        };
        let freshness = if a.resources.is_some() {
            "Current"
        } else {
            "Stale"
        };
        let version = json!({"version": a.version, "resources": resources, "freshness": freshness});
        match items
            .iter_mut()
            .find(|i| i["metadata"]["name"] == a.group.as_str())
        {
            Some(item) => {
                if let Some(vs) = item["versions"].as_array_mut() {
                    if !vs.iter().any(|v| v["version"] == a.version.as_str()) {
                        vs.push(version);
                    }
                }
            }
            None => items.push(json!({
                "metadata": {"name": a.group, "creationTimestamp": null},
                "versions": [version],
            })),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn documents_cover_the_catalog() {
        let c = Catalog::builtin();
        let core = resource_list(&c, "", "v1").expect("core served");
        let names: Vec<&str> = core["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|r| r["name"].as_str())
            .collect();
        assert!(names.contains(&"pods/eviction"));
        assert!(names.contains(&"namespaces/finalize"));
        let agg = aggregated(&c, false, "v2");
        let apps = agg["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["metadata"]["name"] == "apps")
            .expect("apps");
        let deploy = apps["versions"][0]["resources"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["resource"] == "deployments")
            .expect("deployments");
        assert_eq!(deploy["shortNames"][0], "deploy");
        assert_eq!(deploy["categories"][0], "all");
        assert!(group(&c, "resource.k8s.io").is_some());
        assert!(group(&c, "nope").is_none());
    }

    #[test]
    fn aggregated_groups_join_the_documents() {
        let c = Catalog::builtin();
        let served = vec![
            Aggregated {
                group: "metrics.k8s.io".into(),
                version: "v1beta1".into(),
                resources: Some(json!({"resources": [
                    {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics", "verbs": ["get", "list"]},
                    {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get", "list"]},
                    {"name": "nodes/status", "namespaced": false, "kind": "NodeMetrics", "verbs": ["get"]},
                ]})),
            },
            Aggregated {
                group: "custom.metrics.k8s.io".into(),
                version: "v1beta2".into(),
                resources: None,
            },
        ];
        let mut list = group_list(&c);
        add_aggregated_groups(&mut list, &served);
        let names: Vec<&str> = list["groups"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|g| g["name"].as_str())
            .collect();
        assert!(names.contains(&"metrics.k8s.io") && names.contains(&"custom.metrics.k8s.io"));
        let mut agg = aggregated(&c, false, "v2");
        add_aggregated_items(&mut agg, &served);
        let metrics = agg["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["metadata"]["name"] == "metrics.k8s.io")
            .expect("metrics group");
        let v = &metrics["versions"][0];
        assert_eq!(v["freshness"], "Current");
        assert_eq!(v["resources"][0]["responseKind"]["kind"], "PodMetrics");
        assert_eq!(v["resources"][0]["scope"], "Namespaced");
        assert_eq!(
            v["resources"][1]["subresources"][0]["subresource"],
            "status"
        );
        let stale = agg["items"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|i| i["metadata"]["name"] == "custom.metrics.k8s.io")
            .expect("custom metrics group");
        assert_eq!(stale["versions"][0]["freshness"], "Stale");
        assert!(aggregated_group("metrics.k8s.io", &served).is_some());
        assert!(aggregated_group("apps", &served).is_none());
    }
}
