//! `kubectl logs` and `kubectl exec` on the simulated nodes of `fabrik up` (what the kubelet
//! stand-in recorded; the few commands a simulated container answers) and on a tenant pod
//! (proxied to its host pod: the stream passes through, stdin, stdout and exit codes included);
//! `attach` and `port-forward` are refused with the reason, through the tenant as well.

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::{kubectls, Fabrik};

fn kc(k: &e2e::Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?)
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn logs_of_host_and_tenant_pods() -> Result<()> {
    let f = Fabrik::start()?;
    let k = kubectls().pop().expect("kubectl 1.35");
    let cfg = f.data_dir().join("logs.kubeconfig");
    let out = f.fabrik_cli(&[
        "tenant",
        "create",
        "logs",
        "--wait",
        "--kubeconfig-out",
        &cfg.display().to_string(),
    ])?;
    if !out.status.success() {
        bail!("tenant create: {}", String::from_utf8_lossy(&out.stderr));
    }
    let out = kc(&k, &cfg, &["run", "talker", "--image", "busybox"])?;
    assert!(out.status.success(), "{}", text(&out));
    // Wait until the tenant pod runs (its host pod is on a simulated node).
    let start = Instant::now();
    loop {
        let out = kc(&k, &cfg, &["logs", "talker"])?;
        if out.status.success() && !out.stdout.is_empty() {
            let tenant_log = String::from_utf8_lossy(&out.stdout).into_owned();
            // The same log through the host.
            let host = f.kubeconfig();
            let host_log = kc(
                &k,
                &host,
                &["logs", "-n", "fabrik-logs", "talker-x-default-x-logs"],
            )?;
            assert!(host_log.status.success(), "{}", text(&host_log));
            assert_eq!(String::from_utf8_lossy(&host_log.stdout), tenant_log);
            let tail = kc(&k, &cfg, &["logs", "talker", "--tail", "1"])?;
            assert_eq!(
                String::from_utf8_lossy(&tail.stdout).lines().count(),
                1,
                "{}",
                text(&tail)
            );
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("no log for the tenant pod: {}", text(&out));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    // A GPU pod of the tenant is metered, and the host's /metrics shows it under the tenant.
    let gpu = f.data_dir().join("gpu-pod.json");
    std::fs::write(
        &gpu,
        r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"trainer"},
"spec":{"containers":[{"name":"c","image":"cuda","resources":{"limits":{"nvidia.com/gpu":"1"}}}]}}"#,
    )?;
    let out = kc(&k, &cfg, &["create", "-f", &gpu.display().to_string()])?;
    assert!(out.status.success(), "{}", text(&out));
    let start = Instant::now();
    loop {
        let out = kc(&k, &f.kubeconfig(), &["get", "--raw", "/metrics"])?;
        let body = String::from_utf8_lossy(&out.stdout);
        if body.contains("fabrik_gpu_allocated_seconds_total{tenant=\"logs\"") {
            assert!(body.contains("apiserver_request_total"), "API metrics kept");
            break;
        }
        if start.elapsed() > Duration::from_secs(30) {
            bail!("the tenant's GPU pod was not metered on /metrics: {body}");
        }
        std::thread::sleep(Duration::from_millis(300));
    }
    // A container that does not exist.
    let out = kc(&k, &cfg, &["logs", "talker", "-c", "nope"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("container nope is not valid for pod talker"),
        "{}",
        text(&out)
    );
    exec_into_tenant_and_host_pods(&f, &cfg)?;
    follow_until_the_pod_goes(&k, &cfg)?;
    Ok(())
}

fn exec_into_tenant_and_host_pods(f: &Fabrik, cfg: &Path) -> Result<()> {
    let all = kubectls();
    let new = all.last().expect("a kubectl");
    // Through the tenant (its proxy hands the stream to the host in the same process).
    let out = kc(
        new,
        cfg,
        &["exec", "talker", "--", "echo", "hello", "tenant"],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "hello tenant\n");
    let out = kc(new, cfg, &["exec", "talker", "--", "hostname"])?;
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "talker\n",
        "the tenant's hostname, not the host pod's name: {}",
        text(&out)
    );
    let mut cat = std::process::Command::new(&new.path)
        .arg("--kubeconfig")
        .arg(cfg)
        .args(["exec", "-i", "talker", "--", "cat"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let input: Vec<u8> = (0..2000)
        .flat_map(|i| format!("{i}\n").into_bytes())
        .collect();
    if let Some(mut stdin) = cat.stdin.take() {
        use std::io::Write;
        stdin.write_all(&input)?;
    }
    let out = cat.wait_with_output()?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        out.stdout == input,
        "cat gave back {} of {} bytes",
        out.stdout.len(),
        input.len()
    );
    // Exit codes and stderr come back as the container ends.
    let out = kc(new, cfg, &["exec", "talker", "--", "false"])?;
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let out = kc(new, cfg, &["exec", "talker", "--", "rm", "-rf", "/"])?;
    assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    assert!(text(&out).contains("simulated node"), "{}", text(&out));
    // attach and port-forward: the host's reason, through the tenant, without host names.
    let out = kc(new, cfg, &["attach", "talker"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("no process to attach to") && !text(&out).contains("-x-"),
        "{}",
        text(&out)
    );
    let out = kc(new, cfg, &["port-forward", "talker", "18080:80"])?;
    assert!(!out.status.success());
    assert!(text(&out).contains("nothing listens"), "{}", text(&out));
    // kubectl before 1.30 speaks SPDY: passed to the host, which says what it speaks.
    if let Some(old) = all.iter().find(|k| k.version == "1.27") {
        let out = kc(old, cfg, &["exec", "talker", "--", "echo", "x"])?;
        assert!(!out.status.success());
        assert!(text(&out).contains("WebSocket only"), "{}", text(&out));
    }
    // On the host directly.
    let out = kc(
        new,
        &f.kubeconfig(),
        &[
            "exec",
            "-n",
            "fabrik-logs",
            "talker-x-default-x-logs",
            "--",
            "env",
        ],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("HOSTNAME=talker\n"),
        "{}",
        text(&out)
    );
    // RBAC: `get pods/exec` without `create` opens no stream (upstream since 1.31).
    let role = f.data_dir().join("exec-get.yaml");
    std::fs::write(
        &role,
        r#"apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: exec-get, namespace: default}
rules:
- {apiGroups: [""], resources: [pods], verbs: [get, list]}
- {apiGroups: [""], resources: [pods/exec], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: exec-get, namespace: default}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: exec-get}
subjects: [{apiGroup: rbac.authorization.k8s.io, kind: User, name: viewer}]
"#,
    )?;
    let out = kc(new, cfg, &["apply", "-f", &role.display().to_string()])?;
    assert!(out.status.success(), "{}", text(&out));
    let out = kc(
        new,
        cfg,
        &["exec", "--as", "viewer", "talker", "--", "echo", "x"],
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("cannot create resource \"pods/exec\""),
        "{}",
        text(&out)
    );
    Ok(())
}

/// `kubectl logs --follow` through the tenant: the last line now, and the stream ends when the
/// pod goes away.
fn follow_until_the_pod_goes(k: &e2e::Kubectl, cfg: &Path) -> Result<()> {
    let mut follow = std::process::Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(cfg)
        .args(["logs", "--follow", "--tail", "1", "talker"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()?;
    let stdout = follow.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout).lines() {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let first = rx.recv_timeout(Duration::from_secs(30))??;
    assert!(
        first.contains("GPU devices"),
        "the last line first: {first}"
    );
    let out = kc(k, cfg, &["delete", "pod", "talker", "--wait=false"])?;
    assert!(out.status.success(), "{}", text(&out));
    let start = Instant::now();
    loop {
        if let Some(status) = follow.try_wait()? {
            assert!(status.success(), "kubectl logs -f ended with {status}");
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            let _ = follow.kill();
            bail!("kubectl logs --follow did not end when the pod was deleted");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
