//! Gangs a tenant asks for with the labels its tooling already writes, translated to the gang
//! keys of `fabrik up`'s scheduler (`fabrik.dev/gang`, `fabrik.dev/gang-size`, which tenants
//! may not set themselves): all of a gang's pods are bound together or none is.
//!
//! * Kueue's plain pod groups: label `kueue.x-k8s.io/pod-group-name`, annotation
//!   `kueue.x-k8s.io/pod-group-total-count`.
//! * LeaderWorkerSet groups: labels `leaderworkerset.sigs.k8s.io/name` and
//!   `leaderworkerset.sigs.k8s.io/group-index`, annotation `leaderworkerset.sigs.k8s.io/size`
//!   (the leader and its workers).
//!
//! * The coscheduling plugin's PodGroups: label `scheduling.x-k8s.io/pod-group` (or the older
//!   `pod-group.scheduling.sigs.k8s.io`) naming a `scheduling.x-k8s.io` PodGroup of the pod's
//!   namespace, whose `spec.minMember` is the size.
//! * Volcano's PodGroups: annotation `scheduling.k8s.io/group-name` naming a
//!   `scheduling.volcano.sh` PodGroup, `spec.minMember` likewise.
//!
//! * JobSets: label `jobset.sigs.k8s.io/jobset-name`; the gang is all the pods of the
//!   JobSet, sized by the JobSet's `replicatedJobs` (replicas × parallelism), as Kueue
//!   admits a JobSet whole.
//! * Jobs: a pod owned by a Job (label `batch.kubernetes.io/job-name`, or the older
//!   `job-name`) is one of a gang of the Job's `parallelism`, no more than the completions it
//!   still needs, as Kueue admits a Job with all its parallelism (a Job of parallelism 1 asks
//!   for none). Indexed Jobs alike.
//!
//! A gang is named within the pod's tenant namespace, so two namespaces' groups of one name
//! stay apart. A count that is not a whole number from 1 to [`MAX_GANG`] asks for no gang. A
//! pod naming a PodGroup that does not exist (yet) waits for it, unsynced, as the coscheduling
//! plugin keeps it unschedulable.

use serde_json::Value;

use crate::kinds::Kind;

/// Kueue's pod group name label.
pub const KUEUE_GROUP: &str = "kueue.x-k8s.io/pod-group-name";
/// Kueue's pod group size annotation.
pub const KUEUE_TOTAL: &str = "kueue.x-k8s.io/pod-group-total-count";
/// LeaderWorkerSet's name label.
pub const LWS_NAME: &str = "leaderworkerset.sigs.k8s.io/name";
/// LeaderWorkerSet's group index label.
pub const LWS_GROUP: &str = "leaderworkerset.sigs.k8s.io/group-index";
/// LeaderWorkerSet's group size annotation.
pub const LWS_SIZE: &str = "leaderworkerset.sigs.k8s.io/size";

/// The coscheduling plugin's pod group label.
pub const COSCHEDULING_GROUP: &str = "scheduling.x-k8s.io/pod-group";
/// The coscheduling plugin's older pod group label.
pub const COSCHEDULING_GROUP_OLD: &str = "pod-group.scheduling.sigs.k8s.io";
/// Volcano's pod group annotation.
pub const VOLCANO_GROUP: &str = "scheduling.k8s.io/group-name";

/// A JobSet's pods' label naming it.
pub const JOBSET_NAME: &str = "jobset.sigs.k8s.io/jobset-name";
/// A Job's pods' label naming it.
pub const JOB_NAME: &str = "batch.kubernetes.io/job-name";
/// The older label naming a pod's Job.
pub const JOB_NAME_OLD: &str = "job-name";

/// The largest gang asked for this way.
pub const MAX_GANG: usize = 10_000;

fn size(v: &Value) -> Option<usize> {
    v.as_str()?
        .trim()
        .parse::<usize>()
        .ok()
        .filter(|n| (1..=MAX_GANG).contains(n))
}

/// The PodGroup object a tenant pod names, as `(its kind, its name)`.
pub fn pod_group(pod: &Value) -> Option<(Kind, String)> {
    let meta = &pod["metadata"];
    let named = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    named(&meta["labels"][COSCHEDULING_GROUP])
        .or_else(|| named(&meta["labels"][COSCHEDULING_GROUP_OLD]))
        .map(|g| (Kind::CoschedulingPodGroup, g))
        .or_else(|| named(&meta["annotations"][VOLCANO_GROUP]).map(|g| (Kind::VolcanoPodGroup, g)))
}

/// What a tenant pod asks of gangs, its PodGroups looked up with `group` (`(kind, name)` → the
/// object in the pod's namespace).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Asked {
    /// No gang.
    None,
    /// A gang: name within the pod's namespace, size.
    Gang(String, usize),
    /// A PodGroup that does not exist (yet): the pod waits; the message says for what.
    Waiting(String),
}

/// The JobSet ([`Kind::JobSet`]) or Job ([`Kind::Job`]) a pod belongs to, by its labels.
pub fn owner(pod: &Value, kind: Kind) -> Option<String> {
    let labels = &pod["metadata"]["labels"];
    let named = |v: &Value| v.as_str().filter(|s| !s.is_empty()).map(str::to_string);
    match kind {
        Kind::JobSet => named(&labels[JOBSET_NAME]),
        Kind::Job => named(&labels[JOB_NAME]).or_else(|| named(&labels[JOB_NAME_OLD])),
        _ => None,
    }
}

fn count(v: &Value, default: u64) -> u64 {
    if v.is_null() {
        default
    } else {
        v.as_u64().unwrap_or(0)
    }
}

/// The gang a Job's pods form: its parallelism, no more than the completions it still needs.
fn job_gang(job: &Value) -> Option<usize> {
    let spec = &job["spec"];
    let parallelism = count(&spec["parallelism"], 1);
    let left = match spec["completions"].as_u64() {
        Some(c) => c.saturating_sub(count(&job["status"]["succeeded"], 0)),
        None => parallelism,
    };
    let n = usize::try_from(parallelism.min(left)).ok()?;
    (2..=MAX_GANG).contains(&n).then_some(n)
}

/// The gang a JobSet's pods form: every replicated Job's replicas × parallelism.
fn jobset_gang(jobset: &Value) -> Option<usize> {
    let mut total: u64 = 0;
    for r in jobset["spec"]["replicatedJobs"].as_array()? {
        let replicas = count(&r["replicas"], 1);
        let parallelism = count(&r["template"]["spec"]["parallelism"], 1);
        total = total.checked_add(replicas.checked_mul(parallelism)?)?;
    }
    let n = usize::try_from(total).ok()?;
    (2..=MAX_GANG).contains(&n).then_some(n)
}

/// What a tenant pod asks for (see the module docs).
pub fn asked(pod: &Value, group: impl Fn(Kind, &str) -> Option<Value>) -> Asked {
    if let Some((name, size)) = gang(pod) {
        return Asked::Gang(name, size);
    }
    let Some((kind, name)) = pod_group(pod) else {
        // A JobSet's, then a Job's.
        for (kind, what) in [(Kind::JobSet, "JobSet"), (Kind::Job, "Job")] {
            let Some(name) = owner(pod, kind) else {
                continue;
            };
            let Some(obj) = group(kind, &name) else {
                return Asked::Waiting(format!(
                    "waiting for its {what} {name:?} to be known: its pods are admitted together"
                ));
            };
            let size = match kind {
                Kind::JobSet => jobset_gang(&obj),
                _ => job_gang(&obj),
            };
            return match size {
                Some(n) => Asked::Gang(format!("{}/{name}", what.to_lowercase()), n),
                None => Asked::None,
            };
        }
        return Asked::None;
    };
    let what = match kind {
        Kind::CoschedulingPodGroup => "scheduling.x-k8s.io",
        _ => "scheduling.volcano.sh",
    };
    match group(kind, &name) {
        None => Asked::Waiting(format!(
            "waiting for PodGroup {name:?} ({what}) in the pod's namespace: its pods are \
             scheduled together once it exists"
        )),
        Some(g) => match g["spec"]["minMember"]
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
        {
            Some(n) if (1..=MAX_GANG).contains(&n) => Asked::Gang(format!("{what}/{name}"), n),
            _ => Asked::None,
        },
    }
}

/// The gang a tenant pod asks for by labels alone, as `(name within its namespace, size)`.
pub fn gang(pod: &Value) -> Option<(String, usize)> {
    let meta = &pod["metadata"];
    let labels = &meta["labels"];
    let annotations = &meta["annotations"];
    if let Some(group) = labels[KUEUE_GROUP].as_str().filter(|g| !g.is_empty()) {
        return Some((format!("kueue/{group}"), size(&annotations[KUEUE_TOTAL])?));
    }
    let lws = labels[LWS_NAME].as_str().filter(|n| !n.is_empty())?;
    let index = labels[LWS_GROUP].as_str()?;
    Some((format!("lws/{lws}/{index}"), size(&annotations[LWS_SIZE])?))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(labels: Value, annotations: Value) -> Value {
        json!({"metadata": {"name": "p", "labels": labels, "annotations": annotations}})
    }

    #[test]
    fn kueue_and_leader_worker_set_groups_are_gangs() {
        assert_eq!(
            gang(&pod(
                json!({KUEUE_GROUP: "train"}),
                json!({KUEUE_TOTAL: "8"})
            )),
            Some(("kueue/train".into(), 8))
        );
        assert_eq!(
            gang(&pod(
                json!({LWS_NAME: "llm", LWS_GROUP: "2"}),
                json!({LWS_SIZE: "4"})
            )),
            Some(("lws/llm/2".into(), 4))
        );
    }

    #[test]
    fn pod_groups_size_gangs_and_missing_ones_wait() {
        let cosched = pod(json!({COSCHEDULING_GROUP: "train"}), json!({}));
        let volcano = pod(json!({}), json!({VOLCANO_GROUP: "infer"}));
        let group = |n: u64| move |_: Kind, _: &str| Some(json!({"spec": {"minMember": n}}));
        assert_eq!(
            asked(&cosched, group(4)),
            Asked::Gang("scheduling.x-k8s.io/train".into(), 4)
        );
        assert_eq!(
            asked(&volcano, group(2)),
            Asked::Gang("scheduling.volcano.sh/infer".into(), 2)
        );
        assert!(matches!(asked(&volcano, |_, _| None), Asked::Waiting(m) if m.contains("infer")));
        assert_eq!(asked(&cosched, group(0)), Asked::None);
        assert_eq!(
            asked(&pod(json!({"app": "x"}), json!({})), |_, _| None),
            Asked::None
        );
        let old = pod(json!({COSCHEDULING_GROUP_OLD: "t"}), json!({}));
        assert_eq!(
            pod_group(&old),
            Some((Kind::CoschedulingPodGroup, "t".into()))
        );
    }

    #[test]
    fn jobs_and_jobsets_are_gangs_of_their_parallelism() {
        let job_pod = pod(json!({JOB_NAME: "train"}), json!({}));
        let job = |spec: Value, status: Value| {
            move |k: Kind, n: &str| {
                (k == Kind::Job && n == "train").then(|| json!({"spec": spec, "status": status}))
            }
        };
        assert_eq!(
            asked(
                &job_pod,
                job(json!({"parallelism": 4, "completions": 8}), json!({}))
            ),
            Asked::Gang("job/train".into(), 4)
        );
        // Only what it still needs: 2 of 8 completions left.
        assert_eq!(
            asked(
                &job_pod,
                job(
                    json!({"parallelism": 4, "completions": 8}),
                    json!({"succeeded": 6})
                )
            ),
            Asked::Gang("job/train".into(), 2)
        );
        // Parallelism 1 (the default): no gang.
        assert_eq!(asked(&job_pod, job(json!({}), json!({}))), Asked::None);
        // Not known yet: wait for it.
        assert!(matches!(asked(&job_pod, |_, _| None), Asked::Waiting(m) if m.contains("Job")));
        // A JobSet's pods (which are its Jobs' pods too) form one gang of all its Jobs.
        let js_pod = pod(
            json!({JOBSET_NAME: "llm", JOB_NAME: "llm-workers-0"}),
            json!({}),
        );
        let jobset = |k: Kind, _: &str| {
            (k == Kind::JobSet).then(|| {
                json!({"spec": {"replicatedJobs": [
                    {"name": "leader", "replicas": 1, "template": {"spec": {}}},
                    {"name": "workers", "replicas": 2, "template": {"spec": {"parallelism": 4}}}]}})
            })
        };
        assert_eq!(asked(&js_pod, jobset), Asked::Gang("jobset/llm".into(), 9));
        // Kueue's labels win over the Job's.
        let both = pod(
            json!({KUEUE_GROUP: "g", JOB_NAME: "train"}),
            json!({KUEUE_TOTAL: "3"}),
        );
        assert_eq!(asked(&both, |_, _| None), Asked::Gang("kueue/g".into(), 3));
    }

    #[test]
    fn no_count_no_gang() {
        for (labels, annotations) in [
            (json!({KUEUE_GROUP: "train"}), json!({})),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "0"})),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "-3"})),
            (
                json!({KUEUE_GROUP: "train"}),
                json!({KUEUE_TOTAL: "100001"}),
            ),
            (json!({KUEUE_GROUP: "train"}), json!({KUEUE_TOTAL: "lots"})),
            (json!({LWS_NAME: "llm"}), json!({LWS_SIZE: "4"})),
            (json!({"app": "x"}), json!({})),
        ] {
            assert_eq!(
                gang(&pod(labels.clone(), annotations.clone())),
                None,
                "{labels} {annotations}"
            );
        }
    }
}
