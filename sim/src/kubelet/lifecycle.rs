//! What the simulated kubelet does with one pod bound to its node, and the status it writes.
//! Pure: `step` decides from the pod and the time, the `*_status` functions build the
//! `pods/status` merge patches.
//!
//! * A bound pod this kubelet has not started is started: phase `Running`, conditions
//!   `PodScheduled`, `Initialized`, `ContainersReady`, `Ready`, a pod IP, every container
//!   running.
//! * Init containers run first, one at a time in order (each for [`INIT_RUN_SECONDS`], or
//!   `sim.fabrik.dev/init-run-seconds`), the pod `Pending` and not `Initialized` meanwhile,
//!   its app containers waiting (`PodInitializing`). Sidecars (init containers with
//!   `restartPolicy: Always`) start in their turn and keep running beside the app containers;
//!   when the app containers exit for good, the sidecars stop after them.
//! * With a restart policy other than `Always` (a Job's pod, a Helm hook, a `helm test` pod),
//!   the containers exit 0 [`DEFAULT_RUN_SECONDS`] after the start — or after
//!   `sim.fabrik.dev/run-seconds` (`fabrik.dev/sim-run-seconds`, the host's older name), when
//!   the pod says, or as long as a container's command sleeps (`sleep 60`, `sh -c "sleep
//!   60"`: no image runs here, but that one is plain) — : phase `Succeeded` (a terminal pod),
//!   as KWOK's default stages complete such pods. Pods that restart `Always` run until they
//!   are deleted, unless the pod gives them a run time (either way).
//! * `sim.fabrik.dev/exit-code` is the code they exit with: non-zero with `restartPolicy:
//!   Never` is phase `Failed` (reason `Error`); with `OnFailure` (non-zero) or `Always` (any)
//!   the container is restarted as a kubelet does — `restartCount` up, the exit in
//!   `lastState`, `CrashLoopBackOff` for 10 s doubling to 5 min ([`backoff`]), then running
//!   again for another run time.
//! * `sim.fabrik.dev/ready: "false"`: running but not ready (a failing readiness probe).
//! * Statuses hold whole seconds (`startedAt`, `finishedAt`); on GPU pods the kubelet also
//!   records when the app containers first started and when they stopped for good with
//!   nanoseconds ([`run_annotation`]), the times metering credits the pod between. A first run
//!   lasts its run time from that precise start.
//! * A pod active longer than its `activeDeadlineSeconds` (from `status.startTime`) has its
//!   containers killed (exit 137) and is `Failed` with reason `DeadlineExceeded`, as a
//!   kubelet does.
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

/// How long each init container of a pod runs when `sim.fabrik.dev/init-run-seconds` does
/// not say.
pub const INIT_RUN_SECONDS: f64 = 0.5;

/// What to do with a pod now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Start it: its first init container, or its containers when it has none.
    Start,
    /// The running init container has completed: start the next one, or the containers.
    InitNext,
    /// Its containers have run their course and exited with this code, for good: `Succeeded`
    /// (0) or `Failed`.
    Exit(i32),
    /// It has been active longer than its `activeDeadlineSeconds`: its containers are killed,
    /// the pod `Failed` with reason `DeadlineExceeded`.
    DeadlineExceeded,
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

/// How busy the pod says its GPUs are (`sim.fabrik.dev/gpu-utilization: "<percent>"`, read
/// as the resource metrics read it), 0..=1.
pub fn gpu_utilization(pod: &Pod) -> Option<f64> {
    fabrik_api::sim::gpu_utilization(pod.metadata.annotations.as_ref()).map(|p| p as f64 / 100.0)
}

/// How long a container's command sleeps.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Sleeps {
    For(f64),
    Forever,
}

/// How long the app containers run by what their commands say, where a command is `sleep`
/// (`sleep 60`, `/bin/sleep 1.5m 30`, `sh -c "sleep 60"`, `exec sleep infinity`): the longest
/// of those that say; `None` when none does (no image runs here, so any other command runs
/// for the default run time, or until deleted).
fn command_run(pod: &Pod) -> Option<Sleeps> {
    let spec = pod.spec.as_ref()?;
    let mut longest: Option<Sleeps> = None;
    for c in &spec.containers {
        // Without a command the arguments are the image's command (as for images with no
        // entrypoint, e.g. busybox).
        let argv: Vec<&str> = c
            .command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .map(String::as_str)
            .collect();
        let Some(this) = sleeps(&argv) else {
            continue;
        };
        longest = Some(match (longest, this) {
            (Some(Sleeps::Forever), _) | (_, Sleeps::Forever) => Sleeps::Forever,
            (Some(Sleeps::For(a)), Sleeps::For(b)) => Sleeps::For(a.max(b)),
            (None, this) => this,
        });
    }
    longest
}

/// What `argv` sleeps, if it is `sleep <durations>` or a shell running just that.
fn sleeps(argv: &[&str]) -> Option<Sleeps> {
    let program = |p: &str| p.rsplit('/').next().unwrap_or(p).to_string();
    let (first, rest) = argv.split_first()?;
    let words: Vec<&str> = match program(first).as_str() {
        "sleep" => argv.to_vec(),
        "sh" | "bash" | "ash" | "dash" | "zsh" if rest.len() == 2 && rest[0] == "-c" => {
            let mut words: Vec<&str> = rest[1].split_whitespace().collect();
            if words.first() == Some(&"exec") {
                words.remove(0);
            }
            words
        }
        _ => return None,
    };
    let (sleep, durations) = words.split_first()?;
    if program(sleep) != "sleep" || durations.is_empty() {
        return None;
    }
    // As GNU sleep: several durations add up; each a number with an optional unit.
    let mut total = 0.0;
    for d in durations {
        if matches!(*d, "inf" | "infinity") {
            return Some(Sleeps::Forever);
        }
        let (number, unit) = match d.char_indices().last() {
            Some((i, u @ ('s' | 'm' | 'h' | 'd'))) => (&d[..i], u),
            _ => (*d, 's'),
        };
        let n: f64 = number
            .parse()
            .ok()
            .filter(|n: &f64| n.is_finite() && *n >= 0.0)?;
        total += n * match unit {
            'm' => 60.0,
            'h' => 3600.0,
            'd' => 86400.0,
            _ => 1.0,
        };
    }
    Some(Sleeps::For(total))
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
    if past_deadline(pod, now) {
        return Step::DeadlineExceeded;
    }
    if phase == Some("Pending") && !regular_inits(pod).is_empty() {
        let run =
            annotation_seconds(pod, fabrik_api::sim::INIT_RUN_SECONDS).unwrap_or(INIT_RUN_SECONDS);
        return match running_init_started(pod) {
            Some(at) if now < at + seconds(run) => Step::Wait,
            _ => Step::InitNext,
        };
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
    let said = annotation_seconds(pod, fabrik_api::sim::RUN_SECONDS)
        .or_else(|| annotation_seconds(pod, fabrik_api::ANNOTATION_SIM_RUN_SECONDS));
    let run = match (said, command_run(pod)) {
        (Some(run), _) => Some(run),
        (None, Some(Sleeps::For(run))) => Some(run),
        (None, Some(Sleeps::Forever)) => None,
        (None, None) => (policy != "Always").then_some(DEFAULT_RUN_SECONDS),
    };
    // The run started when this kubelet recorded it, to the nanosecond, on a first run;
    // else as the status says (whole seconds).
    let precise = (first["restartCount"].as_u64().unwrap_or(0) == 0)
        .then(|| {
            pod.metadata
                .annotations
                .as_ref()?
                .get(fabrik_gpu::metering::ANNOTATION_STARTED_AT)?
                .parse::<Timestamp>()
                .ok()
        })
        .flatten();
    let started = precise
        .or_else(|| {
            first["state"]["running"]["startedAt"]
                .as_str()
                .and_then(|t| t.parse::<Timestamp>().ok())
        })
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

/// Whether the pod has been active (since `status.startTime`) for its `activeDeadlineSeconds`
/// or longer.
fn past_deadline(pod: &Pod, now: Timestamp) -> bool {
    let Some(deadline) = pod
        .spec
        .as_ref()
        .and_then(|s| s.active_deadline_seconds)
        .filter(|d| *d > 0)
    else {
        return false;
    };
    let Some(start) = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map(|t| t.0)
    else {
        return false;
    };
    now >= start + seconds(deadline as f64)
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

/// The init containers: name, image, and whether each is a sidecar (`restartPolicy:
/// Always`), in order.
pub fn init_containers(pod: &Pod) -> Vec<(String, String, bool)> {
    pod.spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map(|list| {
            list.iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        c.image.clone().unwrap_or_default(),
                        c.restart_policy.as_deref() == Some("Always"),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

/// The names of the init containers that run to completion (not sidecars), in order.
pub fn regular_inits(pod: &Pod) -> Vec<String> {
    init_containers(pod)
        .into_iter()
        .filter(|(_, _, sidecar)| !sidecar)
        .map(|(name, _, _)| name)
        .collect()
}

/// The names of the sidecars, in order.
pub fn sidecars(pod: &Pod) -> Vec<String> {
    init_containers(pod)
        .into_iter()
        .filter(|(_, _, sidecar)| *sidecar)
        .map(|(name, _, _)| name)
        .collect()
}

fn init_statuses(pod: &Pod) -> Vec<Value> {
    pod.status
        .as_ref()
        .and_then(|s| s.init_container_statuses.as_ref())
        .map(|l| {
            l.iter()
                .filter_map(|c| serde_json::to_value(c).ok())
                .collect()
        })
        .unwrap_or_default()
}

/// How many regular init containers have completed, by the pod's status.
pub fn inits_done(pod: &Pod) -> usize {
    let regular = regular_inits(pod);
    init_statuses(pod)
        .iter()
        .filter(|c| {
            c["name"]
                .as_str()
                .is_some_and(|n| regular.iter().any(|r| r == n))
                && c["state"]["terminated"]["exitCode"] == 0
        })
        .count()
}

/// When the regular init container now running started.
fn running_init_started(pod: &Pod) -> Option<Timestamp> {
    let regular = regular_inits(pod);
    init_statuses(pod).iter().find_map(|c| {
        let name = c["name"].as_str()?;
        if !regular.iter().any(|r| r == name) {
            return None;
        }
        c["state"]["running"]["startedAt"].as_str()?.parse().ok()
    })
}

/// The init container statuses when `done` regular init containers have completed (the next
/// one, if any, running since `now`); `finished` says whether the app containers have exited
/// for good (the sidecars then stop too).
fn init_container_statuses(pod: &Pod, done: usize, finished: bool, now: &Value) -> Vec<Value> {
    let uid = pod.metadata.uid.as_deref().unwrap_or("");
    let current = init_statuses(pod);
    let mut regular_seen = 0;
    let mut out = Vec::new();
    for (name, image, sidecar) in init_containers(pod) {
        let base = json!({"name": name, "image": image, "imageID": format!("sim://{image}"),
            "restartCount": 0});
        let mut c = base;
        let state = if sidecar {
            if regular_seen > done {
                json!({"waiting": {"reason": "PodInitializing"}})
            } else if finished {
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}})
            } else {
                c["containerID"] = json!(format!("sim://{uid}/{name}"));
                c["started"] = json!(true);
                c["ready"] = json!(true);
                json!({"running": {"startedAt": now}})
            }
        } else {
            let k = regular_seen;
            regular_seen += 1;
            if k < done {
                json!({"terminated": {"exitCode": 0, "reason": "Completed", "finishedAt": now}})
            } else if k == done {
                c["containerID"] = json!(format!("sim://{uid}/{name}"));
                c["started"] = json!(true);
                json!({"running": {"startedAt": now}})
            } else {
                json!({"waiting": {"reason": "PodInitializing"}})
            }
        };
        if c.get("ready").is_none() {
            c["ready"] = json!(false);
        }
        // A state the container is already in keeps its times; one that ends a run keeps
        // when the run started.
        let mut state = state;
        let kind = state.as_object().and_then(|m| m.keys().next().cloned());
        let previous = current
            .iter()
            .find(|p| p["name"] == c["name"])
            .map(|p| p["state"].clone())
            .unwrap_or(Value::Null);
        if !state["terminated"].is_null() && !previous["running"]["startedAt"].is_null() {
            state["terminated"]["startedAt"] = previous["running"]["startedAt"].clone();
        }
        let same = kind
            .as_ref()
            .is_some_and(|k| !previous[k.as_str()].is_null());
        c["state"] = if same { previous } else { state };
        out.push(c);
    }
    out
}

/// The status of a pod whose init containers run: `done` have completed, the next one runs.
pub fn initializing_status(
    pod: &Pod,
    host_ip: &str,
    pod_ip: &str,
    done: usize,
    now: Timestamp,
) -> Value {
    let at = time(now);
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.start_time.clone())
        .map(|t| time(t.0))
        .unwrap_or_else(|| at.clone());
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({"name": name, "image": image, "imageID": "", "ready": false,
                "started": false, "restartCount": 0,
                "state": {"waiting": {"reason": "PodInitializing"}}})
        })
        .collect();
    let pending = regular_inits(pod).len().saturating_sub(done);
    let cond = |t: &str, ok: bool, reason: Option<&str>| {
        let mut c = json!({"type": t, "status": if ok { "True" } else { "False" },
            "lastTransitionTime": at, "lastProbeTime": null});
        if let Some(r) = reason {
            c["reason"] = json!(r);
            c["message"] = json!(format!(
                "containers with incomplete status: [{}]",
                regular_inits(pod)[done.min(regular_inits(pod).len().saturating_sub(1))..]
                    .join(" ")
            ));
        }
        c
    };
    json!({"status": {
        "phase": "Pending",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "conditions": [
            cond("PodScheduled", true, None),
            cond("Initialized", pending == 0, (pending > 0).then_some("ContainersNotInitialized")),
            cond("ContainersReady", false, None),
            cond("Ready", false, None),
        ],
        "initContainerStatuses": init_container_statuses(pod, done, false, &at),
        "containerStatuses": containers,
    }})
}

fn time(t: Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

/// The merge patch recording `at` in the pod's annotation `key` (RFC 3339 with nanoseconds):
/// when a GPU pod's app containers first started or stopped for good, for metering
/// ([`fabrik_gpu::metering::ANNOTATION_STARTED_AT`],
/// [`fabrik_gpu::metering::ANNOTATION_FINISHED_AT`]).
pub fn run_annotation(key: &str, at: Timestamp) -> Value {
    json!({"metadata": {"annotations": {key: at.to_string()}}})
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
    // After init containers, the app containers start now.
    let app_started = if regular_inits(pod).is_empty() {
        started.clone()
    } else {
        now.clone()
    };
    let containers: Vec<Value> = container_names(pod)
        .into_iter()
        .map(|(name, image)| {
            json!({
                "name": name, "image": image, "imageID": format!("sim://{image}"),
                "containerID": format!("sim://{}/{name}", pod.metadata.uid.as_deref().unwrap_or("")),
                "ready": ready(pod), "started": true, "restartCount": 0,
                "state": {"running": {"startedAt": app_started}},
            })
        })
        .collect();
    let mut out = json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": started,
        "conditions": running_conditions(&now, ready(pod)),
        "containerStatuses": containers,
    }});
    if !init_containers(pod).is_empty() {
        let done = regular_inits(pod).len();
        out["status"]["initContainerStatuses"] =
            json!(init_container_statuses(pod, done, false, &now));
    }
    out
}

/// The status of a pod whose containers exited with `code` for good: `Succeeded` (0) or
/// `Failed`.
pub fn exited_status(pod: &Pod, code: i32, now: Timestamp) -> Value {
    let now = time(now);
    let restarts = first_container(pod)["restartCount"].as_u64().unwrap_or(0);
    let running_since = first_container(pod)["state"]["running"]["startedAt"].clone();
    let started = if running_since.is_null() {
        pod.status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .map(|t| time(t.0))
            .unwrap_or_else(|| now.clone())
    } else {
        running_since
    };
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
    let mut out = json!({"status": {
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "conditions": [cond("PodScheduled", "True"), cond("Initialized", "True"),
            cond("ContainersReady", "False"), cond("Ready", "False")],
        "containerStatuses": containers,
    }});
    // The sidecars stop after the app containers.
    if !init_containers(pod).is_empty() {
        let done = regular_inits(pod).len();
        out["status"]["initContainerStatuses"] =
            json!(init_container_statuses(pod, done, true, &now));
    }
    out
}

/// The status of a pod killed for running past its `activeDeadlineSeconds`: `Failed`, reason
/// `DeadlineExceeded`, its containers terminated by SIGKILL (137), as the kubelet reports it.
pub fn deadline_exceeded_status(pod: &Pod, now: Timestamp) -> Value {
    let mut out = exited_status(pod, 137, now);
    out["status"]["reason"] = json!("DeadlineExceeded");
    out["status"]["message"] =
        json!("Pod was active on the node longer than the specified deadline");
    out
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

    fn with_inits(mut p: Pod) -> Pod {
        let spec = p.spec.as_mut().expect("spec");
        spec.restart_policy = Some("Never".into());
        spec.init_containers = Some(vec![
            Container {
                name: "fetch".into(),
                ..Default::default()
            },
            Container {
                name: "proxy".into(),
                restart_policy: Some("Always".into()),
                ..Default::default()
            },
            Container {
                name: "migrate".into(),
                ..Default::default()
            },
        ]);
        p
    }

    fn apply(p: &mut Pod, status: impl Fn(&Pod) -> Value) {
        let patch = status(p);
        let v = serde_json::to_value(&*p).expect("pod");
        let merged = fabrik_machinery::patch::merge_patch(&v, &patch);
        *p = serde_json::from_value(merged).expect("pod");
    }

    #[test]
    fn init_containers_run_in_order_and_sidecars_stop_last() {
        let mut p = with_inits(pod());
        assert_eq!(step(&p, false, at(0)), Step::Start);
        apply(&mut p, |p| {
            initializing_status(p, "10.0.0.1", "10.244.0.5", 0, at(0))
        });
        let state = |p: &Pod, i: usize| init_statuses(p)[i]["state"].clone();
        assert!(!state(&p, 0)["running"].is_null(), "fetch runs first");
        assert!(
            !state(&p, 1)["waiting"].is_null(),
            "the sidecar waits for fetch"
        );
        assert!(!state(&p, 2)["waiting"].is_null());
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Pending")
        );
        assert_eq!(step(&p, true, at(0)), Step::Wait);
        assert_eq!(step(&p, true, at(1)), Step::InitNext);
        apply(&mut p, |p| {
            initializing_status(p, "10.0.0.1", "10.244.0.5", 1, at(1))
        });
        assert_eq!(inits_done(&p), 1);
        assert!(!state(&p, 0)["terminated"].is_null());
        assert!(
            !state(&p, 1)["running"].is_null(),
            "the sidecar starts in its turn"
        );
        assert!(!state(&p, 2)["running"].is_null());
        assert_eq!(step(&p, true, at(2)), Step::InitNext);
        apply(&mut p, |p| {
            running_status(p, "10.0.0.1", "10.244.0.5", at(2))
        });
        assert_eq!(
            p.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Running")
        );
        assert!(
            !state(&p, 1)["running"].is_null(),
            "the sidecar runs beside the app"
        );
        assert_eq!(
            state(&p, 0)["terminated"]["finishedAt"],
            json!("2023-11-14T22:13:21Z")
        );
        apply(&mut p, |p| exited_status(p, 0, at(5)));
        assert_eq!(
            state(&p, 1)["terminated"]["exitCode"],
            0,
            "the sidecar stops after"
        );
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
    fn a_pod_says_how_busy_its_gpus_are_in_whole_percent() {
        let mut p = pod();
        assert_eq!(gpu_utilization(&p), None);
        for (said, read) in [("25", Some(0.25)), (" 100 ", Some(1.0)), ("250", Some(1.0))] {
            p.metadata.annotations = Some(BTreeMap::from([(
                fabrik_api::sim::GPU_UTILIZATION.to_string(),
                said.to_string(),
            )]));
            assert_eq!(gpu_utilization(&p), read, "{said:?}");
        }
        for bad in ["-5", "12.5", "busy", ""] {
            p.metadata.annotations = Some(BTreeMap::from([(
                fabrik_api::sim::GPU_UTILIZATION.to_string(),
                bad.to_string(),
            )]));
            assert_eq!(gpu_utilization(&p), None, "{bad:?}");
        }
    }

    #[test]
    fn a_container_that_sleeps_runs_that_long() {
        let mut p = pod();
        let set = |p: &mut Pod, command: Option<Vec<&str>>, args: Option<Vec<&str>>| {
            if let Some(c) = p.spec.as_mut().and_then(|s| s.containers.first_mut()) {
                c.command = command.map(|v| v.into_iter().map(String::from).collect());
                c.args = args.map(|v| v.into_iter().map(String::from).collect());
            }
        };
        if let Some(s) = p.spec.as_mut() {
            s.restart_policy = Some("Never".into());
        }
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        for (command, args, runs) in [
            (Some(vec!["sleep", "60"]), None, Some(60)),
            (Some(vec!["/bin/sleep"]), Some(vec!["1m", "30"]), Some(90)),
            (None, Some(vec!["sleep", "1.5m"]), Some(90)),
            (Some(vec!["sh", "-c", " exec sleep 2h "]), None, Some(7200)),
            (Some(vec!["/bin/bash", "-c", "sleep 45"]), None, Some(45)),
            (Some(vec!["sleep", "infinity"]), None, None),
            // Anything else: the default run time (1 s).
            (Some(vec!["sh", "-c", "sleep 60; echo done"]), None, Some(1)),
            (Some(vec!["sleep", "-5"]), None, Some(1)),
            (Some(vec!["sleep", "m"]), None, Some(1)),
            (Some(vec!["python", "train.py"]), None, Some(1)),
        ] {
            set(&mut p, command.clone(), args.clone());
            let what = format!("{command:?} {args:?}");
            match runs {
                Some(s) => {
                    assert_eq!(step(&p, true, at(s - 1)), Step::Wait, "{what}");
                    assert_eq!(step(&p, true, at(s)), Step::Exit(0), "{what}");
                }
                None => assert_eq!(step(&p, true, at(1_000_000)), Step::Wait, "{what}"),
            }
        }
        // The annotation wins over the command; the longest of several containers counts.
        set(&mut p, Some(vec!["sleep", "60"]), None);
        p.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::sim::RUN_SECONDS.to_string(),
            "5".to_string(),
        )]));
        assert_eq!(step(&p, true, at(5)), Step::Exit(0));
        p.metadata.annotations = None;
        if let Some(s) = p.spec.as_mut() {
            let mut other = s.containers[0].clone();
            other.name = "side".into();
            other.command = Some(vec!["sleep".into(), "120".into()]);
            s.containers.push(other);
        }
        assert_eq!(step(&p, true, at(60)), Step::Wait);
        assert_eq!(step(&p, true, at(120)), Step::Exit(0));
    }

    #[test]
    fn a_pod_active_past_its_deadline_is_killed_and_fails() {
        // Runs 100 s, but may be active 10 s at most: killed at 10 s, whatever its policy.
        let mut p = pod();
        p.metadata.annotations = Some(BTreeMap::from([(
            fabrik_api::sim::RUN_SECONDS.to_string(),
            "100".to_string(),
        )]));
        p.status = Some(PodStatus {
            phase: Some("Running".into()),
            start_time: Some(Time(at(0))),
            ..Default::default()
        });
        if let Some(s) = p.spec.as_mut() {
            s.active_deadline_seconds = Some(10);
        }
        assert_eq!(step(&p, true, at(9)), Step::Wait);
        assert_eq!(step(&p, true, at(10)), Step::DeadlineExceeded);
        let status = deadline_exceeded_status(&p, at(10));
        assert_eq!(status["status"]["phase"], "Failed");
        assert_eq!(status["status"]["reason"], "DeadlineExceeded");
        assert_eq!(
            status["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"],
            137
        );
        // Not started yet (no startTime): no deadline runs.
        p.status = None;
        assert_eq!(step(&p, false, at(50)), Step::Start);
        // A pod being deleted is finished, not failed.
        let d = deleting(p.clone(), 0, 30);
        assert_eq!(step(&d, true, at(50)), Step::Finish);
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
    fn a_first_run_is_timed_from_the_precise_start() {
        let mut p = running_since(
            annotated(pod(), &[(fabrik_api::sim::RUN_SECONDS, "3")]),
            "Never",
            0,
        );
        let start = at(0) + SignedDuration::from_millis(900);
        let patch = run_annotation(fabrik_gpu::metering::ANNOTATION_STARTED_AT, start);
        let v = serde_json::to_value(&p).expect("pod");
        p = serde_json::from_value(fabrik_machinery::patch::merge_patch(&v, &patch)).expect("pod");
        assert_eq!(
            patch["metadata"]["annotations"][fabrik_gpu::metering::ANNOTATION_STARTED_AT],
            "2023-11-14T22:13:20.9Z"
        );
        // The status says 0 s; the containers started at 0.9 s and run 3 s.
        let almost = at(3) + SignedDuration::from_millis(899);
        assert_eq!(step(&p, true, almost), Step::Wait);
        assert_eq!(step(&p, true, start + seconds(3.0)), Step::Exit(0));
        assert_eq!(fabrik_gpu::metering::run_times(&p).0, Some(start));
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
