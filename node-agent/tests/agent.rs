//! Integration tests: the real `fabrik-node-agent` binary with the simulated backend against a
//! real `fabrik up` (built with `cargo build -p control-plane --bin fabrik`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::Fabrik;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::resource::v1::ResourceSlice;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const AGENT: &str = env!("CARGO_BIN_EXE_fabrik-node-agent");

/// A running agent, killed on drop.
struct AgentProc {
    child: Child,
    state_dir: PathBuf,
    log: PathBuf,
}

impl AgentProc {
    fn start(fabrik: &Fabrik, dir: &Path, node: &str, sim: &str) -> AgentProc {
        let sim_file = dir.join(format!("{node}.yaml"));
        std::fs::write(&sim_file, sim).expect("write sim file");
        let state_dir = dir.join(format!("{node}-state"));
        let log = dir.join(format!("{node}.log"));
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(AGENT)
            .arg("--kubeconfig")
            .arg(fabrik.kubeconfig())
            .args([
                "--node-name",
                node,
                "--backend",
                "simulated",
                "--interval-ms",
                "100",
            ])
            .arg("--sim-file")
            .arg(&sim_file)
            .arg("--state-dir")
            .arg(&state_dir)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone"))
            .stderr(out)
            .spawn()
            .expect("start agent");
        AgentProc {
            child,
            state_dir,
            log,
        }
    }

    fn inject(&self, faults: &str) {
        let tmp = self.state_dir.join("inject.tmp");
        std::fs::write(&tmp, faults).expect("write faults");
        std::fs::rename(&tmp, self.state_dir.join("sim-inject.yaml")).expect("rename");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for AgentProc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn client(fabrik: &Fabrik) -> Client {
    e2e::init_crypto();
    fabrik.client().await.expect("client")
}

/// Polls `check` until it returns `Some`, or fails after 30 s with `what` and the agent log.
async fn wait_for<T, F, Fut>(agent: &AgentProc, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut tick = tokio::time::interval(Duration::from_millis(100));
    loop {
        tick.tick().await;
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "timed out waiting for {what}; agent log:\n{}",
            agent.log()
        );
    }
}

fn quantity(node: &Node, field: &str, key: &str) -> Option<String> {
    let status = node.status.as_ref()?;
    let map = if field == "capacity" {
        status.capacity.as_ref()?
    } else {
        status.allocatable.as_ref()?
    };
    map.get(key).map(|q| q.0.clone())
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

fn condition(node: &Node, type_: &str) -> Option<(String, String)> {
    let c = node
        .status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.message.clone().unwrap_or_default()))
}

async fn event_reasons(client: &Client) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&Default::default())
        .await
        .map(|l| l.items.into_iter().filter_map(|e| e.reason).collect())
        .unwrap_or_default()
}

async fn set_layout(client: &Client, node: &str, layout: &str) {
    let nodes: Api<Node> = Api::all(client.clone());
    let patch = json!({"metadata": {"annotations": {fabrik_api::ANNOTATION_GPU_LAYOUT: layout}}});
    nodes
        .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("set layout");
}

#[tokio::test]
async fn registers_publishes_inventory_and_applies_layouts() {
    let fabrik = Fabrik::start().expect("fabrik up");
    let dir = tempfile::tempdir().expect("tmp");
    let sim = "gpus: [{model: H200-141GB, count: 2, numaNodes: [0, 1]}]\nnvlink: {pairs: [[0, 1]]}";
    let agent = AgentProc::start(&fabrik, dir.path(), "gpu-a", sim);
    let client = client(&fabrik).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let slices: Api<ResourceSlice> = Api::all(client.clone());

    // Registered, whole GPUs advertised, topology labelled, slice published.
    let node = wait_for(&agent, "node with 2 GPUs", || async {
        let n = nodes.get_opt("gpu-a").await.ok()??;
        (quantity(&n, "allocatable", "nvidia.com/gpu").as_deref() == Some("2")).then_some(n)
    })
    .await;
    let labels = node.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels[fabrik_api::LABEL_GPU_MODEL], "H200-141GB");
    assert_eq!(labels[fabrik_api::LABEL_GPU_NUMA_NODES], "2");
    assert_eq!(labels[fabrik_api::LABEL_GPU_NVLINK_ISLANDS], "1");
    assert_eq!(
        condition(&node, "GPUHealthy").map(|c| c.0).as_deref(),
        Some("True")
    );
    let slice = wait_for(&agent, "resource slice", || async {
        slices.get_opt("gpu-a-gpu.nvidia.com").await.ok()?
    })
    .await;
    assert_eq!(slice.spec.driver, "gpu.nvidia.com");
    let devices = slice.spec.devices.clone().unwrap_or_default();
    assert_eq!(devices.len(), 2);
    let attrs = devices[1].attributes.clone().unwrap_or_default();
    assert_eq!(attrs["uuid"].string.as_deref(), Some("GPU-sim-gpu-a-1"));
    assert_eq!(attrs["numaNode"].int, Some(1));
    assert_eq!(attrs["nvlinkPeers"].string.as_deref(), Some("0"));

    // A MIG geometry: applied, advertised, sliced.
    set_layout(&client, "gpu-a", "mode: mig\ngeometry: all-1g.18gb").await;
    let node = wait_for(&agent, "MIG layout applied", || async {
        let n = nodes.get("gpu-a").await.ok()?;
        let status = annotation(&n, fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS)?;
        let mig = quantity(&n, "allocatable", "nvidia.com/mig-1g.18gb");
        (status.contains("\"applied\"") && mig.as_deref() == Some("14")).then_some(n)
    })
    .await;
    assert_eq!(
        quantity(&node, "capacity", "nvidia.com/gpu"),
        None,
        "stale resource removed"
    );
    assert_eq!(
        node.metadata.labels.unwrap_or_default()[fabrik_api::LABEL_GPU_LAYOUT_MODE],
        "mig"
    );
    let slice = wait_for(&agent, "slice with 14 MIG devices", || async {
        let s = slices.get("gpu-a-gpu.nvidia.com").await.ok()?;
        (s.spec.devices.as_ref()?.len() == 14).then_some(s)
    })
    .await;
    let mig = slice
        .spec
        .devices
        .unwrap_or_default()
        .into_iter()
        .find(|d| d.name == "gpu-1-mig-6")
        .expect("MIG device gpu-1-mig-6");
    let attrs = mig.attributes.unwrap_or_default();
    assert_eq!(attrs["migProfile"].string.as_deref(), Some("1g.18gb"));
    assert_eq!(
        attrs["parentUUID"].string.as_deref(),
        Some("GPU-sim-gpu-a-1")
    );

    // An impossible layout: failed with the reason, nothing changed.
    set_layout(
        &client,
        "gpu-a",
        "mode: mig\nperGpu: {\"0\": [4g.71gb, 4g.71gb]}",
    )
    .await;
    let node = wait_for(&agent, "failed status", || async {
        let n = nodes.get("gpu-a").await.ok()?;
        let status = annotation(&n, fabrik_api::ANNOTATION_GPU_LAYOUT_STATUS)?;
        let condition_false = condition(&n, "GPULayoutApplied")?.0 == "False";
        (status.contains("\"failed\"") && condition_false).then_some((n, status))
    })
    .await;
    assert!(node.1.contains("do not fit"), "{}", node.1);
    assert_eq!(
        quantity(&node.0, "allocatable", "nvidia.com/mig-1g.18gb").as_deref(),
        Some("14"),
        "the layout in force stays"
    );
    let (status, message) = condition(&node.0, "GPULayoutApplied").expect("condition");
    assert_eq!(status, "False");
    assert!(message.contains("do not fit"), "{message}");
    let reasons = event_reasons(&client).await;
    for r in [
        "Registered",
        "LayoutStep",
        "LayoutApplied",
        "LayoutFailed",
        "InventoryPublished",
    ] {
        assert!(
            reasons.iter().any(|x| x == r),
            "no {r} event in {reasons:?}"
        );
    }

    // Time-slicing: each GPU advertised 4 times, as NVIDIA's renamed `nvidia.com/gpu.shared`
    // and never as a whole GPU.
    set_layout(
        &client,
        "gpu-a",
        r#"{"mode": "time-slicing", "replicas": 4}"#,
    )
    .await;
    wait_for(&agent, "time-slicing", || async {
        let n = nodes.get("gpu-a").await.ok()?;
        let shared = quantity(&n, "allocatable", "nvidia.com/gpu.shared");
        let gpus = quantity(&n, "allocatable", "nvidia.com/gpu");
        let mig = quantity(&n, "allocatable", "nvidia.com/mig-1g.18gb");
        (shared.as_deref() == Some("8") && gpus.is_none() && mig.is_none()).then_some(())
    })
    .await;

    // NVIDIA's single MIG strategy: one profile everywhere, published as `nvidia.com/gpu`.
    set_layout(
        &client,
        "gpu-a",
        r#"{"mode": "mig", "strategy": "single", "geometry": "all-1g.18gb"}"#,
    )
    .await;
    wait_for(&agent, "the single MIG strategy", || async {
        let n = nodes.get("gpu-a").await.ok()?;
        let gpus = quantity(&n, "allocatable", "nvidia.com/gpu");
        let mig = quantity(&n, "allocatable", "nvidia.com/mig-1g.18gb");
        let labels = n.metadata.labels.clone().unwrap_or_default();
        (gpus.as_deref() == Some("14")
            && mig.is_none()
            && labels.get("nvidia.com/mig.strategy").map(String::as_str) == Some("single")
            && labels.get("nvidia.com/gpu.product").map(String::as_str)
                == Some("NVIDIA-H200-MIG-1g.18gb"))
        .then_some(())
    })
    .await;
}

fn gpu_pod(name: &str, node: &str, device: &str, app: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": name,
            "labels": {"app": app},
            "annotations": {fabrik_api::ANNOTATION_GPU_DEVICES: device},
        },
        "spec": {
            "nodeName": node,
            "containers": [{"name": "main", "image": "busybox"}],
        }
    }))
    .expect("pod")
}

#[tokio::test]
async fn a_gpu_fault_taints_cordons_evicts_and_the_node_returns() {
    let fabrik = Fabrik::start().expect("fabrik up");
    let dir = tempfile::tempdir().expect("tmp");
    let agent = AgentProc::start(
        &fabrik,
        dir.path(),
        "gpu-b",
        "gpus: [{model: H100-80GB, count: 2}]",
    );
    let client = client(&fabrik).await;
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "default");
    wait_for(&agent, "node registered", || async {
        let n = nodes.get_opt("gpu-b").await.ok()??;
        quantity(&n, "allocatable", "nvidia.com/gpu").map(|_| ())
    })
    .await;
    let pp = PostParams::default();
    for (name, gpu, app) in [
        ("on-bad", 1, "free"),
        ("on-good", 0, "free"),
        ("guarded", 1, "guarded"),
    ] {
        let pod = gpu_pod(name, "gpu-b", &format!("GPU-sim-gpu-b-{gpu}"), app);
        pods.create(&pp, &pod).await.expect("create pod");
        // Running and Ready (no kubelet here to say so): PDBs only protect healthy pods.
        let status = json!({"status": {"phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}]}});
        pods.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
            .await
            .expect("pod status");
    }
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "guarded"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "guarded"}}}
    }))
    .expect("pdb");
    pdbs.create(&pp, &pdb).await.expect("create pdb");

    agent.inject("- {gpu: 1, xid: 79}\n");
    let node = wait_for(&agent, "unhealthy GPU handled", || async {
        let n = nodes.get("gpu-b").await.ok()?;
        let spec = n.spec.clone()?;
        let tainted = spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == fabrik_api::TAINT_GPU_UNHEALTHY && t.effect == "NoSchedule");
        let cordoned = spec.unschedulable == Some(true);
        let alloc = quantity(&n, "allocatable", "nvidia.com/gpu");
        (tainted && cordoned && alloc.as_deref() == Some("1")).then_some(n)
    })
    .await;
    let (status, message) = condition(&node, "GPUHealthy").expect("condition");
    assert_eq!(status, "False");
    assert!(message.contains("GPU 1: XID 79"), "{message}");
    assert_eq!(
        quantity(&node, "capacity", "nvidia.com/gpu").as_deref(),
        Some("2")
    );
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    wait_for(&agent, "bad GPU out of the slice", || async {
        let s = slices.get("gpu-b-gpu.nvidia.com").await.ok()?;
        let names: Vec<String> = s.spec.devices?.into_iter().map(|d| d.name).collect();
        (names == vec!["gpu-0".to_string()]).then_some(())
    })
    .await;
    // The pod on the bad GPU is evicted; the one on the good GPU stays; the guarded one is
    // kept by its PodDisruptionBudget.
    wait_for(&agent, "eviction", || async {
        let p = pods.get_opt("on-bad").await.ok()?;
        let gone = p.is_none_or(|p| p.metadata.deletion_timestamp.is_some());
        gone.then_some(())
    })
    .await;
    wait_for(&agent, "blocked eviction reported", || async {
        let r = event_reasons(&client).await;
        r.iter().any(|x| x == "EvictionBlocked").then_some(())
    })
    .await;
    let good = pods.get("on-good").await.expect("on-good");
    assert!(good.metadata.deletion_timestamp.is_none());
    let guarded = pods.get("guarded").await.expect("guarded");
    assert!(guarded.metadata.deletion_timestamp.is_none());

    // Healthy again: the node returns.
    agent.inject("- {gpu: 1, recover: true}\n");
    wait_for(&agent, "node returned", || async {
        let n = nodes.get("gpu-b").await.ok()?;
        let spec = n.spec.clone()?;
        let tainted = spec
            .taints
            .unwrap_or_default()
            .iter()
            .any(|t| t.key == fabrik_api::TAINT_GPU_UNHEALTHY);
        let healthy = condition(&n, "GPUHealthy")?.0 == "True";
        let alloc = quantity(&n, "allocatable", "nvidia.com/gpu");
        (!tainted && spec.unschedulable != Some(true) && healthy && alloc.as_deref() == Some("2"))
            .then_some(())
    })
    .await;
    // Events are recorded after the step they report: poll until all are there.
    let wanted = [
        "GPUUnhealthy",
        "NodeTainted",
        "NodeCordoned",
        "PodEvicted",
        "GPURecovered",
        "NodeReturned",
    ];
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let reasons = event_reasons(&client).await;
        let missing: Vec<&str> = wanted
            .iter()
            .copied()
            .filter(|r| !reasons.iter().any(|x| x == r))
            .collect();
        if missing.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no {missing:?} events in {reasons:?}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}

#[test]
fn bad_simulation_files_and_backends_fail_clearly() {
    let dir = tempfile::tempdir().expect("tmp");
    let run = |sim: Option<&str>, backend: &str| {
        let mut cmd = Command::new(AGENT);
        cmd.args([
            "--kubeconfig",
            "/nonexistent",
            "--node-name",
            "n",
            "--backend",
            backend,
        ])
        .arg("--state-dir")
        .arg(dir.path().join("state"));
        if let Some(text) = sim {
            let file = dir.path().join("sim.yaml");
            std::fs::write(&file, text).expect("write");
            cmd.arg("--sim-file").arg(file);
        }
        let out = cmd.output().expect("run agent");
        assert!(!out.status.success());
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let err = run(Some("gpus: [{model: T4, count: 2}]"), "simulated");
    assert!(err.contains("unknown GPU model \"T4\""), "{err}");
    let err = run(Some("gpus: [{model: H200-141GB, count: 2"), "simulated");
    assert!(err.contains("sim.yaml"), "{err}");
    let err = run(None, "simulated");
    assert!(err.contains("needs --sim-file"), "{err}");
    let err = run(None, "nvml");
    assert!(err.contains("cannot initialise NVML"), "{err}");
    assert!(
        !dir.path().join("state").join("agent-state.json").exists(),
        "nothing written on bad input"
    );
}
