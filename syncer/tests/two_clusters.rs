//! Two real Fabrik API servers (three, with a second tenant): one plays the host, the others
//! tenants; the syncer runs between them as the tenant manager will run it.

use crate::common::{create, eventually};

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::Ingress;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use syncer::{HostInformers, Policy, TenantSync};

/// Starts a syncer for `tenant`; dropping the sender stops it.
fn start_syncer(
    tenant: &str,
    client: kube::Client,
    host: HostInformers,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let sync = TenantSync {
        tenant: tenant.into(),
        host_namespace: format!("fabrik-{tenant}"),
        policy: Policy {
            node_selector: [("fabrik.dev/pool".to_string(), tenant.to_string())].into(),
            // Ingresses are synced (an extra kind below) to the one class the tenant may use.
            sync_ingresses: true,
            ingress_classes: vec!["public".to_string()],
            ..Default::default()
        },
        extra_kinds: vec![syncer::kinds::Kind::Ingress],
    };
    let handle = tokio::spawn(async move {
        let _ = syncer::run(sync, client, host, async {
            let _ = rx.await;
        })
        .await;
    });
    (tx, handle)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_workloads_run_on_the_host_and_tenants_stay_apart() -> Result<()> {
    e2e::init_crypto();
    let host_fabrik = e2e::Fabrik::start()?;
    let a_fabrik = e2e::Fabrik::start()?;
    let b_fabrik = e2e::Fabrik::start()?;
    let host = host_fabrik.client().await?;
    let a = a_fabrik.client().await?;
    let b = b_fabrik.client().await?;
    let _kubelet = e2e::FakeKubelet::start(&host_fabrik.kubeconfig())?;
    let namespaces: Api<Namespace> = Api::all(host.clone());
    for t in ["a", "b"] {
        create(
            &namespaces,
            json!({"metadata": {"name": format!("fabrik-{t}")}}),
        )
        .await?;
    }
    let informers = HostInformers::new(host.clone());
    let (stop_a, task_a) = start_syncer("a", a.clone(), informers.clone());
    let (_stop_b, _task_b) = start_syncer("b", b.clone(), informers.clone());

    // Tenant A: a Deployment using a ConfigMap, a Secret and a Service.
    create(
        &Api::<ConfigMap>::namespaced(a.clone(), "default"),
        json!({"metadata": {"name": "cfg"}, "data": {"greeting": "hello"}}),
    )
    .await?;
    create(
        &Api::<Secret>::namespaced(a.clone(), "default"),
        json!({"metadata": {"name": "sec"}, "stringData": {"password": "s3cret"}}),
    )
    .await?;
    create(
        &Api::<Service>::namespaced(a.clone(), "default"),
        json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080}]}}),
    )
    .await?;
    let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
        Api::namespaced(a.clone(), "default");
    create(
        &deployments,
        json!({"metadata": {"name": "web"}, "spec": {"replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                // Not the tenant's own (simulated) nodes: a tenant pod bound before its host pod
                // exists counts as lost. The syncer binds it to its host pod's node.
                "schedulerName": "none-in-the-tenant",
                "containers": [{"name": "web", "image": "nginx",
                    "env": [{"name": "GREETING", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "greeting"}}},
                            {"name": "PASSWORD", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "password"}}}],
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg"}]}],
                "volumes": [{"name": "cfg", "configMap": {"name": "cfg"}}]}}}}),
    )
    .await?;

    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "fabrik-a");
    let pods = eventually("two host pods in fabrik-a", || async {
        let l = host_pods.list(&ListParams::default()).await.ok()?;
        (l.items.len() == 2).then_some(l.items)
    })
    .await?;
    for p in &pods {
        let labels = p.labels();
        assert_eq!(labels["fabrik.dev/tenant"], "a");
        assert_eq!(labels["fabrik.dev/namespace"], "default");
        assert_eq!(labels["app"], "web");
        let vname = &p.annotations()["fabrik.dev/virtual-name"];
        assert_eq!(p.name_any(), format!("{vname}-x-default-x-a"));
        let spec = p.spec.as_ref().expect("spec");
        let c = &spec.containers[0];
        // The tenant's own entries come after the service environment.
        let env = c.env.as_ref().expect("env");
        let named = |n: &str| env.iter().find(|e| e.name == n).expect(n);
        let cm = named("GREETING")
            .value_from
            .as_ref()
            .and_then(|f| f.config_map_key_ref.as_ref());
        assert_eq!(cm.map(|r| r.name.as_str()), Some("cfg-x-default-x-a"));
        let s = named("PASSWORD")
            .value_from
            .as_ref()
            .and_then(|f| f.secret_key_ref.as_ref());
        assert_eq!(s.map(|r| r.name.as_str()), Some("sec-x-default-x-a"));
        let vol = spec.volumes.as_ref().and_then(|v| v[0].config_map.as_ref());
        assert_eq!(vol.map(|c| c.name.as_str()), Some("cfg-x-default-x-a"));
        assert_eq!(
            spec.node_selector
                .as_ref()
                .map(|s| s["fabrik.dev/pool"].as_str()),
            Some("a")
        );
    }
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), "fabrik-a");
    eventually("host configmap", || async {
        host_cms.get_opt("cfg-x-default-x-a").await.ok()?
    })
    .await?;
    let host_secrets: Api<Secret> = Api::namespaced(host.clone(), "fabrik-a");
    eventually("host secret", || async {
        host_secrets.get_opt("sec-x-default-x-a").await.ok()?
    })
    .await?;
    let host_svcs: Api<Service> = Api::namespaced(host.clone(), "fabrik-a");
    let svc = eventually("host service", || async {
        host_svcs.get_opt("web-x-default-x-a").await.ok()?
    })
    .await?;
    let selector = svc.spec.and_then(|s| s.selector).unwrap_or_default();
    assert_eq!(selector["app"], "web");
    assert_eq!(selector["fabrik.dev/tenant"], "a");
    assert_eq!(selector["fabrik.dev/namespace"], "default");

    // An Ingress (an extra kind both syncers were given): references rewritten, annotations
    // kept off the host, the host's load balancer status back in the tenant.
    let ingresses: Api<Ingress> = Api::namespaced(a.clone(), "default");
    create(
        &ingresses,
        json!({"metadata": {"name": "web", "annotations": {
                "nginx.ingress.kubernetes.io/configuration-snippet": "more_set_headers x"}},
            "spec": {"rules": [{"host": "web.a.example", "http": {"paths": [{"path": "/",
                "pathType": "Prefix", "backend": {"service": {"name": "web", "port": {"number": 80}}}}]}}],
                "tls": [{"hosts": ["web.a.example"], "secretName": "sec"}]}}),
    )
    .await?;
    let host_ingresses: Api<Ingress> = Api::namespaced(host.clone(), "fabrik-a");
    let hi = eventually("host ingress", || async {
        host_ingresses.get_opt("web-x-default-x-a").await.ok()?
    })
    .await?;
    let spec = serde_json::to_value(&hi.spec)?;
    assert_eq!(
        spec["ingressClassName"], "public",
        "the tenant's class: {spec}"
    );
    assert_eq!(
        spec["rules"][0]["http"]["paths"][0]["backend"]["service"]["name"],
        "web-x-default-x-a"
    );
    assert_eq!(spec["tls"][0]["secretName"], "sec-x-default-x-a");
    assert!(!hi
        .annotations()
        .keys()
        .any(|k| k.starts_with("nginx.ingress")));
    host_ingresses
        .patch_status(
            "web-x-default-x-a",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.10"}]}}})),
        )
        .await?;
    eventually("tenant ingress status", || async {
        let i = ingresses.get("web").await.ok()?;
        let v = serde_json::to_value(&i.status).ok()?;
        (v["loadBalancer"]["ingress"][0]["ip"] == "192.0.2.10").then_some(())
    })
    .await?;

    // Nothing of A anywhere else on the host, nor in B.
    let all_pods: Api<Pod> = Api::all(host.clone());
    for p in all_pods.list(&ListParams::default()).await?.items {
        assert_eq!(
            p.namespace().as_deref(),
            Some("fabrik-a"),
            "{}",
            p.name_any()
        );
    }
    let b_cms: Api<ConfigMap> = Api::namespaced(host.clone(), "fabrik-b");
    assert!(b_cms
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .all(|c| !c.name_any().contains("-x-a")));
    let b_pods: Api<Pod> = Api::all(b.clone());
    assert!(b_pods.list(&ListParams::default()).await?.items.is_empty());

    // A's pods turn Running when the host pods do.
    let tenant_pods: Api<Pod> = Api::namespaced(a.clone(), "default");
    eventually("tenant pods Running", || async {
        let l = tenant_pods.list(&ListParams::default()).await.ok()?;
        let running = l
            .items
            .iter()
            .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
            .count();
        (running == 2).then_some(())
    })
    .await?;

    // A restarted syncer converges with no duplicates.
    let _ = stop_a.send(());
    task_a.await?;
    let (stop_a, task_a) = start_syncer("a", a.clone(), informers.clone());
    create(
        &Api::<ConfigMap>::namespaced(a.clone(), "default"),
        json!({"metadata": {"name": "after-restart"}, "data": {"k": "v"}}),
    )
    .await?;
    eventually("the restarted syncer syncs", || async {
        host_cms.get_opt("after-restart-x-default-x-a").await.ok()?
    })
    .await?;
    assert_eq!(host_pods.list(&ListParams::default()).await?.items.len(), 2);
    // One host watch per kind (twelve built in, plus Ingress), however many tenants.
    assert_eq!(informers.watch_count(), 13);

    // Deleting in the tenant removes the host objects.
    deployments.delete("web", &DeleteParams::default()).await?;
    Api::<ConfigMap>::namespaced(a.clone(), "default")
        .delete("cfg", &DeleteParams::default())
        .await?;
    eventually("host pods gone", || async {
        let l = host_pods.list(&ListParams::default()).await.ok()?;
        l.items.is_empty().then_some(())
    })
    .await?;
    eventually("host configmap gone", || async {
        host_cms
            .get_opt("cfg-x-default-x-a")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    let _ = stop_a.send(());
    task_a.await?;
    Ok(())
}
