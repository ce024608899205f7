//! The syncer: runs a tenant cluster's workloads on the shared host cluster.
//!
//! ```text
//!  tenant API server (virtual)                     host cluster, namespace fabrik-<tenant>
//!  Pods, Services, Endpoints(Slices),   ──down──▶  <name>-x-<ns>-x-<tenant>, labelled
//!  ConfigMaps, Secrets, PVCs,                      fabrik.dev/tenant + fabrik.dev/namespace,
//!  ResourceClaims, PodDisruptionBudgets            built by allow-list (pods.rs, services.rs,
//!                                                  objects.rs, claims.rs), policy injected
//!  pod / service / PVC / claim status,  ◀──up────  host status, Events, Nodes in use,
//!  binding, Events, Nodes (GPU share),             DeviceClasses
//!  DeviceClasses (read-only mirrors)
//! ```
//!
//! # Public API (what the tenant manager calls)
//!
//! * [`HostInformers::new`]`(host)`: once per process. One host watch per kind, shared by every
//!   tenant (filtered by the `fabrik.dev/tenant` label, routed by label *and* namespace).
//! * [`run`]`(TenantSync, tenant_client, host_informers, shutdown)`: one per tenant; returns when
//!   `shutdown` resolves. [`run_with`] takes [`Options`] besides (tests: fast token rotation).
//! * [`check_pod`] / [`check_pod_update`]: pod admission for the tenant API server, with the
//!   [`Policy`] that the syncer enforces again when it builds host pods.
//!
//! # Guarantees
//!
//! * **Allow-list.** A host object holds only fields this crate names; an unknown field of a
//!   tenant object never reaches the host.
//! * **Idempotent and restart-safe.** The only state is two caches filled by list + watch; the
//!   link between a tenant object and its host copy is the host name and the origin
//!   annotations, so a new syncer (or a second one) converges on the same objects.
//! * **Tenant confinement.** The syncer writes only in `fabrik-<tenant>` and only to host objects
//!   whose labels and annotations name this tenant's object.
//!
//! # Not done here
//!
//! Proxying logs / exec / attach / port-forward and quota checks (the tenant manager); extra
//! kinds other than Ingress and the Gateway API routes ([`kinds::Kind::EXTRA`]).
//!
//! # Service account tokens and the tenant API
//!
//! Projected service account tokens are asked of the tenant API (TokenRequests bound to the
//! tenant pod) and written into a host Secret per host pod, refreshed as the kubelet refreshes
//! them ([`tokens`]); with [`Policy::api_address`] the host containers get the `kubernetes`
//! Service's environment pointing at the tenant API, so in-cluster clients reach their tenant.

#![forbid(unsafe_code)]

pub mod addresses;
pub mod admission;
pub mod cache;
pub mod claims;
pub mod events;
pub mod expectations;
pub mod gangs;
pub mod gpu;
pub mod informers;
pub mod ingresses;
pub mod kinds;
pub mod migrate;
pub mod naming;
pub mod nodes;
pub mod objects;
pub mod paths;
pub mod pods;
pub mod policy;
pub mod queue;
pub mod reconcile;
pub mod retry;
pub mod routes;
pub mod service_ips;
pub mod services;
pub mod tokens;

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DynamicObject};
use kube::runtime::{watcher, WatchStreamExt};
use serde_json::Value;

pub use admission::{check_pod, check_pod_update};
pub use informers::HostInformers;
pub use policy::{ApiAddress, GpuSharing, Policy};

use cache::Cache;
use kinds::Kind;
use queue::{Key, Queue};

/// One tenant's syncer configuration.
#[derive(Clone, Debug)]
pub struct TenantSync {
    /// The tenant's name.
    pub tenant: String,
    /// Its host namespace, `fabrik-<tenant>` (must exist).
    pub host_namespace: String,
    /// What the tenant may do on the host.
    pub policy: Policy,
    /// Kinds synced besides the built-in set (from [`kinds::Kind::EXTRA`]).
    pub extra_kinds: Vec<Kind>,
}

/// Settings of a syncer that are not the tenant's: what tests (and operators) may tune.
#[derive(Clone, Debug)]
pub struct Options {
    /// The share of a service account token's lifetime after which it is refreshed
    /// ([`tokens::DEFAULT_REFRESH_FRACTION`], the kubelet's 80 %; a token lives at least
    /// 600 s, so a test that wants to see rotation makes this small).
    pub token_refresh_fraction: f64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            token_refresh_fraction: tokens::DEFAULT_REFRESH_FRACTION,
        }
    }
}

/// Errors of [`run`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The host namespace is not the tenant's (`fabrik-<tenant>`).
    #[error("host namespace {found:?} is not {expected:?}")]
    HostNamespace {
        /// What was given.
        found: String,
        /// What the naming scheme requires.
        expected: String,
    },
}

/// Keys reconciled together.
const BATCH: usize = 64;

/// Every object is looked at again this often, whatever the watches said.
const RESYNC: Duration = Duration::from_secs(300);

/// Runs the tenant's syncer until `shutdown` resolves. Restart-safe and idempotent: any number
/// of runs, one after another, converge on the same host objects.
pub async fn run(
    sync: TenantSync,
    tenant: kube::Client,
    host: HostInformers,
    shutdown: impl Future<Output = ()>,
) -> Result<(), Error> {
    run_with(sync, tenant, host, shutdown, Options::default()).await
}

/// [`run`] with [`Options`].
pub async fn run_with(
    sync: TenantSync,
    tenant: kube::Client,
    host: HostInformers,
    shutdown: impl Future<Output = ()>,
    options: Options,
) -> Result<(), Error> {
    let expected = naming::host_namespace(&sync.tenant);
    if sync.host_namespace != expected {
        return Err(Error::HostNamespace {
            found: sync.host_namespace,
            expected,
        });
    }
    let queue = Arc::new(Queue::default());
    let mut tasks = tokio::task::JoinSet::new();

    // Tenant side: one watch per kind, feeding a cache and the queue.
    let mut tenant_caches = HashMap::new();
    let extra: Vec<Kind> = sync
        .extra_kinds
        .iter()
        .copied()
        .filter(|k| Kind::EXTRA.contains(k))
        .collect();
    let syncs_routes = extra.iter().any(|k| k.is_route());
    if syncs_routes {
        // Until the tenant has them all (the host may be given the Gateway API later).
        let (host, tenant) = (host.client(), tenant.clone());
        let name = sync.tenant.clone();
        tasks.spawn(async move {
            let mut said = None;
            loop {
                match routes::ensure_tenant_crds(&host, &tenant).await {
                    Ok(true) => return,
                    Ok(false) => {}
                    Err(e) if said.as_ref() != Some(&e) => {
                        tracing::warn!(tenant = %name, error = %e,
                            "cannot give the tenant the host's Gateway API CRDs; trying again");
                        said = Some(e);
                    }
                    Err(_) => {}
                }
                tokio::time::sleep(Duration::from_secs(30)).await;
            }
        });
    }
    for kind in Kind::DOWN
        .into_iter()
        .chain([Kind::Node, Kind::DeviceClass])
        .chain(extra.iter().copied())
        .chain(syncs_routes.then_some(Kind::ReferenceGrant))
        .chain(Kind::GANG_OBJECTS)
    {
        let cache = Arc::new(Cache::default());
        tenant_caches.insert(kind, cache.clone());
        let api: Api<DynamicObject> = Api::all_with(tenant.clone(), &kind.api_resource());
        let config = match kind {
            Kind::Node => watcher::Config::default()
                .labels(&format!("{}=true", fabrik_api::LABEL_SYNCED_NODE)),
            Kind::DeviceClass => {
                watcher::Config::default().labels(&format!("{}=true", claims::MIRRORED_LABEL))
            }
            _ => watcher::Config::default(),
        };
        let q = queue.clone();
        let stream = watcher(api, config).default_backoff();
        tasks.spawn(cache::feed(cache, stream, kind.optional(), move |v| {
            enqueue_tenant(&q, kind, v)
        }));
    }

    // Host side: subscriptions to the shared watches.
    let mut host_caches = HashMap::new();
    let mut subscriptions = Vec::new();
    // A host pod's addresses coming or going changes what the tenant's Endpoints may name.
    let address_users = Arc::new(addresses::Users::new(&tenant_caches));
    for kind in Kind::HOST.into_iter().chain(extra.iter().copied()) {
        let q = queue.clone();
        let users = address_users.clone();
        let tenant_name = sync.tenant.clone();
        let sub = host.subscribe(
            kind,
            &sync.tenant,
            Arc::new(move |v: &Value| {
                enqueue_host(&q, &tenant_name, kind, v);
                if kind == Kind::Pod {
                    for k in users.naming(v) {
                        q.push(k);
                    }
                }
            }),
        );
        host_caches.insert(kind, sub.cache.clone());
        subscriptions.push(sub);
    }

    let ctx = Arc::new(reconcile::Context {
        tenant: sync.tenant.clone(),
        host_namespace: sync.host_namespace.clone(),
        policy: sync.policy,
        tenant_client: tenant,
        host_client: host.client(),
        tenant_caches,
        host_caches,
        strays: migrate::Strays::default(),
        queue: queue.clone(),
        token_refresh: options.token_refresh_fraction,
        token_failures: tokens::Failures::default(),
        expectations: expectations::Expectations::default(),
    });
    let work = work(ctx, queue);
    tokio::select! {
        _ = shutdown => {},
        _ = work => {},
    }
    tasks.abort_all();
    drop(subscriptions);
    Ok(())
}

/// Waits for every cache to be listed (deciding that a host object is orphaned needs the whole
/// tenant list), then reconciles keys forever.
async fn work(ctx: Arc<reconcile::Context>, queue: Arc<Queue>) {
    for c in ctx.tenant_caches.values().chain(ctx.host_caches.values()) {
        c.wait_ready().await;
    }
    ctx.strays
        .replace(migrate::Strays::scan(&ctx.tenant, &ctx.host_caches));
    if !ctx.strays.is_empty() {
        tracing::info!(tenant = %ctx.tenant, strays = ctx.strays.len(),
            "host objects named by an earlier naming scheme; migrating them");
        for k in ctx.strays.keys() {
            queue.push(k);
        }
    }
    tracing::info!(
        tenant = %ctx.tenant,
        host_objects = ctx.host_caches.values().map(|c| c.list().len()).sum::<usize>(),
        tenant_objects = ctx.tenant_caches.values().map(|c| c.list().len()).sum::<usize>(),
        "syncer caches listed; syncing"
    );
    // Once at the start, every object the caches hold: a subscriber of a shared host watch is
    // told only of changes, so host objects that were there before it (the Nodes of the pool)
    // would otherwise wait for the first resync.
    resync_all(&ctx, &queue);
    let mut resync = tokio::time::interval(RESYNC);
    resync.tick().await;
    let syncs_routes = ctx.tenant_caches.contains_key(&Kind::ReferenceGrant);
    let retries = Arc::new(retry::Retries::default());
    loop {
        let batch = tokio::select! {
            b = queue.take(BATCH) => b,
            _ = resync.tick() => {
                if syncs_routes {
                    // A tenant that deleted them gets them back.
                    if let Err(e) =
                        routes::ensure_tenant_crds(&ctx.host_client, &ctx.tenant_client).await
                    {
                        tracing::debug!(tenant = %ctx.tenant, error = %e,
                            "cannot give the tenant the host's Gateway API CRDs");
                    }
                }
                resync_all(&ctx, &queue);
                continue;
            }
        };
        let steps = batch.into_iter().map(|key| {
            let ctx = ctx.clone();
            let queue = queue.clone();
            let retries = retries.clone();
            async move {
                match reconcile::reconcile(&ctx, &key).await {
                    Ok(()) => retries.succeeded(&ctx.tenant, &key),
                    Err(e) => {
                        let wait = retries.failed(&ctx.tenant, &key, &e.to_string());
                        // One timer per key (push_after keeps the earliest): a key failing
                        // again, or pushed by the resync meanwhile, never starts a second loop.
                        queue.push_after(key, wait);
                    }
                }
            }
        });
        futures::future::join_all(steps).await;
    }
}

fn resync_all(ctx: &reconcile::Context, queue: &Queue) {
    for (kind, cache) in &ctx.tenant_caches {
        for v in cache.list() {
            enqueue_tenant(queue, *kind, &v);
        }
    }
    for (kind, cache) in &ctx.host_caches {
        if *kind != Kind::Event {
            for v in cache.list() {
                enqueue_host(queue, &ctx.tenant, *kind, &v);
            }
        }
    }
}

fn key(kind: Kind, namespace: &str, name: &str) -> Key {
    Key {
        kind,
        namespace: namespace.to_string(),
        name: name.to_string(),
    }
}

fn enqueue_tenant(queue: &Queue, kind: Kind, v: &Value) {
    let (ns, name) = cache::key_of(v);
    queue.push(key(kind, &ns, &name));
    match kind {
        // A Service changing its selector changes whether its endpoints are synced.
        Kind::Service => queue.push(key(Kind::Endpoints, &ns, &name)),
        Kind::Pod => {
            if let Some(n) = v["spec"]["nodeName"].as_str() {
                queue.push(key(Kind::Node, "", n));
            }
        }
        _ => {}
    }
}

fn enqueue_host(queue: &Queue, tenant: &str, kind: Kind, v: &Value) {
    let (ns, name) = cache::key_of(v);
    match kind {
        Kind::Node | Kind::DeviceClass => queue.push(key(kind, "", &name)),
        Kind::Event => queue.push(key(Kind::Event, &ns, &name)),
        _ => {
            // A pod's token Secret changing (or going) is its pod's business.
            if kind == Kind::Secret {
                if let Some((ns, pod)) = tokens::token_pod(v, tenant) {
                    queue.push(key(Kind::Pod, &ns, &pod));
                    return;
                }
            }
            if let Some(o) = naming::origin(v) {
                queue.push(key(kind, &o.namespace, &o.name));
            }
            if kind == Kind::Pod {
                if let Some(n) = v["spec"]["nodeName"].as_str() {
                    queue.push(key(Kind::Node, "", n));
                }
            }
        }
    }
}
