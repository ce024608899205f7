//! The pods on the node, with the GPUs their assigned devices belong to (from the
//! `fabrik.dev/gpu-devices` annotation), and their eviction through the Eviction API.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{EvictParams, ListParams};
use kube::{Api, Client};

use super::{api, Result};
use crate::remediation::PodRef;

/// Pods bound to `node` that are neither finished nor terminating, with their GPU indexes (`uuids` maps device
/// UUIDs to GPU indexes).
pub async fn on_node(
    client: &Client,
    node: &str,
    uuids: &BTreeMap<String, u32>,
) -> Result<Vec<PodRef>> {
    Ok(refs(&list(client, node).await?, node, uuids))
}

/// Every pod bound to `node`.
pub async fn list(client: &Client, node: &str) -> Result<Vec<Pod>> {
    let pods: Api<Pod> = Api::all(client.clone());
    Ok(pods
        .list(&ListParams::default().fields(&format!("spec.nodeName={node}")))
        .await
        .map_err(api("listing pods on the node"))?
        .items)
}

/// The pods of `pods` bound to `node` that are neither finished nor terminating, with their GPU
/// indexes.
pub fn refs(pods: &[Pod], node: &str, uuids: &BTreeMap<String, u32>) -> Vec<PodRef> {
    let mut out = Vec::new();
    for p in pods {
        let on_node = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node);
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        let terminating = p.metadata.deletion_timestamp.is_some();
        if !on_node || terminating || matches!(phase, Some("Succeeded" | "Failed")) {
            continue;
        }
        let devices = p
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_DEVICES))
            .map(String::as_str)
            .unwrap_or("");
        let gpus: BTreeSet<u32> = devices
            .split(',')
            .map(str::trim)
            .filter_map(|d| uuids.get(d).copied())
            .collect();
        out.push(PodRef {
            namespace: p.metadata.namespace.clone().unwrap_or_default(),
            name: p.metadata.name.clone().unwrap_or_default(),
            gpus,
        });
    }
    out
}

/// Asks the API server to evict a pod. A `429` means a PodDisruptionBudget forbids it now.
pub async fn evict(client: &Client, namespace: &str, name: &str) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    pods.evict(name, &EvictParams::default())
        .await
        .map_err(api(format!("evicting pod {namespace}/{name}")))?;
    Ok(())
}
