//! The pure steps of a CronJob reconcile, with "now" passed in: which scheduled time is due,
//! whether a Job starts for it (concurrency policy, starting deadline, suspend), which finished
//! Jobs fall out of the history limits, and when to wake up next.

use std::time::Duration;

use jiff::tz::TimeZone;
use jiff::Timestamp;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::schedule::Schedule;

/// The annotation upstream puts on Jobs with their scheduled time.
pub const SCHEDULED_ANNOTATION: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// How many missed times are looked at before giving up on counting (upstream warns past 100).
const MAX_MISSED: usize = 100_000;

/// How a finished Job ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finished {
    /// `Complete`.
    Succeeded,
    /// `Failed`.
    Failed,
}

/// Whether `job` finished, and how.
pub fn finished(job: &Job) -> Option<Finished> {
    let conds = job.status.as_ref()?.conditions.as_ref()?;
    conds
        .iter()
        .filter(|c| c.status == "True")
        .find_map(|c| match c.type_.as_str() {
            "Complete" => Some(Finished::Succeeded),
            "Failed" => Some(Finished::Failed),
            _ => None,
        })
}

/// The name of the Job for the scheduled time `t`: `<cronjob>-<minutes since the epoch>`.
pub fn job_name(cronjob: &str, t: Timestamp) -> String {
    format!("{cronjob}-{}", t.as_second().div_euclid(60))
}

/// The latest scheduled time in `(earliest, now]` and how many there were (capped).
pub fn most_recent(
    schedule: &Schedule,
    tz: &TimeZone,
    earliest: Timestamp,
    now: Timestamp,
) -> Option<(Timestamp, usize)> {
    let mut last = None;
    let mut count = 0;
    let mut t = earliest;
    while let Some(next) = schedule.next_after(t, tz) {
        if next > now || count >= MAX_MISSED {
            break;
        }
        last = Some(next);
        count += 1;
        t = next;
    }
    last.map(|l| (l, count))
}

/// What the controller should do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Nothing is due (or the CronJob is suspended).
    Wait,
    /// A time was due but its Job must not start: `Forbid` with Jobs still running, or too
    /// late for the starting deadline.
    Skip(Timestamp, &'static str),
    /// Start a Job for this time; with `Replace`, delete the active Jobs first.
    Start {
        /// The scheduled time.
        at: Timestamp,
        /// Delete the active Jobs first.
        replace: bool,
    },
}

/// The decision at `now` for `cj` with `active` running Jobs whose names are `existing`.
pub fn decide(
    cj: &CronJob,
    schedule: &Schedule,
    tz: &TimeZone,
    active: usize,
    existing: &[String],
    now: Timestamp,
) -> Decision {
    let spec = &cj.spec;
    if spec.suspend == Some(true) {
        return Decision::Wait;
    }
    let created = cj
        .metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0)
        .unwrap_or(now);
    let mut earliest = cj
        .status
        .as_ref()
        .and_then(|s| s.last_schedule_time.as_ref())
        .map(|t| t.0)
        .unwrap_or(created);
    let deadline = spec
        .starting_deadline_seconds
        .map(|s| Duration::from_secs(s.max(0) as u64));
    if let Some(d) = deadline {
        if let Ok(bound) = now.checked_sub(d) {
            if bound > earliest {
                earliest = bound;
            }
        }
    }
    let Some((at, _)) = most_recent(schedule, tz, earliest, now) else {
        return Decision::Wait;
    };
    let name = job_name(cj.metadata.name.as_deref().unwrap_or(""), at);
    if existing.contains(&name) {
        return Decision::Wait;
    }
    if let Some(d) = deadline {
        if now.duration_since(at).unsigned_abs() > d {
            return Decision::Skip(at, "MissSchedule");
        }
    }
    match spec.concurrency_policy.as_deref().unwrap_or("Allow") {
        "Forbid" if active > 0 => Decision::Skip(at, "JobAlreadyActive"),
        "Replace" => Decision::Start {
            at,
            replace: active > 0,
        },
        _ => Decision::Start { at, replace: false },
    }
}

/// How long from `now` until the next scheduled time (None: never again).
pub fn next_wake(schedule: &Schedule, tz: &TimeZone, now: Timestamp) -> Option<Duration> {
    let next = schedule.next_after(now, tz)?;
    // A little past the minute, so that the woken reconcile sees it as due.
    Some(next.duration_since(now).unsigned_abs() + Duration::from_millis(100))
}

/// The Job for the scheduled time `at`.
pub fn job_for(cj: &CronJob, at: Timestamp, owner: OwnerReference) -> Job {
    let template = cj.spec.job_template.clone();
    let tm = template.metadata.unwrap_or_default();
    let mut annotations = tm.annotations.unwrap_or_default();
    annotations.insert(
        SCHEDULED_ANNOTATION.into(),
        at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string(),
    );
    Job {
        metadata: ObjectMeta {
            name: Some(job_name(cj.metadata.name.as_deref().unwrap_or(""), at)),
            namespace: cj.metadata.namespace.clone(),
            labels: tm.labels,
            annotations: Some(annotations),
            owner_references: Some(vec![owner]),
            ..ObjectMeta::default()
        },
        spec: template.spec,
        status: None,
    }
}

/// The finished Jobs to delete: the oldest beyond `successful` succeeded ones and beyond
/// `failed` failed ones. `jobs` is (name, start or creation time, outcome).
pub fn history_to_delete(
    jobs: &[(String, Option<Timestamp>, Finished)],
    successful: usize,
    failed: usize,
) -> Vec<String> {
    let mut out = Vec::new();
    for (kind, limit) in [
        (Finished::Succeeded, successful),
        (Finished::Failed, failed),
    ] {
        let mut of_kind: Vec<&(String, Option<Timestamp>, Finished)> =
            jobs.iter().filter(|(_, _, k)| *k == kind).collect();
        of_kind.sort_by_key(|(_, t, _)| *t);
        let excess = of_kind.len().saturating_sub(limit);
        out.extend(of_kind.into_iter().take(excess).map(|(n, _, _)| n.clone()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::batch::v1::{CronJobSpec, CronJobStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn ts(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    fn cronjob(policy: &str, deadline: Option<i64>, last: Option<&str>) -> CronJob {
        CronJob {
            metadata: ObjectMeta {
                name: Some("cj".into()),
                creation_timestamp: Some(Time(ts("2024-01-01T00:00:30Z"))),
                ..ObjectMeta::default()
            },
            spec: CronJobSpec {
                schedule: "*/5 * * * *".into(),
                concurrency_policy: Some(policy.into()),
                starting_deadline_seconds: deadline,
                ..CronJobSpec::default()
            },
            status: Some(CronJobStatus {
                last_schedule_time: last.map(|l| Time(ts(l))),
                ..CronJobStatus::default()
            }),
        }
    }

    #[test]
    fn decisions() {
        let s = Schedule::parse("*/5 * * * *").expect("parses");
        let t5 = ts("2024-01-01T00:05:00Z");
        let t10 = ts("2024-01-01T00:10:00Z");
        let start = |at| Decision::Start { at, replace: false };
        let cases = [
            // Nothing due yet.
            (
                cronjob("Allow", None, None),
                0,
                vec![],
                "2024-01-01T00:04:00Z",
                Decision::Wait,
            ),
            (
                cronjob("Allow", None, None),
                0,
                vec![],
                "2024-01-01T00:05:10Z",
                start(t5),
            ),
            // Two missed: only the latest runs.
            (
                cronjob("Allow", None, None),
                1,
                vec![],
                "2024-01-01T00:12:00Z",
                start(t10),
            ),
            // Already created.
            (
                cronjob("Allow", None, None),
                1,
                vec!["cj-28401130".to_string()],
                "2024-01-01T00:10:30Z",
                Decision::Wait,
            ),
            (
                cronjob("Allow", None, Some("2024-01-01T00:10:00Z")),
                1,
                vec![],
                "2024-01-01T00:12:00Z",
                Decision::Wait,
            ),
            (
                cronjob("Forbid", None, None),
                1,
                vec![],
                "2024-01-01T00:05:10Z",
                Decision::Skip(t5, "JobAlreadyActive"),
            ),
            (
                cronjob("Forbid", None, None),
                0,
                vec![],
                "2024-01-01T00:05:10Z",
                start(t5),
            ),
            (
                cronjob("Replace", None, None),
                2,
                vec![],
                "2024-01-01T00:05:10Z",
                Decision::Start {
                    at: t5,
                    replace: true,
                },
            ),
            // Past the starting deadline: nothing in the window.
            (
                cronjob("Allow", Some(10), None),
                0,
                vec![],
                "2024-01-01T00:06:00Z",
                Decision::Wait,
            ),
            (
                cronjob("Allow", Some(120), None),
                0,
                vec![],
                "2024-01-01T00:06:00Z",
                start(t5),
            ),
        ];
        for (i, (cj, active, existing, now, want)) in cases.into_iter().enumerate() {
            assert_eq!(
                decide(&cj, &s, &TimeZone::UTC, active, &existing, ts(now)),
                want,
                "case {i}"
            );
        }
        let mut suspended = cronjob("Allow", None, None);
        suspended.spec.suspend = Some(true);
        assert_eq!(
            decide(
                &suspended,
                &s,
                &TimeZone::UTC,
                0,
                &[],
                ts("2024-01-01T00:05:10Z")
            ),
            Decision::Wait
        );
    }

    #[test]
    fn names_wakes_and_history() {
        assert_eq!(job_name("cj", ts("2024-01-01T00:10:00Z")), "cj-28401130");
        let s = Schedule::parse("*/5 * * * *").expect("parses");
        assert_eq!(
            next_wake(&s, &TimeZone::UTC, ts("2024-01-01T00:04:00Z")),
            Some(Duration::from_millis(60_100))
        );
        let j = |n: &str, t: &str, k| (n.to_string(), Some(ts(t)), k);
        let jobs = vec![
            j("s1", "2024-01-01T00:01:00Z", Finished::Succeeded),
            j("s2", "2024-01-01T00:02:00Z", Finished::Succeeded),
            j("f1", "2024-01-01T00:03:00Z", Finished::Failed),
            j("s3", "2024-01-01T00:04:00Z", Finished::Succeeded),
            j("f2", "2024-01-01T00:05:00Z", Finished::Failed),
        ];
        assert_eq!(history_to_delete(&jobs, 2, 1), vec!["s1", "f1"]);
        assert!(history_to_delete(&jobs, 3, 2).is_empty());
    }
}
