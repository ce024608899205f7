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
    let mut names: Vec<String> = Vec::new();
    for (g, _) in catalog.group_versions() {
        if g.is_empty() == core && !names.contains(&g) {
            names.push(g);
        }
    }
    for g in names {
        let mut versions: Vec<String> = Vec::new();
        for d in all.iter().filter(|d| d.group == g) {
            if !versions.contains(&d.version) {
                versions.push(d.version.clone());
            }
        }
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
}
