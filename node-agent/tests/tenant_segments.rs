//! End to end: the real `fabrik-node-agent` with `--network simulated` against a real
//! `fabrik up --nodes 0` (built with `cargo build -p control-plane --bin fabrik`). A Tenant's
//! segment appears on the node (annotation `fabrik.dev/tenant-segments`, condition
//! `TenantNetworks`, Events) while the tenant has pods bound there and disappears with its last
//! pod; a tenant without a segment gets none; a segment that is not a VNI is a clear error on
//! the condition and nothing is built.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use e2e::Fabrik;
use fabrik_api::tenant::{Tenant, TenantSpec};
use k8s_openapi::api::core::v1::{Event, Namespace, Node, Pod};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

const AGENT: &str = env!("CARGO_BIN_EXE_fabrik-node-agent");
const NODE: &str = "net-a";
const TENANT: &str = "neta";

/// The agent, killed on drop.
struct AgentProc {
    child: Child,
    log: std::path::PathBuf,
}

impl AgentProc {
    fn start(fabrik: &Fabrik, dir: &Path) -> AgentProc {
        let sim_file = dir.join("node.yaml");
        std::fs::write(&sim_file, "gpus: [{model: H200-141GB, count: 1}]").expect("sim file");
        let log = dir.join("agent.log");
        let out = std::fs::File::create(&log).expect("log file");
        let child = Command::new(AGENT)
            .arg("--kubeconfig")
            .arg(fabrik.kubeconfig())
            .args(["--node-name", NODE, "--backend", "simulated"])
            .args(["--interval-ms", "100", "--usage-publish-interval", "0"])
            .args(["--network", "simulated", "--vtep", "192.168.50.1"])
            .arg("--sim-file")
            .arg(&sim_file)
            .arg("--state-dir")
            .arg(dir.join("state"))
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("clone"))
            .stderr(out)
            .spawn()
            .expect("start agent");
        AgentProc { child, log }
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

/// Polls `check` until it returns `Some`, or fails after 30 s with `what`, the last value seen
/// and the agent's log.
async fn wait_for<T, F, Fut>(agent: &AgentProc, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        match check().await {
            Ok(v) => return v,
            Err(seen) => assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; last seen: {seen}\nagent log:\n{}",
                agent.log()
            ),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The node's segments annotation and `TenantNetworks` condition (status, message).
async fn network_state(nodes: &Api<Node>) -> Result<(String, String, String), String> {
    let n = nodes.get(NODE).await.map_err(|e| e.to_string())?;
    let segments = n
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("fabrik.dev/tenant-segments"))
        .cloned()
        .ok_or("no segments annotation")?;
    let c = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "TenantNetworks"))
        .ok_or("no TenantNetworks condition")?;
    Ok((
        segments,
        c.status.clone(),
        c.message.clone().unwrap_or_default(),
    ))
}

/// Waits until the node reports `segments` with condition `status` and a message containing
/// `message`.
async fn expect_state(
    agent: &AgentProc,
    nodes: &Api<Node>,
    segments: &str,
    status: &str,
    message: &str,
) {
    let what = format!("segments {segments}, TenantNetworks={status} ({message})");
    wait_for(agent, &what, || async {
        let seen = network_state(nodes).await?;
        if seen.0 == segments && seen.1 == status && seen.2.contains(message) {
            Ok(())
        } else {
            Err(format!("{seen:?}"))
        }
    })
    .await;
}

fn host_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": format!("fabrik-{TENANT}"),
            "labels": {fabrik_api::LABEL_TENANT: TENANT},
        },
        "spec": {"nodeName": NODE, "containers": [{"name": "c", "image": "example.com/app:1"}]},
    }))
    .expect("pod")
}

async fn set_segment(tenants: &Api<Tenant>, segment: i64) {
    let patch = json!({"spec": {"network": {"segment": segment}}});
    tenants
        .patch(TENANT, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect("set segment");
}

async fn event_messages(client: &Client, reason: &str) -> Vec<String> {
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events
        .list(&Default::default())
        .await
        .map(|l| {
            l.items
                .into_iter()
                .filter(|e| e.reason.as_deref() == Some(reason))
                .filter_map(|e| e.message)
                .collect()
        })
        .unwrap_or_default()
}

#[tokio::test]
async fn a_tenants_segment_follows_its_pods_onto_and_off_the_node() {
    e2e::init_crypto();
    let fabrik = Fabrik::start_with(&["--nodes", "0"]).expect("fabrik up");
    let dir = tempfile::tempdir().expect("tmp");
    let client = fabrik.client().await.expect("client");
    let nodes: Api<Node> = Api::all(client.clone());
    let tenants: Api<Tenant> = Api::all(client.clone());
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &format!("fabrik-{TENANT}"));
    let agent = AgentProc::start(&fabrik, dir.path());

    // A tenant without a segment, with a pod on the node: nothing built.
    tenants
        .create(
            &PostParams::default(),
            &Tenant::new(TENANT, TenantSpec::default()),
        )
        .await
        .expect("create tenant");
    wait_for(&agent, "the tenant's host namespace", || async {
        let ns = json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": format!("fabrik-{TENANT}")}});
        let ns: Namespace = serde_json::from_value(ns).map_err(|e| e.to_string())?;
        match namespaces.create(&PostParams::default(), &ns).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    })
    .await;
    wait_for(&agent, "pod p1", || async {
        pods.create(&PostParams::default(), &host_pod("p1"))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    })
    .await;
    expect_state(
        &agent,
        &nodes,
        "{}",
        "True",
        "no tenant segments on this node",
    )
    .await;
    let node = nodes.get(NODE).await.expect("node");
    let annotations = node.metadata.annotations.unwrap_or_default();
    assert_eq!(annotations["fabrik.dev/vtep"], "192.168.50.1");

    // Segment 100: built while the tenant has pods here.
    set_segment(&tenants, 100).await;
    expect_state(
        &agent,
        &nodes,
        r#"{"neta":100}"#,
        "True",
        "tenant segments built: neta=100",
    )
    .await;
    let built = event_messages(&client, "TenantSegmentBuilt").await;
    assert!(
        built
            .iter()
            .any(|m| m.contains("segment 100 of tenant neta")),
        "{built:?}"
    );
    pods.create(&PostParams::default(), &host_pod("p2"))
        .await
        .expect("pod p2");
    let gone = DeleteParams::default().grace_period(0);
    pods.delete("p1", &gone).await.expect("delete p1");
    // Still one pod: kept (give the agent a few passes to be sure).
    tokio::time::sleep(Duration::from_millis(500)).await;
    expect_state(&agent, &nodes, r#"{"neta":100}"#, "True", "neta=100").await;

    // The last pod leaves: removed.
    pods.delete("p2", &gone).await.expect("delete p2");
    expect_state(
        &agent,
        &nodes,
        "{}",
        "True",
        "no tenant segments on this node",
    )
    .await;
    let removed = event_messages(&client, "TenantSegmentRemoved").await;
    assert!(
        removed.iter().any(|m| m.starts_with("segment 100 removed")),
        "{removed:?}"
    );

    // A segment that is not a VNI is refused where the Tenant is written (the agent's own
    // refusal of one, for hosts with an older CRD, is unit-tested in `network::reconcile`).
    let patch = json!({"spec": {"network": {"segment": 0}}});
    let refused = tenants
        .patch(TENANT, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .expect_err("segment 0 is reserved");
    assert!(
        refused.to_string().contains("spec.network.segment"),
        "{refused}"
    );
}
