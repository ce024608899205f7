//! ConfigMaps, Secrets, PersistentVolumeClaims and PodDisruptionBudgets: tenant object → host
//! object, by allow-list.
//!
//! Data is copied as is. Secret types that make the host act on a Secret (service account
//! tokens above all: the host's token controller would fill or delete them) become `Opaque`;
//! the token stays in `data.token`, for a pod that mounts such a Secret itself (projected token
//! sources get tokens the tenant issues instead: [`crate::tokens`]).
//! PVCs keep what asks for storage (access modes, size, class, volume mode) and lose what would
//! reach a host volume directly (`volumeName`, `selector`); a `dataSource` may only name another
//! PVC of the same tenant namespace.

use serde_json::{json, Map, Value};

use crate::naming;

/// Secret types kept on the host; any other becomes `Opaque`.
const KEPT_SECRET_TYPES: &[&str] = &[
    "Opaque",
    "kubernetes.io/tls",
    "kubernetes.io/dockerconfigjson",
    "kubernetes.io/dockercfg",
    "kubernetes.io/basic-auth",
    "kubernetes.io/ssh-auth",
];

fn metadata(obj: &Value, tenant: &str) -> Value {
    naming::host_metadata(
        obj,
        tenant,
        naming::tenant_labels(obj),
        naming::tenant_annotations(obj),
    )
}

/// The host ConfigMap for a tenant ConfigMap.
pub fn host_config_map(cm: &Value, tenant: &str) -> Value {
    let mut out =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata(cm, tenant)});
    for f in ["data", "binaryData", "immutable"] {
        if !cm[f].is_null() {
            out[f] = cm[f].clone();
        }
    }
    out
}

/// The host Secret for a tenant Secret.
pub fn host_secret(secret: &Value, tenant: &str) -> Value {
    let t = secret["type"].as_str().unwrap_or("Opaque");
    let t = if KEPT_SECRET_TYPES.contains(&t) {
        t
    } else {
        "Opaque"
    };
    let mut out = json!({"apiVersion": "v1", "kind": "Secret", "type": t,
        "metadata": metadata(secret, tenant)});
    for f in ["data", "immutable"] {
        if !secret[f].is_null() {
            out[f] = secret[f].clone();
        }
    }
    out
}

/// The host PVC for a tenant PVC.
pub fn host_pvc(pvc: &Value, tenant: &str) -> Value {
    let ns = pvc["metadata"]["namespace"].as_str().unwrap_or("");
    json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": metadata(pvc, tenant),
        "spec": pvc_spec(&pvc["spec"], ns, tenant)})
}

/// The allow-listed part of a PVC spec (also used for ephemeral volume templates).
pub fn pvc_spec(spec: &Value, namespace: &str, tenant: &str) -> Value {
    let mut out = Map::new();
    for f in ["accessModes", "storageClassName", "volumeMode"] {
        if !spec[f].is_null() {
            out.insert(f.into(), spec[f].clone());
        }
    }
    let mut resources = Map::new();
    for kind in ["requests", "limits"] {
        if let Some(s) = spec["resources"][kind]["storage"].as_str() {
            resources.insert(kind.into(), json!({"storage": s}));
        }
    }
    out.insert("resources".into(), Value::Object(resources));
    for f in ["dataSource", "dataSourceRef"] {
        let src = &spec[f];
        if src["kind"].as_str() == Some("PersistentVolumeClaim")
            && src["apiGroup"].as_str().unwrap_or("").is_empty()
        {
            if let Some(name) = src["name"].as_str() {
                out.insert(
                    f.into(),
                    json!({"kind": "PersistentVolumeClaim",
                        "name": naming::host_name(name, namespace, tenant)}),
                );
            }
        }
    }
    Value::Object(out)
}

/// The tenant PVC status for a host PVC (phase, capacity, access modes).
pub fn tenant_pvc_status(host: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for f in ["phase", "capacity", "accessModes"] {
        if !host["status"][f].is_null() {
            out.insert(f.into(), host["status"][f].clone());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_keep_data_and_lose_host_acting_types() {
        let s = json!({"metadata": {"name": "t", "namespace": "ns", "uid": "u",
                "annotations": {"kubernetes.io/service-account.name": "default"}},
            "type": "kubernetes.io/service-account-token", "data": {"token": "dG9r"},
            "stringData": {"x": "y"}});
        let h = host_secret(&s, "a");
        assert_eq!(h["type"], "Opaque");
        assert_eq!(h["data"]["token"], "dG9r");
        assert!(h.get("stringData").is_none());
        assert!(h["metadata"]["annotations"]
            .get("kubernetes.io/service-account.name")
            .is_none());
        let tls =
            json!({"metadata": {"name": "t", "namespace": "ns"}, "type": "kubernetes.io/tls"});
        assert_eq!(host_secret(&tls, "a")["type"], "kubernetes.io/tls");
    }

    #[test]
    fn config_maps_copy_data() {
        let cm = json!({"metadata": {"name": "c", "namespace": "ns"}, "data": {"k": "v"},
            "binaryData": {"b": "AA=="}, "extra": 1});
        let h = host_config_map(&cm, "a");
        assert_eq!(h["metadata"]["name"], "c-x-ns-x-a");
        assert_eq!(h["data"]["k"], "v");
        assert_eq!(h["binaryData"]["b"], "AA==");
        assert!(h.get("extra").is_none());
    }

    #[test]
    fn pvcs_cannot_reach_host_volumes() {
        let pvc = json!({"metadata": {"name": "d", "namespace": "ns"}, "spec": {
            "accessModes": ["ReadWriteOnce"], "volumeName": "someone-elses-pv",
            "selector": {"matchLabels": {"x": "y"}}, "storageClassName": "fast",
            "resources": {"requests": {"storage": "1Gi", "nvidia.com/gpu": "1"}},
            "dataSource": {"kind": "PersistentVolumeClaim", "name": "src"},
            "dataSourceRef": {"kind": "VolumeSnapshot", "apiGroup": "snapshot.storage.k8s.io", "name": "s"}}});
        let h = host_pvc(&pvc, "a");
        let s = &h["spec"];
        assert!(s.get("volumeName").is_none());
        assert!(s.get("selector").is_none());
        assert!(s.get("dataSourceRef").is_none());
        assert_eq!(s["resources"], json!({"requests": {"storage": "1Gi"}}));
        assert_eq!(s["dataSource"]["name"], "src-x-ns-x-a");
        assert_eq!(s["storageClassName"], "fast");
    }
}

/// The host PodDisruptionBudget for a tenant one: its budget (`minAvailable` /
/// `maxUnavailable`, `unhealthyPodEvictionPolicy`) over the host copies of the pods its
/// selector picks — the selector's labels plus the tenant's and the namespace's, so that it
/// can only ever count this tenant namespace's pods. Host evictions (a node agent's after a
/// GPU fault, a drain) are then held to it, as they would be in the tenant.
pub fn host_pdb(pdb: &Value, tenant: &str) -> Value {
    let ns = pdb["metadata"]["namespace"].as_str().unwrap_or("");
    let spec = &pdb["spec"];
    let mut out = Map::new();
    for f in [
        "minAvailable",
        "maxUnavailable",
        "unhealthyPodEvictionPolicy",
    ] {
        if !spec[f].is_null() {
            out.insert(f.into(), spec[f].clone());
        }
    }
    let selector = crate::pods::confined_selector(&spec["selector"], &[ns.to_string()], tenant);
    out.insert("selector".into(), selector);
    json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": metadata(pdb, tenant), "spec": out})
}

/// The tenant PDB's status from its host copy's (the counts of its pods' host copies).
pub fn tenant_pdb_status(host: &Value) -> Map<String, Value> {
    let mut out = Map::new();
    for f in [
        "currentHealthy",
        "desiredHealthy",
        "disruptionsAllowed",
        "expectedPods",
        "conditions",
    ] {
        if !host["status"][f].is_null() {
            out.insert(f.into(), host["status"][f].clone());
        }
    }
    out
}

#[cfg(test)]
mod pdb_tests {
    use super::*;

    #[test]
    fn budgets_count_only_the_tenant_namespace_s_pods() {
        let pdb = json!({"metadata": {"name": "web", "namespace": "ml", "uid": "u"},
            "spec": {"minAvailable": 2, "selector": {
                "matchLabels": {"app": "web", "fabrik.dev/tenant": "other"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a"]},
                    {"key": "fabrik.dev/namespace", "operator": "Exists"}]}}});
        let h = host_pdb(&pdb, "t1");
        assert_eq!(h["metadata"]["namespace"], "fabrik-t1");
        assert_eq!(h["spec"]["minAvailable"], 2);
        assert_eq!(
            h["spec"]["selector"]["matchLabels"],
            json!({"app": "web", "fabrik.dev/tenant": "t1", "fabrik.dev/namespace": "ml"})
        );
        assert_eq!(
            h["spec"]["selector"]["matchExpressions"],
            json!([{"key": "tier", "operator": "In", "values": ["a"]}])
        );
        let s = tenant_pdb_status(&json!({"status": {"disruptionsAllowed": 0,
            "currentHealthy": 2, "observedGeneration": 4}}));
        assert_eq!(s.get("disruptionsAllowed"), Some(&json!(0)));
        assert!(!s.contains_key("observedGeneration"));
    }
}
