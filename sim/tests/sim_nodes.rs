//! End to end: the real `fabrik up --nodes 2 --gpus-per-node 8` (built with
//! `cargo build -p control-plane --bin fabrik`) runs simulated GPU nodes and the GPU scheduler:
//! each node reports its simulated tenant networks (VTEP, no segments); a Deployment of GPU
//! pods is scheduled, packed per NUMA node and Running; a gang that does
//! not fit is held back whole, and placed whole once room is made; deletion finishes.

use std::collections::BTreeMap;
use std::future::Future;
use std::time::{Duration, Instant};

use e2e::Fabrik;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

async fn eventually<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn gpu_pod_template(gpus: u32) -> serde_json::Value {
    json!({
        "containers": [{
            "name": "train", "image": "example.com/train:1",
            "resources": {"limits": {"nvidia.com/gpu": gpus.to_string(), "cpu": "4", "memory": "64Gi"}},
        }],
    })
}

fn annotation<'a>(p: &'a Pod, key: &str) -> Option<&'a str> {
    p.metadata
        .annotations
        .as_ref()?
        .get(key)
        .map(String::as_str)
}

fn running(p: &Pod) -> bool {
    let s = p.status.as_ref();
    s.and_then(|s| s.phase.as_deref()) == Some("Running")
        && s.and_then(|s| s.pod_ip.as_deref()).is_some()
        && s.and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|c| {
                c.iter()
                    .all(|c| c.ready && c.state.as_ref().is_some_and(|s| s.running.is_some()))
            })
}

fn gpu_indexes(p: &Pod) -> Vec<u32> {
    annotation(p, fabrik_api::ANNOTATION_GPU_IDS)
        .unwrap_or("")
        .split(',')
        .filter_map(|d| d.strip_prefix("gpu-")?.parse().ok())
        .collect()
}

async fn pods_with(client: &Client, selector: &str) -> Vec<Pod> {
    Api::<Pod>::namespaced(client.clone(), "default")
        .list(&ListParams::default().labels(selector))
        .await
        .map(|l| l.items)
        .unwrap_or_default()
}

fn gang_pod(name: &str, gpus: u32) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": "gang", fabrik_api::GANG: "big"},
                     "annotations": {fabrik_api::GANG_SIZE: "2"}},
        "spec": gpu_pod_template(gpus),
    }))
    .expect("pod")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fabrik_up_runs_gpu_pods_on_simulated_nodes() {
    let fabrik = Fabrik::start_with(&["--nodes", "2", "--gpus-per-node", "8"]).expect("fabrik up");
    e2e::init_crypto();
    let client = fabrik.client().await.expect("client");
    let nodes: Api<Node> = Api::all(client.clone());

    // Both nodes register, Ready, with CPU, memory and 8 GPUs, and topology labels.
    eventually("2 Ready GPU nodes", Duration::from_secs(30), || async {
        let list = nodes.list(&ListParams::default()).await.ok()?;
        let ready = list.items.iter().filter(|n| {
            let s = n.status.as_ref();
            let alloc = s.and_then(|s| s.allocatable.as_ref());
            let gpus = alloc
                .and_then(|a| a.get("nvidia.com/gpu"))
                .map(|q| q.0.as_str());
            let labels = n.metadata.labels.clone().unwrap_or_default();
            s.and_then(|s| s.conditions.as_ref())
                .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
                && gpus == Some("8")
                && alloc.is_some_and(|a| a.contains_key("cpu") && a.contains_key("memory"))
                && labels.get(fabrik_api::LABEL_GPU_MODEL).map(String::as_str) == Some("H200-141GB")
                && labels.contains_key("kubernetes.io/hostname")
        });
        (ready.count() == 2).then_some(())
    })
    .await;

    // Each node's agent runs the simulated network backend: its VTEP and (no tenant has a
    // segment) no tenant segments are reported.
    eventually(
        "tenant networks reported",
        Duration::from_secs(30),
        || async {
            let list = nodes.list(&ListParams::default()).await.ok()?;
            let mut vteps: Vec<String> = Vec::new();
            for n in &list.items {
                let a = n.metadata.annotations.clone().unwrap_or_default();
                let ready = n
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|c| {
                        c.iter()
                            .any(|c| c.type_ == "TenantNetworks" && c.status == "True")
                    });
                if a.get("fabrik.dev/tenant-segments").map(String::as_str) == Some("{}") && ready {
                    vteps.extend(a.get("fabrik.dev/vtep").cloned());
                }
            }
            vteps.sort();
            (vteps == ["10.0.0.10", "10.0.0.11"]).then_some(())
        },
    )
    .await;

    // Three 4-GPU pods: best fit puts two on one node (one per NUMA node), one on the other.
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let deployment: Deployment = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "train"},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "train"}},
                 "template": {"metadata": {"labels": {"app": "train"}}, "spec": gpu_pod_template(4)}},
    }))
    .expect("deployment");
    deployments
        .create(&PostParams::default(), &deployment)
        .await
        .expect("create deployment");
    let pods = eventually("3 Running GPU pods", Duration::from_secs(30), || async {
        let pods = pods_with(&client, "app=train").await;
        (pods.len() == 3 && pods.iter().all(running)).then_some(pods)
    })
    .await;
    let mut per_node: BTreeMap<String, Vec<Vec<u32>>> = BTreeMap::new();
    for p in &pods {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .expect("bound");
        let gpus = gpu_indexes(p);
        assert_eq!(gpus.len(), 4, "{:?}", p.metadata.annotations);
        let numa0 = gpus.iter().all(|g| *g < 4);
        let numa1 = gpus.iter().all(|g| *g >= 4);
        assert!(numa0 || numa1, "one NUMA node: {gpus:?}");
        assert!(
            annotation(p, fabrik_api::ANNOTATION_GPU_DEVICES).is_some_and(|d| d.contains("GPU-"))
        );
        per_node.entry(node).or_default().push(gpus);
    }
    let mut sizes: Vec<usize> = per_node.values().map(Vec::len).collect();
    sizes.sort_unstable();
    assert_eq!(sizes, vec![1, 2], "packed best fit: {per_node:?}");

    // A gang of two 8-GPU pods does not fit in the 4 free GPUs: neither is bound.
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), "default");
    for name in ["big-0", "big-1"] {
        pods_api
            .create(&PostParams::default(), &gang_pod(name, 8))
            .await
            .expect("create gang pod");
    }
    eventually(
        "the gang to be held back",
        Duration::from_secs(20),
        || async {
            let pods = pods_with(&client, "app=gang").await;
            let held = pods.iter().all(|p| {
                p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none()
                    && p.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|c| {
                            c.iter().any(|c| {
                                c.type_ == "PodScheduled"
                                    && c.status == "False"
                                    && c.message.as_deref().is_some_and(|m| m.contains("gang big"))
                            })
                        })
            });
            (pods.len() == 2 && held).then_some(())
        },
    )
    .await;

    // Scaling the Deployment to zero deletes its pods; the kubelets finish the deletions, the
    // GPUs come free and the whole gang is placed, one 8-GPU pod per node.
    deployments
        .patch(
            "train",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .expect("scale down");
    eventually(
        "the Deployment's pods to be gone",
        Duration::from_secs(30),
        || async {
            pods_with(&client, "app=train")
                .await
                .is_empty()
                .then_some(())
        },
    )
    .await;
    let gang = eventually("the gang Running", Duration::from_secs(30), || async {
        let pods = pods_with(&client, "app=gang").await;
        (pods.len() == 2 && pods.iter().all(running)).then_some(pods)
    })
    .await;
    let gang_nodes: std::collections::BTreeSet<String> = gang
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(gang_nodes.len(), 2);
    assert!(gang.iter().all(|p| gpu_indexes(p).len() == 8));

    // Deletion honours the grace period: containers that ignore SIGTERM are killed at its end.
    let stubborn: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "stubborn", "labels": {"app": "stubborn"},
                     "annotations": {fabrik_api::ANNOTATION_SIM_STOP_SECONDS: "600"}},
        "spec": {"terminationGracePeriodSeconds": 2,
                 "containers": [{"name": "c", "image": "example.com/c:1"}]},
    }))
    .expect("pod");
    pods_api
        .create(&PostParams::default(), &stubborn)
        .await
        .expect("create");
    eventually("stubborn Running", Duration::from_secs(20), || async {
        let p = pods_api.get_opt("stubborn").await.ok()??;
        running(&p).then_some(())
    })
    .await;
    let asked = Instant::now();
    pods_api
        .delete("stubborn", &DeleteParams::default())
        .await
        .expect("delete");
    let p = pods_api.get_opt("stubborn").await.expect("get");
    assert!(
        p.is_some_and(|p| p.metadata.deletion_timestamp.is_some()),
        "graceful: still there"
    );
    eventually("stubborn gone", Duration::from_secs(15), || async {
        pods_api
            .get_opt("stubborn")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        asked.elapsed() >= Duration::from_millis(1000),
        "killed at the grace period's end"
    );

    // The gang's pods go as soon as asked (their containers exit on SIGTERM).
    for name in ["big-0", "big-1"] {
        pods_api
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete");
    }
    eventually("the gang gone", Duration::from_secs(10), || async {
        pods_with(&client, "app=gang")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
}
