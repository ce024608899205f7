//! The simulated nodes' container lifecycle as a tenant drives it with the documented
//! `sim.fabrik.dev/*` pod annotations (kept on the host copies of its pods): a Job whose pods
//! exit 1 fails after its `backoffLimit`, a Deployment's crashing container restarts with
//! back-off (`CrashLoopBackOff`, `restartCount`), a container marked not ready keeps its pod
//! out of its Service's endpoints, a pod active past its `activeDeadlineSeconds` fails with
//! `DeadlineExceeded`.

use std::time::Duration;

use anyhow::Result;
use e2e::kc_apply_ok as apply_ok;
use e2e::{kc_ok, kubectls, Fabrik};

fn poll(what: &str, check: impl FnMut() -> Result<bool>) -> Result<()> {
    e2e::poll_until(what, Duration::from_secs(60), check)
}

#[test]
fn tenants_drive_exit_codes_crash_loops_and_readiness() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("lifecycle", &[])?;
    let k = &kubectls()[0];

    // A Job whose pods exit 1: Failed once its backoffLimit is used up.
    apply_ok(
        k,
        &cfg,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: failing}\nspec:\n  backoffLimit: 1\n  template:\n    metadata:\n      annotations: {sim.fabrik.dev/exit-code: \"1\"}\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: busybox}]\n",
    )?;
    poll("the Job failed", || {
        let c = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "job",
                "failing",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}",
            ],
        )?;
        Ok(c == "BackoffLimitExceeded")
    })?;
    let codes = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "pods",
            "-l",
            "job-name=failing",
            "-o",
            "jsonpath={.items[*].status.containerStatuses[0].state.terminated.exitCode}",
        ],
    )?;
    assert_eq!(codes, "1 1", "two pods, each exited 1");

    // A crashing container of a Deployment: restarted with back-off.
    apply_ok(
        k,
        &cfg,
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: crashy}\nspec:\n  selector: {matchLabels: {app: crashy}}\n  template:\n    metadata:\n      labels: {app: crashy}\n      annotations: {sim.fabrik.dev/run-seconds: \"1\", sim.fabrik.dev/exit-code: \"2\"}\n    spec:\n      containers: [{name: main, image: busybox}]\n",
    )?;
    poll("the crash loop", || {
        let s = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pods",
                "-l",
                "app=crashy",
                "-o",
                "jsonpath={.items[0].status.containerStatuses[0].restartCount}/{.items[0].status.containerStatuses[0].state.waiting.reason}/{.items[0].status.containerStatuses[0].lastState.terminated.exitCode}",
            ],
        )?;
        Ok(s == "1/CrashLoopBackOff/2")
    })?;
    let row = kc_ok(
        k,
        &cfg,
        &["get", "pods", "-l", "app=crashy", "--no-headers"],
    )?;
    assert!(row.contains("CrashLoopBackOff"), "{row}");

    // A container that is not ready: Running, and not an endpoint of its Service.
    apply_ok(
        k,
        &cfg,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: unready, labels: {app: unready}, annotations: {sim.fabrik.dev/ready: \"false\"}}\nspec:\n  containers: [{name: main, image: nginx}]\n---\napiVersion: v1\nkind: Service\nmetadata: {name: unready}\nspec:\n  selector: {app: unready}\n  ports: [{port: 80}]\n",
    )?;
    poll("the pod running, not ready", || {
        let s = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pod",
                "unready",
                "-o",
                "jsonpath={.status.phase}/{.status.conditions[?(@.type==\"Ready\")].status}",
            ],
        )?;
        Ok(s == "Running/False")
    })?;
    let ready_endpoints = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "endpoints",
            "unready",
            "-o",
            "jsonpath={.subsets[*].addresses[*].ip}",
        ],
    )?;
    assert!(ready_endpoints.trim().is_empty(), "{ready_endpoints}");

    // A pod that would run 10 minutes but may be active 2 s: killed at its deadline, Failed
    // with reason DeadlineExceeded, as a kubelet does.
    apply_ok(
        k,
        &cfg,
        "apiVersion: v1\nkind: Pod\nmetadata: {name: bounded, annotations: {sim.fabrik.dev/run-seconds: \"600\"}}\nspec:\n  restartPolicy: Never\n  activeDeadlineSeconds: 2\n  containers: [{name: main, image: busybox}]\n",
    )?;
    poll("the pod failed at its deadline", || {
        let s = kc_ok(
            k,
            &cfg,
            &[
                "get",
                "pod",
                "bounded",
                "-o",
                "jsonpath={.status.phase}/{.status.reason}/{.status.containerStatuses[0].state.terminated.exitCode}",
            ],
        )?;
        Ok(s == "Failed/DeadlineExceeded/137")
    })?;
    Ok(())
}

/// What training frameworks' Jobs rely on, driven by the simulated exit codes: a pod failure
/// policy that fails the Job at the first matching exit code, a backoff limit per index
/// (failed indexes reported, the Job failed once every index is done), and a success policy
/// that completes an Indexed Job when its leader index succeeds.
#[test]
fn jobs_follow_their_failure_and_success_policies() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("training", &[])?;
    let k = &kubectls()[0];
    let job_state = |name: &str| {
        kc_ok(
            k,
            &cfg,
            &[
                "get",
                "job",
                name,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Failed\")].reason}{.status.conditions[?(@.type==\"Complete\")].reason}",
            ],
        )
    };

    apply_ok(
        k,
        &cfg,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: fatal}\nspec:\n  backoffLimit: 6\n  podFailurePolicy:\n    rules:\n    - action: FailJob\n      onExitCodes: {containerName: main, operator: In, values: [42]}\n  template:\n    metadata:\n      annotations: {sim.fabrik.dev/run-seconds: \"1\", sim.fabrik.dev/exit-code: \"42\"}\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: trainer}]\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: per-index}\nspec:\n  completionMode: Indexed\n  completions: 2\n  parallelism: 2\n  backoffLimitPerIndex: 1\n  template:\n    metadata:\n      annotations: {sim.fabrik.dev/run-seconds: \"1\", sim.fabrik.dev/exit-code: \"1\"}\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: trainer}]\n---\napiVersion: batch/v1\nkind: Job\nmetadata: {name: leader}\nspec:\n  completionMode: Indexed\n  completions: 3\n  parallelism: 3\n  successPolicy:\n    rules: [{succeededIndexes: \"0\"}]\n  template:\n    metadata:\n      annotations: {sim.fabrik.dev/run-seconds: \"1\"}\n    spec:\n      restartPolicy: Never\n      containers: [{name: main, image: trainer}]\n",
    )?;
    poll("the failure policy failing the Job", || {
        Ok(job_state("fatal")? == "PodFailurePolicy")
    })?;
    let message = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "job",
            "fatal",
            "-o",
            "jsonpath={.status.conditions[?(@.type==\"Failed\")].message}",
        ],
    )?;
    assert!(
        message.contains("failed with exit code 42 matching FailJob rule at index 0"),
        "{message}"
    );
    let pods = kc_ok(
        k,
        &cfg,
        &["get", "pods", "-l", "job-name=fatal", "-o", "name"],
    )?;
    assert_eq!(pods.lines().count(), 1, "no retry after FailJob: {pods}");

    poll("every index failed twice", || {
        Ok(job_state("per-index")? == "FailedIndexes")
    })?;
    let failed = kc_ok(
        k,
        &cfg,
        &[
            "get",
            "job",
            "per-index",
            "-o",
            "jsonpath={.status.failedIndexes}/{.status.failed}",
        ],
    )?;
    assert_eq!(failed, "0-1/4");

    poll("the success policy completing the Job", || {
        Ok(job_state("leader")? == "SuccessPolicy")
    })?;

    // A failure policy needs restartPolicy Never: refused at once, the field named.
    let out = e2e::kc_apply(
        k,
        &cfg,
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: wrong}\nspec:\n  podFailurePolicy:\n    rules: [{action: Ignore, onPodConditions: [{type: DisruptionTarget}]}]\n  template:\n    spec:\n      restartPolicy: OnFailure\n      containers: [{name: main, image: trainer}]\n",
    )?;
    assert!(!out.status.success());
    let why = String::from_utf8_lossy(&out.stderr);
    assert!(why.contains("spec.template.spec.restartPolicy"), "{why}");
    Ok(())
}

/// Init containers run one after the other before the app containers; a sidecar
/// (`restartPolicy: Always` init container) starts in its turn, runs beside them and stops
/// after them — in the status a tenant reads and in `kubectl logs`.
#[test]
fn init_containers_run_in_order_and_sidecars_stop_last() -> Result<()> {
    let f = Fabrik::start()?;
    let cfg = f.create_tenant("staged", &[])?;
    let k = &kubectls()[0];
    apply_ok(
        k,
        &cfg,
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: staged\n  annotations: {sim.fabrik.dev/run-seconds: \"2\", sim.fabrik.dev/init-run-seconds: \"3\"}\nspec:\n  restartPolicy: Never\n  initContainers:\n  - {name: fetch, image: busybox}\n  - {name: proxy, image: envoy, restartPolicy: Always}\n  - {name: migrate, image: busybox}\n  containers: [{name: main, image: trainer}]\n",
    )?;
    let jsonpath = |path: &str| {
        kc_ok(
            k,
            &cfg,
            &["get", "pod", "staged", "-o", &format!("jsonpath={path}")],
        )
    };
    poll("the first init container running", || {
        Ok(
            jsonpath("{.status.phase}/{.status.initContainerStatuses[0].state.running.startedAt}")?
                .starts_with("Pending/2"),
        )
    })?;
    let waiting = jsonpath("{.status.initContainerStatuses[2].state.waiting.reason}/{.status.containerStatuses[0].state.waiting.reason}")?;
    assert_eq!(waiting, "PodInitializing/PodInitializing");
    poll("the pod done", || {
        Ok(jsonpath("{.status.phase}")? == "Succeeded")
    })?;
    let finished = |i: usize| {
        jsonpath(&format!(
            "{{.status.initContainerStatuses[{i}].state.terminated.finishedAt}}"
        ))
    };
    let (fetch, proxy, migrate) = (finished(0)?, finished(1)?, finished(2)?);
    let main = jsonpath("{.status.containerStatuses[0].state.terminated.finishedAt}")?;
    assert!(
        !fetch.is_empty() && fetch <= migrate,
        "fetch {fetch} before migrate {migrate}"
    );
    assert!(
        migrate <= main && main <= proxy,
        "migrate {migrate}, main {main}, proxy {proxy}"
    );
    let logs = kc_ok(k, &cfg, &["logs", "staged", "-c", "migrate"])?;
    assert!(logs.contains("init container migrate completed"), "{logs}");
    let logs = kc_ok(k, &cfg, &["logs", "staged", "-c", "proxy"])?;
    assert!(
        logs.contains("sidecar proxy") && logs.contains("stopped after the app containers"),
        "{logs}"
    );
    Ok(())
}
