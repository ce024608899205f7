//! What the simulated kubelet does with one pod bound to its node, and the status it writes.
//! Pure: `step` decides from the pod and the time, the `*_status` functions build the
//! `pods/status` merge patches.
//!
//! * A bound pod this kubelet has not started is started: phase `Running`, conditions
//!   `PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, a pod IP, every container
//!   running.
//! * With a restart policy other than `Always` (a Job's pod, a Helm hook, a `helm test` pod),
//!   the containers exit 0 [`DEFAULT_RUN_SECONDS`] after the start — or after
//!   `sim.fabrik.dev/run-seconds` (`fabrik.dev/sim-run-seconds`, the host's older name), when
//!   the pod says — : phase `Succeeded` (a terminal pod), as KWOK's default stages complete
//!   such pods. Pods that restart `Always` run until they are deleted, unless the pod gives
//!   them a run time.
//! * `sim.fabrik.dev/exit-code` is the code they exit with: non-zero with `restartPolicy:
//!   Never` is phase `Failed` (reason `Error`); with `OnFailure` (non-zero) or `Always` (any)
//!   the container is restarted as a kubelet does — `restartCount` up, the exit in
//!   `lastState`, `CrashLoopBackOff` for 10 s doubling to 5 min ([`backoff`]), then running
//!   again for another run time.
//! * `sim.fabrik.dev/ready: "false"`: running but not ready (a failing readiness probe).
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
    /// Its containers have run their course and exited with this code, for good: `Succeeded`
    /// (0) or `Failed`.
    Exit(i32),
    /// Its containers exited with this code and will be restarted after a back-off.
    Crash(i32),
    /// The back-off is over: run them again.
    Restart,
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
    let policy = pod
        .spec
        .as_ref()
        .and_then(|s| s.restart_policy.as_deref())
        .unwrap_or("Always");
    let first = first_container(pod);
    // Crash-looping: run again once the back-off is over.
    if first["state"]["waiting"]["reason"] == "CrashLoopBackOff" {
        let restarts = first["restartCount"].as_u64().unwrap_or(1);
        let finished = first["lastState"]["terminated"]["finishedAt"]
            .as_str()
            .and_then(|t| t.parse::<Timestamp>().ok());
        return match finished {
            Some(at) if now < at + backoff(restarts) => Step::Wait,
            _ => Step::Restart,
        };
    }
    let run = annotation_seconds(pod, fabrik_api::sim::RUN_SECONDS)
        .or_else(|| annotation_seconds(pod, fabrik_api::ANNOTATION_SIM_RUN_SECONDS))
        .or((policy != "Always").then_some(DEFAULT_RUN_SECONDS));
    let started = first["state"]["running"]["startedAt"]
        .as_str()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .or_else(|| {
            pod.status
                .as_ref()
                .and_then(|s| s.start_time.as_ref())
                .map(|t| t.0)
        });
    match (run, started) {
        (Some(run), Some(start)) if now >= start + seconds(run) => {
            let code = exit_code(pod);
            match (policy, code) {
                ("Never", c) | ("OnFailure", c @ 0) => Step::Exit(c),
                (_, c) => Step::Crash(c),
            }
        }
        _ => Step::Wait,
    }
}

/// How long a container that exited `restarts` times waits before it runs again: 10 s,
/// doubling, at most 5 min (the kubelet's back-off).
pub fn backoff(restarts: u64) -> SignedDuration {
    let exp = restarts.saturating_sub(1).min(5) as u32;
    SignedDuration::from_secs((10u64.saturating_mul(1 << exp)).min(300) as i64)
}

/// The exit code the pod's annotation asks for (0 without one; clamped to 0..=255).
fn exit_code(pod: &Pod) -> i32 {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::sim::EXIT_CODE))
        .and_then(|v| v.trim().parse::<i64>().ok())
        .map(|c| c.clamp(0, 255) as i32)
        .unwrap_or(0)
}

/// Whether the pod's containers pass their readiness checks.
fn ready(pod: &Pod) -> bool {
    pod.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(fabrik_api::sim::READY))
        .is_none_or(|v| v.trim() != "false")
}

/// The status of the pod's first container, as JSON (Null when it has none).
fn first_container(pod: &Pod) -> Value {
    pod.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .and_then(|c| serde_json::to_value(c).ok())
        .unwrap_or(Value::Null)
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

/// The conditions of a running pod: Ready and ContainersReady as `ready` says.
fn running_conditions(now: &Value, ready: bool) -> Value {
    let cond = |t: &str, s: bool| {
        json!({"type": t, "status": if s { "True" } else { "False" },
               "lastTransitionTime": now, "lastProbeTime": null})
    };
    json!([
        cond("PodScheduled", true),
        cond("Initialized", true),
        cond("ContainersReady", ready),
        cond("Ready", ready)
    ])
}

/// The status of a pod whose containers exited with `code` and wait out their back-off
/// before they run again.
pub fn crashed_status(pod: &Pod, code: i32, now: Timestamp) -> Value {
    let at = time(now);
    let first = first_container(pod);
    let restarts = first["restartCount"].as_u64().unwrap_or(0) + 1;
    let started = first["state"]["running"]["startedAt"].clone();
    let wait = backoff(restarts).as_secs();
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "ready": false, "started": false, "restartCount": restarts,
                "state": {"waiting": {"reason": "CrashLoopBackOff",
                    "message": format!("back-off {wait}s restarting failed container={name} pod={}",
                        pod.metadata.name.as_deref().unwrap_or(""))}},
                "lastState": {"terminated": {"exitCode": code,
                    "reason": if code == 0 { "Completed" } else { "Error" },
                    "startedAt": started, "finishedAt": at}},
            })
        })
        .collect();
    json!({"status": {
        "phase": "Running",
        "conditions": running_conditions(&at, false),
        "containerStatuses": containers,
    }})
}

/// The status of a pod whose containers run again after a back-off.
pub fn restarted_status(pod: &Pod, now: Timestamp) -> Value {
    let at = time(now);
    let first = first_container(pod);
    let restarts = first["restartCount"].as_u64().unwrap_or(0);
    let last = first["lastState"].clone();
    let ready = ready(pod);
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{}/{name}/{restarts}", pod.metadata.uid.as_deref().unwrap_or("")),
                "ready": ready, "started": true, "restartCount": restarts,
                "state": {"running": {"startedAt": at}},
                "lastState": last,
            })
        })
        .collect();
    json!({"status": {
        "phase": "Running",
        "conditions": running_conditions(&at, ready),
        "containerStatuses": containers,
    }})
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
                "ready": ready(pod), "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": started}},
            })
        })
        .collect();
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "conditions": running_conditions(&now, ready(pod)),
        "containerStatuses": containers,
    }})
}

/// The status of a pod whose containers exited with `code` for good: `Succeeded` (0) or
/// `Failed`.
pub fn exited_status(pod: &Pod, code: i32, now: Timestamp) -> Value {
    let now = time(now);
    let restarts = first_container(pod)["restartCount"].as_u64().unwrap_or(0);
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
                "ready": false, "started": false, "restartCount": restarts,
                "state": {"terminated": {"exitCode": code,
                    "reason": if code == 0 { "Completed" } else { "Error" },
                    "startedAt": started, "finishedAt": now}},
            })
        })
        .collect();
    let cond = |t: &str, s: &str| json!({"type": t, "status": s, "lastTransitionTime": now, "lastProbeTime": null});
    json!({"status": {
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
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
    fn run_seconds_end_in_success_or_a_restart() {
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
        assert_eq!(step(&p, true, at(2)), Step::Wait);
        assert_eq!(
            step(&p, true, at(3)),
            Step::Crash(0),
            "restartPolicy Always: restarted"
        );
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Never".into());
        }
        assert_eq!(step(&p, true, at(2)), Step::Wait);
        assert_eq!(step(&p, true, at(3)), Step::Exit(0));
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
            assert_eq!(step(&p, true, at(1)), Step::Exit(0), "{policy}");
        }
    }

    fn annotated(mut p: Pod, pairs: &[(&str, &str)]) -> Pod {
        p.metadata.annotations = Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        p
    }

    fn running_since(mut p: Pod, policy: &str, s: i64) -> Pod {
        if let Some(spec) = p.spec.as_mut() {
            spec.restart_policy = Some(policy.into());
        }
        let st: PodStatus = serde_json::from_value(
            running_status(&p, "10.0.0.1", "10.244.0.2", at(s))["status"].clone(),
        )
        .expect("status");
        p.status = Some(st);
        p
    }

    #[test]
    fn exit_codes_fail_or_restart_as_the_restart_policy_says() {
        let base = || {
            annotated(
                pod(),
                &[
                    (fabrik_api::sim::RUN_SECONDS, "2"),
                    (fabrik_api::sim::EXIT_CODE, "3"),
                ],
            )
        };
        assert_eq!(
            step(&running_since(base(), "Never", 0), true, at(1)),
            Step::Wait
        );
        assert_eq!(
            step(&running_since(base(), "Never", 0), true, at(2)),
            Step::Exit(3)
        );
        assert_eq!(
            step(&running_since(base(), "OnFailure", 0), true, at(2)),
            Step::Crash(3)
        );
        assert_eq!(
            step(&running_since(base(), "Always", 0), true, at(2)),
            Step::Crash(3)
        );
        // Exit 0 ends an OnFailure pod; an Always pod restarts whatever the code.
        let ok = || annotated(pod(), &[(fabrik_api::sim::RUN_SECONDS, "2")]);
        assert_eq!(
            step(&running_since(ok(), "OnFailure", 0), true, at(2)),
            Step::Exit(0)
        );
        assert_eq!(
            step(&running_since(ok(), "Always", 0), true, at(2)),
            Step::Crash(0)
        );
        let failed = exited_status(&base(), 3, at(2));
        assert_eq!(failed["status"]["phase"], "Failed");
        assert_eq!(
            failed["status"]["containerStatuses"][0]["state"]["terminated"]["reason"],
            "Error"
        );
    }

    #[test]
    fn a_crash_loop_backs_off_then_runs_again() {
        let mut p = running_since(
            annotated(
                pod(),
                &[
                    (fabrik_api::sim::RUN_SECONDS, "1"),
                    (fabrik_api::sim::EXIT_CODE, "1"),
                ],
            ),
            "Always",
            0,
        );
        // First crash at 1 s: 10 s of back-off.
        let crashed = crashed_status(&p, 1, at(1));
        let c = &crashed["status"]["containerStatuses"][0];
        assert_eq!(c["restartCount"], 1);
        assert_eq!(c["state"]["waiting"]["reason"], "CrashLoopBackOff");
        assert_eq!(c["lastState"]["terminated"]["exitCode"], 1);
        assert_eq!(crashed["status"]["conditions"][3]["status"], "False");
        p.status = Some(serde_json::from_value(crashed["status"].clone()).expect("status"));
        assert_eq!(step(&p, true, at(10)), Step::Wait);
        assert_eq!(step(&p, true, at(11)), Step::Restart);
        // Running again; the next exit is a second crash with 20 s of back-off.
        let again = restarted_status(&p, at(11));
        assert_eq!(again["status"]["containerStatuses"][0]["restartCount"], 1);
        p.status = Some(serde_json::from_value(again["status"].clone()).expect("status"));
        assert_eq!(step(&p, true, at(11)), Step::Wait);
        assert_eq!(step(&p, true, at(12)), Step::Crash(1));
        assert_eq!(backoff(2), SignedDuration::from_secs(20));
        assert_eq!(backoff(9), SignedDuration::from_secs(300));
    }

    #[test]
    fn not_ready_when_the_pod_says_so() {
        let p = annotated(pod(), &[(fabrik_api::sim::READY, "false")]);
        let s = running_status(&p, "10.0.0.1", "10.244.0.2", at(0));
        assert_eq!(s["status"]["containerStatuses"][0]["ready"], false);
        assert_eq!(s["status"]["conditions"][3]["status"], "False");
    }

    #[test]
    fn running_status_has_ip_conditions_and_containers() {
        let s = running_status(&pod(), "10.0.0.1", "10.244.0.2", at(0));
        assert_eq!(s["status"]["phase"], "Running");
        assert_eq!(s["status"]["podIP"], "10.244.0.2");
        assert_eq!(s["status"]["conditions"].as_array().map(Vec::len), Some(4));
        assert!(s["status"]["containerStatuses"][0]["state"]["running"]["startedAt"].is_string());
        let e = exited_status(&pod(), 0, at(1));
        assert_eq!(e["status"]["phase"], "Succeeded");
        assert_eq!(
            e["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            0
        );
    }
}
