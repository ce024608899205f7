//! The simulated nodes' container lifecycle as a tenant drives it with the documented
//! `sim.fabrik.dev/*` pod annotations (kept on the host copies of its pods): a Job whose pods
//! exit 1 fails after its `backoffLimit`, a Deployment's crashing container restarts with
//! back-off (`CrashLoopBackOff`, `restartCount`), a container marked not ready keeps its pod
//! out of its Service's endpoints.

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
    Ok(())
}
