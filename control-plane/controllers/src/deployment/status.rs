//! A Deployment's status from its ReplicaSets, with the `Available` and `Progressing`
//! conditions that `kubectl rollout status` reads.

use std::time::Duration;

use k8s_openapi::api::apps::v1::{Deployment, DeploymentCondition, DeploymentStatus, ReplicaSet};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Default `progressDeadlineSeconds`.
pub const DEFAULT_PROGRESS_DEADLINE: i32 = 600;

/// What happened to the new ReplicaSet in this reconcile.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NewReplicaSet {
    /// It was created now.
    Created,
    /// It existed.
    Found,
    /// There is none (paused before the first rollout).
    None,
}

fn counts(rs: &ReplicaSet) -> (i32, i32, i32) {
    let s = rs.status.clone().unwrap_or_default();
    (
        s.replicas,
        s.ready_replicas.unwrap_or(0),
        s.available_replicas.unwrap_or(0),
    )
}

fn condition(
    old: Option<&DeploymentCondition>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
    touched: bool,
) -> DeploymentCondition {
    let same = old.is_some_and(|c| {
        c.status.as_deref() == Some(status) && c.reason.as_deref() == Some(reason)
    });
    let same_message = same && old.is_some_and(|c| c.message.as_deref() == Some(message.as_str()));
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: if same {
            old.and_then(|c| c.last_transition_time.clone())
        } else {
            Some(Time(now))
        },
        last_update_time: if same_message && !touched {
            old.and_then(|c| c.last_update_time.clone())
        } else {
            Some(Time(now))
        },
    }
}

/// The status of `d` given all its ReplicaSets and the new one, and when to look again for
/// the progress deadline (None when the rollout is complete or paused).
pub fn status(
    d: &Deployment,
    all: &[&ReplicaSet],
    new_rs: Option<&ReplicaSet>,
    new_event: NewReplicaSet,
    max_unavailable: i32,
    now: Timestamp,
) -> (DeploymentStatus, Option<Duration>) {
    let old = d.status.clone().unwrap_or_default();
    let desired = d.spec.replicas.unwrap_or(1);
    let (mut replicas, mut ready, mut available) = (0, 0, 0);
    for rs in all {
        let (r, re, a) = counts(rs);
        replicas += r;
        ready += re;
        available += a;
    }
    let updated = new_rs.map(|rs| counts(rs).0).unwrap_or(0);
    let generation = d.metadata.generation;
    let new_name = new_rs
        .and_then(|rs| rs.metadata.name.clone())
        .unwrap_or_default();

    let find = |t: &str| {
        old.conditions
            .iter()
            .flatten()
            .find(|c| c.type_.as_deref() == Some(t))
    };
    let available_cond = if available >= desired - max_unavailable {
        condition(
            find("Available"),
            "Available",
            "True",
            "MinimumReplicasAvailable",
            "Deployment has minimum availability.".into(),
            now,
            false,
        )
    } else {
        condition(
            find("Available"),
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            "Deployment does not have minimum availability.".into(),
            now,
            false,
        )
    };

    let complete = updated == desired && replicas == desired && available == desired;
    let progressed = updated > old.updated_replicas.unwrap_or(0)
        || ready > old.ready_replicas.unwrap_or(0)
        || available > old.available_replicas.unwrap_or(0)
        || replicas < old.replicas.unwrap_or(0);
    let deadline = Duration::from_secs(
        d.spec
            .progress_deadline_seconds
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE)
            .max(0) as u64,
    );
    let prev = find("Progressing");
    let mut recheck = None;
    let progressing = if d.spec.paused == Some(true) {
        Some(condition(
            prev,
            "Progressing",
            "Unknown",
            "DeploymentPaused",
            "Deployment is paused".into(),
            now,
            false,
        ))
    } else if complete && new_rs.is_some() {
        Some(condition(
            prev,
            "Progressing",
            "True",
            "NewReplicaSetAvailable",
            format!("ReplicaSet \"{new_name}\" has successfully progressed."),
            now,
            false,
        ))
    } else if new_event == NewReplicaSet::Created {
        recheck = Some(deadline);
        Some(condition(
            prev,
            "Progressing",
            "True",
            "NewReplicaSetCreated",
            format!("Created new replica set \"{new_name}\""),
            now,
            true,
        ))
    } else if new_rs.is_some() {
        let last = prev
            .and_then(|c| c.last_update_time.as_ref())
            .map(|t| t.0)
            .unwrap_or(now);
        let elapsed = now.duration_since(last).unsigned_abs();
        let timed_out =
            prev.is_some_and(|c| c.reason.as_deref() == Some("ProgressDeadlineExceeded"));
        if progressed
            || prev.is_none()
            || prev.is_some_and(|c| c.status.as_deref() != Some("True") && !timed_out)
        {
            recheck = Some(deadline);
            Some(condition(
                prev,
                "Progressing",
                "True",
                "ReplicaSetUpdated",
                format!("ReplicaSet \"{new_name}\" is progressing."),
                now,
                progressed,
            ))
        } else if timed_out || elapsed >= deadline {
            Some(condition(
                prev,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("ReplicaSet \"{new_name}\" has timed out progressing."),
                now,
                false,
            ))
        } else {
            recheck = Some(deadline - elapsed);
            prev.cloned()
        }
    } else {
        prev.cloned()
    };

    let mut conditions = vec![available_cond];
    conditions.extend(progressing);
    (
        DeploymentStatus {
            replicas: Some(replicas),
            updated_replicas: Some(updated),
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            unavailable_replicas: Some((desired - available).max(0)),
            observed_generation: generation,
            conditions: Some(conditions),
            collision_count: old.collision_count,
            terminating_replicas: old.terminating_replicas,
        },
        recheck,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::apps::v1::ReplicaSetStatus;

    fn rs(name: &str, replicas: i32, ready: i32, available: i32) -> ReplicaSet {
        let mut r = ReplicaSet::default();
        r.metadata.name = Some(name.into());
        r.status = Some(ReplicaSetStatus {
            replicas,
            ready_replicas: Some(ready),
            available_replicas: Some(available),
            ..Default::default()
        });
        r
    }

    fn deployment(replicas: i32) -> Deployment {
        let mut d = Deployment::default();
        d.metadata.generation = Some(2);
        d.spec.replicas = Some(replicas);
        d
    }

    fn cond<'a>(s: &'a DeploymentStatus, t: &str) -> &'a DeploymentCondition {
        s.conditions
            .iter()
            .flatten()
            .find(|c| c.type_.as_deref() == Some(t))
            .expect("condition")
    }

    #[test]
    fn complete_rollout() {
        let d = deployment(3);
        let new = rs("new", 3, 3, 3);
        let old = rs("old", 0, 0, 0);
        let now = Timestamp::UNIX_EPOCH;
        let (s, recheck) = status(&d, &[&new, &old], Some(&new), NewReplicaSet::Found, 0, now);
        assert_eq!(s.replicas, Some(3));
        assert_eq!(s.updated_replicas, Some(3));
        assert_eq!(s.available_replicas, Some(3));
        assert_eq!(s.unavailable_replicas, Some(0));
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(cond(&s, "Available").status.as_deref(), Some("True"));
        assert_eq!(
            cond(&s, "Progressing").reason.as_deref(),
            Some("NewReplicaSetAvailable")
        );
        assert_eq!(recheck, None);
    }

    #[test]
    fn in_progress_then_deadline() {
        let mut d = deployment(3);
        d.spec.progress_deadline_seconds = Some(10);
        let new = rs("new", 1, 0, 0);
        let old = rs("old", 3, 3, 3);
        let t0 = Timestamp::from_second(1000).unwrap_or(Timestamp::UNIX_EPOCH);
        let (s, recheck) = status(&d, &[&new, &old], Some(&new), NewReplicaSet::Created, 1, t0);
        assert_eq!(
            cond(&s, "Progressing").reason.as_deref(),
            Some("NewReplicaSetCreated")
        );
        assert_eq!(cond(&s, "Available").status.as_deref(), Some("True"));
        assert_eq!(recheck, Some(Duration::from_secs(10)));
        d.status = Some(s);
        // No progress for 4 s: wait 6 more.
        let t1 = Timestamp::from_second(1004).unwrap_or(Timestamp::UNIX_EPOCH);
        let (s, recheck) = status(&d, &[&new, &old], Some(&new), NewReplicaSet::Found, 1, t1);
        assert_eq!(
            cond(&s, "Progressing").reason.as_deref(),
            Some("NewReplicaSetCreated")
        );
        assert_eq!(recheck, Some(Duration::from_secs(6)));
        // Past the deadline.
        let t2 = Timestamp::from_second(1011).unwrap_or(Timestamp::UNIX_EPOCH);
        let (s, _) = status(&d, &[&new, &old], Some(&new), NewReplicaSet::Found, 1, t2);
        assert_eq!(
            cond(&s, "Progressing").reason.as_deref(),
            Some("ProgressDeadlineExceeded")
        );
        assert_eq!(cond(&s, "Progressing").status.as_deref(), Some("False"));
    }

    #[test]
    fn paused_and_unavailable() {
        let mut d = deployment(3);
        d.spec.paused = Some(true);
        let new = rs("new", 1, 1, 1);
        let (s, recheck) = status(
            &d,
            &[&new],
            Some(&new),
            NewReplicaSet::Found,
            0,
            Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            cond(&s, "Progressing").reason.as_deref(),
            Some("DeploymentPaused")
        );
        assert_eq!(cond(&s, "Available").status.as_deref(), Some("False"));
        assert_eq!(s.unavailable_replicas, Some(2));
        assert_eq!(recheck, None);
    }
}
