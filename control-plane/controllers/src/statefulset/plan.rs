//! The pure steps of a StatefulSet reconcile: the pod and claims of an ordinal, what to create
//! or delete next (ordered or parallel, scale-down in reverse order, rolling update from the
//! highest ordinal down to the partition) and the status the pods add up to.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use crate::revision::HASH_LABEL;
use crate::shared::{pod_is_ready, pod_phase};

/// Label with the pod's name (upstream sets it for per-pod Services).
pub const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// Label with the pod's ordinal.
pub const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// The ordinal of `pod_name` if it is `<sts>-<n>`.
pub fn ordinal_of(sts: &str, pod_name: &str) -> Option<i32> {
    let n = pod_name.strip_prefix(sts)?.strip_prefix('-')?;
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) || (n.len() > 1 && n.starts_with('0'))
    {
        return None;
    }
    n.parse().ok()
}

/// The name of the claim from template `template` for `ordinal`.
pub fn claim_name(template: &str, sts: &str, ordinal: i32) -> String {
    format!("{template}-{sts}-{ordinal}")
}

/// The first ordinal (`spec.ordinals.start`, default 0).
pub fn start_ordinal(sts: &StatefulSet) -> i32 {
    sts.spec
        .ordinals
        .as_ref()
        .and_then(|o| o.start)
        .unwrap_or(0)
        .max(0)
}

/// The pod of `ordinal` at revision `hash`, controlled by `owner`.
pub fn pod_for(sts: &StatefulSet, ordinal: i32, hash: &str, owner: OwnerReference) -> Pod {
    let name = format!("{}-{ordinal}", sts.metadata.name.as_deref().unwrap_or(""));
    let spec = sts.spec.clone();
    let tm = spec.template.metadata.clone().unwrap_or_default();
    let mut labels = tm.labels.unwrap_or_default();
    labels.insert(HASH_LABEL.into(), hash.into());
    labels.insert(POD_NAME_LABEL.into(), name.clone());
    labels.insert(POD_INDEX_LABEL.into(), ordinal.to_string());
    let mut pod_spec = spec.template.spec.clone().unwrap_or_default();
    pod_spec.hostname = Some(name.clone());
    pod_spec.subdomain = spec.service_name.clone().filter(|s| !s.is_empty());
    let sts_name = sts.metadata.name.as_deref().unwrap_or("");
    for t in spec.volume_claim_templates.iter().flatten() {
        let vname = t.metadata.name.clone().unwrap_or_default();
        let volume = Volume {
            name: vname.clone(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim_name(&vname, sts_name, ordinal),
                read_only: None,
            }),
            ..Volume::default()
        };
        let volumes = pod_spec.volumes.get_or_insert_with(Vec::new);
        volumes.retain(|v| v.name != vname);
        volumes.push(volume);
    }
    Pod {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: sts.metadata.namespace.clone(),
            labels: Some(labels),
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: Some(pod_spec),
        status: None,
    }
}

/// Whether claims are deleted with the StatefulSet / on scale-down
/// (`persistentVolumeClaimRetentionPolicy`, both `Retain` by default).
pub fn retention(sts: &StatefulSet) -> (bool, bool) {
    let p = sts.spec.persistent_volume_claim_retention_policy.as_ref();
    let delete = |v: Option<&String>| v.map(String::as_str) == Some("Delete");
    (
        delete(p.and_then(|p| p.when_deleted.as_ref())),
        delete(p.and_then(|p| p.when_scaled.as_ref())),
    )
}

/// The claims of `ordinal`: each template with its name, the selector's labels added, owned by
/// `owner` when the StatefulSet's deletion should delete them.
pub fn claims_for(
    sts: &StatefulSet,
    ordinal: i32,
    owner: Option<OwnerReference>,
) -> Vec<PersistentVolumeClaim> {
    let spec = sts.spec.clone();
    let sts_name = sts.metadata.name.as_deref().unwrap_or("");
    let selector_labels = spec.selector.match_labels.clone().unwrap_or_default();
    spec.volume_claim_templates
        .unwrap_or_default()
        .into_iter()
        .map(|t| {
            let tname = t.metadata.name.clone().unwrap_or_default();
            let mut labels = t.metadata.labels.clone().unwrap_or_default();
            labels.extend(selector_labels.clone());
            PersistentVolumeClaim {
                metadata: ObjectMeta {
                    name: Some(claim_name(&tname, sts_name, ordinal)),
                    namespace: sts.metadata.namespace.clone(),
                    labels: Some(labels),
                    annotations: t.metadata.annotations.clone(),
                    owner_references: owner.clone().map(|o| vec![o]),
                    ..ObjectMeta::default()
                },
                spec: t.spec.clone(),
                status: None,
            }
        })
        .collect()
}

/// What the pods look like to the planner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodState {
    /// The pod's name.
    pub name: String,
    /// Its revision hash label.
    pub hash: String,
    /// Running and Ready.
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// Phase Failed or Succeeded: to be replaced.
    pub finished: bool,
}

impl PodState {
    /// The state of a pod.
    pub fn of(pod: &Pod) -> PodState {
        PodState {
            name: pod.metadata.name.clone().unwrap_or_default(),
            hash: pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(HASH_LABEL))
                .cloned()
                .unwrap_or_default(),
            ready: pod_phase(pod) == "Running" && pod_is_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            finished: matches!(pod_phase(pod), "Succeeded" | "Failed"),
        }
    }
}

/// One step of a reconcile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Create the pod (and its claims) of this ordinal.
    Create(i32),
    /// Delete this pod.
    Delete(String),
}

/// The inputs of [`next_steps`].
#[derive(Debug)]
pub struct Input<'a> {
    /// First ordinal.
    pub start: i32,
    /// Desired replicas.
    pub replicas: i32,
    /// `Parallel` pod management (otherwise `OrderedReady`).
    pub parallel: bool,
    /// Rolling update strategy (otherwise `OnDelete`).
    pub rolling: bool,
    /// Ordinals below `start + partition` are not updated.
    pub partition: i32,
    /// The update revision's hash.
    pub update_hash: &'a str,
    /// The pods by ordinal.
    pub pods: &'a BTreeMap<i32, PodState>,
}

/// The next steps, as upstream's StatefulSet control: replace finished pods, create missing
/// ones in ascending order (OrderedReady: one at a time, each after its predecessors are
/// Running and Ready), delete condemned ones from the highest ordinal down (OrderedReady: one at
/// a time), then, when everything is settled, delete the highest pod at an old revision at or
/// above the partition so that it comes back at the update revision.
pub fn next_steps(input: &Input<'_>) -> Vec<Step> {
    let end = input.start + input.replicas.max(0);
    let mut steps = Vec::new();
    // Replicas: replace finished pods, create missing ones.
    for ordinal in input.start..end {
        match input.pods.get(&ordinal) {
            Some(p) if p.finished && !p.terminating => {
                steps.push(Step::Delete(p.name.clone()));
                if !input.parallel {
                    return steps;
                }
            }
            Some(p) if !input.parallel && (p.terminating || !p.ready) => return steps,
            Some(_) => {}
            None => {
                steps.push(Step::Create(ordinal));
                if !input.parallel {
                    return steps;
                }
            }
        }
    }
    // Condemned pods, highest first.
    let condemned: Vec<&PodState> = input
        .pods
        .iter()
        .filter(|(o, _)| **o < input.start || **o >= end)
        .rev()
        .map(|(_, p)| p)
        .collect();
    for p in &condemned {
        if p.terminating {
            if input.parallel {
                continue;
            }
            return steps;
        }
        steps.push(Step::Delete(p.name.clone()));
        if !input.parallel {
            return steps;
        }
    }
    if !steps.is_empty() || !condemned.is_empty() || !input.rolling {
        return steps;
    }
    // Rolling update: only when every replica exists, is ready and nothing is terminating.
    let replicas: Vec<(&i32, &PodState)> = input.pods.range(input.start..end).collect();
    if replicas.len() as i32 != input.replicas.max(0)
        || replicas.iter().any(|(_, p)| p.terminating || !p.ready)
    {
        return steps;
    }
    let lowest = input.start + input.partition.max(0);
    if let Some((_, p)) = replicas
        .iter()
        .rev()
        .find(|(o, p)| **o >= lowest && p.hash != input.update_hash)
    {
        steps.push(Step::Delete(p.name.clone()));
    }
    steps
}

/// The status the owned pods add up to. `current` is the previous current revision (the
/// update revision when there is none).
pub fn status(
    sts: &StatefulSet,
    pods: &[&Pod],
    current_revision: &str,
    current_hash: &str,
    update_revision: &str,
    update_hash: &str,
    collision_count: Option<i32>,
) -> StatefulSetStatus {
    let live: Vec<&&Pod> = pods
        .iter()
        .filter(|p| !matches!(pod_phase(p), "Succeeded" | "Failed"))
        .collect();
    let hash = |p: &Pod| {
        p.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(HASH_LABEL))
            .cloned()
            .unwrap_or_default()
    };
    let replicas = live.len() as i32;
    let ready = live.iter().filter(|p| pod_is_ready(p)).count() as i32;
    let updated = live.iter().filter(|p| hash(p) == update_hash).count() as i32;
    let mut current = live.iter().filter(|p| hash(p) == current_hash).count() as i32;
    let mut current_revision = current_revision.to_string();
    let want = sts.spec.replicas.unwrap_or(1);
    // The rollout is complete: the update revision becomes the current one.
    if updated == replicas && ready == replicas && replicas == want {
        current_revision = update_revision.to_string();
        current = updated;
    }
    StatefulSetStatus {
        replicas,
        ready_replicas: Some(ready),
        available_replicas: Some(ready),
        current_replicas: Some(current),
        updated_replicas: Some(updated),
        current_revision: Some(current_revision),
        update_revision: Some(update_revision.to_string()),
        observed_generation: sts.metadata.generation,
        collision_count,
        conditions: sts.status.as_ref().and_then(|s| s.conditions.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(name: &str, hash: &str, ready: bool) -> PodState {
        PodState {
            name: name.into(),
            hash: hash.into(),
            ready,
            terminating: false,
            finished: false,
        }
    }

    fn pods(v: &[(i32, PodState)]) -> BTreeMap<i32, PodState> {
        v.iter().cloned().collect()
    }

    #[test]
    fn ordinals() {
        assert_eq!(ordinal_of("web", "web-0"), Some(0));
        assert_eq!(ordinal_of("web", "web-12"), Some(12));
        assert_eq!(ordinal_of("web", "web-01"), None);
        assert_eq!(ordinal_of("web", "web-x"), None);
        assert_eq!(ordinal_of("web", "webs-1"), None);
        assert_eq!(claim_name("data", "web", 2), "data-web-2");
    }

    /// (replicas, parallel, partition, pods, want)
    type Case = (i32, bool, i32, BTreeMap<i32, PodState>, Vec<Step>);

    #[test]
    fn steps() {
        let del = |s: &str| Step::Delete(s.into());
        let mut terminating = state("w-2", "a", true);
        terminating.terminating = true;
        let mut failed = state("w-0", "a", false);
        failed.finished = true;
        let cases: Vec<Case> = vec![
            (3, false, 0, pods(&[]), vec![Step::Create(0)]),
            (
                3,
                true,
                0,
                pods(&[]),
                vec![Step::Create(0), Step::Create(1), Step::Create(2)],
            ),
            // Ordered: waits for w-0 to be ready.
            (3, false, 0, pods(&[(0, state("w-0", "a", false))]), vec![]),
            (
                3,
                false,
                0,
                pods(&[(0, state("w-0", "a", true))]),
                vec![Step::Create(1)],
            ),
            // Scale down: highest first, one at a time.
            (
                1,
                false,
                0,
                pods(&[
                    (0, state("w-0", "a", true)),
                    (1, state("w-1", "a", true)),
                    (2, state("w-2", "a", true)),
                ]),
                vec![del("w-2")],
            ),
            (
                1,
                true,
                0,
                pods(&[
                    (0, state("w-0", "a", true)),
                    (1, state("w-1", "a", true)),
                    (2, state("w-2", "a", true)),
                ]),
                vec![del("w-2"), del("w-1")],
            ),
            // Waits for the terminating one.
            (
                1,
                false,
                0,
                pods(&[
                    (0, state("w-0", "a", true)),
                    (1, state("w-1", "a", true)),
                    (2, terminating),
                ]),
                vec![],
            ),
            // A failed pod is replaced.
            (1, false, 0, pods(&[(0, failed)]), vec![del("w-0")]),
            // Rolling update: highest old pod first, respecting the partition.
            (
                2,
                false,
                0,
                pods(&[(0, state("w-0", "a", true)), (1, state("w-1", "a", true))]),
                vec![del("w-1")],
            ),
            (
                2,
                false,
                0,
                pods(&[(0, state("w-0", "a", true)), (1, state("w-1", "b", true))]),
                vec![del("w-0")],
            ),
            (
                2,
                false,
                1,
                pods(&[(0, state("w-0", "a", true)), (1, state("w-1", "b", true))]),
                vec![],
            ),
            // Not while a replica is not ready.
            (
                2,
                false,
                0,
                pods(&[(0, state("w-0", "a", true)), (1, state("w-1", "b", false))]),
                vec![],
            ),
        ];
        for (i, (replicas, parallel, partition, pods, want)) in cases.into_iter().enumerate() {
            let input = Input {
                start: 0,
                replicas,
                parallel,
                rolling: true,
                partition,
                update_hash: "b",
                pods: &pods,
            };
            assert_eq!(next_steps(&input), want, "case {i}");
        }
    }
}
