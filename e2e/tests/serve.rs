//! `fabrik serve` against a real host: a `fabrik up --no-tenant-manager` (the host cluster and
//! simulated GPU nodes, nothing of the control plane) plays the real cluster, and `fabrik serve`
//! runs as a second process against it over HTTPS with the host's admin kubeconfig. It must
//! install the Tenant CRD, bring a Tenant created with kubectl to Ready, serve it at
//! `/clusters/<tenant>` on its own listener (and nothing at `/` but health), sync the tenant's
//! objects into the host namespace `fabrik-<tenant>` where the simulated nodes run its pods,
//! keep its data across a restart, and tear it down when the Tenant is deleted.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::{fabrik_bin, kubectls, Fabrik, Kubectl};

/// A running `fabrik serve`.
struct Serve {
    child: Option<Child>,
    log: PathBuf,
}

impl Serve {
    /// Starts `fabrik serve` against `host_kubeconfig` and waits until it says it serves.
    fn start(host_kubeconfig: &Path, data_dir: &Path, log: PathBuf) -> Result<(Serve, String)> {
        let out = std::fs::File::create(&log)?;
        let child = Command::new(fabrik_bin())
            .arg("serve")
            .arg("--host-kubeconfig")
            .arg(host_kubeconfig)
            .arg("--data-dir")
            .arg(data_dir)
            .args(["--listen", "127.0.0.1:0"])
            .args(["--metrics-listen", "127.0.0.1:0"])
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .context("starting fabrik serve")?;
        let mut serve = Serve {
            child: Some(child),
            log,
        };
        let deadline = Instant::now() + e2e::STARTUP;
        loop {
            if let Some(url) = serving_url(&serve.log()) {
                return Ok((serve, url));
            }
            if let Some(c) = serve.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("fabrik serve exited with {status}: {}", serve.log());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "fabrik serve did not serve within {} s: {}",
                    e2e::STARTUP.as_secs(),
                    serve.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, then the exit status.
    fn stop(&mut self) -> Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("not running")?;
        Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status()?;
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("fabrik serve did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `GET /metrics` from the address in "fabrik: the control plane's metrics on http://ADDR/metrics".
fn scrape(log: &str) -> Result<String> {
    use std::io::{Read, Write};
    let line = log
        .lines()
        .find(|l| l.contains("the control plane's metrics on http://"))
        .context("no metrics address in the log")?;
    let addr = line
        .split("http://")
        .nth(1)
        .and_then(|r| r.split('/').next())
        .context("metrics address")?;
    let mut s = std::net::TcpStream::connect(addr)?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    Ok(out)
}

/// The URL in "fabrik: serving tenants at https://HOST:PORT/clusters/<tenant> ...".
fn serving_url(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("serving tenants at "))?;
    let rest = line.split("serving tenants at ").nth(1)?;
    Some(rest.split("/clusters/").next()?.to_string())
}

fn poll(what: &str, secs: u64, mut check: impl FnMut() -> Result<bool>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if check()? {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn kc(k: &Kubectl, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .env("HOME", home)
        .env("KUBECACHEDIR", home.join("kube-cache"))
        .stdin(Stdio::null())
        .output()?)
}

fn kc_ok(k: &Kubectl, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = kc(k, home, kubeconfig, args)?;
    if !out.status.success() {
        bail!(
            "kubectl {args:?}: {}{}",
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

const TENANT: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: team-a}
spec:
  quota: {gpus: 2, gpuSharing: whole, pods: 10}
"#;

const POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: train, labels: {app: train}}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
    envFrom: [{configMapRef: {name: settings}}]
    resources:
      limits: {nvidia.com/gpu: "1"}
"#;

/// The tenant's admin kubeconfig from the host Secret `fabrik-kubeconfig` in `fabrik-<t>`.
fn tenant_kubeconfig(
    k: &Kubectl,
    home: &Path,
    host: &Path,
    tenant: &str,
    out: &Path,
) -> Result<String> {
    use base64::Engine;
    let b64 = kc_ok(
        k,
        home,
        host,
        &[
            "get",
            "secret",
            "fabrik-kubeconfig",
            "-n",
            &format!("fabrik-{tenant}"),
            "-o",
            "jsonpath={.data.kubeconfig}",
        ],
    )?;
    let text = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .context("the kubeconfig Secret is not base64")?;
    let text = String::from_utf8(text).context("the kubeconfig is not UTF-8")?;
    std::fs::write(out, &text)?;
    Ok(text)
}

fn scenario(k: &Kubectl, up: &Fabrik, work: &Path) -> Result<()> {
    let host = up.kubeconfig();
    let home = work.join("home");
    std::fs::create_dir_all(&home)?;

    // `fabrik up --no-tenant-manager` is a bare host: no Tenant CRD, no demo tenant.
    let crd = kc(k, &home, &host, &["get", "crd", "tenants.fabrik.dev"])?;
    if crd.status.success() {
        bail!("the bare host already has the Tenant CRD");
    }

    let data = work.join("serve-data");
    let (mut serve, url) = Serve::start(&host, &data, work.join("serve.log"))?;
    let result = (|| -> Result<()> {
        if !url.starts_with("https://127.0.0.1:") {
            bail!("unexpected public URL {url}");
        }
        // serve installed the CRD on the host.
        kc_ok(k, &home, &host, &["get", "crd", "tenants.fabrik.dev"])?;

        let tenant_file = work.join("tenant.yaml");
        std::fs::write(&tenant_file, TENANT)?;
        kc_ok(
            k,
            &home,
            &host,
            &["apply", "-f", &tenant_file.display().to_string()],
        )?;
        kc_ok(
            k,
            &home,
            &host,
            &[
                "wait",
                "tenant/team-a",
                "--for=jsonpath={.status.phase}=Ready",
                "--timeout=60s",
            ],
        )?;
        // The GPU queue's figures for the tenant, on the metrics port.
        let mut scraped = String::new();
        poll("the queue's figures on /metrics", 30, || {
            scraped = scrape(&serve.log())?;
            Ok(scraped.starts_with("HTTP/1.1 200")
                && scraped.contains(
                    "fabrik_queue_guaranteed_gpus{tenant=\"team-a\",resource=\"nvidia.com/gpu\"} 2",
                ))
        })
        .map_err(|e| anyhow::anyhow!("{e}: {scraped}"))?;
        let endpoint = kc_ok(
            k,
            &home,
            &host,
            &[
                "get",
                "tenant",
                "team-a",
                "-o",
                "jsonpath={.status.endpoint}",
            ],
        )?;
        if endpoint != format!("{url}/clusters/team-a") {
            bail!("status.endpoint {endpoint:?}, expected {url}/clusters/team-a");
        }

        let tkc = work.join("team-a.kubeconfig");
        let text = tenant_kubeconfig(k, &home, &host, "team-a", &tkc)?;
        if !text.contains(&endpoint) {
            bail!("the tenant kubeconfig does not name {endpoint}: {text}");
        }

        // No host API at `/` of serve's listener: health answers; a request that names no
        // tenant is a 404; the tenant's credentials name the tenant (never the host).
        let health = kc_ok(
            k,
            &home,
            &tkc,
            &["--server", &url, "get", "--raw", "/healthz"],
        )?;
        if health.trim() != "ok" {
            bail!("/healthz answered {health:?}");
        }
        let anonymous = std::process::Command::new(&k.path)
            .env("HOME", &home)
            .args([
                "--kubeconfig=/dev/null",
                "--insecure-skip-tls-verify",
                // A token that names no issuer (and no prompt for a password).
                "--token=opaque",
                "--server",
                &url,
                "get",
                "--raw",
                "/api/v1/namespaces",
            ])
            .output()?;
        let stderr = String::from_utf8_lossy(&anonymous.stderr);
        if anonymous.status.success()
            || !(stderr.contains("NotFound") || stderr.contains("not find"))
        {
            bail!(
                "/api/v1/namespaces at / of serve with credentials of no tenant: {stderr}{}",
                String::from_utf8_lossy(&anonymous.stdout)
            );
        }
        let root = kc_ok(
            k,
            &home,
            &tkc,
            &["--server", &url, "get", "--raw", "/api/v1/namespaces"],
        )?;
        if !root.contains("kube-node-lease") || root.contains("fabrik-team-a") {
            bail!("/api/v1/namespaces at / of serve with the tenant's certificate: {root}");
        }

        // The tenant works with kubectl; its objects land in the host namespace.
        kc_ok(
            k,
            &home,
            &tkc,
            &[
                "create",
                "configmap",
                "settings",
                "--from-literal=mode=fast",
            ],
        )?;
        let mode = kc_ok(
            k,
            &home,
            &tkc,
            &[
                "get",
                "configmap",
                "settings",
                "-o",
                "jsonpath={.data.mode}",
            ],
        )?;
        if mode != "fast" {
            bail!("configmap settings has mode {mode:?}");
        }
        poll("the ConfigMap on the host", 30, || {
            let out = kc(
                k,
                &home,
                &host,
                &[
                    "get",
                    "configmap",
                    "-n",
                    "fabrik-team-a",
                    "-l",
                    "fabrik.dev/tenant=team-a",
                    "-o",
                    "jsonpath={.items[*].data.mode}",
                ],
            )?;
            Ok(String::from_utf8_lossy(&out.stdout).trim() == "fast")
        })?;
        let pod_file = work.join("pod.yaml");
        std::fs::write(&pod_file, POD)?;
        kc_ok(
            k,
            &home,
            &tkc,
            &["apply", "-f", &pod_file.display().to_string()],
        )?;
        poll("the host pod running on a simulated GPU node", 60, || {
            let out = kc(
                k,
                &home,
                &host,
                &[
                    "get",
                    "pods",
                    "-n",
                    "fabrik-team-a",
                    "-l",
                    "fabrik.dev/tenant=team-a",
                    "-o",
                    "jsonpath={range .items[*]}{.status.phase} {.spec.nodeName}{\"\\n\"}{end}",
                ],
            )?;
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            Ok(text.lines().any(|l| l.starts_with("Running gpu-node-")))
        })?;
        poll("the tenant pod's status synced back", 30, || {
            let out = kc(
                k,
                &home,
                &tkc,
                &["get", "pod", "train", "-o", "jsonpath={.status.phase}"],
            )?;
            Ok(String::from_utf8_lossy(&out.stdout).trim() == "Running")
        })?;
        // `kubectl exec` into the tenant pod: serve upgrades the connection to the host (across
        // the network here) and copies the stream both ways; stdin, stdout and the exit code
        // pass through.
        let hello = kc_ok(
            k,
            &home,
            &tkc,
            &["exec", "train", "--", "echo", "over", "the", "host"],
        )?;
        if hello.trim() != "over the host" {
            bail!("exec through serve printed {hello:?}");
        }
        let mut cat = std::process::Command::new(&k.path)
            .env("HOME", &home)
            .arg("--kubeconfig")
            .arg(&tkc)
            .args(["exec", "-i", "train", "--", "cat"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        if let Some(mut stdin) = cat.stdin.take() {
            use std::io::Write;
            stdin.write_all(b"line one\nline two\n")?;
        }
        let out = cat.wait_with_output()?;
        if !out.status.success() || out.stdout != b"line one\nline two\n" {
            bail!(
                "exec -i cat through serve: {} {:?} {}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let failed = kc(k, &home, &tkc, &["exec", "train", "--", "false"])?;
        if failed.status.code() != Some(1) {
            bail!("exec false through serve exited with {}", failed.status);
        }
        Ok(())
    })();
    if let Err(e) = result {
        bail!("{e:#}\n--- fabrik serve log ---\n{}", serve.log());
    }

    // A clean stop, and a restart on the same data directory (a new port) keeps the tenant.
    let status = serve.stop()?;
    if !status.success() {
        bail!(
            "fabrik serve exited with {status} on SIGTERM: {}",
            serve.log()
        );
    }
    if !serve.log().contains("fabrik: stopped") {
        bail!("fabrik serve did not report its stop: {}", serve.log());
    }
    let (serve, url2) = Serve::start(&host, &data, work.join("serve2.log"))?;
    let result = (|| -> Result<()> {
        let tkc = work.join("team-a-2.kubeconfig");
        poll("the tenant kubeconfig naming the new address", 30, || {
            let text = tenant_kubeconfig(k, &home, &host, "team-a", &tkc)?;
            Ok(text.contains(&format!("{url2}/clusters/team-a")))
        })?;
        let mut mode = String::new();
        poll("the tenant served again", 30, || {
            let out = kc(
                k,
                &home,
                &tkc,
                &[
                    "get",
                    "configmap",
                    "settings",
                    "-o",
                    "jsonpath={.data.mode}",
                ],
            )?;
            mode = String::from_utf8_lossy(&out.stdout).into_owned();
            Ok(out.status.success())
        })?;
        if mode != "fast" {
            bail!("after a restart the configmap has mode {mode:?}");
        }

        // Deleting the Tenant tears its host side down.
        kc_ok(
            k,
            &home,
            &host,
            &["delete", "tenant", "team-a", "--timeout=60s"],
        )?;
        poll("the host namespace fabrik-team-a gone", 60, || {
            let out = kc(k, &home, &host, &["get", "namespace", "fabrik-team-a"])?;
            Ok(!out.status.success())
        })?;
        let gone = kc(k, &home, &tkc, &["get", "configmaps"])?;
        if gone.status.success() {
            bail!("the deleted tenant is still served");
        }
        Ok(())
    })();
    if let Err(e) = result {
        bail!("{e:#}\n--- fabrik serve log (restart) ---\n{}", serve.log());
    }
    Ok(())
}

#[test]
fn serve_runs_the_tenants_of_a_real_host() {
    let k = kubectls().pop().expect("kubectl in .tools/bin");
    let up = Fabrik::start_with(&["--no-tenant-manager"]).expect("fabrik up");
    let work = tempfile::tempdir().expect("tempdir");
    if let Err(e) = scenario(&k, &up, work.path()) {
        panic!("{e:#}\n--- fabrik up (host) log ---\n{}", up.log());
    }
}

#[test]
fn serve_refuses_bad_flags_before_starting() {
    let work = tempfile::tempdir().expect("tempdir");
    let run = |args: &[&str]| -> Output {
        Command::new(fabrik_bin())
            .arg("serve")
            .arg("--data-dir")
            .arg(work.path().join("data"))
            .args(args)
            .env_remove("KUBECONFIG")
            .env("HOME", work.path())
            .stdin(Stdio::null())
            .output()
            .expect("run fabrik serve")
    };
    let out = run(&["--public-url", "http://fabrik.example.com"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "an http public URL was accepted");
    assert!(err.contains("--public-url"), "{err}");
    let out = run(&["--serving-ca-secret", "no-namespace"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("NAMESPACE/NAME"), "{err}");
    let out = run(&[
        "--host-kubeconfig",
        &work.path().join("missing").display().to_string(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("--host-kubeconfig"), "{err}");
    // Nothing was started: no store was created.
    assert!(!work.path().join("data").join("store").exists());
}
