//! The Node object: registration, labels and annotations (JSON merge patch), extended
//! resources and conditions in status (strategic merge patch: conditions merge by `type`,
//! stale resources are deleted with `null`), and the taint and cordon (read, modify, replace
//! with the read `resourceVersion`, so concurrent writers are not overwritten).

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeCondition, Taint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::{json, Map, Value};

use super::{api, Result};
use crate::inventory::{Inventory, OWNED_RESOURCE_PREFIXES};

/// Reads the Node, registering it (with `labels`) when it does not exist.
pub async fn get_or_register(client: &Client, name: &str) -> Result<(Node, bool)> {
    let nodes: Api<Node> = Api::all(client.clone());
    if let Some(n) = nodes.get_opt(name).await.map_err(api("reading the node"))? {
        return Ok((n, false));
    }
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    match nodes.create(&PostParams::default(), &node).await {
        Ok(n) => Ok((n, true)),
        // Someone else registered it in between.
        Err(kube::Error::Api(s)) if s.code == 409 => {
            let n = nodes.get(name).await.map_err(api("reading the node"))?;
            Ok((n, false))
        }
        Err(e) => Err(api("registering the node")(e)),
    }
}

/// An owner reference to the Node (for the ResourceSlice).
pub fn owner(node: &Node) -> Option<OwnerReference> {
    Some(OwnerReference {
        api_version: "v1".into(),
        kind: "Node".into(),
        name: node.metadata.name.clone()?,
        uid: node.metadata.uid.clone()?,
        controller: Some(true),
        ..Default::default()
    })
}

/// Sets labels and annotations that differ; `None` removes an annotation.
pub async fn publish_metadata(
    client: &Client,
    node: &Node,
    labels: &BTreeMap<String, String>,
    annotations: &BTreeMap<String, Option<String>>,
) -> Result<bool> {
    let have_labels = node.metadata.labels.clone().unwrap_or_default();
    let have_annotations = node.metadata.annotations.clone().unwrap_or_default();
    let mut l = Map::new();
    for (k, v) in labels {
        if have_labels.get(k) != Some(v) {
            l.insert(k.clone(), json!(v));
        }
    }
    let mut a = Map::new();
    for (k, v) in annotations {
        if have_annotations.get(k) != v.as_ref() {
            a.insert(k.clone(), json!(v));
        }
    }
    if l.is_empty() && a.is_empty() {
        return Ok(false);
    }
    let nodes: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    let patch = json!({"metadata": {"labels": l, "annotations": a}});
    nodes
        .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(api("updating node labels and annotations"))?;
    Ok(true)
}

/// A condition to publish: type, status, reason, message.
pub type ConditionSpec = (&'static str, &'static str, String, String);

fn condition(have: &[NodeCondition], spec: &ConditionSpec, now: Timestamp) -> NodeCondition {
    let (type_, status, reason, message) = spec;
    let old = have.iter().find(|c| c.type_ == *type_);
    let transition = match old {
        Some(c) if c.status == *status => c.last_transition_time.clone(),
        _ => Some(Time(now)),
    };
    NodeCondition {
        type_: type_.to_string(),
        status: status.to_string(),
        reason: Some(reason.clone()),
        message: Some(message.clone()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: transition,
    }
}

/// Publishes extended resources and conditions, when they differ from the Node's.
pub async fn publish_status(
    client: &Client,
    node: &Node,
    inv: &Inventory,
    conditions: &[ConditionSpec],
) -> Result<bool> {
    let status = node.status.clone().unwrap_or_default();
    let have_conditions = status.conditions.clone().unwrap_or_default();
    let resource_patch = |have: Option<
        &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
    >,
                          want: &BTreeMap<String, i64>| {
        let mut m = Map::new();
        let have = have.cloned().unwrap_or_default();
        for (k, v) in want {
            if have.get(k).map(|q| q.0.as_str()) != Some(v.to_string().as_str()) {
                m.insert(k.clone(), json!(v.to_string()));
            }
        }
        for k in have.keys() {
            let owned = OWNED_RESOURCE_PREFIXES.iter().any(|p| k.starts_with(p));
            if owned && !want.contains_key(k) {
                m.insert(k.clone(), Value::Null);
            }
        }
        m
    };
    let capacity = resource_patch(status.capacity.as_ref(), &inv.capacity);
    let allocatable = resource_patch(status.allocatable.as_ref(), &inv.allocatable);
    let conditions_differ = conditions.iter().any(|(t, s, r, m)| {
        !have_conditions.iter().any(|c| {
            c.type_ == *t
                && c.status == *s
                && c.reason.as_deref() == Some(r.as_str())
                && c.message.as_deref() == Some(m.as_str())
        })
    });
    if capacity.is_empty() && allocatable.is_empty() && !conditions_differ {
        return Ok(false);
    }
    let now = Timestamp::now();
    let conds: Vec<NodeCondition> = conditions
        .iter()
        .map(|c| condition(&have_conditions, c, now))
        .collect();
    let patch = json!({
        "status": {
            "capacity": capacity,
            "allocatable": allocatable,
            "conditions": conds,
        }
    });
    let nodes: Api<Node> = Api::all(client.clone());
    let name = node.metadata.name.clone().unwrap_or_default();
    nodes
        .patch_status(&name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .map_err(api("updating node status"))?;
    Ok(true)
}

/// The unhealthy taint.
pub fn unhealthy_taint() -> Taint {
    Taint {
        key: fabrik_api::TAINT_GPU_UNHEALTHY.into(),
        value: Some("true".into()),
        effect: "NoSchedule".into(),
        time_added: None,
    }
}

/// Adds or removes the unhealthy taint and sets or clears the agent's cordon, in one update.
pub async fn set_taint_and_cordon(
    client: &Client,
    name: &str,
    taint: Option<bool>,
    cordon: Option<bool>,
) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let mut node = nodes.get(name).await.map_err(api("reading the node"))?;
    let spec = node.spec.get_or_insert_with(Default::default);
    if let Some(on) = taint {
        let taints = spec.taints.get_or_insert_with(Vec::new);
        taints.retain(|t| t.key != fabrik_api::TAINT_GPU_UNHEALTHY);
        if on {
            taints.push(unhealthy_taint());
        }
    }
    if let Some(on) = cordon {
        spec.unschedulable = Some(on);
        let annotations = node.metadata.annotations.get_or_insert_with(BTreeMap::new);
        if on {
            annotations.insert(
                fabrik_api::ANNOTATION_CORDONED_BY_AGENT.into(),
                "true".into(),
            );
        } else {
            annotations.remove(fabrik_api::ANNOTATION_CORDONED_BY_AGENT);
        }
    }
    nodes
        .replace(name, &PostParams::default(), &node)
        .await
        .map_err(api("updating node taints and cordon"))?;
    Ok(())
}
