//! The pure steps of a ReplicaSet reconcile: which pods it owns, adopts and releases, how many
//! to create or delete, which ones go first, and the status they add up to.

use std::cmp::Reverse;
use std::time::Duration;

use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetCondition, ReplicaSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;

use crate::shared::{
    pod_availability, pod_is_active, pod_is_ready, pod_phase, pod_ready_since, Availability,
};

/// Positive: pods to create; negative: pods to delete.
pub fn diff(want: i32, active: usize) -> i64 {
    i64::from(want.max(0)) - active as i64
}

/// How many pods to create in each batch: 1, 2, 4, … (upstream's slow start), up to `total`.
pub fn batches(total: usize) -> Vec<usize> {
    let mut out = Vec::new();
    let (mut left, mut size) = (total, 1usize);
    while left > 0 {
        let n = size.min(left);
        out.push(n);
        left -= n;
        size = size.saturating_mul(2);
    }
    out
}

fn phase_rank(pod: &Pod) -> u8 {
    match pod_phase(pod) {
        "Pending" => 0,
        "Unknown" => 1,
        "Running" => 2,
        _ => 3,
    }
}

fn restarts(pod: &Pod) -> i32 {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map(|cs| cs.iter().map(|c| c.restart_count).sum())
        .unwrap_or(0)
}

/// The `n` pods to delete first, in upstream's order: unscheduled before scheduled, Pending
/// before Unknown before Running, not ready before ready, ready the shortest time first, most
/// restarts first, newest first.
pub fn pick_for_deletion<'a>(pods: &[&'a Pod], n: usize) -> Vec<&'a Pod> {
    let mut sorted: Vec<&Pod> = pods.to_vec();
    sorted.sort_by_key(|p| {
        let scheduled = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        let ready_since = pod_ready_since(p).flatten();
        let created = p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        (
            scheduled,
            phase_rank(p),
            pod_is_ready(p),
            Reverse(ready_since),
            Reverse(restarts(p)),
            Reverse(created),
        )
    });
    sorted.into_iter().take(n).collect()
}

/// A pod built from a controller's template: labels, annotations and finalizers copied,
/// named `<prefix>-<random>`, controlled by `owner`.
pub fn pod_from_template(
    template: &PodTemplateSpec,
    namespace: &str,
    prefix: &str,
    owner: k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference,
) -> Pod {
    let tm = template.metadata.clone().unwrap_or_default();
    Pod {
        metadata: ObjectMeta {
            generate_name: Some(format!("{prefix}-")),
            namespace: Some(namespace.to_string()),
            labels: tm.labels,
            annotations: tm.annotations,
            finalizers: tm.finalizers,
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec.clone(),
        status: None,
    }
}

/// The status of `rs` given the pods it owns at `now`, with the time after which
/// availability changes (minReadySeconds), if any. `failure` is a create/delete error of
/// this round: it becomes the `ReplicaFailure` condition.
pub fn status(
    rs: &ReplicaSet,
    owned: &[&Pod],
    failure: Option<(&str, String)>,
    now: Timestamp,
) -> (ReplicaSetStatus, Option<Duration>) {
    let spec = &rs.spec;
    let min_ready = Duration::from_secs(spec.min_ready_seconds.unwrap_or(0).max(0) as u64);
    let template_labels = spec
        .template
        .as_ref()
        .and_then(|t| t.metadata.as_ref())
        .and_then(|m| m.labels.clone())
        .unwrap_or_default();
    let active: Vec<&Pod> = owned.iter().copied().filter(|p| pod_is_active(p)).collect();
    let mut available = 0;
    let mut recheck: Option<Duration> = None;
    for p in &active {
        match pod_availability(p, min_ready, now) {
            Availability::Yes => available += 1,
            Availability::After(d) => recheck = Some(recheck.map_or(d, |r| r.min(d))),
            Availability::No => {}
        }
    }
    let fully_labeled = active
        .iter()
        .filter(|p| {
            let labels = p.metadata.labels.clone().unwrap_or_default();
            template_labels
                .iter()
                .all(|(k, v)| labels.get(k) == Some(v))
        })
        .count();
    let old = rs.status.clone().unwrap_or_default();
    let mut conditions: Vec<ReplicaSetCondition> = old
        .conditions
        .clone()
        .unwrap_or_default()
        .into_iter()
        .filter(|c| c.type_.as_deref() != Some("ReplicaFailure"))
        .collect();
    if let Some((reason, message)) = failure {
        // As upstream: a failure condition already there is kept as it is while failures go
        // on. Rewriting it with each attempt's message (which names the pod that was refused,
        // a new name each time) would change the status on every retry, and the status write
        // would wake the controller again at once, past its backoff.
        let prev = old
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_.as_deref() == Some("ReplicaFailure"));
        conditions.push(match prev {
            Some(c) => c.clone(),
            None => ReplicaSetCondition {
                type_: Some("ReplicaFailure".into()),
                status: Some("True".into()),
                reason: Some(reason.into()),
                message: Some(message),
                last_transition_time: Some(Time(now)),
            },
        });
    }
    let status = ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(fully_labeled as i32),
        ready_replicas: Some(active.iter().filter(|p| pod_is_ready(p)).count() as i32),
        available_replicas: Some(available),
        observed_generation: rs.metadata.generation,
        conditions: (!conditions.is_empty()).then_some(conditions),
        ..old
    };
    (status, recheck)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shared::claim;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn pod(name: &str, phase: &str, ready: Option<i64>, node: bool, owner: Option<&str>) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(BTreeMap::from([("app".into(), "x".into())])),
                owner_references: owner.map(|o| {
                    vec![OwnerReference {
                        uid: o.into(),
                        controller: Some(true),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: node.then(|| "n1".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: ready.map(|secs| {
                    vec![PodCondition {
                        type_: "Ready".into(),
                        status: "True".into(),
                        last_transition_time: Some(Time(
                            Timestamp::from_second(secs).unwrap_or(Timestamp::UNIX_EPOCH),
                        )),
                        ..Default::default()
                    }]
                }),
                ..Default::default()
            }),
        }
    }

    fn sel() -> LabelSelector {
        LabelSelector {
            match_labels: Some(BTreeMap::from([("app".into(), "x".into())])),
            match_expressions: None,
        }
    }

    #[test]
    fn claims() {
        let mut other = pod("other", "Running", None, false, Some("u2"));
        other.metadata.name = Some("other".into());
        let mut stray = pod("stray", "Running", None, false, Some("u1"));
        stray.metadata.labels = None;
        let pods = vec![
            pod("mine", "Running", None, false, Some("u1")),
            pod("orphan", "Running", None, false, None),
            other,
            stray,
        ];
        let c = claim("u1", false, &sel(), &pods);
        let names = |v: &[&Pod]| -> Vec<String> {
            v.iter().filter_map(|p| p.metadata.name.clone()).collect()
        };
        assert_eq!(names(&c.owned), vec!["mine"]);
        assert_eq!(names(&c.adopt), vec!["orphan"]);
        assert_eq!(names(&c.release), vec!["stray"]);
        // A deleting owner neither adopts nor releases; an empty selector selects nothing.
        let c = claim("u1", true, &sel(), &pods);
        assert!(c.adopt.is_empty() && c.release.is_empty());
        let c = claim("u1", false, &LabelSelector::default(), &pods);
        assert!(c.owned.is_empty() && c.adopt.is_empty());
    }

    #[test]
    fn diffs_and_batches() {
        assert_eq!(diff(3, 1), 2);
        assert_eq!(diff(0, 2), -2);
        assert_eq!(diff(-1, 0), 0);
        assert_eq!(batches(0), Vec::<usize>::new());
        assert_eq!(batches(1), vec![1]);
        assert_eq!(batches(10), vec![1, 2, 4, 3]);
    }

    #[test]
    fn deletion_order() {
        let a = pod("running-ready-old", "Running", Some(100), true, None);
        let b = pod("running-ready-new", "Running", Some(200), true, None);
        let c = pod("running-not-ready", "Running", None, true, None);
        let d = pod("pending", "Pending", None, true, None);
        let e = pod("unscheduled", "Running", Some(100), false, None);
        let all = vec![&a, &b, &c, &d, &e];
        let order: Vec<String> = pick_for_deletion(&all, 5)
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect();
        assert_eq!(
            order,
            vec![
                "unscheduled",
                "pending",
                "running-not-ready",
                "running-ready-new",
                "running-ready-old"
            ]
        );
        assert_eq!(pick_for_deletion(&all, 2).len(), 2);
    }

    #[test]
    fn status_counts_and_min_ready() {
        let mut rs = ReplicaSet::default();
        rs.metadata.generation = Some(3);
        rs.spec.min_ready_seconds = Some(10);
        let now = Timestamp::from_second(1_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let a = pod("a", "Running", Some(900), false, None);
        let b = pod("b", "Running", Some(995), false, None);
        let c = pod("c", "Pending", None, false, None);
        let d = pod("d", "Succeeded", None, false, None);
        let (s, recheck) = status(&rs, &[&a, &b, &c, &d], None, now);
        assert_eq!(s.replicas, 3);
        assert_eq!(s.ready_replicas, Some(2));
        assert_eq!(s.available_replicas, Some(1));
        assert_eq!(s.fully_labeled_replicas, Some(3));
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(recheck, Some(Duration::from_secs(5)));
        let (s, _) = status(&rs, &[], Some(("FailedCreate", "quota".into())), now);
        let conds = s.conditions.clone().unwrap_or_default();
        assert_eq!(conds.len(), 1);
        assert_eq!(conds[0].type_.as_deref(), Some("ReplicaFailure"));
        // Failing again (another pod name in the message) leaves the status as it was, so the
        // status write does not wake the controller before its backoff.
        rs.status = Some(s.clone());
        let later = Timestamp::from_second(2_000).unwrap_or(Timestamp::UNIX_EPOCH);
        let (again, _) = status(
            &rs,
            &[],
            Some(("FailedCreate", "quota, pod x2".into())),
            later,
        );
        assert_eq!(again, s);
        // Succeeding clears it.
        rs.status = Some(again);
        let (ok, _) = status(&rs, &[], None, later);
        assert!(ok.conditions.unwrap_or_default().is_empty());
    }
}
