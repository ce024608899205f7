//! The pure part of a Job reconcile: what the pods add up to, and what to do next.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::{JobSpec, JobStatus};
use k8s_openapi::api::core::v1::Pod;

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

/// Counts `pods` on top of what `status` already counted.
pub fn observe(pods: &[&Pod], status: &JobStatus, completions: Option<i32>) -> Observed {
    let mut o = Observed {
        completed: parse_indexes(status.completed_indexes.as_deref().unwrap_or("")),
        ..Observed::default()
    };
    let (mut succeeded, mut failed) = (0, 0);
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
                if let Some(i) = pod_index(p).filter(|i| completions.is_some_and(|c| *i < c)) {
                    o.completed.insert(i);
                }
            }
            "Failed" => failed += 1,
            _ => {}
        }
    }
    o.succeeded = succeeded.max(status.succeeded.unwrap_or(0));
    o.failed = failed.max(status.failed.unwrap_or(0));
    o
}

/// How a Job ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// All completions succeeded.
    Complete,
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
    let backoff_limit = spec.backoff_limit.unwrap_or(DEFAULT_BACKOFF_LIMIT);
    if o.failed > backoff_limit {
        return Step::Finish(Outcome::Failed(
            "BackoffLimitExceeded",
            "Job has reached the specified backoff limit".into(),
        ));
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
            if o.completed.len() as i32 >= c {
                return Step::Finish(Outcome::Complete);
            }
            let room = (parallelism - o.active).max(0) as usize;
            let create = (0..c)
                .filter(|i| !o.completed.contains(i) && !o.active_indexes.contains(i))
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
                return Step::Finish(Outcome::Complete);
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
                    return Step::Finish(Outcome::Complete);
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
            (
                spec(Some(3), 2, false),
                obs(0, 3, 0),
                false,
                Step::Finish(Outcome::Complete),
            ),
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
            (
                spec(None, 2, false),
                obs(0, 1, 0),
                false,
                Step::Finish(Outcome::Complete),
            ),
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
        assert_eq!(
            next_step(&spec(Some(4), 3, true), &o, false),
            Step::Finish(Outcome::Complete)
        );
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
