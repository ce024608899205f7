//! Issue day-one: what a new user meets on the command line. Each case drives the real
//! `fabrik` binary and checks its exit code, its one-line message, and that nothing changed.

use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use anyhow::{bail, Result};
use e2e::{fabrik_bin, Fabrik};

/// `fabrik up ARGS` run to its end (it must fail fast: a hang is an error), with
/// `RUST_BACKTRACE=1` set as many Rust users have it.
fn up_fails(args: &[&str]) -> Result<Output> {
    let mut child = Command::new(fabrik_bin())
        .arg("up")
        .args(args)
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = std::time::Instant::now() + e2e::STARTUP;
    while child.try_wait()?.is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            bail!("fabrik up {args:?} did not exit");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(child.wait_with_output()?)
}

/// The error line: exactly one line on stderr starting `fabrik: error:`, no backtrace, no
/// repeated causes.
fn error_line(out: &Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    let errors: Vec<&str> = stderr
        .lines()
        .filter(|l| l.starts_with("fabrik: error:"))
        .collect();
    assert_eq!(errors.len(), 1, "one error line: {stderr}");
    assert!(
        !stderr.contains("backtrace") && !stderr.contains("Caused by"),
        "user errors are not panics: {stderr}"
    );
    assert!(!out.status.success(), "a failure exits non-zero: {stderr}");
    errors[0].to_string()
}

fn listing(dir: &Path) -> Result<Vec<(String, u64)>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        names.push((
            entry.file_name().to_string_lossy().into_owned(),
            entry.metadata()?.len(),
        ));
    }
    names.sort();
    Ok(names)
}

#[test]
fn a_second_fabrik_up_on_a_live_data_dir_touches_nothing() -> Result<()> {
    let f = Fabrik::start()?;
    let dir = f.data_dir();
    let kubeconfig = std::fs::read(f.kubeconfig())?;
    // The running server makes its simulated nodes' state directory just after it serves.
    e2e::poll_until(
        "the simulated nodes' state directory",
        std::time::Duration::from_secs(60),
        || Ok(dir.join("nodes").is_dir()),
    )?;
    let before = listing(&dir)?;

    let out = up_fails(&[
        "--data-dir",
        &dir.display().to_string(),
        "--listen",
        "127.0.0.1:0",
        "--nodes",
        "0",
    ])?;
    let line = error_line(&out);
    assert!(
        line.contains("in use by another fabrik up") && line.contains(&dir.display().to_string()),
        "{line}"
    );
    // The running server's files are untouched, and it still serves with its kubeconfig.
    assert_eq!(std::fs::read(f.kubeconfig())?, kubeconfig);
    assert_eq!(listing(&dir)?, before);
    let ns = f.kubectl(&e2e::kubectls()[0], &["get", "ns", "default", "-o", "name"])?;
    assert!(
        !f.log().contains('\x1b'),
        "no colour codes in a log that is a file"
    );
    assert!(
        ns.status.success(),
        "{}",
        String::from_utf8_lossy(&ns.stderr)
    );
    Ok(())
}

#[test]
fn a_port_in_use_leaves_no_data_dir_behind() -> Result<()> {
    let held = TcpListener::bind("127.0.0.1:0")?;
    let port = held.local_addr()?.port();
    let tmp = tempfile::tempdir()?;
    let dir = tmp.path().join("never");
    let listen = format!("127.0.0.1:{port}");
    let out = up_fails(&[
        "--data-dir",
        &dir.display().to_string(),
        "--listen",
        &listen,
    ])?;
    let line = error_line(&out);
    assert!(
        line.contains(&format!("cannot listen on {listen}")),
        "{line}"
    );
    assert_eq!(
        line.matches("Address already in use").count(),
        1,
        "the cause once: {line}"
    );
    assert!(!dir.exists(), "nothing created: {:?}", listing(tmp.path()));
    Ok(())
}

/// The CLI's one error line for `fabrik tenant ARGS` (against `f`), which must fail.
fn tenant_fails(f: &Fabrik, args: &[&str]) -> Result<String> {
    let mut full = vec!["tenant"];
    full.extend_from_slice(args);
    let out = f.fabrik_cli(&full)?;
    Ok(error_line(&out))
}

/// The tenants' names, as `fabrik tenant list` prints them.
fn tenant_list(f: &Fabrik) -> Result<Vec<String>> {
    let out = f.fabrik_cli(&["tenant", "list"])?;
    if !out.status.success() {
        bail!("tenant list: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .skip(1)
        .filter_map(|l| l.split_whitespace().next().map(str::to_string))
        .collect())
}

#[test]
fn bad_tenant_input_is_refused_in_one_line_and_creates_nothing() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let before = tenant_list(&f)?;
    let long70 = "a".repeat(70);
    let long50 = "b".repeat(50);
    let tmp = tempfile::tempdir()?;
    let missing = tmp.path().join("no-such-dir").join("k1.kubeconfig");
    let missing = missing.display().to_string();
    let cases: Vec<(Vec<&str>, &str)> = vec![
        (
            vec!["create", "m1", "--memory=-5Gi"],
            "must not be negative",
        ),
        (vec!["create", "m2", "--cpu", "-1"], "must not be negative"),
        (
            vec!["create", "m3", "--gpus", "-1"],
            "spec.quota.gpus: must not be negative",
        ),
        (
            vec!["create", "m4", "--gpu-sharing", "mig:0g.5gb"],
            "a MIG profile looks like",
        ),
        (
            vec!["create", "m5", "--gpu-sharing", "share:0,10"],
            "a shared slice looks like",
        ),
        (vec!["create", "m6", "--owner", ""], "not an empty name"),
        (
            vec!["create", "m7", "--owner", "group:"],
            "not an empty name",
        ),
        (vec!["create", &long70], "no more than 40 characters"),
        (vec!["create", &long50], "no more than 40 characters"),
        (
            vec!["create", "k1", "--kubeconfig-out", &missing],
            "does not exist; nothing was created",
        ),
        (vec!["kubeconfig", "nosuch"], "tenant nosuch not found"),
        (vec!["get", "nosuch"], "tenant nosuch not found"),
        (vec!["delete", "nosuch"], "tenant nosuch not found"),
    ];
    for (args, want) in cases {
        let line = tenant_fails(&f, &args)?;
        assert!(line.contains(want), "fabrik tenant {args:?}: {line}");
        assert!(
            !line.contains("-- -1"),
            "no hint to make a value positional: {line}"
        );
    }
    assert_eq!(tenant_list(&f)?, before, "nothing was created");

    // A tenant's kubeconfig where the host's is needed is named for what it is.
    let demo = f.data_dir().join("tenants").join("demo.kubeconfig");
    let demo = demo.display().to_string();
    let line = tenant_fails(&f, &["list", "--kubeconfig", &demo])?;
    assert!(line.contains("points at a tenant cluster"), "{line}");
    // A file that is no kubeconfig: the parser's first line, no snippet, no hint that fabrik
    // up is not running.
    let garbage = tmp.path().join("garbage.kubeconfig");
    std::fs::write(&garbage, "garbage: [\n")?;
    let garbage = garbage.display().to_string();
    let out = f.fabrik_cli(&["tenant", "list", "--kubeconfig", &garbage])?;
    let line = error_line(&out);
    assert!(
        line.contains("is not a kubeconfig") && !line.contains("fabrik up"),
        "{line}"
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        line,
        "nothing but the error line"
    );

    // Results go to stdout, progress to stderr; `get` shows no managedFields.
    let out = f.fabrik_cli(&["tenant", "create", "ok1"])?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "tenant/ok1 created\n");
    let got = f.fabrik_cli(&["tenant", "get", "ok1"])?;
    let got = String::from_utf8_lossy(&got.stdout);
    assert!(
        got.contains("name: ok1") && !got.contains("managedFields"),
        "{got}"
    );
    Ok(())
}

/// Polls `check` every 100 ms until it gives a value or `within` has passed.
fn poll<T>(
    within: Duration,
    what: &str,
    mut check: impl FnMut() -> Result<Option<T>>,
) -> Result<T> {
    let deadline = std::time::Instant::now() + within;
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if std::time::Instant::now() > deadline {
            bail!("{what}: not within {} s", within.as_secs());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn json_of(out: &str) -> Result<serde_json::Value> {
    Ok(serde_json::from_str(out)?)
}

/// Item 2: a pod without requests in a tenant whose memory quota is below the host's default
/// request is refused at `kubectl run` (the tenant applies the host's defaults); a pod the host
/// refuses for a reason the tenant cannot see (an operator's quota on the host namespace) is
/// told in the tenant — a `PodScheduled=False` condition and one Warning Event naming the
/// reason — retried with backoff by one loop (one warning, a few debug retries, not one a
/// second), and runs once the host accepts it.
#[test]
fn a_pod_the_host_refuses_is_told_in_the_tenant_and_retried_with_backoff() -> Result<()> {
    let f = Fabrik::start_with_env(&[], &[("FABRIK_LOG", "info,syncer=debug")])?;
    let k = e2e::kubectls().pop().expect("kubectl");
    let cfg = f.create_tenant("m2", &["--memory", "100Mi"])?;
    // Refused at once: the host's default request (128Mi) does not fit 100Mi.
    let out = e2e::kc(&k, &cfg, &["run", "nolimits", "--image=busybox"])?;
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "admitted: {err}");
    assert!(
        err.contains("exceeded the quota of tenant \"m2\"") && err.contains("requests.memory"),
        "{err}"
    );
    // What the tenant admitted carries the defaults it was counted with.
    let pod = |name: &str, mem: &str| {
        format!(
            r#"{{"apiVersion":"v1","kind":"Pod","metadata":{{"name":"{name}"}},
"spec":{{"containers":[{{"name":"c","image":"busybox","resources":{{"requests":{{"memory":"{mem}"}}}}}}]}}}}"#
        )
    };
    let dir = tempfile::tempdir()?;
    let apply = |name: &str, body: String| -> Result<Output> {
        let file = dir.path().join(format!("{name}.json"));
        std::fs::write(&file, body)?;
        e2e::kc(&k, &cfg, &["create", "-f", &file.display().to_string()])
    };
    let out = apply("small", pod("small", "50Mi"))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let small = json_of(&e2e::kc_ok(
        &k,
        &cfg,
        &["get", "pod", "small", "-o", "json"],
    )?)?;
    assert_eq!(
        small["spec"]["containers"][0]["resources"]["requests"]["cpu"], "100m",
        "host default applied in the tenant: {small}"
    );
    e2e::kc_ok(&k, &cfg, &["delete", "pod", "small", "--wait=false"])?;

    // An operator's quota on the host namespace, which the tenant does not see.
    let host = f.kubeconfig();
    let quota = dir.path().join("ops.json");
    std::fs::write(
        &quota,
        r#"{"apiVersion":"v1","kind":"ResourceQuota","metadata":{"name":"ops","namespace":"fabrik-m2"},"spec":{"hard":{"count/pods":"0","pods":"0"}}}"#,
    )?;
    e2e::kc_ok(&k, &host, &["create", "-f", &quota.display().to_string()])?;
    let out = apply("blocked", pod("blocked", "50Mi"))?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let started = std::time::Instant::now();

    let condition = poll(Duration::from_secs(20), "RefusedByHost condition", || {
        let p = json_of(&e2e::kc_ok(
            &k,
            &cfg,
            &["get", "pod", "blocked", "-o", "json"],
        )?)?;
        Ok(p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled" && c["reason"] == "RefusedByHost")
            .cloned())
    })?;
    assert_eq!(condition["status"], "False");
    let message = condition["message"].as_str().unwrap_or("");
    assert!(message.contains("exceeded quota: ops"), "{condition}");
    let events = poll(Duration::from_secs(20), "RefusedByHost Event", || {
        let list = json_of(&e2e::kc_ok(
            &k,
            &cfg,
            &[
                "get",
                "events",
                "--field-selector",
                "involvedObject.name=blocked",
                "-o",
                "json",
            ],
        )?)?;
        let found: Vec<serde_json::Value> = list["items"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|e| e["reason"] == "RefusedByHost")
            .cloned()
            .collect();
        Ok((!found.is_empty()).then_some(found))
    })?;
    assert_eq!(events[0]["type"], "Warning");
    assert!(
        events[0]["message"]
            .as_str()
            .is_some_and(|m| m.contains("exceeded quota: ops")),
        "{}",
        events[0]
    );

    // Backoff, one loop: over 12 s, retries at 1, 2, 4, 8 s intervals (at most 5 attempts, and
    // never more than one retry loop: a loop per resync would add attempts), one warning.
    let window = Duration::from_secs(12);
    if let Some(rest) = window.checked_sub(started.elapsed()) {
        std::thread::sleep(rest);
    }
    let log = f.log();
    let ours = |l: &&str| l.contains("name: \"blocked\"") && l.contains("Pod");
    let warnings = log
        .lines()
        .filter(ours)
        .filter(|l| l.contains("sync failed; retrying with backoff"))
        .count();
    let retries = log
        .lines()
        .filter(ours)
        .filter(|l| l.contains("sync failed again"))
        .count();
    assert_eq!(warnings, 1, "one warning per distinct error:\n{log}");
    assert!(
        (1..=5).contains(&retries),
        "backoff: {retries} retries in {} s:\n{log}",
        started.elapsed().as_secs()
    );
    let events = json_of(&e2e::kc_ok(&k, &cfg, &["get", "events", "-o", "json"])?)?;
    let refused = events["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| e["reason"] == "RefusedByHost")
        .count();
    assert_eq!(refused, 1, "one Event per distinct refusal: {events}");

    // Once the host accepts it, the pod is placed.
    e2e::kc_ok(
        &k,
        &host,
        &["delete", "resourcequota", "ops", "-n", "fabrik-m2"],
    )?;
    poll(
        Duration::from_secs(60),
        "pod placed after the host quota went",
        || {
            let p = json_of(&e2e::kc_ok(
                &k,
                &cfg,
                &["get", "pod", "blocked", "-o", "json"],
            )?)?;
            Ok(p["spec"]["nodeName"]
                .as_str()
                .is_some_and(|n| !n.is_empty())
                .then_some(()))
        },
    )?;
    Ok(())
}

/// Item 3: the server (the host's admission on `fabrik up`, the Tenant CRD's schema) and the
/// CLI give one verdict on the same spec, and the server's refusal names the field.
#[test]
fn the_server_and_the_cli_give_one_verdict_on_a_tenant_spec() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = e2e::kubectls().pop().expect("kubectl");
    let dir = tempfile::tempdir()?;
    let long = "c".repeat(41);
    // (name, CLI flags, spec, accepted, the field a refusal names)
    let cases: Vec<(&str, Vec<&str>, serde_json::Value, bool, &str)> = vec![
        (
            "v1",
            vec!["--memory=-5Gi"],
            serde_json::json!({"quota": {"memory": "-5Gi"}}),
            false,
            "spec.quota.memory",
        ),
        (
            "v2",
            vec!["--cpu=lots"],
            serde_json::json!({"quota": {"cpu": "lots"}}),
            false,
            "spec.quota.cpu",
        ),
        (
            "v3",
            vec!["--gpus=-1"],
            serde_json::json!({"quota": {"gpus": -1}}),
            false,
            "spec.quota.gpus",
        ),
        (
            "v4",
            vec!["--gpu-sharing=mig:0g.5gb"],
            serde_json::json!({"quota": {"gpuSharing": "mig:0g.5gb"}}),
            false,
            "spec.quota.gpuSharing",
        ),
        (
            "v5",
            vec!["--gpu-sharing=share:0,10"],
            serde_json::json!({"quota": {"gpuSharing": "share:0,10"}}),
            false,
            "spec.quota.gpuSharing",
        ),
        (
            "v6",
            vec!["--owner="],
            serde_json::json!({"owners": [""]}),
            false,
            "spec.owners",
        ),
        (
            "v7",
            vec!["--owner=group:"],
            serde_json::json!({"owners": ["group:"]}),
            false,
            "spec.owners",
        ),
        (&long, vec![], serde_json::json!({}), false, "metadata.name"),
        (
            "v9",
            vec![
                "--gpu-sharing=share:8192,25",
                "--cpu=500m",
                "--memory=1Gi",
                "--gpus=2",
            ],
            serde_json::json!({"quota": {"gpuSharing": "share:8192,25", "cpu": "500m", "memory": "1Gi", "gpus": 2}}),
            true,
            "",
        ),
        (
            "v10",
            vec!["--gpu-sharing=mig:1g.18gb", "--owner=group:ml"],
            serde_json::json!({"quota": {"gpuSharing": "mig:1g.18gb"}, "owners": ["group:ml"]}),
            true,
            "",
        ),
    ];
    for (name, flags, spec, accepted, field) in cases {
        let tenant = serde_json::json!({"apiVersion": "fabrik.dev/v1alpha1", "kind": "Tenant",
            "metadata": {"name": name}, "spec": spec});
        let file = dir
            .path()
            .join(format!("{}.json", &name[..name.len().min(8)]));
        std::fs::write(&file, tenant.to_string())?;
        let server = e2e::kc(
            &k,
            &f.kubeconfig(),
            &[
                "create",
                "--dry-run=server",
                "-f",
                &file.display().to_string(),
            ],
        )?;
        let server_err = String::from_utf8_lossy(&server.stderr).into_owned();
        assert_eq!(
            server.status.success(),
            accepted,
            "server on {name} {spec}: {server_err}"
        );
        if !accepted {
            assert!(
                server_err.contains(field) && server_err.contains("is invalid"),
                "server on {name} {spec} names {field}: {server_err}"
            );
        }
        let mut args = vec!["tenant", "create", name];
        args.extend(flags.iter().copied());
        let cli = f.fabrik_cli(&args)?;
        assert_eq!(
            cli.status.success(),
            accepted,
            "CLI on {args:?}: {}",
            String::from_utf8_lossy(&cli.stderr)
        );
    }
    Ok(())
}
