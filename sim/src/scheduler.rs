//! The GPU-aware scheduler of `fabrik up`'s embedded host, where no kube-scheduler runs.
//!
//! Each round (every `interval`, while pods are pending) it reads Nodes, the agents'
//! ResourceSlices and all pods, plans placements ([`plan`], [`fit`] over [`model`]: the pure
//! placement of [`fabrik_gpu::placement`]) and binds through `pods/binding`, after writing the
//! chosen devices onto the pod:
//! `fabrik.dev/gpu-ids` (DRA device names) and `fabrik.dev/gpu-devices` (their UUIDs, which the
//! node agent reads to know which GPUs are busy). A pod that cannot be placed gets
//! `PodScheduled=False`, reason `Unschedulable`, with why. It takes pods whose `schedulerName`
//! is unset, `default-scheduler` or `fabrik-scheduler`, and that no scheduling gate holds.
//!
//! Pods with ResourceClaims ([`claims`]) get their claims allocated on the node they go to,
//! before they are bound: the claim's `status.allocation` and `reservedFor` are written (guarded
//! by its resourceVersion), and the devices are named on the pod as
//! `fabrik.dev/claim-gpu-ids` (device names) and in `fabrik.dev/gpu-devices` (UUIDs).
//!
//! Guarantees: a pod is bound at most once (the binding carries the pod's UID and the API
//! server refuses a second binding); a gang is bound only when all its members fit.
//! Caveats: it polls rather than watches; pods bound by someone else without
//! `fabrik.dev/gpu-ids` use node resources but no particular device.

use std::collections::BTreeMap;
use std::time::Duration;

use fabrik_gpu::placement::plan::Outcome;
use fabrik_gpu::placement::{claims, fit, model, plan};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use thiserror::Error;

/// Errors of a scheduling round.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// An API call failed.
    #[error("{op}: {source}")]
    Api {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn api(op: impl Into<String>) -> impl FnOnce(kube::Error) -> Error {
    let op = op.into();
    move |source| Error::Api { op, source }
}

/// Scheduler settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Time between rounds.
    pub interval: Duration,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            interval: Duration::from_millis(200),
        }
    }
}

/// Runs rounds until `shutdown` completes.
pub async fn run(
    client: Client,
    config: Config,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    tracing::info!("scheduler starting");
    let mut ticker = tokio::time::interval(config.interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // Reasons already written, so an unschedulable pod is not patched every round.
    let mut reported: BTreeMap<String, String> = BTreeMap::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            _ = ticker.tick() => {
                if let Err(e) = round(&client, &mut reported).await {
                    tracing::warn!(error = %e, "scheduling round failed; retrying");
                }
            }
        }
    }
    tracing::info!("scheduler stopped");
}

fn ours(pod: &Pod) -> bool {
    let spec = pod.spec.as_ref();
    let unbound = spec
        .and_then(|s| s.node_name.as_deref())
        .is_none_or(str::is_empty);
    let scheduler = spec.and_then(|s| s.scheduler_name.as_deref());
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    // A gated pod waits until whoever holds its gates (Fabrik's GPU queue) clears them.
    let gated = spec
        .and_then(|s| s.scheduling_gates.as_ref())
        .is_some_and(|g| !g.is_empty());
    unbound
        && !gated
        && pod.metadata.deletion_timestamp.is_none()
        && !matches!(phase, Some("Succeeded" | "Failed"))
        && matches!(
            scheduler,
            None | Some("default-scheduler") | Some(fabrik_api::SCHEDULER_NAME)
        )
}

/// The pending pods in the order they are tried: by creation time; within one second (the
/// timestamps' resolution), namespaces (on a host: tenants) take turns — each namespace's
/// first pod of that second, then each one's second, … — the namespace holding fewer GPUs
/// first, so that no tenant wins every tie by its name.
pub fn arrival_order(pods: &[Pod]) -> Vec<&Pod> {
    fn ns(p: &Pod) -> &str {
        p.metadata.namespace.as_deref().unwrap_or("")
    }
    fn name(p: &Pod) -> &str {
        p.metadata.name.as_deref().unwrap_or("")
    }
    let mut held: BTreeMap<&str, i64> = BTreeMap::new();
    for p in pods {
        if model::holds_resources(p).is_none() {
            continue;
        }
        let gpus: i64 = model::requests(p)
            .map(|r| {
                r.iter()
                    .filter(|(k, _)| model::is_gpu_resource(k))
                    .map(|(_, n)| *n)
                    .sum()
            })
            .unwrap_or(0);
        *held.entry(ns(p)).or_insert(0) += gpus;
    }
    let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
    let mut pending: Vec<&Pod> = pods.iter().filter(|p| ours(p)).collect();
    pending.sort_by_key(|p| (created(p), ns(p), name(p)));
    // Each pod's turn within its namespace and second, then the order of turns.
    let mut turn: BTreeMap<(Option<k8s_openapi::jiff::Timestamp>, &str), usize> = BTreeMap::new();
    let mut keyed: Vec<_> = pending
        .into_iter()
        .map(|p| {
            let t = turn.entry((created(p), ns(p))).or_insert(0);
            *t += 1;
            let holds = held.get(ns(p)).copied().unwrap_or(0);
            ((created(p), *t, holds, ns(p), name(p)), p)
        })
        .collect();
    keyed.sort_by_key(|(k, _)| *k);
    keyed.into_iter().map(|(_, p)| p).collect()
}

/// One round: returns how many pods were bound.
pub async fn round(client: &Client, reported: &mut BTreeMap<String, String>) -> Result<usize> {
    let pods_api: Api<Pod> = Api::all(client.clone());
    let pods = pods_api
        .list(&ListParams::default())
        .await
        .map_err(api("listing pods"))?
        .items;
    let pending = arrival_order(&pods);
    if pending.is_empty() {
        reported.clear();
        return Ok(0);
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api("listing nodes"))?
        .items;
    let slices = Api::<ResourceSlice>::all(client.clone())
        .list(&ListParams::default())
        .await
        .map_err(api("listing ResourceSlices"))?
        .items;
    let uses_claims = pending.iter().any(|p| {
        p.spec
            .as_ref()
            .is_some_and(|s| s.resource_claims.as_ref().is_some_and(|c| !c.is_empty()))
    });
    let all_claims: Vec<ResourceClaim> = list_served(client, "ResourceClaims").await?;
    let classes: Vec<DeviceClass> = if uses_claims {
        list_served(client, "DeviceClasses").await?
    } else {
        Vec::new()
    };
    let mut views = model::nodes(
        &nodes,
        &slices,
        &pods,
        &claims::allocated_devices(&all_claims, &claims::node_agent_drivers(&slices)),
    );
    let drivers = claims::drivers_by_node(&slices);
    let claim_index = claims::claim_index(&all_claims);
    let classes = claims::class_index(&classes);
    let devices = if uses_claims {
        claims::slice_devices(&slices)
    } else {
        Vec::new()
    };
    let mut needs = claims::Needs::new(&claim_index, &classes, &devices);
    let mut bound_in_gang: BTreeMap<String, usize> = BTreeMap::new();
    for p in &pods {
        if model::holds_resources(p).is_some() {
            if let Ok(Some((g, _))) = model::gang(p) {
                let ns = p.metadata.namespace.clone().unwrap_or_default();
                *bound_in_gang.entry(format!("{ns}/{g}")).or_insert(0) += 1;
            }
        }
    }
    let mut requests = Vec::new();
    let mut refused = Vec::new();
    for p in &pending {
        match model::pod_request(p) {
            Ok(mut r) => match needs.of(p) {
                Ok(Some(claims)) => {
                    r.claims = claims;
                    requests.push(r);
                }
                // Shares a claim another pod of this round allocates: the next round.
                Ok(None) => {}
                Err(reason) => refused.push((*p, reason)),
            },
            Err(reason) => refused.push((*p, reason)),
        }
    }
    let outcomes = plan::plan(&mut views, &requests, &bound_in_gang);
    let mut bound = 0;
    for (req, outcome) in requests.iter().zip(outcomes) {
        let key = format!("{}/{}", req.namespace, req.name);
        match outcome {
            Outcome::Bind(placement) => {
                match bind(client, &views, &claim_index, &drivers, req, &placement).await {
                    Ok(()) => {
                        reported.remove(&key);
                        bound += 1;
                    }
                    // Told to the pod (condition and Event) once per different failure, not
                    // logged every round: a refused claim reservation can last.
                    Err(e) => {
                        tracing::debug!(pod = %key, error = %e, "binding failed");
                        let pod = PodKey {
                            namespace: &req.namespace,
                            name: &req.name,
                            uid: &req.uid,
                        };
                        let reason = format!("binding to {} failed: {e}", placement.node);
                        unschedulable(client, reported, pod, &reason).await
                    }
                }
            }
            Outcome::Unschedulable(reason) => {
                let pod = PodKey {
                    namespace: &req.namespace,
                    name: &req.name,
                    uid: &req.uid,
                };
                unschedulable(client, reported, pod, &reason).await
            }
        }
    }
    for (p, reason) in refused {
        let ns = p.metadata.namespace.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        let uid = p.metadata.uid.clone().unwrap_or_default();
        let pod = PodKey {
            namespace: &ns,
            name: &name,
            uid: &uid,
        };
        unschedulable(client, reported, pod, &reason).await;
    }
    Ok(bound)
}

/// Lists a `resource.k8s.io` kind; a host that does not serve it has none.
async fn list_served<K>(client: &Client, what: &str) -> Result<Vec<K>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    K::DynamicType: Default,
{
    match Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
    {
        Ok(l) => Ok(l.items),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(Vec::new()),
        Err(e) => Err(api(format!("listing {what}"))(e)),
    }
}

/// Allocates and reserves the pod's claims as placed (each write guarded by the claim's
/// resourceVersion, so that a claim changed meanwhile fails this binding rather than being
/// allocated twice). Returns the claim devices the pod uses, by index on the node.
async fn reserve_claims(
    client: &Client,
    view: Option<&model::NodeView>,
    claim_index: &BTreeMap<String, &ResourceClaim>,
    drivers: &BTreeMap<String, String>,
    req: &model::PodRequest,
    placement: &fit::Placement,
) -> Result<Vec<usize>> {
    let mut used = Vec::new();
    let index_of =
        |device: &str| view.and_then(|v| v.devices.iter().position(|d| d.name == device));
    for need in &req.claims {
        let Some(claim) = claim_index.get(need.claim()) else {
            continue;
        };
        let name = claim.metadata.name.clone().unwrap_or_default();
        let api_ns: Api<ResourceClaim> = Api::namespaced(client.clone(), &req.namespace);
        let rv = claim.metadata.resource_version.clone();
        let status = match need {
            claims::ClaimNeed::Pending { .. } => {
                let Some(alloc) = placement.claims.iter().find(|a| a.claim == need.claim()) else {
                    continue;
                };
                let results: Vec<(String, String)> = alloc
                    .results
                    .iter()
                    .filter_map(|(request, i)| {
                        let d = view?.devices.get(*i)?;
                        Some((request.clone(), d.name.clone()))
                    })
                    .collect();
                used.extend(alloc.results.iter().map(|(_, i)| *i));
                let driver = drivers
                    .get(&placement.node)
                    .map(String::as_str)
                    .unwrap_or(fabrik_api::DRA_DRIVER);
                claims::allocated_status(driver, &placement.node, &results, &req.name, &req.uid)
            }
            claims::ClaimNeed::Allocated { .. } => {
                let status = claim.status.clone().unwrap_or_default();
                for r in status
                    .allocation
                    .iter()
                    .filter_map(|a| a.devices.as_ref())
                    .flat_map(|d| d.results.iter().flatten())
                {
                    if r.pool == placement.node {
                        used.extend(index_of(&r.device));
                    }
                }
                if claims::reserved_for(claim, &req.uid) {
                    continue;
                }
                let mut reserved = serde_json::to_value(status.reserved_for.unwrap_or_default())
                    .unwrap_or_else(|_| json!([]));
                if let Some(list) = reserved.as_array_mut() {
                    list.push(json!({"resource": "pods", "name": req.name, "uid": req.uid}));
                }
                json!({"reservedFor": reserved})
            }
        };
        let patch = json!({"metadata": {"resourceVersion": rv}, "status": status});
        api_ns
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api(format!(
                "reserving resource claim {name} for pod {}",
                req.name
            )))?;
    }
    Ok(used)
}

async fn bind(
    client: &Client,
    views: &[model::NodeView],
    claim_index: &BTreeMap<String, &ResourceClaim>,
    drivers: &BTreeMap<String, String>,
    req: &model::PodRequest,
    placement: &fit::Placement,
) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), &req.namespace);
    let view = views.iter().find(|v| v.name == placement.node);
    let claimed = reserve_claims(client, view, claim_index, drivers, req, placement).await?;
    let pick = |idx: &[usize]| -> Vec<&model::GpuDevice> {
        view.map(|v| idx.iter().filter_map(|&i| v.devices.get(i)).collect())
            .unwrap_or_default()
    };
    let devices = pick(&placement.devices);
    let claim_devices = pick(&claimed);
    if !devices.is_empty() || !claim_devices.is_empty() {
        let ids: Vec<&str> = devices.iter().map(|d| d.name.as_str()).collect();
        let claim_ids: Vec<&str> = claim_devices.iter().map(|d| d.name.as_str()).collect();
        let uuids: Vec<&str> = devices
            .iter()
            .chain(claim_devices.iter())
            .map(|d| d.uuid.as_str())
            .collect();
        let mut annotations = serde_json::Map::new();
        if !ids.is_empty() {
            annotations.insert(fabrik_api::ANNOTATION_GPU_IDS.into(), json!(ids.join(",")));
        }
        if !claim_ids.is_empty() {
            annotations.insert(
                fabrik_api::ANNOTATION_CLAIM_GPU_IDS.into(),
                json!(claim_ids.join(",")),
            );
        }
        annotations.insert(
            fabrik_api::ANNOTATION_GPU_DEVICES.into(),
            json!(uuids.join(",")),
        );
        let patch = json!({"metadata": {"annotations": annotations}});
        pods.patch(&req.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(api(format!("annotating pod {}", req.name)))?;
    }
    let binding = json!({
        "apiVersion": "v1",
        "kind": "Binding",
        "metadata": {"name": req.name, "namespace": req.namespace, "uid": req.uid},
        "target": {"apiVersion": "v1", "kind": "Node", "name": placement.node},
    });
    pods.create_subresource::<serde_json::Value, serde_json::Value>(
        "binding",
        &req.name,
        &PostParams::default(),
        &binding,
    )
    .await
    .map_err(api(format!(
        "binding pod {} to {}",
        req.name, placement.node
    )))?;
    tracing::debug!(pod = %req.name, node = %placement.node, "bound");
    Ok(())
}

/// A pod, by namespace, name and UID.
#[derive(Clone, Copy)]
struct PodKey<'a> {
    namespace: &'a str,
    name: &'a str,
    uid: &'a str,
}

/// Says why a pod cannot be placed: its `PodScheduled=False` condition and a `FailedScheduling`
/// Warning Event, as kube-scheduler does — once per different reason.
async fn unschedulable(
    client: &Client,
    reported: &mut BTreeMap<String, String>,
    pod: PodKey<'_>,
    reason: &str,
) {
    let (ns, name) = (pod.namespace, pod.name);
    let key = format!("{ns}/{name}");
    if reported.get(&key).map(String::as_str) == Some(reason) {
        return;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let now =
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now());
    let patch = json!({"status": {"conditions": [{
        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
        "message": reason, "lastTransitionTime": now, "lastProbeTime": null,
    }]}});
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
    {
        Ok(_) => {
            reported.insert(key.clone(), reason.to_string());
        }
        Err(e) => {
            tracing::warn!(pod = %key, error = %e, "reporting unschedulable failed");
            return;
        }
    }
    let event = json!({
        "metadata": {"name": format!("{name}.{:x}", now.0.as_nanosecond().unsigned_abs()),
            "namespace": ns},
        "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": ns, "name": name,
            "uid": pod.uid},
        "reason": "FailedScheduling",
        "message": reason,
        "type": "Warning",
        "source": {"component": fabrik_api::SCHEDULER_NAME},
        "reportingComponent": fabrik_api::SCHEDULER_NAME,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    });
    let events: Api<k8s_openapi::api::core::v1::Event> = Api::namespaced(client.clone(), ns);
    match serde_json::from_value(event) {
        Ok(ev) => {
            if let Err(e) = events.create(&PostParams::default(), &ev).await {
                tracing::debug!(pod = %key, error = %e, "recording FailedScheduling failed");
            }
        }
        Err(e) => tracing::debug!(error = %e, "building the FailedScheduling event"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(ns: &str, name: &str, created: &str, node: Option<&str>, gpus: u32) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"namespace": ns, "name": name, "creationTimestamp": created},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "i",
                "resources": {"limits": {"nvidia.com/gpu": gpus.to_string()}}}]},
            "status": {"phase": if node.is_some() { "Running" } else { "Pending" }},
        }))
        .expect("pod")
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        arrival_order(pods)
            .iter()
            .map(|p| p.metadata.name.clone().unwrap_or_default())
            .collect()
    }

    #[test]
    fn tenants_take_turns_within_a_second() {
        let second = "2026-01-01T00:00:01Z";
        let mut pods = vec![pod("b-team", "early", "2026-01-01T00:00:00Z", None, 1)];
        for i in 1..=3 {
            pods.push(pod("a-team", &format!("a{i}"), second, None, 1));
            pods.push(pod("b-team", &format!("b{i}"), second, None, 1));
        }
        // The earlier second first; then turns, the alphabet breaking a tie of equal holdings.
        assert_eq!(names(&pods), ["early", "a1", "b1", "a2", "b2", "a3", "b3"]);
        // A namespace holding GPUs yields each turn to one holding fewer.
        pods.push(pod(
            "a-team",
            "running",
            "2025-12-31T00:00:00Z",
            Some("n1"),
            4,
        ));
        assert_eq!(names(&pods), ["early", "b1", "a1", "b2", "a2", "b3", "a3"]);
    }
}
