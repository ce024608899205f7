//! The pure part of a Job reconcile: what the pods add up to, and what to do next.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::batch::v1::{JobSpec, JobStatus};
use k8s_openapi::api::core::v1::Pod;

use super::policy::{self, Action};
use crate::shared::{pod_is_active, pod_phase};

/// Label and annotation holding an Indexed Job pod's completion index.
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";
/// Default backoffLimit.
pub const DEFAULT_BACKOFF_LIMIT: i32 = 6;

/// The Job's pods, counted.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Observed {
    /// Active pods (not terminal, not deleting).
    pub active: i32,
    /// Active pods that are Ready.
    pub ready: i32,
    /// Succeeded pods (never fewer than the status already counted).
    pub succeeded: i32,
    /// Failed pods (never fewer than the status already counted).
    pub failed: i32,
    /// Indexed: completed indexes (with those already in the status).
    pub completed: BTreeSet<i32>,
    /// Indexed: indexes with an active pod.
    pub active_indexes: BTreeSet<i32>,
    /// Indexed with `backoffLimitPerIndex`: failed indexes (with those already in the status).
    pub failed_indexes: BTreeSet<i32>,
    /// The message of the first failed pod the pod failure policy fails the Job for.
    pub fail_job: Option<String>,
}

/// The completion index of a pod.
pub fn pod_index(pod: &Pod) -> Option<i32> {
    let m = &pod.metadata;
    m.annotations
        .as_ref()
        .and_then(|a| a.get(INDEX_KEY))
        .or_else(|| m.labels.as_ref().and_then(|l| l.get(INDEX_KEY)))
        .and_then(|v| v.parse().ok())
}

/// Counts `pods` on top of what `status` already counted, as `spec`'s pod failure policy and
/// per-index backoff limit judge the failed ones.
pub fn observe(pods: &[&Pod], status: &JobStatus, spec: &JobSpec) -> Observed {
    let completions = spec.completions;
    let in_range = |i: &i32| completions.is_some_and(|c| *i >= 0 && *i < c);
    let mut o = Observed {
        completed: parse_indexes(status.completed_indexes.as_deref().unwrap_or("")),
        failed_indexes: parse_indexes(status.failed_indexes.as_deref().unwrap_or("")),
        ..Observed::default()
    };
    let (mut succeeded, mut failed) = (0, 0);
    let mut failures_per_index: BTreeMap<i32, i32> = BTreeMap::new();
    for p in pods {
        if pod_is_active(p) {
            o.active += 1;
            if crate::shared::pod_is_ready(p) {
                o.ready += 1;
            }
            if let Some(i) = pod_index(p) {
                o.active_indexes.insert(i);
            }
            continue;
        }
        match pod_phase(p) {
            "Succeeded" => {
                succeeded += 1;
                if let Some(i) = pod_index(p).filter(in_range) {
                    o.completed.insert(i);
                }
            }
            "Failed" => match policy::judge(spec.pod_failure_policy.as_ref(), p) {
                Action::Ignore => {}
                Action::FailJob(message) => {
                    failed += 1;
                    o.fail_job.get_or_insert(message);
                }
                Action::FailIndex(_) => {
                    failed += 1;
                    if let Some(i) = pod_index(p).filter(in_range) {
                        o.failed_indexes.insert(i);
                    }
                }
                Action::Count => {
                    failed += 1;
                    if let Some(i) = pod_index(p).filter(in_range) {
                        *failures_per_index.entry(i).or_insert(0) += 1;
                    }
                }
            },
            _ => {}
        }
    }
    if let Some(limit) = spec.backoff_limit_per_index {
        for (i, n) in failures_per_index {
            if n > limit && !o.completed.contains(&i) {
                o.failed_indexes.insert(i);
            }
        }
    } else {
        o.failed_indexes.clear();
    }
    o.succeeded = succeeded.max(status.succeeded.unwrap_or(0));
    o.failed = failed.max(status.failed.unwrap_or(0));
    o
}

/// How a Job ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// It succeeded: reason (all completions, or a success policy) and message.
    Complete(&'static str, String),
    /// It failed: reason and message.
    Failed(&'static str, String),
}

/// What to do next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// The outcome is decided; active pods are deleted, then the terminal condition is set.
    Finish(Outcome),
    /// Create pods (with these indexes for an Indexed Job; `None` for NonIndexed) or delete
    /// surplus active ones.
    Run {
        /// Pods to create.
        create: Vec<Option<i32>>,
        /// Active pods to delete.
        delete: i32,
    },
}

/// The next step for a Job with `spec` and `observed` pods; `deadline_passed` is whether
/// activeDeadlineSeconds has run out.
pub fn next_step(spec: &JobSpec, o: &Observed, deadline_passed: bool) -> Step {
    let indexed = spec.completion_mode.as_deref() == Some("Indexed");
    let per_index = indexed && spec.backoff_limit_per_index.is_some();
    let backoff_limit = spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    if let Some(message) = &o.fail_job {
        return Step::Finish(Outcome::Failed("PodFailurePolicy", message.clone()));
    }
    if !per_index && o.failed > backoff_limit {
        return Step::Finish(Outcome::Failed(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit".into(),
        ));
    }
    if per_index {
        let max = spec
            .max_failed_indexes
            .and_then(|m| usize::try_from(m).ok());
        if max.is_some_and(|m| o.failed_indexes.len() > m) {
            return Step::Finish(Outcome::Failed(
                "MaxFailedIndexesExceeded",
                "Job has exceeded the specified maximal number of failed indexes".into(),
            ));
        }
    }
    if deadline_passed {
        return Step::Finish(Outcome::Failed(
            "DeadlineExceeded",
            "Job was active longer than specified deadline".into(),
        ));
    }
    let parallelism = spec.parallelism.unwrap_or(1).max(0);
    if spec.suspend == Some(true) {
        return Step::Run {
            create: vec![],
            delete: o.active,
        };
    }
    match (indexed, spec.completions) {
        (true, Some(c)) => {
            if let Some(rule) = policy::succeeded_rule(spec.success_policy.as_ref(), &o.completed) {
                return Step::Finish(Outcome::Complete(
                    "SuccessPolicy",
                    format!("Matched rules at index {rule}"),
                ));
            }
            if o.completed.len() as i32 >= c {
                return Step::Finish(Outcome::Complete(
                    "CompletionsReached",
                    "Reached expected number of succeeded pods".into(),
                ));
            }
            let done = |i: &i32| o.completed.contains(i) || o.failed_indexes.contains(i);
            if per_index && o.active == 0 && (0..c).all(|i| done(&i)) {
                return Step::Finish(Outcome::Failed(
                    "FailedIndexes",
                    "Job has failed indexes".into(),
                ));
            }
            let room = (parallelism - o.active).max(0) as usize;
            let create = (0..c)
                .filter(|i| !done(i) && !o.active_indexes.contains(i))
                .take(room)
                .map(Some)
                .collect();
            Step::Run {
                create,
                delete: (o.active - parallelism).max(0),
            }
        }
        (false, Some(c)) => {
            if o.succeeded >= c {
                return Step::Finish(Outcome::Complete(
                    "CompletionsReached",
                    "Reached expected number of succeeded pods".into(),
                ));
            }
            let want = parallelism.min(c - o.succeeded);
            Step::Run {
                create: vec![None; (want - o.active).max(0) as usize],
                delete: (o.active - want).max(0),
            }
        }
        // No completions: done once one pod succeeded and the others finished.
        (_, None) => {
            if o.succeeded > 0 {
                if o.active == 0 {
                    return Step::Finish(Outcome::Complete(
                        "CompletionsReached",
                        "Reached expected number of succeeded pods".into(),
                    ));
                }
                return Step::Run {
                    create: vec![],
                    delete: 0,
                };
            }
            Step::Run {
                create: vec![None; (parallelism - o.active).max(0) as usize],
                delete: (o.active - parallelism).max(0),
            }
        }
    }
}

/// Parses `completedIndexes` ("1,3-5").
pub fn parse_indexes(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Formats indexes as `completedIndexes` does: ascending, runs as `a-b`.
pub fn format_indexes(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        parts.push(if start == end {
            start.to_string()
        } else {
            format!("{start}-{end}")
        });
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(completions: Option<i32>, parallelism: i32, indexed: bool) -> JobSpec {
        JobSpec {
            completions,
            parallelism: Some(parallelism),
            backoff_limit: Some(2),
            completion_mode: Some(if indexed { "Indexed" } else { "NonIndexed" }.into()),
            ..Default::default()
        }
    }

    fn obs(active: i32, succeeded: i32, failed: i32) -> Observed {
        Observed {
            active,
            succeeded,
            failed,
            ..Default::default()
        }
    }

    fn done() -> Step {
        Step::Finish(Outcome::Complete(
            "CompletionsReached",
            "Reached expected number of succeeded pods".into(),
        ))
    }

    #[test]
    fn steps() {
        let run = |create: usize, delete: i32| Step::Run {
            create: vec![None; create],
            delete,
        };
        let cases = [
            (spec(Some(3), 2, false), obs(0, 0, 0), false, run(2, 0)),
            (spec(Some(3), 2, false), obs(2, 2, 0), false, run(0, 1)),
            (spec(Some(3), 2, false), obs(1, 2, 1), false, run(0, 0)),
            (spec(Some(3), 2, false), obs(0, 3, 0), false, done()),
            (
                spec(Some(3), 2, false),
                obs(1, 0, 3),
                false,
                Step::Finish(Outcome::Failed(
                    "BackoffLimitExceeded",
                    "Job has reached the specified backoff limit".into(),
                )),
            ),
            (spec(Some(3), 2, false), obs(1, 0, 2), false, run(1, 0)),
            (spec(None, 2, false), obs(1, 1, 0), false, run(0, 0)),
            (spec(None, 2, false), obs(0, 1, 0), false, done()),
            (spec(None, 2, false), obs(0, 0, 0), false, run(2, 0)),
            (
                spec(Some(1), 1, false),
                obs(1, 0, 0),
                true,
                Step::Finish(Outcome::Failed(
                    "DeadlineExceeded",
                    "Job was active longer than specified deadline".into(),
                )),
            ),
        ];
        for (i, (s, o, dl, want)) in cases.into_iter().enumerate() {
            assert_eq!(next_step(&s, &o, dl), want, "case {i}");
        }
    }

    #[test]
    fn indexed_steps() {
        let mut o = obs(1, 1, 0);
        o.completed = [0].into();
        o.active_indexes = [1].into();
        assert_eq!(
            next_step(&spec(Some(4), 3, true), &o, false),
            Step::Run {
                create: vec![Some(2), Some(3)],
                delete: 0
            }
        );
        o.completed = [0, 1, 2, 3].into();
        o.active = 0;
        assert_eq!(next_step(&spec(Some(4), 3, true), &o, false), done());
    }

    #[test]
    fn per_index_limits_success_policies_and_failure_policies() {
        let mut s = spec(Some(3), 3, true);
        s.backoff_limit_per_index = Some(1);
        // Index 1 failed for good; 0 and 2 go on (the global backoff limit is not used).
        let mut o = obs(1, 0, 5);
        o.active_indexes = [0].into();
        o.failed_indexes = [1].into();
        assert_eq!(
            next_step(&s, &o, false),
            Step::Run {
                create: vec![Some(2)],
                delete: 0
            }
        );
        // Every index done, one failed: the Job fails.
        let mut o = obs(0, 2, 2);
        o.completed = [0, 2].into();
        o.failed_indexes = [1].into();
        assert_eq!(
            next_step(&s, &o, false),
            Step::Finish(Outcome::Failed(
                "FailedIndexes",
                "Job has failed indexes".into()
            ))
        );
        s.max_failed_indexes = Some(0);
        assert!(matches!(
            next_step(&s, &o, false),
            Step::Finish(Outcome::Failed("MaxFailedIndexesExceeded", _))
        ));
        // A success policy ends an Indexed Job early.
        let mut s = spec(Some(5), 5, true);
        s.success_policy =
            serde_json::from_value(serde_json::json!({"rules": [{"succeededIndexes": "0"}]}))
                .expect("policy");
        let mut o = obs(4, 1, 0);
        o.completed = [0].into();
        assert_eq!(
            next_step(&s, &o, false),
            Step::Finish(Outcome::Complete(
                "SuccessPolicy",
                "Matched rules at index 0".into()
            ))
        );
        // A pod the failure policy fails the Job for.
        let mut o = obs(1, 0, 1);
        o.fail_job = Some("Container main ...".into());
        assert_eq!(
            next_step(&spec(Some(2), 1, false), &o, false),
            Step::Finish(Outcome::Failed(
                "PodFailurePolicy",
                "Container main ...".into()
            ))
        );
    }

    #[test]
    fn observation_applies_the_failure_policy_per_index() {
        let pod = |index: i32, code: i32| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": format!("p{index}-{code}"), "namespace": "ns",
                    "annotations": {INDEX_KEY: index.to_string()}},
                "status": {"phase": "Failed", "containerStatuses": [{"name": "main",
                    "ready": false, "restartCount": 0, "image": "x", "imageID": "",
                    "state": {"terminated": {"exitCode": code}}}]}}))
            .expect("pod")
        };
        let mut s = spec(Some(3), 3, true);
        s.backoff_limit_per_index = Some(1);
        s.pod_failure_policy = serde_json::from_value(serde_json::json!({"rules": [
            {"action": "Ignore", "onExitCodes": {"operator": "In", "values": [9]}},
            {"action": "FailIndex", "onExitCodes": {"operator": "In", "values": [7]}}]}))
        .expect("policy");
        let pods = [pod(0, 1), pod(0, 1), pod(1, 9), pod(1, 9), pod(2, 7)];
        let refs: Vec<&Pod> = pods.iter().collect();
        let o = observe(&refs, &JobStatus::default(), &s);
        // Index 0: two counted failures over a limit of 1; index 1: ignored; index 2: FailIndex.
        assert_eq!(o.failed_indexes, [0, 2].into());
        assert_eq!(o.failed, 3);
    }

    #[test]
    fn index_sets_round_trip() {
        let set = parse_indexes("0,2-4,7");
        assert_eq!(set, [0, 2, 3, 4, 7].into());
        assert_eq!(format_indexes(&set), "0,2-4,7");
        assert_eq!(format_indexes(&BTreeSet::new()), "");
        assert_eq!(parse_indexes("x,1"), [1].into());
    }
}
