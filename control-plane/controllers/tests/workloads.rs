//! Controllers against the real `fabrik up`: each test starts its own server, runs the
//! controllers in-process over HTTPS and plays the kubelet through `pods/status`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use e2e::Fabrik;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{watcher, WatchStreamExt};
use kube::ResourceExt;
use serde_json::{json, Value};
use tokio::sync::oneshot;

use crate::common::wait_for;

struct Cluster {
    fabrik: Fabrik,
    client: kube::Client,
    stop: Option<oneshot::Sender<()>>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
    }
}

/// A `fabrik up`, which runs these controllers inside the server over its in-process client,
/// and a client for the test.
async fn cluster() -> Result<Cluster> {
    e2e::init_crypto();
    // No simulated nodes: the tests play the kubelet, and a simulated node's kubelet would
    // race them (starting pods the test means to fail).
    let fabrik = Fabrik::start_with(&["--nodes", "0"])?;
    let client = fabrik.client().await?;
    let (tx, _rx) = oneshot::channel::<()>();
    Ok(Cluster {
        fabrik,
        client,
        stop: Some(tx),
    })
}

fn now() -> String {
    Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// The status a kubelet writes for a running, ready pod.
fn running_ready(pod: &Pod) -> Value {
    let t = now();
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "ready": true, "started": true, "restartCount": 0,
                   "image": c.image, "imageID": "",
                   "state": {"running": {"startedAt": t}}})
        })
        .collect();
    json!({"status": {
        "phase": "Running",
        "startTime": t,
        "conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": t},
            {"type": "Initialized", "status": "True", "lastTransitionTime": t},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": t},
            {"type": "Ready", "status": "True", "lastTransitionTime": t},
        ],
        "containerStatuses": containers,
    }})
}

/// The status a kubelet writes for a pod that exited with `code`.
fn terminated(pod: &Pod, code: i32) -> Value {
    let t = now();
    let containers: Vec<Value> = pod
        .spec
        .iter()
        .flat_map(|s| s.containers.iter())
        .map(|c| {
            json!({"name": c.name, "ready": false, "restartCount": 0, "image": c.image,
                   "imageID": "", "state": {"terminated": {"exitCode": code,
                   "reason": if code == 0 { "Completed" } else { "Error" },
                   "startedAt": t, "finishedAt": t}}})
        })
        .collect();
    json!({"status": {
        "phase": if code == 0 { "Succeeded" } else { "Failed" },
        "startTime": t,
        "conditions": [{"type": "Ready", "status": "False", "lastTransitionTime": t}],
        "containerStatuses": containers,
    }})
}

/// A kubelet stand-in: every new pod of `ns` gets the status `decide` returns (once).
fn kubelet(
    client: kube::Client,
    ns: &str,
    decide: impl Fn(&Pod) -> Option<Value> + Send + Sync + 'static,
) -> tokio::task::JoinHandle<()> {
    let api: Api<Pod> = Api::namespaced(client, ns);
    let decide = Arc::new(decide);
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        let mut pods = std::pin::pin!(watcher(api.clone(), watcher::Config::default())
            .default_backoff()
            .applied_objects());
        // A watch error (a dropped connection, a 410 under load) is retried by the backoff;
        // it must not end the stand-in kubelet, or every later pod stays Pending.
        while let Some(event) = pods.next().await {
            let Ok(pod) = event else { continue };
            let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
            if pod.metadata.deletion_timestamp.is_some()
                || matches!(phase.as_deref(), Some("Running" | "Succeeded" | "Failed"))
            {
                continue;
            }
            let uid = pod.uid().unwrap_or_default();
            if !seen.insert(uid) {
                continue;
            }
            if let Some(status) = decide(&pod) {
                // As a kubelet does: retry until the status is written (or the pod is gone).
                for _ in 0..100 {
                    match api
                        .patch_status(
                            &pod.name_any(),
                            &PatchParams::default(),
                            &Patch::Merge(&status),
                        )
                        .await
                    {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 404 => break,
                        Err(e) => {
                            eprintln!(
                                "test kubelet: status of {} not written: {e}",
                                pod.name_any()
                            );
                            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                        }
                    }
                }
            }
        }
    })
}

fn deployment(name: &str, replicas: i32, image: &str) -> Result<Deployment> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "c", "image": image}]},
            },
        },
    }))?)
}

async fn active_pods(api: &Api<Pod>) -> Result<Vec<Pod>> {
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect())
}

async fn rollout_complete(api: &Api<Deployment>, name: &str) -> Result<Option<()>> {
    let d = api.get(name).await?;
    let s = d.status.clone().unwrap_or_default();
    let want = d.spec.replicas.unwrap_or(1);
    let done = s.observed_generation >= d.metadata.generation
        && s.updated_replicas == Some(want)
        && s.replicas == Some(want)
        && s.available_replicas == Some(want)
        && s.conditions.iter().flatten().any(|c| {
            c.type_.as_deref() == Some("Progressing")
                && c.reason.as_deref() == Some("NewReplicaSetAvailable")
        });
    Ok(done.then_some(()))
}

fn kubectl(c: &Cluster, args: &[&str]) -> Result<String> {
    let kubectl = e2e::Kubectl {
        version: "1.35".into(),
        path: e2e::repo_root().join(".tools/bin/kubectl-1.35"),
    };
    c.fabrik.kubectl_ok(&kubectl, args)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deployment_rolls_out_updates_and_undoes() -> Result<()> {
    let c = cluster().await?;
    let ns = "default";
    let _kubelet = kubelet(c.client.clone(), ns, |p| Some(running_ready(p)));
    let deploys: Api<Deployment> = Api::namespaced(c.client.clone(), ns);
    let rss: Api<ReplicaSet> = Api::namespaced(c.client.clone(), ns);
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), ns);
    deploys
        .create(&PostParams::default(), &deployment("web", 3, "nginx:1")?)
        .await?;
    wait_for("first rollout", 60, || rollout_complete(&deploys, "web")).await?;
    let out = kubectl(&c, &["rollout", "status", "deploy/web", "--timeout=60s"])?;
    assert!(out.contains("successfully rolled out"), "{out}");
    assert_eq!(active_pods(&pods).await?.len(), 3);

    // Watch the ReplicaSets while the image changes: never more than replicas + maxSurge.
    let max_total = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let watch_max = max_total.clone();
    let rs_watch = rss.clone();
    let tracker = tokio::spawn(async move {
        let mut store: BTreeMap<String, i32> = BTreeMap::new();
        let mut s = std::pin::pin!(watcher(rs_watch, watcher::Config::default())
            .default_backoff()
            .applied_objects());
        while let Some(event) = s.next().await {
            let Ok(rs) = event else { continue };
            store.insert(rs.name_any(), rs.spec.replicas.unwrap_or(0));
            let total: i32 = store.values().sum();
            watch_max.fetch_max(total, std::sync::atomic::Ordering::SeqCst);
        }
    });
    deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
                {"name": "c", "image": "nginx:2"}]}}}})),
        )
        .await?;
    wait_for("second rollout", 60, || rollout_complete(&deploys, "web")).await?;
    kubectl(&c, &["rollout", "status", "deploy/web", "--timeout=60s"])?;
    tracker.abort();
    assert!(
        max_total.load(std::sync::atomic::Ordering::SeqCst) <= 4,
        "surge exceeded: {}",
        max_total.load(std::sync::atomic::Ordering::SeqCst)
    );
    let list = rss.list(&ListParams::default()).await?.items;
    assert_eq!(list.len(), 2);
    let images: Vec<String> = active_pods(&pods)
        .await?
        .iter()
        .flat_map(|p| p.spec.iter().flat_map(|s| s.containers.iter()))
        .filter_map(|c| c.image.clone())
        .collect();
    assert_eq!(images, vec!["nginx:2"; 3]);
    let d = deploys.get("web").await?;
    assert_eq!(
        d.annotations()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("2")
    );

    let history = kubectl(&c, &["rollout", "history", "deploy/web"])?;
    assert!(history.contains('1') && history.contains('2'), "{history}");
    kubectl(&c, &["rollout", "undo", "deploy/web"])?;
    wait_for("undo", 60, || async {
        let d = deploys.get("web").await?;
        let image = d
            .spec
            .template
            .spec
            .as_ref()
            .and_then(|s| s.containers[0].image.clone());
        if image.as_deref() != Some("nginx:1") {
            return Ok(None);
        }
        rollout_complete(&deploys, "web").await
    })
    .await?;
    kubectl(&c, &["rollout", "status", "deploy/web", "--timeout=60s"])?;
    let d = deploys.get("web").await?;
    assert_eq!(
        d.annotations()
            .get("deployment.kubernetes.io/revision")
            .map(String::as_str),
        Some("3")
    );
    assert_eq!(rss.list(&ListParams::default()).await?.items.len(), 2);

    // restart makes a new ReplicaSet; pause stops rollouts.
    kubectl(&c, &["rollout", "restart", "deploy/web"])?;
    wait_for("restart", 60, || async {
        if rss.list(&ListParams::default()).await?.items.len() != 3 {
            return Ok(None);
        }
        rollout_complete(&deploys, "web").await
    })
    .await?;
    kubectl(&c, &["rollout", "pause", "deploy/web"])?;
    kubectl(&c, &["set", "image", "deploy/web", "c=nginx:3"])?;
    wait_for("paused condition", 30, || async {
        let d = deploys.get("web").await?;
        let paused = d
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .any(|c| c.reason.as_deref() == Some("DeploymentPaused"));
        Ok(paused.then_some(()))
    })
    .await?;
    assert_eq!(rss.list(&ListParams::default()).await?.items.len(), 3);
    kubectl(&c, &["rollout", "resume", "deploy/web"])?;
    wait_for("resumed rollout", 60, || async {
        if rss.list(&ListParams::default()).await?.items.len() != 4 {
            return Ok(None);
        }
        rollout_complete(&deploys, "web").await
    })
    .await?;

    // Idle means idle: nothing is rewritten once the rollout settled. (The one fixed wait in
    // these tests: absence of writes can only be observed over a window.)
    wait_for("settled", 30, || async {
        let before = versions(&deploys, &rss).await?;
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok((versions(&deploys, &rss).await? == before).then_some(()))
    })
    .await?;
    Ok(())
}

async fn versions(d: &Api<Deployment>, rs: &Api<ReplicaSet>) -> Result<Vec<String>> {
    let mut out: Vec<String> = d
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter_map(|o| o.resource_version())
        .collect();
    out.extend(
        rs.list(&ListParams::default())
            .await?
            .items
            .iter()
            .filter_map(|o| o.resource_version()),
    );
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recreate_scales_old_to_zero_first() -> Result<()> {
    let c = cluster().await?;
    let _kubelet = kubelet(c.client.clone(), "default", |p| Some(running_ready(p)));
    let deploys: Api<Deployment> = Api::namespaced(c.client.clone(), "default");
    let mut d = deployment("rec", 2, "busybox:1")?;
    d.spec.strategy = serde_json::from_value(json!({"type": "Recreate"}))?;
    deploys.create(&PostParams::default(), &d).await?;
    wait_for("rollout", 60, || rollout_complete(&deploys, "rec")).await?;
    deploys
        .patch(
            "rec",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"template": {"metadata": {"labels": {"app": "rec", "v": "2"}}}}}),
            ),
        )
        .await?;
    wait_for("second rollout", 60, || async {
        let d = deploys.get("rec").await?;
        if d.metadata.generation != Some(2) {
            return Ok(None);
        }
        rollout_complete(&deploys, "rec").await
    })
    .await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replicaset_replaces_deleted_pod_and_reports_status() -> Result<()> {
    let c = cluster().await?;
    let _kubelet = kubelet(c.client.clone(), "default", |p| Some(running_ready(p)));
    let rss: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let rs: ReplicaSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "ReplicaSet",
        "metadata": {"name": "rs"},
        "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "rs"}},
                 "template": {"metadata": {"labels": {"app": "rs"}},
                              "spec": {"containers": [{"name": "c", "image": "busybox"}]}}},
    }))?;
    rss.create(&PostParams::default(), &rs).await?;
    let ready = |rss: Api<ReplicaSet>| async move {
        let rs = rss.get("rs").await?;
        let s = rs.status.unwrap_or_default();
        Ok(
            (s.replicas == 2 && s.ready_replicas == Some(2) && s.available_replicas == Some(2))
                .then_some(()),
        )
    };
    wait_for("2 ready replicas", 30, || ready(rss.clone())).await?;
    let before = active_pods(&pods).await?;
    assert_eq!(before.len(), 2);
    for p in &before {
        assert!(p.name_any().starts_with("rs-"));
        let owner = &p.owner_references()[0];
        assert_eq!(owner.kind, "ReplicaSet");
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }
    let victim = before[0].name_any();
    pods.delete(&victim, &DeleteParams::default()).await?;
    wait_for("replacement", 30, || async {
        let now = active_pods(&pods).await?;
        Ok((now.len() == 2 && now.iter().all(|p| p.name_any() != victim)).then_some(()))
    })
    .await?;
    wait_for("2 ready replicas again", 30, || ready(rss.clone())).await?;

    // Scale down to 1, then adopt an orphan matching the selector instead of creating one.
    rss.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    wait_for("scale down", 30, || async {
        Ok((active_pods(&pods).await?.len() == 1).then_some(()))
    })
    .await?;
    let orphan: Pod = serde_json::from_value(json!({
        "metadata": {"name": "orphan", "labels": {"app": "rs"}},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))?;
    rss.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 2}})),
    )
    .await?;
    pods.create(&PostParams::default(), &orphan).await?;
    wait_for("two pods", 30, || async {
        Ok((active_pods(&pods).await?.len() >= 2).then_some(()))
    })
    .await?;
    Ok(())
}

fn job(name: &str, extra: Value) -> Result<Job> {
    let mut j = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name},
        "spec": {"template": {"spec": {"restartPolicy": "Never",
                 "containers": [{"name": "c", "image": "busybox"}]}}},
    });
    if let (Some(spec), Some(extra)) = (j["spec"].as_object_mut(), extra.as_object()) {
        for (k, v) in extra {
            spec.insert(k.clone(), v.clone());
        }
    }
    Ok(serde_json::from_value(j)?)
}

fn condition(j: &Job, t: &str) -> bool {
    j.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .any(|c| c.type_ == t && c.status == "True")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_complete_fail_and_index() -> Result<()> {
    let c = cluster().await?;
    // Pods of job "bad" fail, every other pod succeeds.
    let _kubelet = kubelet(c.client.clone(), "default", |p| {
        let bad = p.labels().get("job-name").map(String::as_str) == Some("bad");
        Some(terminated(p, if bad { 1 } else { 0 }))
    });
    let jobs: Api<Job> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    jobs.create(
        &PostParams::default(),
        &job("ok", json!({"completions": 3, "parallelism": 2}))?,
    )
    .await?;
    jobs.create(
        &PostParams::default(),
        &job("bad", json!({"backoffLimit": 1}))?,
    )
    .await?;
    jobs.create(
        &PostParams::default(),
        &job(
            "idx",
            json!({"completions": 3, "parallelism": 3, "completionMode": "Indexed"}),
        )?,
    )
    .await?;
    let done = match wait_for("job ok complete", 60, || async {
        let j = jobs.get("ok").await?;
        Ok(condition(&j, "Complete").then_some(j))
    })
    .await
    {
        Ok(j) => j,
        Err(e) => {
            let state: Vec<String> = pods
                .list(&ListParams::default())
                .await?
                .items
                .iter()
                .map(|p| {
                    format!(
                        "{} {:?} deleting={} owners={:?}",
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.clone()),
                        p.metadata.deletion_timestamp.is_some(),
                        p.metadata.owner_references.as_ref().map(|o| o.len())
                    )
                })
                .collect();
            let j = jobs.get("ok").await?;
            anyhow::bail!("{e}; pods: {state:?}; job status: {:?}", j.status);
        }
    };
    let s = done.status.clone().unwrap_or_default();
    assert_eq!(s.succeeded, Some(3));
    assert_eq!(s.active, Some(0));
    assert!(s.start_time.is_some() && s.completion_time.is_some());
    assert!(condition(&done, "SuccessCriteriaMet"));

    let failed = match wait_for("job bad failed", 60, || async {
        let j = jobs.get("bad").await?;
        Ok(condition(&j, "Failed").then_some(j))
    })
    .await
    {
        Ok(j) => j,
        Err(e) => {
            let state: Vec<String> = pods
                .list(&ListParams::default().labels("job-name=bad"))
                .await?
                .items
                .iter()
                .map(|p| {
                    format!(
                        "{} {:?} deleting={}",
                        p.name_any(),
                        p.status.as_ref().and_then(|s| s.phase.clone()),
                        p.metadata.deletion_timestamp.is_some()
                    )
                })
                .collect();
            let j = jobs.get("bad").await?;
            anyhow::bail!("{e}; pods: {state:?}; job status: {:?}", j.status);
        }
    };
    let s = failed.status.clone().unwrap_or_default();
    assert_eq!(s.failed, Some(2));
    assert!(condition(&failed, "FailureTarget"));
    let reason = failed
        .status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "Failed")
        .and_then(|c| c.reason.clone());
    assert_eq!(reason.as_deref(), Some("BackoffLimitExceeded"));

    let idx = wait_for("indexed job complete", 60, || async {
        let j = jobs.get("idx").await?;
        Ok(condition(&j, "Complete").then_some(j))
    })
    .await?;
    assert_eq!(
        idx.status
            .as_ref()
            .and_then(|s| s.completed_indexes.as_deref()),
        Some("0-2")
    );
    let indexes: std::collections::BTreeSet<String> = pods
        .list(&ListParams::default().labels("job-name=idx"))
        .await?
        .items
        .iter()
        .filter_map(|p| {
            p.annotations()
                .get("batch.kubernetes.io/job-completion-index")
                .cloned()
        })
        .collect();
    assert_eq!(indexes.len(), 3);

    // ttlSecondsAfterFinished: the finished Job is deleted.
    jobs.create(
        &PostParams::default(),
        &job("ttl", json!({"ttlSecondsAfterFinished": 1}))?,
    )
    .await?;
    wait_for("ttl job deleted", 60, || async {
        Ok(jobs.get_opt("ttl").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}

fn configmap(name: &str, owner: Option<&ConfigMap>, block: bool, finalizer: bool) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    if finalizer {
        cm.metadata.finalizers = Some(vec!["example.com/hold".into()]);
    }
    if let Some(o) = owner {
        cm.metadata.owner_references = Some(vec![
            k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: o.name_any(),
                uid: o.uid().unwrap_or_default(),
                controller: None,
                block_owner_deletion: Some(block),
            },
        ]);
    }
    cm
}

/// Deletes `name` with `propagationPolicy=Foreground` or `Orphan`: the server keeps it with the
/// `foregroundDeletion` / `orphan` finalizer for the garbage collector.
async fn delete_propagating(api: &Api<ConfigMap>, name: &str, finalizer: &str) -> Result<()> {
    let dp = match finalizer {
        "foregroundDeletion" => DeleteParams::foreground(),
        _ => DeleteParams::orphan(),
    };
    // The answer is the object as kept; the collector may finish it right after.
    let kept = api.delete(name, &dp).await?.left();
    let Some(o) = kept else {
        anyhow::bail!("{name} was deleted at once");
    };
    assert!(
        o.finalizers().iter().any(|f| f == finalizer),
        "{name} lacks {finalizer}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_background_foreground_orphan() -> Result<()> {
    let c = cluster().await?;
    let cms: Api<ConfigMap> = Api::namespaced(c.client.clone(), "default");
    let pp = PostParams::default();
    let gone = |name: &'static str| {
        let cms = cms.clone();
        move || {
            let cms = cms.clone();
            async move { Ok(cms.get_opt(name).await?.is_none().then_some(())) }
        }
    };

    // Background.
    let owner = cms
        .create(&pp, &configmap("bg-owner", None, false, false))
        .await?;
    cms.create(&pp, &configmap("bg-dep", Some(&owner), false, false))
        .await?;
    let grandchild_owner = cms.get("bg-dep").await?;
    cms.create(
        &pp,
        &configmap("bg-grandchild", Some(&grandchild_owner), false, false),
    )
    .await?;
    cms.delete("bg-owner", &DeleteParams::background()).await?;
    wait_for("background dependent collected", 30, gone("bg-dep")).await?;
    wait_for("background grandchild collected", 30, gone("bg-grandchild")).await?;

    // A dependent whose owner never existed (uid mismatch) is collected too.
    let mut fake = configmap("fake-owner", None, false, false);
    fake.metadata.uid = Some("00000000-0000-0000-0000-000000000000".into());
    cms.create(&pp, &configmap("dangling", Some(&fake), false, false))
        .await?;
    wait_for("dangling dependent collected", 30, gone("dangling")).await?;

    // Foreground: the owner waits for its blocking dependent.
    let owner = cms
        .create(&pp, &configmap("fg-owner", None, false, false))
        .await?;
    cms.create(&pp, &configmap("fg-block", Some(&owner), true, true))
        .await?;
    cms.create(&pp, &configmap("fg-free", Some(&owner), false, false))
        .await?;
    delete_propagating(&cms, "fg-owner", "foregroundDeletion").await?;
    wait_for("non-blocking dependent collected", 30, gone("fg-free")).await?;
    wait_for("blocking dependent deleting", 30, || async {
        let d = cms.get("fg-block").await?;
        Ok(d.metadata.deletion_timestamp.is_some().then_some(()))
    })
    .await?;
    let o = cms.get("fg-owner").await?;
    assert!(o.metadata.deletion_timestamp.is_some());
    assert!(o.finalizers().iter().any(|f| f == "foregroundDeletion"));
    cms.patch(
        "fg-block",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"finalizers": null}})),
    )
    .await?;
    wait_for("blocking dependent gone", 30, gone("fg-block")).await?;
    wait_for("foreground owner gone", 30, gone("fg-owner")).await?;

    // Orphan: the dependent stays, without the reference.
    let owner = cms
        .create(&pp, &configmap("or-owner", None, false, false))
        .await?;
    cms.create(&pp, &configmap("or-dep", Some(&owner), true, false))
        .await?;
    delete_propagating(&cms, "or-owner", "orphan").await?;
    wait_for("orphaning owner gone", 30, gone("or-owner")).await?;
    let dep = cms.get("or-dep").await?;
    assert!(dep.owner_references().is_empty());
    assert!(dep.metadata.deletion_timestamp.is_none());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_deployment_collects_everything() -> Result<()> {
    let c = cluster().await?;
    let _kubelet = kubelet(c.client.clone(), "default", |p| Some(running_ready(p)));
    let deploys: Api<Deployment> = Api::namespaced(c.client.clone(), "default");
    let pods: Api<Pod> = Api::namespaced(c.client.clone(), "default");
    let rss: Api<ReplicaSet> = Api::namespaced(c.client.clone(), "default");
    deploys
        .create(&PostParams::default(), &deployment("gone", 2, "nginx")?)
        .await?;
    wait_for("rollout", 60, || rollout_complete(&deploys, "gone")).await?;
    deploys.delete("gone", &DeleteParams::foreground()).await?;
    wait_for("everything collected", 60, || async {
        let empty = pods.list(&ListParams::default()).await?.items.is_empty()
            && rss.list(&ListParams::default()).await?.items.is_empty()
            && deploys.get_opt("gone").await?.is_none();
        Ok(empty.then_some(()))
    })
    .await?;
    // Service accounts: every namespace gets `default`.
    let sas: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(c.client.clone(), "kube-public");
    wait_for("default service account", 30, || async {
        Ok(sas.get_opt("default").await?.map(|_| ()))
    })
    .await?;
    Ok(())
}

/// The garbage collector finds kinds served after it started: a CRD created now, a custom
/// object owned by a ConfigMap (collected with it) and a ConfigMap owned by a custom object
/// (collected with that).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kinds_created_after_the_collector_started_are_collected() -> Result<()> {
    use kube::api::DynamicObject;
    use kube::discovery::ApiResource;
    let c = cluster().await?;
    let crds = ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    };
    let crd: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gadgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object",
                    "x-kubernetes-preserve-unknown-fields": true}}}]}
    }))?;
    Api::<DynamicObject>::all_with(c.client.clone(), &crds)
        .create(&PostParams::default(), &crd)
        .await?;
    let gadgets_ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    };
    let gadgets: Api<DynamicObject> = Api::default_namespaced_with(c.client.clone(), &gadgets_ar);
    let cms: Api<ConfigMap> = Api::default_namespaced(c.client.clone());
    // A gadget owned by a ConfigMap.
    let owner = cms
        .create(
            &PostParams::default(),
            &configmap("owner", None, false, false),
        )
        .await?;
    let owned: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "owned", "ownerReferences": [{"apiVersion": "v1",
            "kind": "ConfigMap", "name": "owner", "uid": owner.uid()}]},
        "spec": {}
    }))?;
    wait_for("the gadget kind served", 20, || async {
        Ok(gadgets.create(&PostParams::default(), &owned).await.ok())
    })
    .await?;
    // A ConfigMap owned by a gadget.
    let parent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.com/v1", "kind": "Gadget",
        "metadata": {"name": "parent"}, "spec": {}
    }))?;
    let parent = gadgets.create(&PostParams::default(), &parent).await?;
    let mut child = configmap("child", None, false, false);
    child.metadata.owner_references = Some(vec![
        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
            api_version: "example.com/v1".into(),
            kind: "Gadget".into(),
            name: "parent".into(),
            uid: parent.uid().unwrap_or_default(),
            controller: None,
            block_owner_deletion: None,
        },
    ]);
    cms.create(&PostParams::default(), &child).await?;

    cms.delete("owner", &DeleteParams::default()).await?;
    wait_for("the gadget collected with its ConfigMap", 30, || async {
        Ok(gadgets.get_opt("owned").await?.is_none().then_some(()))
    })
    .await?;
    gadgets.delete("parent", &DeleteParams::default()).await?;
    wait_for("the ConfigMap collected with its gadget", 30, || async {
        Ok(cms.get_opt("child").await?.is_none().then_some(()))
    })
    .await?;
    Ok(())
}
