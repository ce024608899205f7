//! Fabrik on a real Kubernetes host: a real control plane (kube-apiserver, controller manager
//! and scheduler v1.28 over etcd, see `e2e::real_host`), Fabrik's simulated GPU nodes
//! registered into it with `fabrik nodes`, and `fabrik serve` running with exactly the rights
//! the Helm chart gives it (its RBAC applied, a token of its ServiceAccount).
//!
//! One test, one host (it costs about 600 MiB), in steps that each print their name:
//! 1. nodes: `fabrik nodes` registers two GPU nodes; they turn Ready and publish their GPUs;
//! 2. least privilege: the chart's RBAC and CRD applied, `fabrik serve` started with the
//!    ServiceAccount's token;
//! 3. a Tenant turns Ready and its kubeconfig works;
//! 4. a Deployment and a Service in the tenant: the host pods in `fabrik-<tenant>` are bound by
//!    the real scheduler to the simulated nodes, run, and their status comes back to the
//!    tenant; a pod asking for a GPU lands on a GPU node;
//!    4b. in-cluster access: the host pod's token, CA and `KUBERNETES_SERVICE_*` reach its
//!    tenant's API, and the real host refuses the token;
//!    4c. addresses and DNS: the tenant Service's address is its host copy's (the real
//!    allocator's), the tenant's `kubernetes` Service is the chart's, host pods get the chart
//!    Service as nameserver, and the tenant DNS answers a tenant pod (queried from its address:
//!    the nodes' pod network is 127.244.0.0/16) and refuses a stranger;
//!    4d. quota and escapes: the real quota controller counts the tenant's host pods exactly
//!    (no duplicate creates), hostile pods and Endpoints are refused, a foreign address is
//!    reported and kept off the host;
//!    4e. extension APIs: a tenant's admission webhook and APIService naming its Service are
//!    answered for its pods on the simulated nodes (found through the host's pods, since the
//!    real EndpointSlice controller refuses the simulated pod network's loopback addresses),
//!    and a webhook whose Service is missing fails the write naming it — all within the
//!    chart's RBAC;
//! 5. the nodes stay Ready past the node lifecycle controller's grace period (their Leases);
//! 6. deleting the Tenant removes its objects from the host;
//! 9. HA: two `fabrik serve` replicas on one etcd, with the chart's RBAC for that mode, serve
//!    a new tenant through either listener; killing the one that runs it, the other syncs on.
//!
//! `fabrik serve` must log no Forbidden error: a missing permission in the chart fails here; nor
//! a sync fight over the host Endpoints the real endpoints controller owns.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::real_host::{tail, RealHost};
use e2e::{fabrik_bin, helms, kc, kc_ok, kubectls, repo_root, Kubectl};
use serde_json::{json, Value};

const TENANT: &str = "team-a";
const NS: &str = "fabrik-team-a";
/// The chart's release and namespace, as `helm install rel … -n fabrik-system` names them.
const RELEASE: &str = "rel";
const RELEASE_NS: &str = "fabrik-system";

/// A `fabrik` process with its log; killed when dropped.
struct Fabrik {
    name: &'static str,
    child: Option<Child>,
    log: PathBuf,
}

impl Fabrik {
    fn start(name: &'static str, args: &[&str], log: PathBuf) -> Result<Fabrik> {
        let bin = fabrik_bin();
        if !bin.exists() {
            bail!(
                "{} is missing: build it first with \
                 `cargo build -p control-plane --bin fabrik --features etcd`",
                bin.display()
            );
        }
        let out = std::fs::File::create(&log)?;
        let child = Command::new(bin)
            .args(args)
            .env_remove("KUBECONFIG")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting fabrik {name}"))?;
        Ok(Fabrik {
            name,
            child: Some(child),
            log,
        })
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Fails with the log when the process has exited.
    fn check_running(&mut self) -> Result<()> {
        if let Some(c) = self.child.as_mut() {
            if let Some(status) = c.try_wait()? {
                bail!("fabrik {} exited with {status}:\n{}", self.name, self.log());
            }
        }
        Ok(())
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

/// Polls `check` every half second until it says done or `secs` pass; on a timeout the error
/// says what was last seen.
fn poll(what: &str, secs: u64, mut check: impl FnMut() -> Result<(bool, String)>) -> Result<()> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        let (done, seen) = check()?;
        if done {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}; last seen:\n{seen}");
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Runs kubectl; stdout on success, else stdout and stderr as what was seen.
fn seen(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<(bool, String)> {
    let out = kc(k, kubeconfig, args)?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok((true, text))
    } else {
        Ok((
            false,
            format!("{text}{}", String::from_utf8_lossy(&out.stderr)),
        ))
    }
}

fn get_json(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<Value> {
    let mut a = args.to_vec();
    a.extend(["-o", "json"]);
    let text = kc_ok(k, kubeconfig, &a)?;
    serde_json::from_str(&text).context("kubectl printed no JSON")
}

fn items(list: &Value) -> Vec<Value> {
    list["items"].as_array().cloned().unwrap_or_default()
}

fn is_ready(node: &Value) -> bool {
    node["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

fn taints(node: &Value) -> Vec<String> {
    node["spec"]["taints"]
        .as_array()
        .map(|ts| {
            ts.iter()
                .map(|t| format!("{}:{}", t["key"].as_str().unwrap_or(""), t["effect"]))
                .collect()
        })
        .unwrap_or_default()
}

/// One line per node: name, Ready, GPUs allocatable, taints.
fn node_lines(nodes: &Value) -> String {
    items(nodes)
        .iter()
        .map(|n| {
            format!(
                "{} ready={} gpus={} taints={:?}\n",
                n["metadata"]["name"].as_str().unwrap_or("?"),
                is_ready(n),
                n["status"]["allocatable"]["nvidia.com/gpu"],
                taints(n)
            )
        })
        .collect()
}

/// One line per pod: name, phase, node, scheduler.
fn pod_lines(pods: &Value) -> String {
    items(pods)
        .iter()
        .map(|p| {
            format!(
                "{} phase={} node={} scheduler={}\n",
                p["metadata"]["name"].as_str().unwrap_or("?"),
                p["status"]["phase"].as_str().unwrap_or("-"),
                p["spec"]["nodeName"].as_str().unwrap_or("-"),
                p["spec"]["schedulerName"].as_str().unwrap_or("-"),
            )
        })
        .collect()
}

/// The simulated nodes Ready, untainted, with GPUs; and what was seen.
fn nodes_ready(k: &Kubectl, admin: &Path, want: usize) -> Result<(bool, String)> {
    let nodes = get_json(
        k,
        admin,
        &["get", "nodes", "-l", "fabrik.dev/simulated=true"],
    )?;
    let list = items(&nodes);
    let good = list
        .iter()
        .filter(|n| {
            is_ready(n)
                && taints(n).is_empty()
                && n["status"]["allocatable"]["nvidia.com/gpu"] == "8"
        })
        .count();
    Ok((good == want && list.len() == want, node_lines(&nodes)))
}

/// The RBAC objects and the Service of the chart rendered with its default values (what
/// `fabrik serve` needs on the host besides its pod), as one YAML stream.
fn chart_rbac(work: &Path, values: &[&str]) -> Result<String> {
    let helm = helms()
        .into_iter()
        .next()
        .context("no Helm in .tools/bin (scripts/install-test-deps.sh)")?;
    let home = work.join("helm-home");
    std::fs::create_dir_all(&home)?;
    let chart = repo_root().join("helm").join("fabrik");
    let out = Command::new(&helm.path)
        .args(["template", RELEASE])
        .arg(&chart)
        .args(["--namespace", RELEASE_NS])
        .args(values)
        .env_remove("KUBECONFIG")
        .env("HOME", &home)
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()?;
    if !out.status.success() {
        bail!("helm template: {}", String::from_utf8_lossy(&out.stderr));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let mut docs = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(&text) {
        let v: Value = serde::Deserialize::deserialize(doc)?;
        let kind = v["kind"].as_str().unwrap_or("");
        if matches!(
            kind,
            "ServiceAccount"
                | "ClusterRole"
                | "ClusterRoleBinding"
                | "Role"
                | "RoleBinding"
                | "Service"
        ) {
            docs.push(serde_yaml_ng::to_string(&v)?);
        }
    }
    if docs.is_empty() {
        bail!("the chart rendered no RBAC:\n{text}");
    }
    Ok(docs.join("---\n"))
}

/// The tenant's admin kubeconfig, from the host Secret `fabrik-kubeconfig` in `fabrik-<t>`.
fn tenant_kubeconfig(k: &Kubectl, admin: &Path, ns: &str, out: &Path) -> Result<()> {
    use base64::Engine;
    let b64 = kc_ok(
        k,
        admin,
        &[
            "get",
            "secret",
            "fabrik-kubeconfig",
            "-n",
            ns,
            "-o",
            "jsonpath={.data.kubeconfig}",
        ],
    )?;
    let text = base64::engine::general_purpose::STANDARD
        .decode(b64.trim())
        .context("the kubeconfig Secret is not base64")?;
    std::fs::write(out, text)?;
    Ok(())
}

const TENANT_YAML: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: team-a}
spec:
  quota: {gpus: 2, gpuSharing: whole, pods: 10}
  sync: {extraKinds: [httproutes.gateway.networking.k8s.io]}
  isolation:
    gateways: [infra/shared]
    routeHostnames: ["*.team-a.example.com"]
"#;

const GPU_POD: &str = r#"apiVersion: v1
kind: Pod
metadata: {name: train, labels: {app: train}}
spec:
  containers:
  - name: main
    image: busybox:1.36
    command: ["sleep", "3600"]
    resources:
      limits: {nvidia.com/gpu: "1"}
"#;

/// A second tenant that may borrow every GPU beyond its guarantee of 2.
const BORROWER_YAML: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: team-b}
spec:
  quota: {gpus: 2, gpuSharing: whole, pods: 20}
  queue: {borrowingLimit: 14}
"#;

/// A Deployment of `replicas` pods of one GPU each.
fn gpu_deployment(name: &str, replicas: usize) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}}}\nspec:\n  \
         replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    \
         metadata: {{labels: {{app: {name}}}}}\n    spec:\n      containers:\n      - name: main\n        \
         image: busybox:1.36\n        command: [sleep, \"3600\"]\n        \
         resources: {{limits: {{nvidia.com/gpu: \"1\"}}}}\n"
    )
}

/// Runs one named step, printing its name and how long it took; its error names it.
fn step<T>(name: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    eprintln!("real host: step {name}");
    let started = Instant::now();
    let out = f().with_context(|| format!("step {name:?}"))?;
    eprintln!(
        "real host: step {name} done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(out)
}

struct World {
    host: RealHost,
    k: Kubectl,
    work: PathBuf,
    nodes: Option<Fabrik>,
    serve: Option<Fabrik>,
}

impl World {
    fn admin(&self) -> PathBuf {
        self.host.admin_kubeconfig()
    }

    fn logs(&self) -> String {
        let mut out = self.host.logs();
        for f in [&self.nodes, &self.serve].into_iter().flatten() {
            out.push_str(&format!("--- fabrik {} log (last 60 lines) ---\n", f.name));
            out.push_str(&tail(&f.log(), 60));
        }
        out
    }

    fn check_running(&mut self) -> Result<()> {
        self.host.check_running()?;
        for f in [&mut self.nodes, &mut self.serve].into_iter().flatten() {
            f.check_running()?;
        }
        Ok(())
    }

    /// Peak memory and CPU time of every process, one line each.
    fn usage(&self) -> String {
        let mut pids: Vec<(String, u32)> = self
            .host
            .pids()
            .into_iter()
            .map(|(n, p)| (n.to_string(), p))
            .collect();
        for f in [&self.nodes, &self.serve].into_iter().flatten() {
            if let Some(p) = f.pid() {
                pids.push((format!("fabrik {}", f.name), p));
            }
        }
        let mut total = 0.0;
        let mut out = String::new();
        for (name, pid) in pids {
            let (_, hwm) = e2e::procfs::memory_mib(pid);
            total += hwm;
            let cpu = e2e::procfs::cpu_seconds(pid).unwrap_or(0.0);
            out.push_str(&format!(
                "  {name}: peak RSS {hwm:.0} MiB, CPU {cpu:.1} s\n"
            ));
        }
        out.push_str(&format!("  sum of peaks: {total:.0} MiB\n"));
        out
    }
}

fn scenario(w: &mut World) -> Result<()> {
    let admin = w.admin();
    let k = w.k.clone();
    let work = w.work.clone();

    let ready_at = step(
        "1 nodes: fabrik nodes registers two Ready GPU nodes",
        || {
            let data = work.join("nodes");
            w.nodes = Some(Fabrik::start(
                "nodes",
                &[
                    "nodes",
                    "--kubeconfig",
                    &admin.display().to_string(),
                    "--nodes",
                    "2",
                    "--gpus-per-node",
                    "8",
                    "--data-dir",
                    &data.display().to_string(),
                    // Pod addresses this machine can send from: the DNS step asks as a pod.
                    "--pod-network",
                    "127.244",
                ],
                work.join("nodes.log"),
            )?);
            poll(
                "two simulated nodes Ready with 8 GPUs and no taints",
                120,
                || {
                    w.check_running()?;
                    nodes_ready(&k, &admin, 2)
                },
            )?;
            Ok(Instant::now())
        },
    )?;

    step(
        "2 least privilege: fabrik serve with the chart's RBAC",
        || {
            kc_ok(&k, &admin, &["create", "namespace", RELEASE_NS])?;
            let crd = repo_root()
                .join("helm")
                .join("fabrik")
                .join("crds")
                .join("tenants.fabrik.dev.yaml");
            // `create`, not client-side `apply`: the CRD is larger than the annotation limit.
            kc_ok(&k, &admin, &["create", "-f", &crd.display().to_string()])?;
            // The host's Gateway API (as a platform installs it for its Gateway controller).
            let gateway_crds = repo_root().join("control-plane/controllers/src/gateway/crds");
            kc_ok(
                &k,
                &admin,
                &["create", "-f", &gateway_crds.display().to_string()],
            )?;
            kc_ok(
                &k,
                &admin,
                &[
                    "wait",
                    "crd/tenants.fabrik.dev",
                    "crd/httproutes.gateway.networking.k8s.io",
                    "crd/gateways.gateway.networking.k8s.io",
                    "--for=condition=Established",
                    "--timeout=60s",
                ],
            )?;
            let rbac = work.join("rbac.yaml");
            std::fs::write(&rbac, chart_rbac(&work, &[])?)?;
            kc_ok(&k, &admin, &["apply", "-f", &rbac.display().to_string()])?;
            let sa = format!("{RELEASE}-fabrik");
            let token = kc_ok(
                &k,
                &admin,
                &["create", "token", &sa, "-n", RELEASE_NS, "--duration=2h"],
            )?;
            let host_kubeconfig = work.join("serve.kubeconfig");
            std::fs::write(&host_kubeconfig, w.host.token_kubeconfig(token.trim())?)?;
            // The rights are the ServiceAccount's, not more.
            let can = kc_ok(
                &k,
                &host_kubeconfig,
                &["auth", "can-i", "create", "clusterroles"],
            );
            if can.is_ok_and(|s| s.trim() == "yes") {
                bail!("the ServiceAccount may create ClusterRoles");
            }
            // The flags the chart gives `fabrik serve`, but for paths and addresses.
            let serve = Fabrik::start(
                "serve",
                &[
                    "serve",
                    "--host-kubeconfig",
                    &host_kubeconfig.display().to_string(),
                    "--data-dir",
                    &work.join("serve-data").display().to_string(),
                    "--listen",
                    "127.0.0.1:0",
                    "--serving-ca-secret",
                    &format!("{RELEASE_NS}/{RELEASE}-fabrik-serving-ca"),
                    "--usage-namespace",
                    RELEASE_NS,
                    "--api-service",
                    &format!("{RELEASE_NS}/{RELEASE}-fabrik"),
                    "--dns-listen",
                    "127.0.0.1:0",
                ],
                work.join("serve.log"),
            )?;
            w.serve = Some(serve);
            poll(
                "fabrik serve serving tenants",
                e2e::STARTUP.as_secs(),
                || {
                    w.check_running()?;
                    let log = w.serve.as_ref().map(Fabrik::log).unwrap_or_default();
                    Ok((log.contains("serving tenants at "), tail(&log, 20)))
                },
            )
        },
    )?;

    let tkc = work.join("team-a.kubeconfig");
    step("3 a Tenant turns Ready; its kubeconfig works", || {
        let file = work.join("tenant.yaml");
        std::fs::write(&file, TENANT_YAML)?;
        kc_ok(&k, &admin, &["apply", "-f", &file.display().to_string()])?;
        poll("Tenant team-a Ready", 120, || {
            w.check_running()?;
            let (ok, text) = seen(&k, &admin, &["get", "tenant", TENANT, "-o", "json"])?;
            if !ok {
                return Ok((false, text));
            }
            let t: Value = serde_json::from_str(&text)?;
            Ok((t["status"]["phase"] == "Ready", t["status"].to_string()))
        })?;
        tenant_kubeconfig(&k, &admin, NS, &tkc)?;
        poll("the tenant API answering", 60, || {
            seen(&k, &tkc, &["get", "namespaces"])
        })
    })?;

    step(
        "4 workloads: bound by the real scheduler, run by the simulated nodes",
        || {
            kc_ok(
                &k,
                &tkc,
                &[
                    "create",
                    "deployment",
                    "web",
                    "--image=nginx:1.25",
                    "--replicas=2",
                ],
            )?;
            kc_ok(
                &k,
                &tkc,
                &[
                    "expose",
                    "deployment",
                    "web",
                    "--port=80",
                    "--target-port=80",
                ],
            )?;
            let pod = work.join("gpu-pod.yaml");
            std::fs::write(&pod, GPU_POD)?;
            kc_ok(&k, &tkc, &["apply", "-f", &pod.display().to_string()])?;
            poll(
                "three host pods in fabrik-team-a Running on gpu-node-*",
                120,
                || {
                    w.check_running()?;
                    let pods = get_json(&k, &admin, &["get", "pods", "-n", NS])?;
                    let list = items(&pods);
                    let good = list
                        .iter()
                        .filter(|p| {
                            p["status"]["phase"] == "Running"
                                && p["spec"]["nodeName"]
                                    .as_str()
                                    .is_some_and(|n| n.starts_with("gpu-node-"))
                                && p["spec"]["schedulerName"] == "default-scheduler"
                        })
                        .count();
                    Ok((good == 3 && list.len() == 3, pod_lines(&pods)))
                },
            )?;
            // The real scheduler bound them: its Scheduled events.
            poll("Scheduled events of default-scheduler", 30, || {
                let events = get_json(
                    &k,
                    &admin,
                    &[
                        "get",
                        "events",
                        "-n",
                        NS,
                        "--field-selector",
                        "reason=Scheduled",
                    ],
                )?;
                let n = items(&events)
                    .iter()
                    .filter(|e| {
                        e["source"]["component"] == "default-scheduler"
                            || e["reportingComponent"] == "default-scheduler"
                    })
                    .count();
                Ok((n >= 3, events.to_string()))
            })?;
            // The GPU pod sits on a node with GPUs and holds one.
            let gpu = get_json(&k, &admin, &["get", "pods", "-n", NS])?;
            let gpu_pod = items(&gpu)
                .into_iter()
                .find(|p| {
                    p["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
                })
                .with_context(|| format!("no host pod asks for a GPU:\n{}", pod_lines(&gpu)))?;
            let node = gpu_pod["spec"]["nodeName"].as_str().unwrap_or("");
            // It went through Fabrik's GPU queue: created gated, admitted pinned to the node
            // the real kube-scheduler then bound it to (a scheduler that knows nothing of
            // Fabrik, honouring scheduling gates).
            let admitted = &gpu_pod["metadata"]["annotations"]["fabrik.dev/queue-admitted"];
            let pinned = &gpu_pod["spec"]["nodeSelector"]["kubernetes.io/hostname"];
            let gates = gpu_pod["spec"]["schedulingGates"]
                .as_array()
                .map_or(0, Vec::len);
            if !admitted
                .as_str()
                .is_some_and(|a| a.ends_with(" guaranteed"))
                || pinned.as_str() != Some(node)
                || gates != 0
            {
                bail!(
                    "the GPU pod did not come through the GPU queue: admitted {admitted}, \
                     pinned {pinned}, {gates} gates, bound to {node}"
                );
            }
            let n = get_json(&k, &admin, &["get", "node", node])?;
            if n["status"]["allocatable"]["nvidia.com/gpu"] != "8" {
                bail!(
                    "the GPU pod is on {node}, which has no GPUs: {}",
                    node_lines(&json!({"items": [n]}))
                );
            }
            // The status came back to the tenant.
            poll("the tenant's pods Running", 60, || {
                let pods = get_json(&k, &tkc, &["get", "pods"])?;
                let list = items(&pods);
                let running = list
                    .iter()
                    .filter(|p| {
                        p["status"]["phase"] == "Running" && p["status"]["podIP"].is_string()
                    })
                    .count();
                Ok((running == 3 && list.len() == 3, pod_lines(&pods)))
            })?;
            poll("the tenant Deployment available", 60, || {
                let (ok, text) = seen(
                    &k,
                    &tkc,
                    &[
                        "get",
                        "deployment",
                        "web",
                        "-o",
                        "jsonpath={.status.availableReplicas}",
                    ],
                )?;
                Ok((ok && text.trim() == "2", text))
            })?;
            // The Service on the host, and its endpoints in the tenant.
            poll("the Service synced to the host", 60, || {
                seen(
                    &k,
                    &admin,
                    &[
                        "get",
                        "services",
                        "-n",
                        NS,
                        "-l",
                        "fabrik.dev/tenant=team-a",
                    ],
                )
                .map(|(ok, text)| (ok && text.lines().count() > 1, text))
            })?;
            poll("the tenant Service's endpoints: the two pods", 60, || {
                let (ok, text) = seen(
                    &k,
                    &tkc,
                    &[
                        "get",
                        "endpoints",
                        "web",
                        "-o",
                        "jsonpath={.subsets[*].addresses[*].ip}",
                    ],
                )?;
                Ok((ok && text.split_whitespace().count() == 2, text))
            })
        },
    )?;

    step(
        "4b in-cluster access: a host pod's token, CA and address reach its tenant only",
        || in_cluster_access(&k, &admin, &tkc, w),
    )?;

    step(
        "4c addresses and DNS: the tenant's Service IPs work on the host, its pods resolve its names",
        || service_addresses_and_dns(&k, &admin, &tkc, w),
    )?;

    step(
        "4d quota and escapes: the host's quota counts the tenant's pods, hostile objects stay out",
        || quota_and_escapes(&k, &admin, &tkc),
    )?;

    step(
        "4e webhooks and aggregated APIs: a tenant's Service found through the real endpoints",
        || extension_apis(&k, &tkc, &work),
    )?;

    step(
        "4f DRA on a host without resource.k8s.io/v1: a pod with a claim is told why, never run without it",
        || claims_on_an_old_host(&k, &tkc),
    )?;

    step(
        "4g Gateway API: a tenant HTTPRoute reaches the host Gateway it may use; the host controller's status comes back",
        || gateway_routes(&k, &admin, &tkc),
    )?;

    step(
        "4h GPU queue: a borrower fills the idle GPUs; the owner's demand returns and reclaim evicts through the real API; what can never run is told so",
        || queue_reclaim(&k, &admin, &tkc, w),
    )?;

    step(
        "4i layouts follow demand: a tenant on MIG instances gets an idle node laid out for it; the busy node stays whole",
        || layouts_follow_demand(&k, &admin, &tkc, w),
    )?;

    step(
        "4j a host component's message names the tenant's objects as the tenant knows them",
        || host_messages_in_tenant_words(&k, &tkc),
    )?;

    step(
        "5 nodes stay Ready past the node monitor grace period",
        || {
            // kube-controller-manager marks a node without heartbeats Unknown 40 s after the last
            // one (and taints it unreachable): look every two seconds until 60 s after Ready, and
            // at its NodeNotReady events, which outlive a flap the looks might miss.
            let until = ready_at + Duration::from_secs(60);
            while Instant::now() < until {
                let (ok, text) = nodes_ready(&k, &admin, 2)?;
                if !ok {
                    bail!("a node is no longer Ready (or got tainted):\n{text}");
                }
                std::thread::sleep(Duration::from_secs(2));
            }
            let events = get_json(
                &k,
                &admin,
                &[
                    "get",
                    "events",
                    "-n",
                    "default",
                    "--field-selector",
                    "reason=NodeNotReady",
                ],
            )?;
            if !items(&events).is_empty() {
                bail!("the node lifecycle controller found nodes not Ready: {events}");
            }
            Ok(())
        },
    )?;

    step("6 deleting the Tenant removes its host objects", || {
        kc_ok(&k, &admin, &["delete", "tenant", TENANT, "--timeout=120s"])?;
        poll("the host namespace fabrik-team-a gone", 120, || {
            let (exists, text) = seen(&k, &admin, &["get", "namespace", NS, "-o", "name"])?;
            Ok((!exists, text))
        })?;
        let (_, left) = seen(
            &k,
            &admin,
            &[
                "get",
                "pods,services,configmaps,secrets",
                "-A",
                "-l",
                "fabrik.dev/tenant=team-a",
                "-o",
                "name",
            ],
        )?;
        if !left.trim().is_empty() {
            bail!("objects of the deleted tenant are left on the host:\n{left}");
        }
        Ok(())
    })?;

    step(
        "7 least privilege held: no Forbidden in fabrik serve's log",
        || {
            let log = w.serve.as_ref().map(Fabrik::log).unwrap_or_default();
            // (Quota refusals — a preempted pod's replacement, in the tenant or on the host,
            // while the quota still counts the pod on its way out; retried — are not RBAC.)
            let forbidden: Vec<&str> = log
                .lines()
                .filter(|l| l.to_ascii_lowercase().contains("forbidden"))
                .filter(|l| {
                    !l.contains("exceeded the quota of tenant") && !l.contains("exceeded quota")
                })
                .collect();
            if !forbidden.is_empty() {
                bail!(
                    "fabrik serve was refused with the chart's RBAC:\n{}",
                    forbidden.join("\n")
                );
            }
            Ok(())
        },
    )?;

    step(
        "8 no sync fight: the host's endpoints controller owns the Service's endpoints",
        || {
            // The real endpoints controller writes the host Endpoints of the synced Service
            // under the name a copy of the tenant's Endpoints would have; the syncer leaves them.
            let log = w.serve.as_ref().map(Fabrik::log).unwrap_or_default();
            let fights: Vec<&str> = log
                .lines()
                .filter(|l| l.contains("name is taken by another"))
                .collect();
            if !fights.is_empty() {
                bail!(
                    "the syncer fought over host objects:\n{}",
                    fights.join("\n")
                );
            }
            Ok(())
        },
    )?;
    step(
        "9 HA: two fabrik serve replicas on etcd serve and sync a tenant; one dies, the other goes on",
        || ha_replicas(w),
    )?;
    Ok(())
}

#[test]
fn fabrik_runs_tenants_on_a_real_kubernetes_host() {
    let started = Instant::now();
    let k = kubectls()
        .into_iter()
        .next()
        .expect("kubectl in .tools/bin (scripts/install-test-deps.sh)");
    let host = match RealHost::start() {
        Ok(h) => h,
        Err(e) => panic!("cannot start the real host: {e:#}"),
    };
    eprintln!(
        "real host: {} ready in {:.1} s",
        host.url(),
        started.elapsed().as_secs_f64()
    );
    let work = host.work_dir().join("test");
    std::fs::create_dir_all(&work).expect("work dir");
    let mut w = World {
        host,
        k,
        work,
        nodes: None,
        serve: None,
    };
    let result = scenario(&mut w);
    eprintln!(
        "real host: {:.0} s in all; processes:\n{}",
        started.elapsed().as_secs_f64(),
        w.usage()
    );
    if let Err(e) = result {
        panic!("{e:#}\n{}", w.logs());
    }
}

/// What a tenant pod's in-cluster client gets on the host — the environment, the token and the
/// CA of its host pod, read from the host pod's spec and the host objects its volume mounts —
/// reaches its tenant's API and nothing else. (There is no kube-proxy here: the client dials
/// the listener the Service fronts, with exactly the credentials the pod was given.)
fn in_cluster_access(k: &Kubectl, admin: &Path, tkc: &Path, w: &World) -> Result<()> {
    let service = get_json(
        k,
        admin,
        &[
            "get",
            "service",
            &format!("{RELEASE}-fabrik"),
            "-n",
            RELEASE_NS,
        ],
    )?;
    let cluster_ip = service["spec"]["clusterIP"]
        .as_str()
        .context("the chart's Service has no ClusterIP")?
        .to_string();
    let pods = get_json(k, admin, &["get", "pods", "-n", NS])?;
    let pod = items(&pods)
        .into_iter()
        .find(|p| {
            p["metadata"]["annotations"]["fabrik.dev/virtual-name"]
                .as_str()
                .is_some_and(|n| n.starts_with("web-"))
        })
        .with_context(|| format!("no host pod of web:\n{}", pod_lines(&pods)))?;
    // The address: the chart's Service, in every container.
    let env = &pod["spec"]["containers"][0]["env"];
    let var = |name: &str| {
        env.as_array()
            .into_iter()
            .flatten()
            .find(|e| e["name"] == name)
            .and_then(|e| e["value"].as_str())
            .map(str::to_string)
    };
    if var("KUBERNETES_SERVICE_HOST").as_deref() != Some(cluster_ip.as_str())
        || var("KUBERNETES_SERVICE_PORT").as_deref() != Some("443")
    {
        bail!("the host pod's KUBERNETES_SERVICE_* do not name {cluster_ip}:443: {env}");
    }
    // The token and CA: the projected volume's sources, on the host.
    let sources: Vec<Value> = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|v| v["projected"]["sources"].as_array())
        .flatten()
        .cloned()
        .collect();
    let secret = sources
        .iter()
        .find(|s| {
            s["secret"]["items"]
                .as_array()
                .is_some_and(|i| i.iter().any(|i| i["path"] == "token"))
        })
        .with_context(|| format!("no token in the host pod's projected volume: {sources:?}"))?;
    let key = secret["secret"]["items"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|i| i["path"] == "token")
        .and_then(|i| i["key"].as_str())
        .context("token item key")?
        .to_string();
    let secret_name = secret["secret"]["name"].as_str().context("secret name")?;
    let token = kc_ok(
        k,
        admin,
        &[
            "get",
            "secret",
            secret_name,
            "-n",
            NS,
            "-o",
            &format!("go-template={{{{index .data \"{key}\" | base64decode}}}}"),
        ],
    )?;
    let ca_map = sources
        .iter()
        .find_map(|s| s["configMap"]["name"].as_str())
        .context("no CA ConfigMap in the host pod's projected volume")?;
    let ca = kc_ok(
        k,
        admin,
        &[
            "get",
            "configmap",
            ca_map,
            "-n",
            NS,
            "-o",
            "go-template={{index .data \"ca.crt\"}}",
        ],
    )?;
    if !ca.contains("BEGIN CERTIFICATE") {
        bail!("the host copy of kube-root-ca.crt holds no CA: {ca}");
    }
    let work = w.host.work_dir();
    let ca_file = work.join("pod-ca.crt");
    std::fs::write(&ca_file, &ca)?;
    // The listener the Service fronts, without any /clusters/ prefix.
    let serve_log = w.serve.as_ref().map(Fabrik::log).unwrap_or_default();
    let url = serve_log
        .lines()
        .find_map(|l| l.split("serving tenants at ").nth(1))
        .and_then(|rest| rest.split("/clusters/").next())
        .context("fabrik serve's URL in its log")?
        .to_string();
    kc_ok(
        k,
        tkc,
        &[
            "create",
            "rolebinding",
            "pods-view",
            "--clusterrole=view",
            "--serviceaccount=default:default",
        ],
    )?;
    let as_pod = |server: &str, args: &[&str]| {
        let mut all = vec![
            "--kubeconfig=/dev/null".to_string(),
            format!("--server={server}"),
            format!("--token={}", token.trim()),
            format!("--certificate-authority={}", ca_file.display()),
            // The CA verifies the listener; the name in the certificate is the Service's.
            format!("--tls-server-name={cluster_ip}"),
        ];
        all.extend(args.iter().map(|a| a.to_string()));
        Command::new(&k.path).args(&all).output()
    };
    poll("the pod's token listing its tenant's pods", 60, || {
        let out = as_pod(&url, &["get", "pods", "-n", "default", "-o", "name"])?;
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        Ok((out.status.success() && text.contains("pod/web-"), text))
    })?;
    // The host does not take it.
    let out = Command::new(&k.path)
        .args([
            "--kubeconfig=/dev/null",
            "--insecure-skip-tls-verify",
            &format!("--server={}", w.host.url()),
            &format!("--token={}", token.trim()),
            "get",
            "pods",
            "-n",
            NS,
        ])
        .output()?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !err.contains("Unauthorized") {
        bail!("the real host took the tenant pod's token: {err}");
    }
    Ok(())
}

/// The tenant Service's address is its host copy's (allocated by the real host); the tenant's
/// `kubernetes` Service is the chart's Service; synced pods are given the chart Service as
/// nameserver, and the DNS behind it answers a tenant pod with the tenant's names and a
/// stranger with nothing.
fn service_addresses_and_dns(k: &Kubectl, admin: &Path, tkc: &Path, w: &World) -> Result<()> {
    let ip_of = |kubeconfig: &Path, ns: &str, name: &str| -> Result<String> {
        let s = get_json(k, kubeconfig, &["get", "svc", "-n", ns, name])?;
        s["spec"]["clusterIP"]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("Service {ns}/{name} has no clusterIP: {s}"))
    };
    let web = ip_of(tkc, "default", "web")?;
    let copy = ip_of(admin, NS, &format!("web-x-default-x-{TENANT}"))?;
    if web != copy {
        bail!("the tenant shows web at {web}, its host copy is at {copy}");
    }
    let chart = ip_of(admin, RELEASE_NS, &format!("{RELEASE}-fabrik"))?;
    let api = ip_of(tkc, "default", "kubernetes")?;
    if api != chart {
        bail!("the tenant's kubernetes Service is at {api}, the control plane's at {chart}");
    }
    let pods = get_json(k, admin, &["get", "pods", "-n", NS, "-l", "app=web"])?;
    let list = items(&pods);
    if list.is_empty() {
        bail!("no web host pods:\n{}", pod_lines(&pods));
    }
    for p in &list {
        let spec = &p["spec"];
        if spec["dnsPolicy"] != "None"
            || spec["dnsConfig"]["nameservers"] != json!([chart])
            || spec["dnsConfig"]["searches"][0] != "default.svc.cluster.local"
        {
            bail!(
                "host pod DNS is not the tenant's: {} {}",
                spec["dnsPolicy"],
                spec["dnsConfig"]
            );
        }
    }
    let log = w.serve.as_ref().map(Fabrik::log).unwrap_or_default();
    let server = e2e::dns::address_in_log(&log).context("fabrik serve printed no tenant DNS")?;
    let tenant_pods = get_json(k, tkc, &["get", "pods", "-l", "app=web"])?;
    let source: std::net::IpAddr = items(&tenant_pods)
        .iter()
        .find_map(|p| p["status"]["podIP"].as_str().and_then(|ip| ip.parse().ok()))
        .with_context(|| format!("no tenant web pod has an IP:\n{}", pod_lines(&tenant_pods)))?;
    use e2e::dns::{query, ResponseCode, Type};
    let deadline = Instant::now() + Duration::from_secs(30);
    for (name, want) in [
        ("web.default.svc.cluster.local.", &web),
        ("kubernetes.default.svc.cluster.local.", &chart),
    ] {
        loop {
            let r = query(server, source, name, Type::A)?;
            if r.code == ResponseCode::NoError && r.answers == [want.clone()] {
                break;
            }
            if Instant::now() > deadline {
                bail!("{name} from tenant pod {source}: {r:?}, want {want}");
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    let stranger = query(
        server,
        "127.0.0.1".parse()?,
        "web.default.svc.cluster.local.",
        Type::A,
    )?;
    if stranger.code != ResponseCode::Refused {
        bail!("a stranger was answered: {stranger:?}");
    }
    Ok(())
}

const HOSTILE: &[(&str, &str, &str)] = &[
    (
        "privileged",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: root}\nspec:\n  containers:\n  - {name: c, image: busybox, securityContext: {privileged: true}}\n",
        "privileged",
    ),
    (
        "hostPath",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: node-disk}\nspec:\n  containers: [{name: c, image: busybox}]\n  volumes: [{name: root, hostPath: {path: /}}]\n",
        "hostPath",
    ),
    (
        "metadata endpoint",
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: leak}\nsubsets: [{addresses: [{ip: 169.254.169.254}], ports: [{port: 80}]}]\n",
        "169.254.169.254",
    ),
    (
        "GPUs over quota",
        "apiVersion: v1\nkind: Pod\nmetadata: {name: greedy}\nspec:\n  containers:\n  - {name: c, image: busybox, resources: {limits: {nvidia.com/gpu: \"2\"}}}\n",
        "quota",
    ),
];

/// The host ResourceQuota of the tenant's namespace is counted by the real quota controller;
/// what a hostile tenant tries is refused at its admission and never reaches the host; a
/// selector-less Service's Endpoints keep only the tenant's own pods on the host.
/// Kubernetes 1.28 serves no `resource.k8s.io/v1`: a tenant pod with a resource claim stays
/// Pending with the reason instead of running without its device; the rest of the tenant
/// syncs as before (the steps above).
fn claims_on_an_old_host(k: &Kubectl, tkc: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("claim.yaml");
    std::fs::write(
        &file,
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: gpu}\nspec:\n  devices:\n    requests:\n    - name: g\n      exactly: {deviceClassName: gpu.nvidia.com}\n---\napiVersion: v1\nkind: Pod\nmetadata: {name: claimer}\nspec:\n  resourceClaims: [{name: gpu, resourceClaimName: gpu}]\n  containers: [{name: main, image: trainer, resources: {claims: [{name: gpu}]}}]\n",
    )?;
    kc_ok(k, tkc, &["apply", "-f", &file.display().to_string()])?;
    poll("the claiming pod told why", 60, || {
        let pod = get_json(k, tkc, &["get", "pod", "claimer"])?;
        let reason = pod["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "PodScheduled")
            .map(|c| c["reason"].as_str().unwrap_or("").to_string())
            .unwrap_or_default();
        let pending = pod["status"]["phase"].as_str().unwrap_or("Pending") == "Pending";
        Ok((
            pending && reason == "ResourceClaimsUnavailable",
            pod["status"].to_string(),
        ))
    })?;
    kc_ok(k, tkc, &["delete", "pod", "claimer", "--wait=false"])?;
    // The claim counts against the tenant's GPU quota until it goes too.
    kc_ok(k, tkc, &["delete", "resourceclaim", "gpu", "--wait=false"])?;
    Ok(())
}

const TENANT_ROUTE: &str = r#"apiVersion: v1
kind: Service
metadata: {name: llm}
spec: {selector: {app: llm}, ports: [{port: 8000}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: llm}
spec:
  parentRefs: [{name: shared, namespace: infra}]
  hostnames: [llm.team-a.example.com]
  rules:
  - matches: [{headers: [{name: x-model, value: big}]}]
    backendRefs: [{name: llm, port: 8000, weight: 3}]
"#;

/// Step 4h: on the real kube-apiserver with kube-scheduler binding, and the chart's RBAC: team-b
/// (2 guaranteed, may borrow 14) takes the 15 GPUs team-a leaves idle; team-a (2 guaranteed,
/// holding 1) asks for its second; while a disruption budget (its status kept by the real
/// disruption controller) protects team-b's pods the queue takes none; once it is gone the
/// queue preempts one of team-b's borrowed pods (evicted through the Eviction API), tells
/// team-b why, and team-a's pod runs where it freed. Then a pod of team-b's larger than any
/// node is told it cannot run here.
fn queue_reclaim(k: &Kubectl, admin: &Path, tkc: &Path, w: &mut World) -> Result<()> {
    const B_NS: &str = "fabrik-team-b";
    let work = w.work.clone();
    let file = work.join("team-b.yaml");
    std::fs::write(&file, BORROWER_YAML)?;
    kc_ok(k, admin, &["apply", "-f", &file.display().to_string()])?;
    poll("Tenant team-b Ready", 120, || {
        w.check_running()?;
        let t = get_json(k, admin, &["get", "tenant", "team-b"])?;
        Ok((t["status"]["phase"] == "Ready", t["status"].to_string()))
    })?;
    let bkc = work.join("team-b.kubeconfig");
    tenant_kubeconfig(k, admin, B_NS, &bkc)?;
    poll("team-b's API answering", 60, || {
        seen(k, &bkc, &["get", "namespaces"])
    })?;
    let fill = work.join("fill.yaml");
    std::fs::write(&fill, gpu_deployment("fill", 16))?;
    kc_ok(k, &bkc, &["apply", "-f", &fill.display().to_string()])?;
    // team-a's `train` holds one of the 16 GPUs: team-b gets the other 15, 13 of them
    // borrowed, and its 16th pod waits at the queue's gate.
    poll(
        "15 of team-b's 16 host pods Running, 13 admitted as borrowed",
        120,
        || {
            w.check_running()?;
            let pods = get_json(k, admin, &["get", "pods", "-n", B_NS])?;
            let list = items(&pods);
            let running = list
                .iter()
                .filter(|p| p["status"]["phase"] == "Running")
                .count();
            let borrowed = list
                .iter()
                .filter(|p| {
                    p["metadata"]["annotations"]["fabrik.dev/queue-admitted"]
                        .as_str()
                        .is_some_and(|a| a.ends_with(" borrowed"))
                })
                .count();
            Ok((
                running == 15 && borrowed == 13 && list.len() == 16,
                pod_lines(&pods),
            ))
        },
    )?;
    // First team-b's pods are under a disruption budget that lets none go; the real
    // disruption controller keeps its status on the host.
    let budget = work.join("fill-pdb.yaml");
    std::fs::write(
        &budget,
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata: {name: fill}\nspec:\n  \
         maxUnavailable: 0\n  selector: {matchLabels: {app: fill}}\n",
    )?;
    kc_ok(k, &bkc, &["apply", "-f", &budget.display().to_string()])?;
    poll(
        "the budget's host copy with its status: no disruption allowed",
        60,
        || {
            let pdbs = get_json(k, admin, &["get", "pdb", "-n", B_NS])?;
            let ok = items(&pdbs).iter().any(|b| {
                b["status"]["observedGeneration"].as_i64().is_some()
                    && b["status"]["disruptionsAllowed"] == 0
                    && b["status"]["currentHealthy"] == 15
            });
            Ok((ok, pdbs.to_string()))
        },
    )?;
    let second = work.join("gpu-pod-2.yaml");
    std::fs::write(&second, GPU_POD.replace("name: train,", "name: train-2,"))?;
    // (Once the claim step's pod and claim have left team-a's quota.)
    poll("team-a's second GPU pod created", 60, || {
        let out = e2e::kc(k, tkc, &["apply", "-f", &second.display().to_string()])?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    })?;
    // The budget protects every one of team-b's pods: the queue takes none; team-a waits.
    poll("team-a's second GPU pod told it waits", 60, || {
        let p = get_json(k, tkc, &["get", "pod", "train-2"])?;
        let queued = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|c| {
                c["message"]
                    .as_str()
                    .is_some_and(|m| m.contains("queued by Fabrik's GPU queue"))
            });
        Ok((queued, p["status"].to_string()))
    })?;
    std::thread::sleep(Duration::from_secs(3));
    let pods = get_json(k, admin, &["get", "pods", "-n", B_NS])?;
    let marked = items(&pods)
        .iter()
        .filter(|p| {
            p["metadata"]["deletionTimestamp"].is_string()
                || p["status"]["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .any(|c| c["type"] == "DisruptionTarget")
        })
        .count();
    if marked != 0 {
        bail!(
            "the queue preempted pods a budget protects:\n{}",
            pod_lines(&pods)
        );
    }
    // The budget goes: reclaim takes one of team-b's borrowed pods.
    kc_ok(k, &bkc, &["delete", "pdb", "fill"])?;
    poll("team-a's second GPU pod Running on a GPU node", 120, || {
        w.check_running()?;
        let p = get_json(k, tkc, &["get", "pod", "train-2"])?;
        Ok((p["status"]["phase"] == "Running", p["status"].to_string()))
    })?;
    poll("team-b told why, in an Event", 60, || {
        let events = get_json(
            k,
            &bkc,
            &[
                "get",
                "events",
                "--field-selector",
                "reason=PreemptedByFairShare",
            ],
        )?;
        let told = items(&events).iter().any(|e| {
            e["message"]
                .as_str()
                .is_some_and(|m| m.contains("tenant team-a"))
        });
        Ok((told, events.to_string()))
    })?;
    poll(
        "team-b at its fair share (14), team-a at its guarantee (2)",
        60,
        || {
            let b = get_json(k, admin, &["get", "tenant", "team-b"])?;
            let a = get_json(k, admin, &["get", "tenant", TENANT])?;
            let q = |t: &Value, f: &str| t["status"]["queue"][0][f].as_i64().unwrap_or(-1);
            Ok((
                q(&b, "admitted") == 14 && q(&b, "fairShare") == 14 && q(&a, "admitted") == 2,
                format!("team-b {}\nteam-a {}", b["status"], a["status"]),
            ))
        },
    )?;
    // The queue keeps its fair-share ledger on the host, with the chart's rights: team-b held
    // a GPU past its share while the budget kept team-a below its own.
    poll(
        "the fair-share ledger saved in the release namespace, team-b ahead, team-a behind",
        60,
        || {
            let (ok, text) = seen(
                k,
                admin,
                &[
                    "get",
                    "configmap",
                    "fabrik-gpu-queue-ledger",
                    "-n",
                    RELEASE_NS,
                    "-o",
                    r"jsonpath={.data.ledger\.json}",
                ],
            )?;
            if !ok {
                return Ok((false, text));
            }
            let saved: Value = serde_json::from_str(&text)?;
            let lead = |t: &str| -> f64 {
                saved["lead"][t]
                    .as_object()
                    .map(|per| per.values().filter_map(Value::as_f64).sum())
                    .unwrap_or(0.0)
            };
            Ok((lead("team-b") > 0.0 && lead(TENANT) < 0.0, text))
        },
    )?;
    // What the host can never run is told so, with no estimated wait: a pod of 9 GPUs where
    // every node has 8 (the queue's ceiling read from the nodes' allocatable: no ResourceSlice
    // names the GPUs on this host).
    kc_ok(k, &bkc, &["delete", "deployment", "fill", "--wait=false"])?;
    let nine = work.join("nine.yaml");
    std::fs::write(
        &nine,
        GPU_POD
            .replace("name: train,", "name: nine,")
            .replace("nvidia.com/gpu: \"1\"", "nvidia.com/gpu: \"9\""),
    )?;
    // (Once the Deployment's pods have left team-b's quota.)
    poll("team-b's pod of 9 GPUs created", 120, || {
        let out = e2e::kc(k, &bkc, &["apply", "-f", &nine.display().to_string()])?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    })?;
    let mut said = String::new();
    poll("team-b's pod of 9 GPUs told it cannot run here", 60, || {
        let p = get_json(k, &bkc, &["get", "pod", "nine"])?;
        said = p["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["type"] == "PodScheduled")
            .filter_map(|c| c["message"].as_str())
            .collect();
        Ok((
            said.contains(
                "it asks for 9 nvidia.com/gpu, more than any node's GPUs could ever offer (8): \
                 it cannot run unless a larger node joins",
            ),
            p["status"].to_string(),
        ))
    })?;
    if said.contains("estimated wait") {
        bail!("an estimated wait for a pod that cannot run: {said}");
    }
    kc_ok(k, tkc, &["delete", "pod", "train-2", "--wait=false"])?;
    kc_ok(k, admin, &["delete", "tenant", "team-b", "--wait=false"])?;
    Ok(())
}

/// Step 4j: a pod whose PersistentVolumeClaim does not exist is refused by the real
/// kube-scheduler with a message naming the claim's host name; the tenant reads it under the
/// name it gave the claim.
fn host_messages_in_tenant_words(k: &Kubectl, tkc: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("orphan.yaml");
    // Pod `pod`, whose claim `claim` does not exist: what the scheduler tells it.
    let told = |pod: &str, claim: &str| -> Result<String> {
        std::fs::write(
            &file,
            format!(
                "apiVersion: v1\nkind: Pod\nmetadata: {{name: {pod}}}\nspec:\n  volumes: [{{name: \
                 data, persistentVolumeClaim: {{claimName: {claim}}}}}]\n  containers: [{{name: \
                 main, image: busybox:1.36, volumeMounts: [{{name: data, mountPath: /data}}]}}]\n"
            ),
        )?;
        kc_ok(k, tkc, &["apply", "-f", &file.display().to_string()])?;
        let mut said = String::new();
        poll(&format!("pod {pod} told its claim is missing"), 60, || {
            let p = get_json(k, tkc, &["get", "pod", pod])?;
            said = p["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .filter(|c| c["type"] == "PodScheduled")
                .filter_map(|c| c["message"].as_str())
                .collect();
            Ok((said.contains("not found"), p["status"].to_string()))
        })?;
        Ok(said)
    };
    let said = told("orphan", "missing")?;
    if !said.contains("\"default/missing\"") || said.contains("-x-") {
        bail!("the scheduler's message is not in the tenant's words: {said}");
    }
    // A claim named so long that its host name is hashed (and, missing, has no host copy to
    // look up): read back through the name the pod gives it.
    let long = format!("missing-{}", "m".repeat(56));
    let said = told("orphan-long", &long)?;
    if !said.contains(&format!("\"default/{long}\"")) {
        bail!("the scheduler's message names the long claim by its host name: {said}");
    }
    kc_ok(
        k,
        tkc,
        &["delete", "pod", "orphan", "orphan-long", "--wait=false"],
    )?;
    Ok(())
}

/// A tenant whose GPUs are 1g.18gb MIG instances.
const MIG_TENANT_YAML: &str = r#"apiVersion: fabrik.dev/v1alpha1
kind: Tenant
metadata: {name: team-c}
spec:
  quota: {gpus: 2, gpuSharing: "mig:1g.18gb", pods: 5}
"#;

/// Step 4i: on a host without `resource.k8s.io/v1` no ResourceSlice names the GPUs one by one,
/// so the queue lays a node out as one. Every GPU is whole; team-a's `train` runs on one node
/// and team-b's pods are leaving; team-c, on MIG instances, asks for one: the queue lays the
/// idle node out for MIG (its annotation, through the real API), the node agent applies it,
/// kube-scheduler binds the pod to an instance. Then the node is set back to whole GPUs for the
/// steps after.
fn layouts_follow_demand(k: &Kubectl, admin: &Path, tkc: &Path, w: &mut World) -> Result<()> {
    const MIG: &str = "nvidia.com/mig-1g.18gb";
    let work = w.work.clone();
    let file = work.join("team-c.yaml");
    std::fs::write(&file, MIG_TENANT_YAML)?;
    kc_ok(k, admin, &["apply", "-f", &file.display().to_string()])?;
    poll("Tenant team-c Ready", 120, || {
        w.check_running()?;
        let t = get_json(k, admin, &["get", "tenant", "team-c"])?;
        Ok((t["status"]["phase"] == "Ready", t["status"].to_string()))
    })?;
    let ckc = work.join("team-c.kubeconfig");
    tenant_kubeconfig(k, admin, "fabrik-team-c", &ckc)?;
    poll("team-c's API answering", 60, || {
        seen(k, &ckc, &["get", "namespaces"])
    })?;
    // team-b's pods (step 4h) gone: one node idle, team-a's `train` on the other.
    poll("team-b's host pods gone", 120, || {
        let pods = get_json(k, admin, &["get", "pods", "-n", "fabrik-team-b"])?;
        Ok((items(&pods).is_empty(), pod_lines(&pods)))
    })?;
    let train = get_json(k, tkc, &["get", "pod", "train"])?;
    let busy = train["spec"]["nodeName"]
        .as_str()
        .context("team-a's train pod has a node")?
        .to_string();
    let infer = work.join("infer.yaml");
    std::fs::write(&infer, gpu_deployment("infer", 1))?;
    kc_ok(k, &ckc, &["apply", "-f", &infer.display().to_string()])?;
    poll("team-c's pod Running on a MIG instance", 120, || {
        w.check_running()?;
        let pods = get_json(k, &ckc, &["get", "pods", "-l", "app=infer"])?;
        let running = items(&pods)
            .iter()
            .any(|p| p["status"]["phase"] == "Running");
        Ok((running, pod_lines(&pods)))
    })?;
    let nodes = get_json(
        k,
        admin,
        &["get", "nodes", "-l", "fabrik.dev/simulated=true"],
    )?;
    let offers = |n: &Value, r: &str| {
        n["status"]["allocatable"][r]
            .as_str()
            .and_then(|v| v.parse::<i64>().ok())
            .unwrap_or(0)
    };
    let mut laid = None;
    for n in items(&nodes) {
        let name = n["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let (whole, mig) = (offers(&n, "nvidia.com/gpu"), offers(&n, MIG));
        if name == busy {
            if (whole, mig) != (8, 0) {
                bail!("the busy node {name} was laid out: {whole} GPUs, {mig} instances");
            }
        } else if (whole, mig) == (0, 56) {
            laid = Some(name);
        } else {
            bail!("node {name} offers {whole} GPUs and {mig} instances, not 56 instances");
        }
    }
    let laid = laid.context("no node laid out for MIG")?;
    kc_ok(k, admin, &["delete", "tenant", "team-c", "--wait=false"])?;
    poll("team-c's host pods gone", 120, || {
        let pods = get_json(k, admin, &["get", "pods", "-n", "fabrik-team-c"])?;
        Ok((items(&pods).is_empty(), pod_lines(&pods)))
    })?;
    kc_ok(
        k,
        admin,
        &[
            "annotate",
            "node",
            &laid,
            "--overwrite",
            "fabrik.dev/gpu-layout=mode: whole",
        ],
    )?;
    poll("both nodes back to eight whole GPUs", 60, || {
        nodes_ready(k, admin, 2)
    })
}

/// Step 4g. No Gateway controller runs on this host: the test writes the host route's status
/// as one would, and reads it back in the tenant.
fn gateway_routes(k: &Kubectl, admin: &Path, tkc: &Path) -> Result<()> {
    let dir = tempfile::tempdir()?;
    let file = dir.path().join("gateway.yaml");
    std::fs::write(&file, e2e::host_gateways("platform", &["shared"]))?;
    kc_ok(k, admin, &["apply", "-f", &file.display().to_string()])?;
    poll("the tenant's HTTPRoute CRD", 90, || {
        seen(
            k,
            tkc,
            &["get", "crd", "httproutes.gateway.networking.k8s.io"],
        )
    })?;
    kc_ok(
        k,
        tkc,
        &[
            "wait",
            "crd/httproutes.gateway.networking.k8s.io",
            "--for=condition=Established",
            "--timeout=60s",
        ],
    )?;
    let route = dir.path().join("route.yaml");
    std::fs::write(&route, TENANT_ROUTE)?;
    kc_ok(k, tkc, &["apply", "-f", &route.display().to_string()])?;
    let hname = fabrik_api::naming::host_name("llm", "default", TENANT);
    let host_ns = format!("fabrik-{TENANT}");
    let mut host_route = Value::Null;
    poll("the host HTTPRoute", 60, || {
        let out = kc(
            k,
            admin,
            &["get", "httproute", &hname, "-n", &host_ns, "-o", "json"],
        )?;
        if !out.status.success() {
            return Ok((false, String::from_utf8_lossy(&out.stderr).into_owned()));
        }
        host_route = serde_json::from_slice(&out.stdout)?;
        Ok((true, String::new()))
    })?;
    let spec = &host_route["spec"];
    if spec["rules"][0]["backendRefs"][0]["name"] != hname.as_str()
        || spec["rules"][0]["backendRefs"][0]["weight"] != 3
        || spec["parentRefs"][0]["namespace"] != "infra"
        || spec["rules"][0]["matches"][0]["headers"][0]["name"] != "x-model"
    {
        bail!("the host route is not the tenant's, rewritten: {host_route}");
    }
    let status = serde_json::json!({"status": {"parents": [{
        "parentRef": {"group": "gateway.networking.k8s.io", "kind": "Gateway",
                      "namespace": "infra", "name": "shared"},
        "controllerName": "example.com/platform-gateway",
        "conditions": [{"type": "Accepted", "status": "True", "reason": "Accepted",
            "message": "", "observedGeneration": 1,
            "lastTransitionTime": "2026-01-01T00:00:00Z"}]
    }]}});
    kc_ok(
        k,
        admin,
        &[
            "patch",
            "httproute",
            &hname,
            "-n",
            &host_ns,
            "--subresource=status",
            "--type=merge",
            "-p",
            &status.to_string(),
        ],
    )?;
    poll("the host controller's verdict in the tenant", 60, || {
        let r = get_json(k, tkc, &["get", "httproute", "llm"])?;
        let ok = r["status"]["parents"].as_array().is_some_and(|ps| {
            ps.iter().any(|p| {
                p["controllerName"] == "example.com/platform-gateway"
                    && p["parentRef"]["name"] == "shared"
                    && p["parentRef"]["namespace"] == "infra"
            })
        });
        Ok((ok, r["status"].to_string()))
    })?;
    kc_ok(k, tkc, &["delete", "httproute", "llm"])?;
    Ok(())
}

fn quota_and_escapes(k: &Kubectl, admin: &Path, tkc: &Path) -> Result<()> {
    poll("the host quota counting the tenant's pods", 60, || {
        let pods = get_json(k, admin, &["get", "pods", "-n", NS])?;
        let live = items(&pods)
            .iter()
            .filter(|p| !matches!(p["status"]["phase"].as_str(), Some("Succeeded" | "Failed")))
            .count();
        let q = get_json(
            k,
            admin,
            &["get", "resourcequota", "fabrik-quota", "-n", NS],
        )?;
        let used = q["status"]["used"]["pods"].as_str().unwrap_or("");
        Ok((
            used == live.to_string() && live > 0,
            format!("{} with pods:\n{}", q["status"], pod_lines(&pods)),
        ))
    })?;
    let dir = tempfile::tempdir()?;
    let leak_service = dir.path().join("leak-svc.yaml");
    std::fs::write(
        &leak_service,
        "apiVersion: v1\nkind: Service\nmetadata: {name: leak}\nspec: {ports: [{port: 80}]}\n",
    )?;
    kc_ok(
        k,
        tkc,
        &["apply", "-f", &leak_service.display().to_string()],
    )?;
    for (what, yaml, named) in HOSTILE {
        let file = dir.path().join("hostile.yaml");
        std::fs::write(&file, yaml)?;
        let out = kc(k, tkc, &["apply", "-f", &file.display().to_string()])?;
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() || !err.contains(named) {
            bail!(
                "{what}: not refused naming {named}: {}{err}",
                String::from_utf8_lossy(&out.stdout)
            );
        }
    }
    // Endpoints naming the host's API server (an address no check of ranges can refuse): kept
    // in the tenant, left out of the host copy.
    let host_api = std::fs::write(
        dir.path().join("api.yaml"),
        "apiVersion: v1\nkind: Endpoints\nmetadata: {name: leak}\nsubsets: [{addresses: [{ip: 10.96.0.1}], ports: [{port: 443}]}]\n",
    );
    host_api?;
    kc_ok(
        k,
        tkc,
        &[
            "apply",
            "-f",
            &dir.path().join("api.yaml").display().to_string(),
        ],
    )?;
    poll("a warning Event about the left-out address", 60, || {
        let (ok, text) = seen(k, tkc, &["get", "events", "-o", "json"])?;
        Ok((
            ok && text.contains("10.96.0.1") && text.contains("AddressRefused"),
            text,
        ))
    })?;
    let on_host = get_json(k, admin, &["get", "pods,endpoints", "-n", NS, "-o", "json"])?;
    let text = on_host.to_string();
    for bad in [
        "169.254.169.254",
        "10.96.0.1",
        "root-x-",
        "node-disk-x-",
        "greedy-x-",
    ] {
        if text.contains(bad) {
            bail!("{bad} reached the host namespace: {text}");
        }
    }
    Ok(())
}

/// A tenant's admission webhooks and APIService naming its Service `web` (pods on the
/// simulated nodes, endpoints written by the real endpoints controller): the simulation
/// answers for them (the webhook admits, the APIService is Available); a webhook whose Service
/// does not exist fails as its `failurePolicy: Fail` says, naming the Service. Every host read
/// this takes is within the chart's RBAC (step 7 finds no Forbidden).
fn extension_apis(k: &Kubectl, tkc: &Path, work: &Path) -> Result<()> {
    let apply = |name: &str, yaml: &str| -> Result<std::process::Output> {
        let file = work.join(format!("{name}.yaml"));
        std::fs::write(&file, yaml)?;
        kc(k, tkc, &["apply", "-f", &file.display().to_string()])
    };
    let hook = |name: &str, service: &str, label: &str| {
        format!(
            "apiVersion: admissionregistration.k8s.io/v1\nkind: ValidatingWebhookConfiguration\nmetadata: {{name: {name}}}\nwebhooks:\n- name: {name}.hooks.test\n  clientConfig: {{service: {{namespace: default, name: {service}, port: 80, path: /validate}}}}\n  rules: [{{apiGroups: [\"\"], apiVersions: [v1], operations: [CREATE], resources: [configmaps]}}]\n  objectSelector: {{matchLabels: {{hooked: {label}}}}}\n  failurePolicy: Fail\n  sideEffects: None\n  admissionReviewVersions: [v1]\n"
        )
    };
    let config_map = |name: &str, label: &str| {
        format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, labels: {{hooked: {label}}}}}\ndata: {{a: b}}\n")
    };
    let out = apply("hook-live", &hook("live", "web", "live"))?;
    if !out.status.success() {
        bail!(
            "webhook configuration: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let out = apply("hook-dead", &hook("dead", "absent", "dead"))?;
    if !out.status.success() {
        bail!(
            "webhook configuration: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    poll("a write admitted by the webhook of Service web", 60, || {
        let out = apply("cm-live", &config_map("admitted", "live"))?;
        Ok((
            out.status.success(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ))
    })?;
    let out = apply("cm-dead", &config_map("refused", "dead"))?;
    let err = String::from_utf8_lossy(&out.stderr);
    if out.status.success() || !err.contains("absent") {
        bail!("a webhook without its Service did not fail the write naming it: {err}");
    }
    let out = apply(
        "apiservice",
        "apiVersion: apiregistration.k8s.io/v1\nkind: APIService\nmetadata: {name: v1alpha1.sim.test.fabrik.dev}\nspec:\n  group: sim.test.fabrik.dev\n  version: v1alpha1\n  service: {namespace: default, name: web, port: 80}\n  insecureSkipTLSVerify: true\n  groupPriorityMinimum: 100\n  versionPriority: 100\n",
    )?;
    if !out.status.success() {
        bail!("APIService: {}", String::from_utf8_lossy(&out.stderr));
    }
    poll("the APIService Available", 60, || {
        seen(
            k,
            tkc,
            &[
                "get",
                "apiservice",
                "v1alpha1.sim.test.fabrik.dev",
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Available\")].status}",
            ],
        )
        .map(|(ok, text)| (ok && text == "True", text))
    })?;
    kc_ok(
        k,
        tkc,
        &["delete", "validatingwebhookconfiguration", "live", "dead"],
    )?;
    kc_ok(
        k,
        tkc,
        &["delete", "apiservice", "v1alpha1.sim.test.fabrik.dev"],
    )?;
    Ok(())
}

/// The URL a `fabrik serve` log names (`serving tenants at URL/clusters/<tenant>`).
fn serving_url(log: &str) -> Option<String> {
    let rest = log.split("serving tenants at ").nth(1)?;
    Some(rest.split("/clusters/").next()?.to_string())
}

/// A copy of the tenant kubeconfig `from` that names `url` as its server.
fn kubeconfig_at(from: &Path, url: &str, out: &Path) -> Result<()> {
    let text = std::fs::read_to_string(from)?;
    let mut doc: Value = serde_yaml_ng::from_str(&text)?;
    let clusters = doc["clusters"]
        .as_array_mut()
        .context("a kubeconfig without clusters")?;
    for c in clusters {
        let server = c["cluster"]["server"].as_str().unwrap_or("").to_string();
        let path = server
            .find("/clusters/")
            .map(|i| &server[i..])
            .unwrap_or("");
        c["cluster"]["server"] = json!(format!("{url}{path}"));
    }
    std::fs::write(out, serde_yaml_ng::to_string(&doc)?)?;
    Ok(())
}

/// Two `fabrik serve` replicas sharing an etcd store, with the chart's RBAC for that mode
/// (shard Leases): a new tenant is served through both, its pods synced; the replica that runs
/// it is killed and the other takes over its syncing.
fn ha_replicas(w: &mut World) -> Result<()> {
    let (k, admin, work) = (w.k.clone(), w.admin(), w.work.clone());
    // The sled replica steps down: from here the tenants are the etcd replicas'.
    w.serve = None;
    let rbac = work.join("rbac-etcd.yaml");
    std::fs::write(
        &rbac,
        chart_rbac(
            &work,
            &[
                "--set",
                "controlPlane.storage.mode=etcd",
                "--set",
                "controlPlane.storage.etcd.endpoints={http://etcd:2379}",
                "--set",
                "controlPlane.replicas=2",
            ],
        )?,
    )?;
    kc_ok(&k, &admin, &["apply", "-f", &rbac.display().to_string()])?;
    let etcd = e2e::etcd::Etcd::start()?;
    let store = etcd.store_flag();
    let host_kubeconfig = work.join("serve.kubeconfig").display().to_string();
    let ca_secret = format!("{RELEASE_NS}/{RELEASE}-fabrik-serving-ca");
    let api_service = format!("{RELEASE_NS}/{RELEASE}-fabrik");
    let replica = |name: &'static str| -> Result<Fabrik> {
        let data = work.join(format!("{name}-data")).display().to_string();
        Fabrik::start(
            name,
            &[
                "serve",
                "--host-kubeconfig",
                &host_kubeconfig,
                "--data-dir",
                &data,
                "--listen",
                "127.0.0.1:0",
                "--serving-ca-secret",
                &ca_secret,
                "--usage-namespace",
                RELEASE_NS,
                "--api-service",
                &api_service,
                "--store",
                &store,
                "--replica-id",
                name,
                "--lease-namespace",
                RELEASE_NS,
            ],
            work.join(format!("{name}.log")),
        )
    };
    let mut replicas = vec![replica("replica-0")?, replica("replica-1")?];
    let mut urls = Vec::new();
    for r in &replicas {
        let url = poll_value(
            &format!("{} serving", r.name),
            e2e::STARTUP.as_secs(),
            || Ok(serving_url(&r.log())),
        )?;
        urls.push(url);
    }
    let file = work.join("team-b.yaml");
    std::fs::write(
        &file,
        "apiVersion: fabrik.dev/v1alpha1\nkind: Tenant\nmetadata: {name: team-b}\nspec:\n  quota: {pods: 10}\n",
    )?;
    kc_ok(&k, &admin, &["apply", "-f", &file.display().to_string()])?;
    poll("Tenant team-b Ready", 120, || {
        let (ok, text) = seen(&k, &admin, &["get", "tenant", "team-b", "-o", "json"])?;
        if !ok {
            return Ok((false, text));
        }
        let t: Value = serde_json::from_str(&text)?;
        Ok((t["status"]["phase"] == "Ready", t["status"].to_string()))
    })?;
    let tenant_kc = work.join("team-b.kubeconfig");
    tenant_kubeconfig(&k, &admin, "fabrik-team-b", &tenant_kc)?;
    // The replica deciding for the GPU queue goes on from the fair-share ledger the single
    // replica saved before it was killed.
    poll("a replica read the saved fair-share ledger", 60, || {
        let read = replicas
            .iter()
            .any(|r| r.log().contains("GPU queue: fair-share ledger read"));
        Ok((read, String::new()))
    })?;
    // Through either replica: the same tenant.
    let mut via = Vec::new();
    for (i, url) in urls.iter().enumerate() {
        let out = work.join(format!("team-b-via-{i}.kubeconfig"));
        kubeconfig_at(&tenant_kc, url, &out)?;
        poll(&format!("team-b through replica {i}"), 60, || {
            seen(&k, &out, &["get", "ns", "default"])
        })?;
        via.push(out);
    }
    kc_ok(&k, &via[1], &["create", "configmap", "written-via-1"])?;
    poll("the configmap through replica 0", 30, || {
        seen(&k, &via[0], &["get", "configmap", "written-via-1"])
    })?;
    let pod = |name: &str, through: &Path| -> Result<()> {
        let f = work.join(format!("{name}.yaml"));
        std::fs::write(
            &f,
            format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}}}\nspec:\n  containers: [{{name: c, image: busybox}}]\n"),
        )?;
        kc_ok(&k, through, &["apply", "-f", &f.display().to_string()])?;
        Ok(())
    };
    let host_pod_running = |name: &str, tenant: &Path| {
        let host_name = format!("{name}-x-default-x-team-b");
        poll(
            &format!("host pod {host_name} Running, and the tenant sees it"),
            120,
            || {
                let (ok, text) = seen(
                    &k,
                    &admin,
                    &[
                        "get",
                        "pod",
                        &host_name,
                        "-n",
                        "fabrik-team-b",
                        "-o",
                        "jsonpath={.status.phase}",
                    ],
                )?;
                if !ok || text.trim() != "Running" {
                    return Ok((false, text));
                }
                let (ok, text) = seen(
                    &k,
                    tenant,
                    &["get", "pod", name, "-o", "jsonpath={.status.phase}"],
                )?;
                Ok((ok && text.trim() == "Running", text))
            },
        )
    };
    pod("before", &via[1])?;
    host_pod_running("before", &via[0])?;
    // The replica that runs team-b (its syncer) dies; the other takes over within the Leases'
    // duration and syncs what is created meanwhile.
    let owner = replicas
        .iter()
        .position(|r| {
            r.log()
                .lines()
                .any(|l| l.contains("team-b") && l.contains("tenant API server started"))
        })
        .context("no replica says it started team-b")?;
    let survivor = 1 - owner;
    drop(replicas.remove(owner));
    pod("after", &via[survivor])?;
    host_pod_running("after", &via[survivor])?;
    drop(replicas);
    drop(etcd);
    Ok(())
}

fn poll_value<T>(what: &str, secs: u64, mut check: impl FnMut() -> Result<Option<T>>) -> Result<T> {
    let deadline = Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check()? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out after {secs} s waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}
