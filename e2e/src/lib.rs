//! Harness for end-to-end tests: starts the real `fabrik up` in a temporary data directory and
//! hands out real clients for it (kubectl binaries, a kube-rs `Client`).
//!
//! The binary is the workspace's `target/debug/fabrik` (built by the test command before the
//! tests run), or `FABRIK_BIN`. kubectl binaries come from `.tools/bin` (installed by
//! `scripts/install-test-deps.sh`), or `FABRIK_KUBECTLS` (comma-separated paths).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

pub mod aggregated;
pub mod dns;
pub mod etcd;
pub mod ha;
pub mod https;
pub mod oidc;
pub mod procfs;
pub mod raw;
pub mod real_host;
pub mod seeded;
pub mod webhook;

/// How long a process the tests start (fabrik, etcd, a host control plane) may take to serve.
/// A hang detector, not a figure: on a loaded 2-core CI machine beside other end-to-end tests a
/// start that takes 0.4 s alone has taken over 30 s (its writes wait for their fsync).
pub const STARTUP: Duration = Duration::from_secs(120);

/// The repository root.
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}

/// Path of the `fabrik` binary under test.
pub fn fabrik_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("FABRIK_BIN") {
        return PathBuf::from(p);
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target"));
    target.join("debug").join("fabrik")
}

/// A kubectl binary and its version label.
#[derive(Clone, Debug)]
pub struct Kubectl {
    /// e.g. "1.27".
    pub version: String,
    /// The executable.
    pub path: PathBuf,
}

/// The kubectl binaries to test with: oldest and newest available.
pub fn kubectls() -> Vec<Kubectl> {
    if let Ok(list) = std::env::var("FABRIK_KUBECTLS") {
        return list
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|p| Kubectl {
                version: p.rsplit('-').next().unwrap_or(p).to_string(),
                path: PathBuf::from(p),
            })
            .collect();
    }
    let bin = repo_root().join(".tools").join("bin");
    ["1.27", "1.35"]
        .iter()
        .map(|v| Kubectl {
            version: v.to_string(),
            path: bin.join(format!("kubectl-{v}")),
        })
        .filter(|k| k.path.exists())
        .collect()
}

/// Runs `kubectl` with `kubeconfig`: its output, whatever its exit status.
pub fn kc(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<Output> {
    Ok(Command::new(&k.path)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()?)
}

/// Runs `kubectl` with `kubeconfig`: its stdout, or an error with its stderr.
pub fn kc_ok(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let out = kc(k, kubeconfig, args)?;
    if !out.status.success() {
        bail!("kubectl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// `kubectl apply -f` of `yaml` (through a temporary file) with `kubeconfig`: its output,
/// whatever its exit status.
pub fn kc_apply(k: &Kubectl, kubeconfig: &Path, yaml: &str) -> Result<Output> {
    let file = tempfile::NamedTempFile::new()?;
    std::fs::write(file.path(), yaml)?;
    let path = file.path().display().to_string();
    kc(k, kubeconfig, &["apply", "-f", &path])
}

/// [`kc_apply`]: its stdout, or an error with its stderr.
pub fn kc_apply_ok(k: &Kubectl, kubeconfig: &Path, yaml: &str) -> Result<String> {
    let out = kc_apply(k, kubeconfig, yaml)?;
    if !out.status.success() {
        bail!("kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Calls `check` every 200 ms until it returns true; an error naming `what` after `within`.
pub fn poll_until(
    what: &str,
    within: std::time::Duration,
    mut check: impl FnMut() -> Result<bool>,
) -> Result<()> {
    let start = std::time::Instant::now();
    while start.elapsed() < within {
        if check()? {
            return Ok(());
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    bail!("timed out waiting for {what}")
}

/// A running `fabrik up` with its own data directory.
pub struct Fabrik {
    child: Option<Child>,
    dir: tempfile::TempDir,
    /// Extra arguments given to `fabrik up`.
    args: Vec<String>,
    /// Extra environment variables of `fabrik up`.
    env: Vec<(String, String)>,
}

impl Fabrik {
    /// Starts `fabrik up --data-dir <tmp> --listen 127.0.0.1:0` and waits for its kubeconfig.
    pub fn start() -> Result<Fabrik> {
        Self::start_with(&[])
    }

    /// Starts with extra `fabrik up` arguments.
    pub fn start_with(args: &[&str]) -> Result<Fabrik> {
        Self::start_with_env(args, &[])
    }

    /// Starts with extra `fabrik up` arguments and environment variables (`FABRIK_LOG`, ...).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Result<Fabrik> {
        let dir = tempfile::tempdir().context("tempdir")?;
        let mut f = Fabrik {
            child: None,
            dir,
            args: args.iter().map(|s| s.to_string()).collect(),
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        f.spawn()?;
        Ok(f)
    }

    fn spawn(&mut self) -> Result<()> {
        let bin = fabrik_bin();
        if !bin.exists() {
            bail!(
                "{} is missing: build it first with `cargo build -p control-plane --bin fabrik`",
                bin.display()
            );
        }
        let _ = std::fs::remove_file(self.kubeconfig());
        let log = std::fs::File::create(self.dir.path().join("fabrik.log"))?;
        let child = Command::new(&bin)
            .arg("up")
            .arg("--data-dir")
            .arg(self.data_dir())
            .arg("--listen")
            .arg("127.0.0.1:0")
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        self.child = Some(child);
        let deadline = Instant::now() + STARTUP;
        while !self.kubeconfig().exists() {
            if let Some(c) = self.child.as_mut() {
                if let Some(status) = c.try_wait()? {
                    bail!("fabrik up exited with {status}: {}", self.log());
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "fabrik up did not become ready in {} s: {}",
                    STARTUP.as_secs(),
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    }

    /// The data directory.
    pub fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// `DATA/host.kubeconfig`.
    pub fn kubeconfig(&self) -> PathBuf {
        self.data_dir().join("host.kubeconfig")
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// What the server printed.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("fabrik.log")).unwrap_or_default()
    }

    /// Runs a test's steps against this control plane; a failure panics with the error and
    /// what the server printed, which a failed end-to-end test needs to be understood.
    pub fn check(&self, steps: impl FnOnce() -> Result<()>) {
        if let Err(e) = steps() {
            panic!("{e:#}\n--- fabrik up log ---\n{}", self.log());
        }
    }

    /// Stops with SIGTERM and waits; returns the exit status.
    pub fn stop(&mut self) -> Result<std::process::ExitStatus> {
        let mut child = self.child.take().context("not running")?;
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(child.id().to_string())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = child.try_wait()? {
                return Ok(status);
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                bail!("fabrik up did not stop within 20 s of SIGTERM");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Kills the server with SIGKILL (a crash) and starts it again on the same data directory.
    pub fn crash_and_restart(&mut self) -> Result<()> {
        if let Some(mut c) = self.child.take() {
            c.kill()?;
            c.wait()?;
        }
        self.spawn()
    }

    /// Runs the `fabrik` CLI (e.g. `tenant create ...`) against this server's data directory.
    pub fn fabrik_cli(&self, args: &[&str]) -> Result<Output> {
        Ok(Command::new(fabrik_bin())
            .args(args)
            .arg("--data-dir")
            .arg(self.data_dir())
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .output()?)
    }

    /// `fabrik tenant create NAME EXTRA… --wait --kubeconfig-out DIR/NAME.kubeconfig`: the
    /// tenant, Ready, and the path of its admin kubeconfig (an error with the CLI's stderr
    /// otherwise).
    pub fn create_tenant(&self, name: &str, extra: &[&str]) -> Result<PathBuf> {
        let cfg = self.data_dir().join(format!("{name}.kubeconfig"));
        let cfg_text = cfg.display().to_string();
        let mut args = vec!["tenant", "create", name];
        args.extend_from_slice(extra);
        args.extend(["--wait", "--kubeconfig-out", &cfg_text]);
        let out = self.fabrik_cli(&args)?;
        if !out.status.success() {
            bail!(
                "fabrik tenant create {name}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(cfg)
    }

    /// Stops and starts again on the same data directory with `args` instead of the first
    /// start's (a new port).
    pub fn restart_with(&mut self, args: &[&str]) -> Result<()> {
        self.args = args.iter().map(|s| s.to_string()).collect();
        self.restart()
    }

    /// Stops and starts again on the same data directory (a new port).
    pub fn restart(&mut self) -> Result<()> {
        let status = self.stop()?;
        if !status.success() {
            bail!("fabrik up exited with {status} on SIGTERM: {}", self.log());
        }
        self.spawn()
    }

    /// Runs `kubectl` with this cluster's kubeconfig.
    pub fn kubectl(&self, kubectl: &Kubectl, args: &[&str]) -> Result<Output> {
        self.kubectl_env(kubectl, args, &[])
    }

    /// Runs `kubectl` with extra environment variables.
    pub fn kubectl_env(
        &self,
        kubectl: &Kubectl,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> Result<Output> {
        let cache = self
            .dir
            .path()
            .join(format!("kube-cache-{}", kubectl.version));
        let out = Command::new(&kubectl.path)
            .args(args)
            .env("KUBECONFIG", self.kubeconfig())
            .env("KUBECACHEDIR", cache)
            .env("HOME", self.dir.path())
            .envs(env.iter().copied())
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", kubectl.path.display()))?;
        Ok(out)
    }

    /// Runs `kubectl` and requires success; returns stdout.
    pub fn kubectl_ok(&self, kubectl: &Kubectl, args: &[&str]) -> Result<String> {
        let out = self.kubectl(kubectl, args)?;
        if !out.status.success() {
            bail!(
                "kubectl {} {:?} failed: {}\n{}",
                kubectl.version,
                args,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// A kube-rs client for this cluster.
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = kube::config::Kubeconfig::read_from(self.kubeconfig())?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        Ok(kube::Client::try_from(config)?)
    }
}

impl Drop for Fabrik {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Installs the rustls crypto provider once (kube-rs needs one chosen explicitly).
pub fn init_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A stand-in for kubelets: marks every pending pod Running and Ready through `pods/status`,
/// exactly as a kubelet reports it, until dropped. No kubelet runs pods in a Fabrik cluster on
/// one machine; tests that need workloads to become ready (rollouts, `helm --wait`) use this.
pub struct FakeKubelet {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl FakeKubelet {
    /// Starts marking pods of the cluster behind `kubeconfig` ready.
    pub fn start(kubeconfig: &Path) -> Result<FakeKubelet> {
        init_crypto();
        let kubeconfig = kubeconfig.to_path_buf();
        let (tx, mut rx) = tokio::sync::oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::spawn(move || {
            runtime.block_on(async move {
                let Ok(kc) = kube::config::Kubeconfig::read_from(&kubeconfig) else {
                    return;
                };
                let Ok(config) =
                    kube::Config::from_custom_kubeconfig(kc, &Default::default()).await
                else {
                    return;
                };
                let Ok(client) = kube::Client::try_from(config) else {
                    return;
                };
                let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
                    kube::Api::all(client.clone());
                loop {
                    if let Ok(list) = pods
                        .list(&kube::api::ListParams::default().fields("status.phase=Pending"))
                        .await
                    {
                        for pod in list.items {
                            let _ = mark_ready(&client, &pod).await;
                        }
                    }
                    tokio::select! {
                        _ = &mut rx => return,
                        _ = tokio::time::sleep(Duration::from_millis(100)) => {},
                    }
                }
            });
        });
        Ok(FakeKubelet {
            stop: Some(tx),
            thread: Some(thread),
        })
    }
}

/// The `pods/status` merge patch a kubelet sends once a pod's containers run and are ready
/// (Running, Ready, one running container status per container).
pub fn running_status(pod: &k8s_openapi::api::core::v1::Pod) -> serde_json::Value {
    let now = "2026-01-01T00:00:00Z";
    let containers: Vec<serde_json::Value> = pod
        .spec
        .as_ref()
        .map(|s| {
            s.containers
                .iter()
                .map(|c| {
                    serde_json::json!({
                        "name": c.name, "image": c.image, "imageID": "", "ready": true,
                        "started": true, "restartCount": 0,
                        "state": {"running": {"startedAt": now}}
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    serde_json::json!({"status": {
        "phase": "Running",
        "podIP": "10.244.0.10",
        "hostIP": "10.0.0.1",
        "startTime": now,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now}
        ],
        "containerStatuses": containers,
    }})
}

async fn mark_ready(client: &kube::Client, pod: &k8s_openapi::api::core::v1::Pod) -> Result<()> {
    use kube::ResourceExt;
    if pod.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    let ns = pod.namespace().unwrap_or_default();
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &ns);
    let status = running_status(pod);
    api.patch_status(
        &pod.name_any(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&status),
    )
    .await?;
    Ok(())
}

impl Drop for FakeKubelet {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A Helm binary and its major version.
#[derive(Clone, Debug)]
pub struct Helm {
    /// "3" or "4".
    pub major: String,
    /// The executable.
    pub path: PathBuf,
}

impl Helm {
    /// Runs this Helm against `kubeconfig` with its state under `home`: its output, whatever its
    /// exit status.
    pub fn run(&self, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<Output> {
        Ok(Command::new(&self.path)
            .args(args)
            .env("KUBECONFIG", kubeconfig)
            .env("HOME", home)
            .env("HELM_CACHE_HOME", home.join("helm-cache"))
            .env("HELM_CONFIG_HOME", home.join("helm-config"))
            .env("HELM_DATA_HOME", home.join("helm-data"))
            .output()?)
    }

    /// [`Helm::run`]: its stdout, or an error with its output.
    pub fn run_ok(&self, home: &Path, kubeconfig: &Path, args: &[&str]) -> Result<String> {
        let out = self.run(home, kubeconfig, args)?;
        if !out.status.success() {
            bail!(
                "helm {} {args:?}: {}\n{}",
                self.major,
                String::from_utf8_lossy(&out.stderr),
                String::from_utf8_lossy(&out.stdout)
            );
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }
}

/// Helm 3 and Helm 4 from `.tools/bin`.
pub fn helms() -> Vec<Helm> {
    let bin = repo_root().join(".tools").join("bin");
    ["3", "4"]
        .iter()
        .map(|m| Helm {
            major: m.to_string(),
            path: bin.join(format!("helm-{m}")),
        })
        .filter(|h| h.path.exists())
        .collect()
}

/// Writes `files` (relative path, text) under `dir`, making folders as needed: fixture charts.
pub fn write_files(dir: &Path, files: &[(&str, &str)]) -> Result<()> {
    for (path, text) in files {
        let file = dir.join(path);
        if let Some(parent) = file.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(file, text)?;
    }
    Ok(())
}

/// A platform's shared Gateways on a host: namespace `infra` and, for each name, a Gateway of
/// `class` with one HTTP listener (`http`, port 80) taking routes from every namespace.
pub fn host_gateways(class: &str, names: &[&str]) -> String {
    let mut yaml = "apiVersion: v1\nkind: Namespace\nmetadata: {name: infra}\n".to_string();
    for name in names {
        yaml.push_str(&format!(
            "---\napiVersion: gateway.networking.k8s.io/v1\nkind: Gateway\n\
             metadata: {{name: {name}, namespace: infra}}\nspec:\n  gatewayClassName: {class}\n  \
             listeners:\n  - {{name: http, port: 80, protocol: HTTP, allowedRoutes: {{namespaces: {{from: All}}}}}}\n"
        ));
    }
    yaml
}
