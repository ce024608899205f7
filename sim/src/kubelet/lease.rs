//! The node's heartbeat, as a kubelet sends it: a `coordination.k8s.io/v1` Lease named after
//! the node in `kube-node-lease`, held by the node, renewed every [`RENEW_INTERVAL`] for
//! [`DURATION_SECONDS`], owned by the Node (deleted with it). A real host's node lifecycle
//! controller reads the Lease's `renewTime`: without renewals it marks the node `Ready=Unknown`
//! and taints it unreachable after its grace period (40 s by default), and then evicts its pods.
//!
//! The Lease body is built here ([`lease`], pure); [`renew`] creates or updates it.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Value};

use super::{api, Result};

/// The namespace of node Leases.
pub const NAMESPACE: &str = "kube-node-lease";

/// How long a renewal holds (upstream kubelet: 40 s).
pub const DURATION_SECONDS: i32 = 40;

/// Time between renewals (upstream kubelet: a quarter of the duration, 10 s).
pub const RENEW_INTERVAL: Duration = Duration::from_secs(10);

/// The Lease of node `node` renewed at `now`; owned by the Node when its UID is known.
pub fn lease(node: &str, node_uid: Option<&str>, now: Timestamp) -> Result<Value> {
    let renew = serde_json::to_value(MicroTime(now))?;
    let mut metadata = json!({"name": node, "namespace": NAMESPACE});
    if let Some(uid) = node_uid {
        metadata["ownerReferences"] = json!([{
            "apiVersion": "v1", "kind": "Node", "name": node, "uid": uid,
        }]);
    }
    Ok(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": metadata,
        "spec": {
            "holderIdentity": node,
            "leaseDurationSeconds": DURATION_SECONDS,
            "renewTime": renew,
        },
    }))
}

/// Creates the node's Lease, or renews it.
pub async fn renew(client: &Client, node: &str, node_uid: Option<&str>) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    let body = lease(node, node_uid, Timestamp::now())?;
    let existing = leases
        .get_opt(node)
        .await
        .map_err(api("reading the node lease"))?;
    if existing.is_some() {
        let patch = json!({"spec": body["spec"]});
        leases
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api("renewing the node lease"))?;
        return Ok(());
    }
    let lease: Lease = serde_json::from_value(body)?;
    match leases.create(&PostParams::default(), &lease).await {
        Ok(_) => Ok(()),
        // Created in between (another pass): the next renewal updates it.
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(api("creating the node lease")(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lease_is_held_by_the_node_and_owned_by_it() {
        let now = Timestamp::from_second(1_700_000_000).expect("time");
        let l = lease("gpu-node-0", Some("u-1"), now).expect("lease");
        assert_eq!(l["metadata"]["namespace"], NAMESPACE);
        assert_eq!(l["spec"]["holderIdentity"], "gpu-node-0");
        assert_eq!(l["spec"]["leaseDurationSeconds"], 40);
        assert!(l["spec"]["renewTime"]
            .as_str()
            .is_some_and(|t| t.starts_with("2023-11-14T22:13:20.")));
        assert_eq!(l["metadata"]["ownerReferences"][0]["uid"], "u-1");
        let parsed: Lease = serde_json::from_value(l).expect("a Lease");
        assert_eq!(parsed.spec.and_then(|s| s.lease_duration_seconds), Some(40));
        let unowned = lease("n", None, now).expect("lease");
        assert!(unowned["metadata"].get("ownerReferences").is_none());
    }
}
