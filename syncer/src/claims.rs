//! Dynamic resource allocation (`resource.k8s.io/v1`) across the boundary:
//!
//! - **ResourceClaims** go down like other namespaced objects (renamed, origin annotations):
//!   what a claim asks for (`spec.devices`: requests, subrequests, selectors, constraints)
//!   is copied; opaque driver `config` is not (nothing on the host may be configured by a
//!   tenant). Device class names stay: the classes are the host's, mirrored into the tenant.
//!   The host's scheduler allocates the host copy; its `status` comes back with `reservedFor`
//!   naming the tenant's pods instead of their host copies.
//! - **Pods** name their claims' host copies: each `spec.resourceClaims` entry becomes a
//!   `resourceClaimName` (a template's claim is the one the tenant's claim controller made,
//!   from the pod's `status.resourceClaimStatuses`; until then the pod waits).
//! - **DeviceClasses** come up: the host's classes are mirrored into a tenant whose quota
//!   allows GPUs, so that `kubectl get deviceclasses` and claims name what exists. They are
//!   the host's: the tenant's API server refuses writes to them from anyone but the syncer.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Map, Value};

use crate::naming;

/// The label that marks a tenant DeviceClass as the syncer's mirror of a host class.
pub const MIRRORED_LABEL: &str = "fabrik.dev/mirrored-from-host";

/// The host ResourceClaim for a tenant claim.
pub fn host_claim(claim: &Value, tenant: &str) -> Value {
    let metadata = naming::host_metadata(
        claim,
        tenant,
        naming::tenant_labels(claim),
        naming::tenant_annotations(claim),
    );
    let mut devices = Map::new();
    for f in ["requests", "constraints"] {
        if !claim["spec"]["devices"][f].is_null() {
            devices.insert(f.into(), claim["spec"]["devices"][f].clone());
        }
    }
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": metadata,
        "spec": {"devices": devices}})
}

/// The tenant claim's status from its host copy's: allocation as is, `reservedFor` naming the
/// tenant pods (host pods looked up by name with `host_pod`; entries for anything else
/// dropped).
pub fn tenant_claim_status(
    host: &Value,
    host_pod: impl Fn(&str) -> Option<Arc<Value>>,
) -> Map<String, Value> {
    let mut out = Map::new();
    out.insert("allocation".into(), host["status"]["allocation"].clone());
    let reserved: Vec<Value> = host["status"]["reservedFor"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["resource"] == "pods" && r["apiGroup"].as_str().unwrap_or("").is_empty())
        .filter_map(|r| {
            let pod = host_pod(r["name"].as_str()?)?;
            let origin = naming::origin(&pod)?;
            Some(json!({"resource": "pods", "name": origin.name, "uid": origin.uid}))
        })
        .collect();
    out.insert(
        "reservedFor".into(),
        if reserved.is_empty() {
            Value::Null
        } else {
            Value::Array(reserved)
        },
    );
    if !host["status"]["devices"].is_null() {
        out.insert("devices".into(), host["status"]["devices"].clone());
    }
    out
}

/// Whether the tenant's status already says what `want` says (`null`s meaning absent).
pub fn status_matches(current: &Value, want: &Map<String, Value>) -> bool {
    want.iter().all(|(k, v)| {
        let have = &current[k.as_str()];
        match v {
            Value::Null => have.is_null(),
            v => have == v,
        }
    })
}

/// Why a pod cannot go to the host yet: a claim of a template not made yet.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("waiting for the ResourceClaim of pod claim {0:?} (from a template) to be created")]
pub struct ClaimPending(pub String);

/// The host pod's `spec.resourceClaims` for a tenant pod: every entry naming the host copy of
/// its claim.
pub fn host_pod_claims(pod: &Value, tenant: &str) -> Result<Option<Value>, ClaimPending> {
    let Some(list) = pod["spec"]["resourceClaims"].as_array() else {
        return Ok(None);
    };
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let made: BTreeMap<&str, &Value> = pod["status"]["resourceClaimStatuses"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| Some((s["name"].as_str()?, &s["resourceClaimName"])))
        .collect();
    let mut out = Vec::new();
    for c in list {
        let Some(name) = c["name"].as_str() else {
            continue;
        };
        let claim = if let Some(claim) = c["resourceClaimName"].as_str() {
            claim
        } else if c["resourceClaimTemplateName"].is_string() {
            match made.get(name) {
                Some(Value::String(claim)) => claim.as_str(),
                // The controller decided that no claim is needed.
                Some(_) => continue,
                None => return Err(ClaimPending(name.to_string())),
            }
        } else {
            continue;
        };
        out.push(json!({"name": name,
            "resourceClaimName": naming::host_name(claim, ns, tenant)}));
    }
    Ok(Some(Value::Array(out)))
}

/// The tenant's mirror of a host DeviceClass: name, the host's labels and spec, and the
/// mirror mark.
pub fn tenant_device_class(host: &Value) -> Value {
    let mut labels: Map<String, Value> = host["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels.insert(MIRRORED_LABEL.into(), json!("true"));
    json!({"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": host["metadata"]["name"], "labels": labels},
        "spec": host["spec"]})
}

/// Whether a tenant DeviceClass is a mirror the syncer made (and may replace or delete).
pub fn is_mirror(tenant_class: &Value) -> bool {
    tenant_class["metadata"]["labels"][MIRRORED_LABEL] == "true"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_go_down_without_driver_config() {
        let claim = json!({"metadata": {"name": "c", "namespace": "ml", "uid": "u"},
            "spec": {"devices": {
                "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                "config": [{"opaque": {"driver": "gpu.nvidia.com", "parameters": {"x": 1}}}]}}});
        let h = host_claim(&claim, "t1");
        assert_eq!(h["metadata"]["namespace"], "fabrik-t1");
        assert_eq!(h["metadata"]["name"], naming::host_name("c", "ml", "t1"));
        assert_eq!(
            h["spec"]["devices"]["requests"],
            claim["spec"]["devices"]["requests"]
        );
        assert!(h["spec"]["devices"]["config"].is_null());
    }

    #[test]
    fn reservations_name_tenant_pods() {
        let host_pod = json!({"metadata": {"name": "p-x-ml-x-t1",
            "labels": {"fabrik.dev/tenant": "t1"},
            "annotations": {"fabrik.dev/virtual-name": "p",
                "fabrik.dev/virtual-namespace": "ml", "fabrik.dev/virtual-uid": "tu"}}});
        let pods = BTreeMap::from([("p-x-ml-x-t1".to_string(), Arc::new(host_pod))]);
        let host = json!({"status": {"allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "p-x-ml-x-t1", "uid": "hu"},
                            {"resource": "pods", "name": "someone-else", "uid": "x"}]}});
        let lookup = |n: &str| pods.get(n).cloned();
        let s = tenant_claim_status(&host, lookup);
        assert_eq!(
            s["reservedFor"],
            json!([{"resource": "pods", "name": "p", "uid": "tu"}])
        );
        assert!(status_matches(
            &json!({"allocation": {"devices": {"results": []}},
            "reservedFor": [{"resource": "pods", "name": "p", "uid": "tu"}]}),
            &s
        ));
        let released = tenant_claim_status(&json!({"status": {}}), lookup);
        assert!(!status_matches(
            &json!({"allocation": {"devices": {}}}),
            &released
        ));
        assert!(status_matches(&json!({}), &released));
    }

    #[test]
    fn pods_name_the_host_claims() {
        let mut pod = json!({"metadata": {"name": "p", "namespace": "ml"},
            "spec": {"resourceClaims": [
                {"name": "shared", "resourceClaimName": "s"},
                {"name": "gpu", "resourceClaimTemplateName": "t"}]}});
        assert_eq!(host_pod_claims(&pod, "t1"), Err(ClaimPending("gpu".into())));
        pod["status"] = json!({"resourceClaimStatuses": [
            {"name": "gpu", "resourceClaimName": "p-gpu-abcde"}]});
        let claims = host_pod_claims(&pod, "t1").expect("ready").expect("some");
        assert_eq!(
            claims,
            json!([
            {"name": "shared", "resourceClaimName": naming::host_name("s", "ml", "t1")},
            {"name": "gpu", "resourceClaimName": naming::host_name("p-gpu-abcde", "ml", "t1")}])
        );
        assert_eq!(host_pod_claims(&json!({"spec": {}}), "t1"), Ok(None));
    }

    #[test]
    fn mirrors_are_marked() {
        let m = tenant_device_class(&json!({"metadata": {"name": "gpu.nvidia.com",
            "resourceVersion": "5", "uid": "h"}, "spec": {"selectors": []}}));
        assert!(is_mirror(&m));
        assert!(m["metadata"]["uid"].is_null());
        assert!(!is_mirror(&json!({"metadata": {"name": "x"}})));
    }
}
