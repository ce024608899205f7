//! What the simulated kubelet does with one pod bound to its node, and the status it writes.
//! Pure: `step` decides from the pod and the time, the `*_status` functions build the
//! `pods/status` merge patches.
//!
//! * A bound pod this kubelet has not started is started: phase `Running`, conditions
//!   `PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, a pod IP, every container
//!   running.
//! * With a restart policy other than `Always` (a Job's pod, a Helm hook, a `helm test` pod),
//!   the containers exit 0 [`DEFAULT_RUN_SECONDS`] after the start — or
//!   `fabrik.dev/sim-run-seconds` after it, when the pod says — : phase `Succeeded` (a terminal
//!   pod), as KWOK's default stages complete such pods. Pods that restart `Always` run until
//!   they are deleted.
//! * A pod being deleted (`deletionTimestamp`) is finished — deleted with a grace period of 0 —
//!   once its simulated containers have stopped: `fabrik.dev/sim-stop-seconds` after the
//!   deletion was asked for (default 0: they exit on SIGTERM at once), and never later than the
//!   grace period, when they would be killed.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use serde_json::{json, Value};

/// How long the containers of a pod that does not restart `Always` run when its
/// `fabrik.dev/sim-run-seconds` does not say.
pub const DEFAULT_RUN_SECONDS: f64 = 1.0;

/// What to do with a pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Start its containers.
    Start,
    /// Its containers have run their course: mark it `Succeeded`.
    Exit,
    /// Its containers have stopped after a deletion: delete it for good.
    Finish,
    /// Nothing now.
    Wait,
}

fn annotation_seconds(pod: &Pod, key: &str) -> Option<f64> {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .filter(|s| s.is_finite() && *s >= 0.0)
}

fn seconds(s: f64) -> SignedDuration {
    SignedDuration::from_secs_f64(s.min(1e9))
}

/// Decides what to do with `pod` (bound to this node) at `now`; `started` says whether this
/// kubelet has started it already.
pub fn step(pod: &Pod, started: bool, now: Timestamp) -> Step {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let terminal = matches!(phase, Some("Succeeded" | "Failed"));
    if let Some(Time(deadline)) = &pod.metadata.deletion_timestamp {
        if terminal {
            return Step::Finish;
        }
        let grace = pod
            .metadata
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .max(0);
        let asked = *deadline - SignedDuration::from_secs(grace);
        let stop = annotation_seconds(pod, fabrik_api::ANNOTATION_SIM_STOP_SECONDS)
            .unwrap_or(0.0)
            .min(grace as f64);
        return if now >= asked + seconds(stop) {
            Step::Finish
        } else {
            Step::Wait
        };
    }
    if terminal {
        return Step::Wait;
    }
    if !started {
        return Step::Start;
    }
    let restart_always = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .is_none_or(|p| p == "Always");
    let run = annotation_seconds(pod, fabrik_api::ANNOTATION_SIM_RUN_SECONDS)
        .unwrap_or(DEFAULT_RUN_SECONDS);
    match pod.status.as_ref().and_then(|s| s.start_time.as_ref()) {
        Some(Time(start)) if !restart_always && now >= *start + seconds(run) => Step::Exit,
        _ => Step::Wait,
    }
}

/// The containers' names and images.
pub fn container_names(pod: &Pod) -> Vec<(String, String)> {
    pod.spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| (c.name.clone(), c.image.clone().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default()
}

fn time(t: Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

/// The status of a started pod.
pub fn running_status(pod: &Pod, host_ip: &str, pod_ip: &str, now: Timestamp) -> Value {
    let now = time(now);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .map(|t| time(t.0))
        .unwrap_or_else(|| now.clone());
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{}/{name}", pod.metadata.uid.as_deref().unwrap_or("")),
                "ready": true, "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    let cond = |t: &str| json!({"type": t, "status": "True", "lastTransitionTime": now, "lastProbeTime": null});
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "conditions": [cond("PodScheduled"), cond("Initialized"), cond("ContainersReady"), cond("Ready")],
        "containerStatuses": containers,
    }})
}

/// The status of a pod whose containers exited 0.
pub fn exited_status(pod: &Pod, now: Timestamp) -> Value {
    let now = time(now);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .map(|t| time(t.0))
        .unwrap_or_else(|| now.clone());
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "ready": false, "started": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": 0, "reason": "Completed",
                    "startedAt": started, "finishedAt": now}},
            })
        })
        .collect();
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "lastTransitionTime": now, "lastProbeTime": null});
    json!({"status": {
        "phase": "Succeeded",
        "conditions": [cond("PodScheduled", "True"), cond("Initialized", "True"),
            cond("ContainersReady", "False"), cond("Ready", "False")],
        "containerStatuses": containers,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, PodStatus};
    use std::collections::BTreeMap;

    fn pod() -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "main".into(),
                    image: Some("busybox".into()),
                    ..Default::default()
                }],
                node_name: Some("n".into()),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("time")
    }

    fn deleting(mut p: Pod, asked: i64, grace: i64) -> Pod {
        p.metadata.deletion_timestamp = Some(Time(at(asked + grace)));
        p.metadata.deletion_grace_period_seconds = Some(grace);
        p
    }

    #[test]
    fn start_then_wait() {
        assert_eq!(step(&pod(), false, at(0)), Step::Start);
        assert_eq!(step(&pod(), true, at(0)), Step::Wait);
    }

    #[test]
    fn deletion_finishes_when_the_containers_stop_at_the_latest_at_grace() {
        // Default: the simulated process exits on SIGTERM at once.
        assert_eq!(step(&deleting(pod(), 0, 30), true, at(0)), Step::Finish);
        // A process that takes 5 s to stop.
        let mut p = deleting(pod(), 0, 30);
        p.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_SIM_STOP_SECONDS.to_string(),
            "5".to_string(),
        )]));
        assert_eq!(step(&p, true, at(4)), Step::Wait);
        assert_eq!(step(&p, true, at(5)), Step::Finish);
        // One that ignores SIGTERM is killed when the grace period ends.
        p.metadata.deletion_timestamp = Some(Time(at(2)));
        p.metadata.deletion_grace_period_seconds = Some(2);
        assert_eq!(step(&p, true, at(1)), Step::Wait);
        assert_eq!(step(&p, true, at(2)), Step::Finish);
    }

    #[test]
    fn run_seconds_end_in_success_unless_restart_always() {
        let mut p = pod();
        p.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::ANNOTATION_SIM_RUN_SECONDS.to_string(),
            "3".to_string(),
        )]));
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        assert_eq!(step(&p, true, at(3)), Step::Wait, "restartPolicy Always");
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Never".into());
        }
        assert_eq!(step(&p, true, at(2)), Step::Wait);
        assert_eq!(step(&p, true, at(3)), Step::Exit);
        if let Some(s) = p.status.as_mut() {
            s.phase = Some("Succeeded".into());
        }
        assert_eq!(step(&p, true, at(9)), Step::Wait, "terminal pods stay");
    }

    #[test]
    fn pods_that_do_not_restart_always_complete_by_default() {
        let mut p = pod();
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        assert_eq!(
            step(&p, true, at(60)),
            Step::Wait,
            "restartPolicy Always runs on"
        );
        for policy in ["Never", "OnFailure"] {
            if let Some(s) = p.spec.as_mut() {
                s.restart_policy = Some(policy.into());
            }
            assert_eq!(step(&p, true, at(0)), Step::Wait, "{policy}");
            assert_eq!(step(&p, true, at(1)), Step::Exit, "{policy}");
        }
    }

    #[test]
    fn running_status_has_ip_conditions_and_containers() {
        let s = running_status(&pod(), "10.0.0.1", "10.244.0.2", at(0));
        assert_eq!(s["status"]["phase"], "Running");
        assert_eq!(s["status"]["podIP"], "10.244.0.2");
        assert_eq!(s["status"]["conditions"].as_array().map(Vec::len), Some(4));
        assert!(s["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let e = exited_status(&pod(), at(1));
        assert_eq!(e["status"]["phase"], "Succeeded");
        assert_eq!(
            e["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
    }
}
