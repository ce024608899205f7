//! Host Events about synced objects → Events in the tenant, about the tenant's object.
//!
//! A tenant Event's name is the tenant object's name and the FNV-1a hash of the host Event's
//! name, so re-syncing (after a restart too) updates the same Event instead of adding one.

use serde_json::{json, Value};

use crate::naming;

/// The tenant Event for a host Event about a host object that is the copy of tenant object
/// `origin` (of `kind`, `apiVersion`).
pub fn tenant_event(
    host_event: &Value,
    origin: &naming::Origin,
    api_version: &str,
    hashed: naming::Hashed<'_>,
) -> Value {
    let host_name = host_event["metadata"]["name"].as_str().unwrap_or("");
    let name = format!(
        "{}.{:016x}",
        origin.name,
        naming::fnv1a(host_name.as_bytes())
    );
    let io = &host_event["involvedObject"];
    let mut out = json!({"apiVersion": "v1", "kind": "Event",
        "metadata": {"name": name, "namespace": origin.namespace},
        "involvedObject": {"apiVersion": api_version, "kind": io["kind"],
            "name": origin.name, "namespace": origin.namespace, "uid": origin.uid},
        "source": {"component": host_event["source"]["component"]},
    });
    for f in [
        "reason",
        "message",
        "type",
        "count",
        "firstTimestamp",
        "lastTimestamp",
    ] {
        if !host_event[f].is_null() {
            out[f] = host_event[f].clone();
        }
    }
    // Its message names the tenant's objects as the tenant knows them.
    if let Some(m) = out.as_object_mut() {
        naming::tenant_messages(m, &origin.tenant, hashed);
    }
    if !io["fieldPath"].is_null() {
        out["involvedObject"]["fieldPath"] = io["fieldPath"].clone();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn involved_object_is_rewritten() {
        let ev = json!({"metadata": {"name": "web-x-prod-x-a.17a", "namespace": "fabrik-a"},
            "involvedObject": {"kind": "Pod", "name": "web-x-prod-x-a", "namespace": "fabrik-a",
                "uid": "host-uid", "fieldPath": "spec.containers{c}"},
            "reason": "Pulled", "message": "pulled", "type": "Normal", "count": 2,
            "source": {"component": "kubelet", "host": "gpu-1"}});
        let origin = naming::Origin {
            tenant: "a".into(),
            namespace: "prod".into(),
            name: "web".into(),
            uid: "u".into(),
        };
        let t = tenant_event(&ev, &origin, "v1", &|_| None);
        assert_eq!(t["metadata"]["namespace"], "prod");
        assert!(t["metadata"]["name"]
            .as_str()
            .is_some_and(|n| n.starts_with("web.")));
        assert_eq!(t["involvedObject"]["name"], "web");
        assert_eq!(t["involvedObject"]["uid"], "u");
        assert_eq!(t["involvedObject"]["fieldPath"], "spec.containers{c}");
        assert_eq!(t["count"], 2);
        assert_eq!(t["source"], json!({"component": "kubelet"}));
        assert_eq!(
            tenant_event(&ev, &origin, "v1", &|_| None)["metadata"],
            t["metadata"]
        );
        // Its message names the tenant's objects as the tenant knows them.
        let mut ev = ev;
        ev["message"] = json!("Unable to attach or mount volumes: unmounted volumes=[data], PVC data-x-prod-x-a not bound");
        assert_eq!(
            tenant_event(&ev, &origin, "v1", &|_| None)["message"],
            "Unable to attach or mount volumes: unmounted volumes=[data], PVC prod/data not bound"
        );
    }
}
