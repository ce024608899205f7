//! StatefulSet, DaemonSet, CronJob, ResourceQuota status, Endpoints / EndpointSlices and the
//! `kubernetes` Service against the real `fabrik up` (which runs the controllers inside the
//! server). Each test starts its own server and plays the kubelet through `pods/status`.

use std::time::Duration;

use anyhow::{bail, Result};
use e2e::Fabrik;
use k8s_openapi::api::apps::v1::{DaemonSet, StatefulSet};
use k8s_openapi::api::batch::v1::CronJob;
use k8s_openapi::api::core::v1::Event;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Node, PersistentVolumeClaim, Pod, ResourceQuota, Service,
};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::{json, Value};

use crate::common::wait_for;

async fn start() -> Result<(Fabrik, kube::Client)> {
    start_with(&[]).await
}

/// A server with extra `fabrik up` arguments (`--nodes 0`: the test is the only kubelet).
async fn start_with(args: &[&str]) -> Result<(Fabrik, kube::Client)> {
    e2e::init_crypto();
    let fabrik = Fabrik::start_with(args)?;
    let client = fabrik.client().await?;
    Ok((fabrik, client))
}

/// Plays the kubelet: the pod is Running, with `ip`, Ready or not.
async fn set_running(api: &Api<Pod>, name: &str, ip: &str, ready: bool) -> Result<()> {
    let t = "2026-01-01T00:00:00Z";
    let r = if ready { "True" } else { "False" };
    let status = json!({"status": {
        "phase": "Running", "podIP": ip, "hostIP": "10.0.0.1", "startTime": t,
        "conditions": [{"type": "Ready", "status": r, "lastTransitionTime": t},
                       {"type": "ContainersReady", "status": r, "lastTransitionTime": t}],
    }});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&status))
        .await?;
    Ok(())
}

async fn names(api: &Api<Pod>) -> Result<Vec<String>> {
    let mut n: Vec<String> = api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    n.sort();
    Ok(n)
}

#[tokio::test]
async fn statefulset_orders_pods_and_claims() -> Result<()> {
    let (_f, client) = start().await?;
    let sts: StatefulSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "web"},
        "spec": {
            "replicas": 2, "serviceName": "web",
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}},
                         "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}}}}],
        },
    }))?;
    let sets: Api<StatefulSet> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &sts).await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let p0 = wait_for("web-0", 20, || async { Ok(pods.get_opt("web-0").await?) }).await?;
    let spec = p0.spec.clone().unwrap_or_default();
    assert_eq!(spec.hostname.as_deref(), Some("web-0"));
    assert_eq!(spec.subdomain.as_deref(), Some("web"));
    assert!(p0.labels().contains_key("controller-revision-hash"));
    let claims: Api<PersistentVolumeClaim> = Api::default_namespaced(client.clone());
    assert!(claims.get_opt("data-web-0").await?.is_some());
    // web-1 only after web-0 is Running and Ready (the server's simulated nodes run pods, or
    // the test does).
    let _ = set_running(&pods, "web-0", "10.244.0.2", true).await;
    let p1 = wait_for("web-1", 20, || async { Ok(pods.get_opt("web-1").await?) }).await?;
    let p0 = pods.get("web-0").await?;
    assert!(
        p0.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"),
        "web-1 {:?} came before web-0 ran",
        p1.metadata.creation_timestamp
    );
    let _ = set_running(&pods, "web-1", "10.244.0.3", true).await;
    wait_for("status", 20, || async {
        let s = sets.get("web").await?.status.unwrap_or_default();
        Ok((s.ready_replicas == Some(2)
            && s.current_revision.is_some()
            && s.current_revision == s.update_revision)
            .then_some(()))
    })
    .await?;
    // Scale down: the highest ordinal goes, its claim stays (Retain).
    sets.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 1}})),
    )
    .await?;
    wait_for("web-1 gone", 20, || async {
        Ok((names(&pods).await? == vec!["web-0"]).then_some(()))
    })
    .await?;
    assert!(claims.get_opt("data-web-1").await?.is_some());
    Ok(())
}

#[tokio::test]
async fn daemonset_runs_one_pod_per_fitting_node() -> Result<()> {
    let (_f, client) = start().await?;
    let nodes: Api<Node> = Api::all(client.clone());
    for (name, labels, taint) in [
        ("n1", json!({"gpu": "yes"}), json!(null)),
        (
            "n2",
            json!({"gpu": "yes"}),
            json!([{"key": "k", "effect": "NoSchedule"}]),
        ),
        ("n3", json!({}), json!(null)),
    ] {
        let node: Node = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": labels}, "spec": {"taints": taint}}))?;
        nodes.create(&PostParams::default(), &node).await?;
    }
    let ds: DaemonSet = serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "DaemonSet",
        "metadata": {"name": "agent"},
        "spec": {
            "selector": {"matchLabels": {"app": "agent"}},
            "template": {"metadata": {"labels": {"app": "agent"}},
                         "spec": {"nodeSelector": {"gpu": "yes"},
                                  "containers": [{"name": "c", "image": "agent"}]}},
        },
    }))?;
    let sets: Api<DaemonSet> = Api::default_namespaced(client.clone());
    sets.create(&PostParams::default(), &ds).await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    let placed = wait_for("a pod on n1", 20, || async {
        let list = pods.list(&ListParams::default()).await?.items;
        Ok((!list.is_empty()).then_some(list))
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let list = pods.list(&ListParams::default()).await?.items;
    assert_eq!(list.len(), 1, "only n1 fits: {placed:?}");
    let pod = &list[0];
    // Pinned to n1 by node affinity, as upstream; the scheduler binds it.
    assert_eq!(
        pod.spec
            .as_ref()
            .and_then(fabrik_controllers::daemonset::plan::node_of)
            .as_deref(),
        Some("n1")
    );
    set_running(&pods, &pod.name_any(), "10.244.1.2", true).await?;
    wait_for("status", 20, || async {
        let s = sets.get("agent").await?.status.unwrap_or_default();
        Ok((s.desired_number_scheduled == 1
            && s.number_ready == 1
            && s.updated_number_scheduled == Some(1))
        .then_some(()))
    })
    .await?;
    // The node stops matching: its pod is deleted (gracefully, as it has a node; finish it).
    nodes
        .patch(
            "n1",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"gpu": null}}})),
        )
        .await?;
    let name = pod.name_any();
    wait_for("pod deleted", 20, || async {
        let p = pods.get_opt(&name).await?;
        Ok(p.is_none_or(|p| p.metadata.deletion_timestamp.is_some())
            .then_some(()))
    })
    .await?;
    let _ = pods
        .delete(&name, &DeleteParams::default().grace_period(0))
        .await;
    wait_for("desired 0", 20, || async {
        let s = sets.get("agent").await?.status.unwrap_or_default();
        Ok((s.desired_number_scheduled == 0 && s.current_number_scheduled == 0).then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn cronjob_with_a_bad_schedule_gets_a_warning() -> Result<()> {
    let (_f, client) = start().await?;
    let cj: CronJob = serde_json::from_value(json!({
        "apiVersion": "batch/v1", "kind": "CronJob",
        "metadata": {"name": "bad"},
        "spec": {"schedule": "61 * * * *", "jobTemplate": {"spec": {"template": {"spec": {
            "restartPolicy": "Never", "containers": [{"name": "c", "image": "busybox"}]}}}}},
    }))?;
    let api: Api<CronJob> = Api::default_namespaced(client.clone());
    // The server may validate the schedule itself; then there is nothing for the controller.
    if api.create(&PostParams::default(), &cj).await.is_err() {
        return Ok(());
    }
    let events: Api<Event> = Api::default_namespaced(client.clone());
    wait_for("UnparseableSchedule event", 20, || async {
        let list = events.list(&ListParams::default()).await?.items;
        Ok(list
            .iter()
            .any(|e| e.reason.as_deref() == Some("UnparseableSchedule"))
            .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn quota_status_counts_usage() -> Result<()> {
    let (_f, client) = start().await?;
    let quota: ResourceQuota = serde_json::from_value(json!({
        "metadata": {"name": "q"},
        "spec": {"hard": {"pods": "10", "requests.cpu": "4", "requests.memory": "1Gi",
                          "requests.nvidia.com/gpu": "2", "configmaps": "10",
                          "count/deployments.apps": "5"}},
    }))?;
    Api::<ResourceQuota>::default_namespaced(client.clone())
        .create(&PostParams::default(), &quota)
        .await?;
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "p"},
        "spec": {"containers": [{"name": "c", "image": "x", "resources": {
            "requests": {"cpu": "500m", "memory": "128Mi"},
            "limits": {"nvidia.com/gpu": "1"}}}]},
    }))?;
    Api::<Pod>::default_namespaced(client.clone())
        .create(&PostParams::default(), &pod)
        .await?;
    let cm: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "c1"}}))?;
    Api::<ConfigMap>::default_namespaced(client.clone())
        .create(&PostParams::default(), &cm)
        .await?;
    let quotas: Api<ResourceQuota> = Api::default_namespaced(client.clone());
    wait_for("used", 20, || async {
        let s = quotas.get("q").await?.status.unwrap_or_default();
        let used = s.used.unwrap_or_default();
        let get = |k: &str| used.get(k).map(|q| q.0.clone()).unwrap_or_default();
        let cms: usize = get("configmaps").parse().unwrap_or(0);
        Ok((get("pods") == "1"
            && get("requests.cpu") == "500m"
            && get("requests.memory") == "128Mi"
            && get("requests.nvidia.com/gpu") == "1"
            && get("count/deployments.apps") == "0"
            && cms >= 1
            && s.hard.is_some_and(|h| h.len() == 6))
        .then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn endpoints_follow_ready_pods() -> Result<()> {
    // No simulated nodes: the test reports pod readiness itself, and nothing else does.
    let (_f, client) = start_with(&["--nodes", "0"]).await?;
    let svc: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"},
                 "ports": [{"name": "http", "port": 80, "targetPort": "http"}]},
    }))?;
    Api::<Service>::default_namespaced(client.clone())
        .create(&PostParams::default(), &svc)
        .await?;
    let pods: Api<Pod> = Api::default_namespaced(client.clone());
    for name in ["a", "b"] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "x",
                     "ports": [{"name": "http", "containerPort": 8080}]}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    // The server's simulated nodes may run the pods; the test makes sure they are running.
    for (name, ip) in [("a", "10.244.9.5"), ("b", "10.244.9.6")] {
        let p = pods.get(name).await?;
        if p.status.and_then(|s| s.pod_ip).is_none() {
            set_running(&pods, name, ip, true).await?;
        }
    }
    let eps: Api<Endpoints> = Api::default_namespaced(client.clone());
    wait_for("endpoints", 20, || async {
        let Some(e) = eps.get_opt("web").await? else {
            return Ok(None);
        };
        let subsets = e.subsets.unwrap_or_default();
        let ok = subsets.len() == 1
            && subsets[0].addresses.as_ref().map_or(0, Vec::len) == 2
            && subsets[0]
                .ports
                .as_ref()
                .and_then(|p| p.first())
                .map(|p| p.port)
                == Some(8080);
        Ok(ok.then_some(()))
    })
    .await?;
    let slices: Api<EndpointSlice> = Api::default_namespaced(client.clone());
    wait_for("slice", 20, || async {
        let list = slices
            .list(&ListParams::default().labels(
                "kubernetes.io/service-name=web,endpointslice.kubernetes.io/managed-by=endpointslice-controller.k8s.io",
            ))
            .await?
            .items;
        let ok = list.len() == 1 && list[0].endpoints.as_ref().map_or(0, Vec::len) == 2;
        Ok(ok.then_some(()))
    })
    .await?;
    // A pod that is not Ready moves to notReadyAddresses.
    set_running(&pods, "b", "10.244.9.6", false).await?;
    wait_for("b not ready", 20, || async {
        let e = eps.get("web").await?;
        let s = e.subsets.unwrap_or_default();
        let ok = s.len() == 1
            && s[0].addresses.as_ref().map_or(0, Vec::len) == 1
            && s[0].not_ready_addresses.as_ref().map_or(0, Vec::len) == 1;
        Ok(ok.then_some(()))
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn kubernetes_service_points_at_the_api_server() -> Result<()> {
    let (_f, client) = start().await?;
    let services: Api<Service> = Api::namespaced(client.clone(), "default");
    let svc = wait_for("kubernetes service", 20, || async {
        Ok(services.get_opt("kubernetes").await?)
    })
    .await?;
    let first_uid = svc.uid();
    let spec = svc.spec.unwrap_or_default();
    assert_eq!(spec.cluster_ip.as_deref(), Some("10.96.0.1"));
    assert_eq!(spec.ports.unwrap_or_default()[0].port, 443);
    let eps: Api<Endpoints> = Api::namespaced(client.clone(), "default");
    let e = wait_for("kubernetes endpoints", 20, || async {
        Ok(eps.get_opt("kubernetes").await?)
    })
    .await?;
    let subset: Value = serde_json::to_value(e.subsets.unwrap_or_default())?;
    assert!(subset[0]["addresses"][0]["ip"].is_string(), "{subset}");
    assert!(subset[0]["ports"][0]["port"].as_i64().unwrap_or(0) > 0);
    let slices: Api<EndpointSlice> = Api::namespaced(client.clone(), "default");
    wait_for("kubernetes slice", 20, || async {
        Ok(slices.get_opt("kubernetes").await?)
    })
    .await?;
    // Deleted: it comes back.
    services
        .delete("kubernetes", &DeleteParams::default())
        .await?;
    wait_for("recreated", 20, || async {
        Ok(services
            .get_opt("kubernetes")
            .await?
            .filter(|s| s.uid() != first_uid))
    })
    .await?;
    Ok(())
}

/// The CA of a kubeconfig's cluster, as PEM.
fn kubeconfig_ca(path: &std::path::Path) -> Result<String> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let Some(data) = kubeconfig
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority_data.clone())
    else {
        bail!("{} names no CA data", path.display());
    };
    use base64::Engine as _;
    Ok(String::from_utf8(
        base64::engine::general_purpose::STANDARD.decode(data)?,
    )?)
}

/// Waits until `ns` has `kube-root-ca.crt` holding exactly `bundle`.
async fn wait_root_ca(api: &Api<ConfigMap>, ns: &str, bundle: &str) -> Result<()> {
    wait_for(&format!("kube-root-ca.crt in {ns}"), 60, || async {
        let cm = api.get_opt("kube-root-ca.crt").await?;
        let data = cm.and_then(|c| c.data).unwrap_or_default();
        Ok(
            (data.len() == 1 && data.get("ca.crt").map(String::as_str) == Some(bundle))
                .then_some(()),
        )
    })
    .await
}

#[tokio::test]
async fn every_namespace_has_the_root_ca_that_verifies_its_server() -> Result<()> {
    let (fabrik, host) = start_with(&["--nodes", "0"]).await?;
    // The host (`fabrik up`) and a tenant: each publishes the CA its clients verify it with.
    let demo = fabrik.data_dir().join("tenants/demo.kubeconfig");
    wait_for("the demo tenant's kubeconfig", 60, || async {
        Ok(demo.exists().then_some(()))
    })
    .await?;
    let tenant = {
        let kubeconfig = kube::config::Kubeconfig::read_from(&demo)?;
        let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        kube::Client::try_from(config)?
    };
    for (client, ca) in [
        (host, kubeconfig_ca(&fabrik.kubeconfig())?),
        (tenant, kubeconfig_ca(&demo)?),
    ] {
        let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
        namespaces
            .create(
                &PostParams::default(),
                &serde_json::from_value(json!({"metadata": {"name": "team"}}))?,
            )
            .await?;
        for ns in ["default", "kube-system", "team"] {
            wait_root_ca(&Api::namespaced(client.clone(), ns), ns, &ca).await?;
        }
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), "team");
        // Changed: the bundle, and only it, comes back.
        api.patch(
            "kube-root-ca.crt",
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"ca.crt": "forged", "extra": "x"}})),
        )
        .await?;
        wait_root_ca(&api, "team", &ca).await?;
        // Deleted: created again.
        api.delete("kube-root-ca.crt", &DeleteParams::default())
            .await?;
        wait_root_ca(&api, "team", &ca).await?;
    }
    Ok(())
}
