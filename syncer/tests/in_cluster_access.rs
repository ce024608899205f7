//! What a tenant pod needs on a real host to reach its tenant API, and what the syncer leaves to
//! the host: Fabrik API servers play the host and the tenants, the syncer runs between them.
//!
//! * Service account tokens come from the tenant (TokenRequests bound to the tenant pod), live
//!   in a host Secret owned by the host pod, rotate, and stop working with the pod.
//! * Endpoints of a Service with a selector belong to the host's endpoints controller: the
//!   syncer leaves them alone, silently.

use crate::common::{create, eventually};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::authentication::v1::TokenReview;
use k8s_openapi::api::core::v1::{
    ConfigMap, Endpoints, Event, Namespace, Pod, Secret, Service, ServiceAccount,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::json;
use syncer::{ApiAddress, HostInformers, Options, Policy, TenantSync};

/// The scheduler tenant pods name: none. A tenant's `fabrik up` schedules pods on its own
/// simulated nodes, and a tenant pod bound before its host pod exists counts as lost; the
/// syncer binds tenant pods to the host pod's node.
const TENANT_SCHEDULER: &str = "none-in-the-tenant";

/// Starts a syncer for `tenant` with `policy` and `options`; sending on (or dropping) the
/// sender stops it.
fn start_syncer(
    tenant: &str,
    client: kube::Client,
    host: HostInformers,
    policy: Policy,
    options: Options,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
) {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let sync = TenantSync {
        tenant: tenant.into(),
        host_namespace: format!("fabrik-{tenant}"),
        policy,
        extra_kinds: Vec::new(),
    };
    let handle = tokio::spawn(async move {
        let _ = syncer::run_with(
            sync,
            client,
            host,
            async {
                let _ = rx.await;
            },
            options,
        )
        .await;
    });
    (tx, handle)
}

/// What a TokenReview against `client`'s cluster says of `token`: the user name and the
/// `pod-name` extra when authenticated.
async fn review(client: &kube::Client, token: &str) -> Result<Option<(String, Vec<String>)>> {
    let reviews: Api<TokenReview> = Api::all(client.clone());
    let r = create(&reviews, json!({"spec": {"token": token}})).await?;
    let status = r.status.unwrap_or_default();
    if status.authenticated != Some(true) {
        return Ok(None);
    }
    let user = status.user.unwrap_or_default();
    let pod = user
        .extra
        .unwrap_or_default()
        .remove("authentication.kubernetes.io/pod-name")
        .unwrap_or_default();
    Ok(Some((user.username.unwrap_or_default(), pod)))
}

/// The token under `key` in the host token Secret `name`, once it is there.
async fn host_token(secrets: &Api<Secret>, name: &str, key: &str) -> Option<(Secret, String)> {
    let s = secrets.get_opt(name).await.ok()??;
    let bytes = s.data.as_ref()?.get(key)?.0.clone();
    let token = String::from_utf8(bytes).ok()?;
    Some((s, token))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_get_tenant_tokens_that_rotate_and_end_with_the_pod() -> Result<()> {
    let seen = warnings();
    let result = tokens().await;
    if result.is_err() {
        for w in seen.lock().map(|s| s.clone()).unwrap_or_default() {
            eprintln!("syncer warning: {w:?}");
        }
    }
    result
}

async fn tokens() -> Result<()> {
    e2e::init_crypto();
    let host_fabrik = e2e::Fabrik::start()?;
    let a_fabrik = e2e::Fabrik::start()?;
    let host = host_fabrik.client().await?;
    let a = a_fabrik.client().await?;
    let _kubelet = e2e::FakeKubelet::start(&host_fabrik.kubeconfig())?;
    create(
        &Api::<Namespace>::all(host.clone()),
        json!({"metadata": {"name": "fabrik-a"}}),
    )
    .await?;
    let policy = Policy {
        api_address: Some(ApiAddress {
            host: "10.96.0.20".into(),
            port: 6443,
        }),
        ..Default::default()
    };
    // kube-api-access tokens live 3607 s: refreshed after about 1.8 s here.
    let options = Options {
        token_refresh_fraction: 0.0005,
    };
    let informers = HostInformers::new(host.clone());
    let (stop, task) = start_syncer("a", a.clone(), informers, policy, options);

    let sas: Api<ServiceAccount> = Api::namespaced(a.clone(), "default");
    eventually("the default service account", || async {
        sas.get_opt("default").await.ok()?
    })
    .await?;
    // The root CA ConfigMap the kube-api-access volume projects (the tenant's publisher may
    // have written it already).
    let tenant_cms: Api<ConfigMap> = Api::namespaced(a.clone(), "default");
    if tenant_cms.get_opt("kube-root-ca.crt").await?.is_none() {
        let _ = create(
            &tenant_cms,
            json!({"metadata": {"name": "kube-root-ca.crt"}, "data": {"ca.crt": "test CA"}}),
        )
        .await;
    }
    let tenant_pods: Api<Pod> = Api::namespaced(a.clone(), "default");
    let tpod = create(
        &tenant_pods,
        json!({"metadata": {"name": "app"}, "spec": {"schedulerName": TENANT_SCHEDULER,
            "containers": [{"name": "c", "image": "x",
            "env": [{"name": "KUBERNETES_SERVICE_PORT", "value": "1"}]}]}}),
    )
    .await?;
    let tpod_uid = tpod.uid().context("tenant pod uid")?;

    // The host pod: the token source became a key of its token Secret, the service env comes
    // first and the pod's own entry after it.
    let host_pods: Api<Pod> = Api::namespaced(host.clone(), "fabrik-a");
    let hpod = eventually("the host pod", || async {
        host_pods.get_opt("app-x-default-x-a").await.ok()?
    })
    .await?;
    let hspec = serde_json::to_value(&hpod.spec)?;
    let access = hspec["volumes"]
        .as_array()
        .and_then(|v| {
            v.iter().find(|v| {
                v["name"]
                    .as_str()
                    .is_some_and(|n| n.starts_with("kube-api-access-"))
            })
        })
        .context("the kube-api-access volume")?;
    assert_eq!(
        access["projected"]["sources"][0],
        json!({"secret": {"name": "app-x-default-x-a-token", "optional": true,
            "items": [{"key": "token-0-0", "path": "token"}]}}),
        "{access}"
    );
    assert_eq!(
        access["projected"]["sources"][1]["configMap"]["name"],
        "kube-root-ca.crt-x-default-x-a"
    );
    let env = &hspec["containers"][0]["env"];
    assert_eq!(
        env[0],
        json!({"name": "KUBERNETES_SERVICE_HOST", "value": "10.96.0.20"})
    );
    assert_eq!(
        env[1],
        json!({"name": "KUBERNETES_SERVICE_PORT", "value": "6443"})
    );
    assert_eq!(
        env[8],
        json!({"name": "KUBERNETES_SERVICE_PORT", "value": "1"})
    );
    assert_eq!(hspec["enableServiceLinks"], false);
    let host_cms: Api<ConfigMap> = Api::namespaced(host.clone(), "fabrik-a");
    eventually("the root CA on the host", || async {
        host_cms
            .get_opt("kube-root-ca.crt-x-default-x-a")
            .await
            .ok()?
    })
    .await?;

    // The token: issued by the tenant for this pod, owned by the host pod.
    let secrets: Api<Secret> = Api::namespaced(host.clone(), "fabrik-a");
    let hpod_uid = hpod.uid().context("host pod uid")?;
    let (secret, first) = eventually("the token Secret owned by the host pod", || async {
        let (s, token) = host_token(&secrets, "app-x-default-x-a-token", "token-0-0").await?;
        let owned = s
            .owner_references()
            .iter()
            .any(|o| o.kind == "Pod" && o.uid == hpod_uid);
        owned.then_some((s, token))
    })
    .await?;
    assert_eq!(secret.type_.as_deref(), Some("Opaque"));
    assert_eq!(secret.labels()["fabrik.dev/tenant"], "a");
    assert_eq!(secret.labels()["fabrik.dev/namespace"], "default");
    assert_eq!(
        review(&a, &first).await?,
        Some((
            "system:serviceaccount:default:default".to_string(),
            vec!["app".to_string()]
        ))
    );
    assert_eq!(
        review(&host, &first).await?,
        None,
        "a tenant's token is no host credential"
    );

    // Rotation: a new token replaces the Secret's data, and it works too.
    let second = eventually("a rotated token", || async {
        let (_, token) = host_token(&secrets, "app-x-default-x-a-token", "token-0-0").await?;
        (token != first).then_some(token)
    })
    .await?;
    assert!(review(&a, &second).await?.is_some());

    // A pod whose service account does not exist runs without a token, is told once, and gets
    // its token when the service account comes.
    create(
        &tenant_pods,
        json!({"metadata": {"name": "late"}, "spec": {"serviceAccountName": "late",
            "schedulerName": TENANT_SCHEDULER,
            "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await?;
    eventually(
        "the host pod of a pod without its service account",
        || async { host_pods.get_opt("late-x-default-x-a").await.ok()? },
    )
    .await?;
    let events: Api<Event> = Api::namespaced(a.clone(), "default");
    let failed = || async {
        let l = events.list(&ListParams::default()).await.ok()?;
        let n = l
            .items
            .iter()
            .filter(|e| e.involved_object.name.as_deref() == Some("late"))
            .filter(|e| e.reason.as_deref() == Some("FailedMount"))
            .count();
        Some(n)
    };
    eventually("the FailedMount event", || async {
        failed().await.filter(|n| *n > 0)
    })
    .await?;
    // Retried with backoff (1 s, 2 s, 4 s...), reported once.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(failed().await, Some(1));
    assert!(secrets.get_opt("late-x-default-x-a-token").await?.is_none());
    create(&sas, json!({"metadata": {"name": "late"}})).await?;
    let (_, late) = eventually("the late token", || async {
        host_token(&secrets, "late-x-default-x-a-token", "token-0-0").await
    })
    .await?;
    assert_eq!(
        review(&a, &late).await?.map(|(user, _)| user),
        Some("system:serviceaccount:default:late".to_string())
    );

    // Deleting the tenant pod ends its tokens (the tenant checks the bound pod) and the Secret.
    tenant_pods
        .delete(
            "app",
            &DeleteParams {
                grace_period_seconds: Some(0),
                ..Default::default()
            },
        )
        .await?;
    eventually("the token refused without its pod", || async {
        review(&a, &second).await.ok()?.is_none().then_some(())
    })
    .await?;
    eventually("the token Secret gone", || async {
        secrets
            .get_opt("app-x-default-x-a-token")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    assert!(
        tenant_pods
            .get_opt("app")
            .await?
            .is_none_or(|p| p.uid() != Some(tpod_uid)),
        "the tenant pod is gone"
    );
    let _ = stop.send(());
    task.await?;
    Ok(())
}

/// The fields of each event logged (`message` included).
type Seen = Arc<Mutex<Vec<HashMap<String, String>>>>;

/// Warnings (and the syncer's debug and info lines) logged, for tests that count them and for
/// a failing test to print. Installed once per test process.
fn warnings() -> Seen {
    static SEEN: OnceLock<Seen> = OnceLock::new();
    SEEN.get_or_init(|| {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let _ = tracing::subscriber::set_global_default(Warnings { seen: seen.clone() });
        seen
    })
    .clone()
}

/// A subscriber that keeps WARN and ERROR events, and the syncer's own down to DEBUG.
struct Warnings {
    seen: Seen,
}

struct Fields(HashMap<String, String>);

impl tracing::field::Visit for Fields {
    fn record_str(&mut self, field: &tracing::field::Field, value: &str) {
        self.0.insert(field.name().to_string(), value.to_string());
    }

    fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
        self.0
            .insert(field.name().to_string(), format!("{value:?}"));
    }
}

impl tracing::Subscriber for Warnings {
    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        *metadata.level() <= tracing::Level::WARN
            || (metadata.target().starts_with("syncer")
                && *metadata.level() <= tracing::Level::DEBUG)
    }

    fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        tracing::span::Id::from_u64(1)
    }

    fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}

    fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}

    fn event(&self, event: &tracing::Event<'_>) {
        let mut fields = Fields(HashMap::new());
        event.record(&mut fields);
        if let Ok(mut seen) = self.seen.lock() {
            seen.push(fields.0);
        }
    }

    fn enter(&self, _: &tracing::span::Id) {}

    fn exit(&self, _: &tracing::span::Id) {}
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn endpoints_of_selector_services_are_left_to_the_host_silently() -> Result<()> {
    let seen = warnings();
    let taken = || {
        seen.lock()
            .map(|s| {
                s.iter()
                    .filter(|f| f.get("tenant").map(String::as_str) == Some("e"))
                    .filter(|f| {
                        f.get("message")
                            .is_some_and(|m| m.contains("host name is taken"))
                    })
                    .count()
            })
            .unwrap_or(0)
    };
    e2e::init_crypto();
    let host_fabrik = e2e::Fabrik::start()?;
    let e_fabrik = e2e::Fabrik::start()?;
    let host = host_fabrik.client().await?;
    let e = e_fabrik.client().await?;
    create(
        &Api::<Namespace>::all(host.clone()),
        json!({"metadata": {"name": "fabrik-e"}}),
    )
    .await?;
    let (stop, task) = start_syncer(
        "e",
        e.clone(),
        HostInformers::new(host.clone()),
        Policy::default(),
        Options::default(),
    );

    // A Service with a selector: the host copy selects the translated labels, and the host's
    // endpoints controller writes the host Endpoints of the same (translated) name.
    create(
        &Api::<Service>::namespaced(e.clone(), "default"),
        json!({"metadata": {"name": "web"}, "spec": {"selector": {"app": "web"},
            "ports": [{"port": 80}]}}),
    )
    .await?;
    let host_eps: Api<Endpoints> = Api::namespaced(host.clone(), "fabrik-e");
    let before = eventually("the host's own Endpoints", || async {
        host_eps.get_opt("web-x-default-x-e").await.ok()?
    })
    .await?;
    let tenant_eps: Api<Endpoints> = Api::namespaced(e.clone(), "default");
    eventually("the tenant Endpoints", || async {
        tenant_eps.get_opt("web").await.ok()?
    })
    .await?;

    // The tenant Endpoints change (a pod comes, the tenant's controller rewrites them; an
    // annotation changes): each change is a reconcile of a key the syncer does not sync.
    create(
        &Api::<Pod>::namespaced(e.clone(), "default"),
        json!({"metadata": {"name": "web-1", "labels": {"app": "web"}},
            "spec": {"schedulerName": TENANT_SCHEDULER, "containers": [{"name": "c", "image": "x"}]}}),
    )
    .await?;
    for i in 0..3 {
        tenant_eps
            .patch(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"annotations": {"touched": i.to_string()}}})),
            )
            .await?;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // A selector-less Service's Endpoints are still the syncer's: synced after the keys above
    // (the queue is FIFO), so once its copy is there the keys above were looked at.
    create(
        &Api::<Service>::namespaced(e.clone(), "default"),
        json!({"metadata": {"name": "ext"}, "spec": {"ports": [{"port": 5432}]}}),
    )
    .await?;
    create(
        &tenant_eps,
        json!({"metadata": {"name": "ext"}, "subsets": []}),
    )
    .await?;
    eventually("the selector-less Service's Endpoints copy", || async {
        let h = host_eps.get_opt("ext-x-default-x-e").await.ok()??;
        (h.annotations()
            .get("fabrik.dev/virtual-name")
            .map(String::as_str)
            == Some("ext"))
        .then_some(())
    })
    .await?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(taken(), 0, "warnings: {:?}", seen.lock().map(|s| s.clone()));

    // The host's Endpoints are the host controller's still: not overwritten with a copy.
    let after = host_eps.get("web-x-default-x-e").await?;
    assert!(!after.annotations().contains_key("fabrik.dev/virtual-name"));
    assert_eq!(after.uid(), before.uid());
    let _ = stop.send(());
    task.await?;
    Ok(())
}
