//! The tenant manager: a kube-runtime controller over `Tenant` objects on the host. For each
//! tenant it keeps the host side in place (namespace `fabrik-<tenant>`, CA and kubeconfig
//! Secrets, ResourceQuota, LimitRange, a NetworkPolicy that denies traffic from other
//! namespaces), runs the tenant's API server — served at `/clusters/<tenant>` by the shared
//! listener — and reports status. A finalizer tears it all down. Tenants are restored on
//! restart: the controller's first pass starts every tenant again from its keyspace.

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use fabrik_api::tenant::{host_namespace, SecretRef, Tenant, TenantStatus, TENANT_FINALIZER};
use fabrik_apiserver::admission::cluster_quota::ClusterQuota;
use fabrik_apiserver::admission::limit_ranger::LimitRanger;
use fabrik_apiserver::admission::resource_quota::ResourceQuota as ResourceQuotaAdmission;
use fabrik_apiserver::pki::{Ca, PkiError};
use fabrik_apiserver::router::Router;
use fabrik_apiserver::webhook::Targets;
use fabrik_apiserver::{Cluster, Settings};
use fabrik_store::Store;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{finalizer, Event};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::Mutex;

use crate::keyspaces::Keyspaces;
use crate::shards::Shards;

/// The field manager of everything the tenant manager writes.
const MANAGER: &str = "fabrik-tenant-manager";
/// Host Secret holding a tenant's CA.
const CA_SECRET: &str = "fabrik-tenant-ca";
/// Host Secret holding a tenant's admin kubeconfig.
pub const KUBECONFIG_SECRET: &str = "fabrik-kubeconfig";

/// Errors of tenant reconciliation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A host API call failed.
    #[error("host API call failed: {0}")]
    Kube(#[from] kube::Error),
    /// Certificates could not be made.
    #[error("tenant CA: {0}")]
    Pki(#[from] PkiError),
    /// The tenant's store keyspace failed.
    #[error("tenant store: {0}")]
    Store(#[from] fabrik_store::StoreError),
    /// The tenant's API server could not start.
    #[error("tenant API server: {0}")]
    Start(#[from] fabrik_apiserver::StartError),
    /// A stored CA or kubeconfig is malformed.
    #[error("invalid {0}")]
    Invalid(String),
    /// Writing a kubeconfig file failed.
    #[error("cannot write {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The finalizer helper failed.
    #[error("finalizer: {0}")]
    Finalizer(String),
    /// Serving a tenant another replica owns failed.
    #[error("shards: {0}")]
    Shards(Box<crate::shards::Error>),
}

/// What the manager needs: where tenants are served and stored.
pub struct Runtime {
    /// The listener's router (tenants are added and removed here).
    pub router: Arc<Router>,
    /// The store backend (one keyspace per tenant): sled, or etcd shared by replicas.
    pub backend: Keyspaces,
    /// API tunables for tenant servers.
    pub settings: Settings,
    /// The listener's URL (`https://127.0.0.1:6443`).
    pub public_url: String,
    /// The CA clients verify the listener with (goes into tenant kubeconfigs).
    pub serving_ca_pem: String,
    /// Where `fabrik up` keeps `tenants/<name>.kubeconfig` (None for `fabrik serve`).
    pub data_dir: Option<PathBuf>,
    /// The shared host watches every tenant's syncer subscribes to.
    pub informers: syncer::HostInformers,
    running: Mutex<HashMap<String, Cluster>>,
    /// Sharding across replicas (`fabrik serve` on etcd): unset = this process runs every
    /// tenant.
    shards: std::sync::OnceLock<Arc<Shards>>,
    /// Each running tenant's quota, enforced at its admission (updated as the spec changes).
    quotas: std::sync::Mutex<HashMap<String, Arc<ClusterQuota>>>,
    /// Each running tenant's syncer.
    syncers: Mutex<HashMap<String, SyncerRun>>,
    /// The pod policy of each tenant this replica follows (serves without running it).
    followed_policies: Mutex<HashMap<String, Arc<SyncerAdmission>>>,
    /// The nodes' GPU-second counters over time (for the OpenCost allocation export).
    pub usage_history: Arc<super::usage::History>,
    /// Host namespaces Fabrik itself uses (no tenant may take one).
    pub reserved_namespaces: Vec<String>,
    /// Where tenant pods reach their tenant's API (see [`syncer::ApiAddress`]).
    pub api_address: Option<syncer::ApiAddress>,
    /// The nameserver synced pods are given (the tenant DNS), if any.
    pub dns_nameserver: Option<String>,
    /// The host's Services, where tenant webhooks are served.
    host_services: Arc<crate::webhooks::HostServices>,
    /// The host's client.
    host: Client,
    /// Local ports that may serve tenant Services' webhooks (`fabrik up --local-backends`).
    pub local_backends: Option<std::ops::RangeInclusive<u16>>,
    /// Each tenant's webhook address rules (updated as the spec changes).
    webhook_targets: std::sync::Mutex<HashMap<String, Arc<Targets>>>,
    /// Whether host pods asking for GPUs wait for the GPU queue (see [`crate::queue`]).
    gpu_queue: std::sync::atomic::AtomicBool,
}

impl Runtime {
    /// A runtime with no tenant running yet.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        router: Arc<Router>,
        backend: Keyspaces,
        settings: Settings,
        public_url: String,
        serving_ca_pem: String,
        data_dir: Option<PathBuf>,
        host: Client,
        reserved_namespaces: Vec<String>,
        api_address: Option<syncer::ApiAddress>,
        dns_nameserver: Option<String>,
        local_backends: Option<std::ops::RangeInclusive<u16>>,
    ) -> Arc<Runtime> {
        Arc::new(Runtime {
            router,
            backend,
            settings,
            public_url,
            serving_ca_pem,
            data_dir,
            host_services: Arc::new(crate::webhooks::HostServices::new(host.clone())),
            host: host.clone(),
            informers: syncer::HostInformers::new(host),
            running: Mutex::new(HashMap::new()),
            shards: std::sync::OnceLock::new(),
            quotas: std::sync::Mutex::new(HashMap::new()),
            syncers: Mutex::new(HashMap::new()),
            followed_policies: Mutex::new(HashMap::new()),
            usage_history: Arc::new(super::usage::History::default()),
            reserved_namespaces,
            api_address,
            dns_nameserver,
            local_backends,
            webhook_targets: std::sync::Mutex::new(HashMap::new()),
            gpu_queue: std::sync::atomic::AtomicBool::new(false),
        })
    }

    /// Holds tenants' GPU pods for the GPU queue (set before the manager runs, when the queue
    /// controller runs).
    pub fn set_gpu_queue(&self, on: bool) {
        self.gpu_queue
            .store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Runs only the tenants of the shards `shards` owns (set once, before the manager runs).
    pub fn set_shards(&self, shards: Arc<Shards>) {
        let _ = self.shards.set(shards);
    }

    /// Stops every tenant's API server (process shutdown).
    pub async fn shutdown(&self) {
        let all: Vec<Cluster> = self.running.lock().await.drain().map(|(_, c)| c).collect();
        for c in all {
            c.shutdown().await;
        }
    }
}

struct Ctx {
    host: Client,
    rt: Arc<Runtime>,
}

/// Whether the host namespace a tenant would take is free for it: absent, or already the
/// tenant's (labelled `fabrik.dev/tenant=<tenant>` when the tenant manager created it), and not
/// one of the namespaces Fabrik itself uses. A tenant never adopts (nor, on deletion, deletes) a
/// namespace it did not create.
pub fn host_namespace_problem(
    tenant: &str,
    existing: Option<&Namespace>,
    reserved: &[String],
) -> Option<String> {
    let ns = host_namespace(tenant);
    if reserved.contains(&ns) {
        return Some(format!(
            "host namespace {ns} is used by Fabrik itself; choose another tenant name"
        ));
    }
    let existing = existing?;
    let owner = existing
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(fabrik_api::LABEL_TENANT));
    if owner.map(String::as_str) == Some(tenant) {
        return None;
    }
    Some(format!(
        "host namespace {ns} already exists and was not created for this tenant; \
         choose another tenant name or remove the namespace"
    ))
}

fn keyspace(name: &str) -> String {
    format!("tenant-{name}")
}

fn ready_condition(
    status: bool,
    reason: &str,
    message: &str,
    generation: Option<i64>,
) -> Condition {
    Condition {
        type_: "Ready".into(),
        status: if status { "True" } else { "False" }.into(),
        reason: reason.into(),
        message: message.into(),
        last_transition_time: Time(k8s_openapi::jiff::Timestamp::now()),
        observed_generation: generation,
    }
}

/// The extra kinds a Tenant asks to sync: those the syncer knows, and the names it does not.
fn extra_kinds(tenant: &Tenant) -> (Vec<syncer::kinds::Kind>, Vec<String>) {
    let mut known = Vec::new();
    let mut unknown = Vec::new();
    for name in tenant.spec.sync.iter().flat_map(|s| s.extra_kinds.iter()) {
        match syncer::kinds::Kind::from_extra_name(name) {
            Some(k) => known.push(k),
            None => unknown.push(name.clone()),
        }
    }
    (known, unknown)
}

/// `SyncConfigured`: whether every extra kind of `spec.sync` is one the syncer can sync.
fn sync_condition(tenant: &Tenant) -> Condition {
    let (_, unknown) = extra_kinds(tenant);
    let supported: Vec<String> = syncer::kinds::Kind::EXTRA
        .iter()
        .map(|k| k.extra_name())
        .collect();
    let (ok, reason, message) = if unknown.is_empty() {
        (
            true,
            "Configured",
            "every kind asked for is synced".to_string(),
        )
    } else {
        (
            false,
            "UnsupportedKind",
            format!(
                "spec.sync.extraKinds names kinds the syncer cannot copy safely and leaves alone: {}; supported: {}",
                unknown.join(", "),
                supported.join(", ")
            ),
        )
    };
    Condition {
        type_: "SyncConfigured".into(),
        ..ready_condition(ok, reason, &message, tenant.metadata.generation)
    }
}

async fn apply<K>(api: &Api<K>, name: &str, obj: serde_json::Value) -> Result<(), Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.patch(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await?;
    Ok(())
}

fn b64(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}

fn secret_text(secret: &Secret, key: &str) -> Option<String> {
    secret
        .data
        .as_ref()?
        .get(key)
        .and_then(|v| String::from_utf8(v.0.clone()).ok())
}

/// The tenant's CA and service-account signing key, created once and kept in a host Secret
/// (a Secret from before signing keys existed gets one added).
async fn tenant_ca(
    secrets: &Api<Secret>,
    tenant: &str,
) -> Result<(Ca, Arc<fabrik_apiserver::auth::SigningKey>), Error> {
    let signing = |pem: &str| {
        fabrik_apiserver::auth::SigningKey::from_pem(pem)
            .map(Arc::new)
            .map_err(|e| Error::Invalid(format!("service-account key of tenant {tenant}: {e}")))
    };
    let fresh_key = || {
        fabrik_apiserver::auth::SigningKey::generate()
            .map(Arc::new)
            .map_err(|e| Error::Invalid(format!("service-account key of tenant {tenant}: {e}")))
    };
    if let Some(s) = secrets.get_opt(CA_SECRET).await? {
        let (Some(cert), Some(key)) = (secret_text(&s, "ca.crt"), secret_text(&s, "ca.key")) else {
            return Err(Error::Invalid(format!("CA Secret of tenant {tenant}")));
        };
        let ca = Ca::from_pem(&cert, &key)?;
        let sa_key = match secret_text(&s, "sa.key") {
            Some(pem) => signing(&pem)?,
            None => {
                let k = fresh_key()?;
                secrets
                    .patch(
                        CA_SECRET,
                        &PatchParams::default(),
                        &Patch::Merge(json!({"data": {"sa.key": b64(&k.to_pem())}})),
                    )
                    .await?;
                k
            }
        };
        return Ok((ca, sa_key));
    }
    let ca = Ca::generate(&format!("fabrik-tenant-{tenant}-{}", uuid_short()))?;
    let sa_key = fresh_key()?;
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": CA_SECRET, "labels": {"fabrik.dev/tenant": tenant}},
        "type": "Opaque",
        "data": {
            "ca.crt": b64(&ca.pair().cert_pem),
            "ca.key": b64(&ca.pair().key_pem),
            "sa.key": b64(&sa_key.to_pem()),
        },
    });
    apply(secrets, CA_SECRET, secret).await?;
    Ok((ca, sa_key))
}

fn uuid_short() -> String {
    use rand::Rng;
    let mut rng = rand::rng();
    (0..8)
        .map(|_| char::from(b"0123456789abcdef"[rng.random_range(0..16)]))
        .collect()
}

/// Node ports and load balancers a tenant may hold: 0 unless its spec allows them (host node
/// ports are shared by every tenant).
fn service_quota(tenant: &Tenant) -> [(&'static str, i64); 2] {
    let q = tenant.spec.quota.as_ref();
    [
        (
            "services.nodeports",
            q.and_then(|q| q.node_ports).unwrap_or(0).max(0),
        ),
        (
            "services.loadbalancers",
            q.and_then(|q| q.load_balancers).unwrap_or(0).max(0),
        ),
    ]
}

fn quota_hard(tenant: &Tenant) -> BTreeMap<String, String> {
    let mut hard = BTreeMap::new();
    for (key, n) in service_quota(tenant) {
        hard.insert(key.to_string(), n.to_string());
    }
    if let Some(q) = &tenant.spec.quota {
        if let Some(c) = &q.cpu {
            hard.insert("requests.cpu".into(), c.clone());
        }
        if let Some(m) = &q.memory {
            hard.insert("requests.memory".into(), m.clone());
        }
        if let Some(p) = q.pods {
            hard.insert("pods".into(), p.to_string());
        }
        if let Some(g) = tenant.spec.gpu_cap() {
            // The resources the syncer puts on the tenant's host pods, each at most all of
            // them (the tenant's own API server limits their sum); with what it may borrow.
            let policy = policy_of(tenant);
            for kind in syncer::gpu::kinds(&policy) {
                let resource = format!("requests.{}", syncer::gpu::host_resource(kind));
                hard.insert(resource, g.to_string());
            }
        }
    }
    hard
}

/// The tenant's quota as its own API server counts it (GPUs as the tenant's pods ask for them:
/// `nvidia.com/gpu`, whatever the host resource they map to).
fn tenant_quota_hard(tenant: &Tenant) -> fabrik_apiserver::admission::resource_quota::Usage {
    let mut hard = fabrik_apiserver::admission::resource_quota::Usage::new();
    let mut put = |key: &str, value: String| {
        if let Ok(v) = value.parse::<fabrik_machinery::quantity::Quantity>() {
            hard.insert(key.to_string(), v);
        }
    };
    for (key, n) in service_quota(tenant) {
        put(key, n.to_string());
    }
    let Some(q) = &tenant.spec.quota else {
        return hard;
    };
    if let Some(c) = &q.cpu {
        put("requests.cpu", c.clone());
    }
    if let Some(m) = &q.memory {
        put("requests.memory", m.clone());
    }
    if let Some(p) = q.pods {
        put("pods", p.to_string());
    }
    if let Some(g) = tenant.spec.gpu_cap() {
        put("requests.nvidia.com/gpu", g.to_string());
        if !q.gpu_types.is_empty() {
            // Every kind the tenant may request counts: one sum.
            put(fabrik_machinery::quota::GPU_DEVICES, g.to_string());
        }
    }
    hard
}

/// The syncer's policy as an admission plugin of the tenant's API server: refused pods,
/// Services, Endpoints, EndpointSlices and (synced) Ingresses fail at `kubectl apply` with the
/// reason, instead of never starting on the host or being copied in part.
struct SyncerAdmission {
    policy: std::sync::RwLock<syncer::Policy>,
}

impl SyncerAdmission {
    fn new(policy: syncer::Policy) -> SyncerAdmission {
        SyncerAdmission {
            policy: std::sync::RwLock::new(policy),
        }
    }

    fn policy(&self) -> syncer::Policy {
        match self.policy.read() {
            Ok(p) => p.clone(),
            Err(poisoned) => poisoned.into_inner().clone(),
        }
    }

    fn set(&self, policy: syncer::Policy) {
        match self.policy.write() {
            Ok(mut p) => *p = policy,
            Err(poisoned) => *poisoned.into_inner() = policy,
        }
    }
}

/// The tenant's addresses on the host: its Service IPs are its host copies'.
fn with_host_addresses(settings: &mut fabrik_apiserver::Settings, ctx: &Ctx, tenant: &str) {
    settings.service_ips = Some(Arc::new(HostServiceIps {
        host: ctx.host.clone(),
        tenant: tenant.to_string(),
        host_namespace: host_namespace(tenant),
    }));
}

/// Where the tenant's pods reach its API: the control plane's Service (the tenant's
/// `kubernetes` Service).
fn pod_api_address(ctx: &Ctx) -> Option<std::net::SocketAddr> {
    ctx.rt.api_address.as_ref().and_then(|a| {
        let ip = a.host.parse::<std::net::IpAddr>().ok()?;
        Some(std::net::SocketAddr::new(ip, a.port))
    })
}

/// What the tenant reaches on the host: its admission webhooks and aggregated APIs (its Services
/// at their host copies, or local processes `--local-backends` allows; `url`s under the
/// Tenant's webhook targets) and its resource metrics.
fn with_host_backends(settings: &mut fabrik_apiserver::Settings, rt: &Runtime, tenant: &Tenant) {
    let backends: Arc<dyn fabrik_apiserver::webhook::Backends> = Arc::new(
        crate::webhooks::TenantServices::new(&tenant.name_any(), rt.host_services.clone()),
    );
    settings.webhooks = fabrik_apiserver::webhook::WebhookSettings {
        backends: crate::webhooks::with_local(backends, rt.local_backends.as_ref()),
        targets: webhook_targets(rt, tenant),
    };
    // Its `metrics.k8s.io`: the host's, for its pods.
    settings.resource_metrics = Some(Arc::new(crate::resource_metrics::HostMetrics::new(
        rt.host.clone(),
        &tenant.name_any(),
    )));
}

/// The entries of a Tenant's `webhookTargets` (checked by `fabrik_api::validation` before the
/// tenant is served; an entry that does not parse allows nothing).
fn allowed_targets(tenant: &Tenant) -> Vec<fabrik_apiserver::webhook::Allowed> {
    tenant
        .spec
        .isolation
        .iter()
        .flat_map(|i| &i.webhook_targets)
        .filter_map(|t| fabrik_apiserver::webhook::Allowed::parse(t).ok())
        .collect()
}

/// The tenant's webhook address rules: one per tenant, following the spec.
fn webhook_targets(rt: &Runtime, tenant: &Tenant) -> Arc<Targets> {
    let allowed = allowed_targets(tenant);
    let own: Vec<std::net::IpAddr> = rt
        .api_address
        .iter()
        .filter_map(|a| a.host.parse().ok())
        .collect();
    let fresh = || Arc::new(Targets::restricted(allowed.clone()));
    let targets = match rt.webhook_targets.lock() {
        Ok(mut all) => all.entry(tenant.name_any()).or_insert_with(fresh).clone(),
        Err(_) => fresh(),
    };
    targets.set_allowed(allowed);
    targets.set_own(own);
    targets
}

/// A tenant's Service IPs come from its host copies (see [`syncer::service_ips`]).
struct HostServiceIps {
    host: Client,
    tenant: String,
    host_namespace: String,
}

impl std::fmt::Debug for HostServiceIps {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostServiceIps")
            .field("tenant", &self.tenant)
            .field("host_namespace", &self.host_namespace)
            .finish_non_exhaustive()
    }
}

#[async_trait::async_trait]
impl fabrik_apiserver::service_ips::ServiceIps for HostServiceIps {
    async fn allocate(
        &self,
        svc: &serde_json::Value,
    ) -> Result<Option<String>, fabrik_apiserver::ApiError> {
        use syncer::service_ips::Error as E;
        let name = svc["metadata"]["name"].as_str().unwrap_or("").to_string();
        syncer::service_ips::reserve(&self.host, &self.tenant, &self.host_namespace, svc)
            .await
            .map_err(|e| match e {
                E::Refused(message) => fabrik_apiserver::ApiError::Invalid {
                    kind: "Service".into(),
                    group: String::new(),
                    name,
                    causes: vec![fabrik_machinery::validation::FieldError::invalid(
                        "spec.clusterIPs",
                        svc["spec"]["clusterIP"].as_str().unwrap_or(""),
                        &message,
                    )],
                },
                E::Forbidden(_) => fabrik_apiserver::ApiError::Forbidden(format!(
                    "services \"{name}\" is forbidden: {e}"
                )),
                E::Deleting => fabrik_apiserver::ApiError::Conflict {
                    resource: fabrik_apiserver::GroupResource {
                        group: String::new(),
                        resource: "services".into(),
                    },
                    name,
                    message: e.to_string(),
                },
                E::Taken(_) | E::Host(_) => fabrik_apiserver::ApiError::Internal(format!(
                    "failed to allocate a cluster IP: {e}"
                )),
            })
    }
}

/// A running tenant's syncer and what it was started with, so that a spec change restarts it.
struct SyncerRun {
    policy: syncer::Policy,
    kinds: Vec<syncer::kinds::Kind>,
    admission: Arc<SyncerAdmission>,
    /// Dropping (or sending) stops the syncer.
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

#[async_trait::async_trait]
impl fabrik_apiserver::admission::Admission for SyncerAdmission {
    fn name(&self) -> &'static str {
        "FabrikTenantPodPolicy"
    }

    async fn validate_delete(
        &self,
        req: &fabrik_apiserver::admission::Request<'_>,
        old: &serde_json::Value,
    ) -> Result<fabrik_apiserver::admission::Verdict, fabrik_apiserver::ApiError> {
        mirrored_read_only(req, old)?;
        Ok(fabrik_apiserver::admission::Verdict::ok())
    }

    async fn validate(
        &self,
        req: &fabrik_apiserver::admission::Request<'_>,
        obj: &serde_json::Value,
        old: Option<&serde_json::Value>,
    ) -> Result<fabrik_apiserver::admission::Verdict, fabrik_apiserver::ApiError> {
        let (group, plural) = (req.def.group.as_str(), req.def.plural.as_str());
        mirrored_read_only(req, obj)?;
        let policy = self.policy();
        if req.subresource.is_some() || !syncer::admission::checks(group, plural, &policy) {
            return Ok(fabrik_apiserver::admission::Verdict::ok());
        }
        let old = match req.op {
            fabrik_apiserver::admission::Operation::Update
            | fabrik_apiserver::admission::Operation::Delete
            | fabrik_apiserver::admission::Operation::Connect => old,
            fabrik_apiserver::admission::Operation::Create => None,
        };
        let mut checked = syncer::admission::check(group, plural, obj, old, &policy);
        if checked.is_err() && matches!(plural, "endpoints" | "endpointslices") {
            // Addresses the host gave this tenant's pods are pods' addresses, whatever their
            // range; looked up only when an address was refused.
            let pod_ips = namespace_pod_ips(req).await?;
            checked =
                syncer::admission::check_with_pods(group, plural, obj, old, &policy, &pod_ips);
        }
        checked
            .map(|()| fabrik_apiserver::admission::Verdict::ok())
            .map_err(|reasons| {
                let name = obj["metadata"]["name"].as_str().unwrap_or("");
                fabrik_apiserver::ApiError::Forbidden(format!(
                    "{plural} \"{name}\" is forbidden by the tenant's policy: {}",
                    reasons.join("; ")
                ))
            })
    }
}

/// DeviceClasses are the host's, mirrored by the syncer: no one else writes them in a tenant.
fn mirrored_read_only(
    req: &fabrik_apiserver::admission::Request<'_>,
    obj: &serde_json::Value,
) -> Result<(), fabrik_apiserver::ApiError> {
    if req.def.group != "resource.k8s.io" || req.def.plural != "deviceclasses" {
        return Ok(());
    }
    let syncer = fabrik_apiserver::client::controller_identity("syncer").name;
    if req.user.is_some_and(|u| u.name == syncer) {
        return Ok(());
    }
    Err(fabrik_apiserver::ApiError::Forbidden(format!(
        "deviceclasses.resource.k8s.io \"{}\" is forbidden: device classes are the host's, \
         mirrored into the tenant read-only; claims may name them",
        obj["metadata"]["name"].as_str().unwrap_or("")
    )))
}

/// The IPs of the pods of the request's namespace (in their status).
async fn namespace_pod_ips(
    req: &fabrik_apiserver::admission::Request<'_>,
) -> Result<std::collections::BTreeSet<std::net::IpAddr>, fabrik_apiserver::ApiError> {
    let (Some(ns), Some(def)) = (req.namespace, req.objects.resource("", "v1", "pods")) else {
        return Ok(Default::default());
    };
    let pods = req.objects.list(&def, Some(ns)).await?;
    Ok(pods.iter().flat_map(syncer::addresses::pod_ips).collect())
}

/// Starts the tenant's syncer; it stops with the tenant's API server or when the returned
/// run's `stop` is dropped.
fn start_syncer(
    rt: &Runtime,
    name: &str,
    server: Arc<fabrik_apiserver::server::ApiServer>,
    admission: Arc<SyncerAdmission>,
    policy: syncer::Policy,
    kinds: Vec<syncer::kinds::Kind>,
) -> SyncerRun {
    let sync = syncer::TenantSync {
        tenant: name.to_string(),
        host_namespace: host_namespace(name),
        policy: policy.clone(),
        extra_kinds: kinds.clone(),
    };
    let server_stop = server.shutdown_signal();
    let tenant_client = fabrik_apiserver::client::in_process_client(
        server,
        fabrik_apiserver::client::controller_identity("syncer"),
    );
    let informers = rt.informers.clone();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let tname = name.to_string();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            tokio::select! {
                _ = server_stop => {}
                _ = stopped => {}
            }
        };
        if let Err(e) = syncer::run(sync, tenant_client, informers, shutdown).await {
            tracing::error!(tenant = %tname, error = %e, "syncer stopped");
        }
    });
    SyncerRun {
        policy,
        kinds,
        admission,
        stop,
        task,
    }
}

/// Restarts the tenant's syncer (and updates its pod policy) when the spec asks for another
/// policy or other extra kinds than it runs with.
async fn restart_syncer_if_changed(rt: &Runtime, name: &str, tenant: &Tenant) {
    let (policy, kinds) = (tenant_policy(rt, tenant), extra_kinds(tenant).0);
    let mut syncers = rt.syncers.lock().await;
    let Some(run) = syncers.get(name) else {
        return;
    };
    if run.policy == policy && run.kinds == kinds {
        return;
    }
    let Some(cluster_server) = rt.running.lock().await.get(name).map(|c| c.server.clone()) else {
        return;
    };
    let Some(old) = syncers.remove(name) else {
        return;
    };
    old.admission.set(policy.clone());
    let _ = old.stop.send(());
    if tokio::time::timeout(Duration::from_secs(5), old.task)
        .await
        .is_err()
    {
        tracing::warn!(tenant = %name, "the old syncer did not stop within 5 s");
    }
    let run = start_syncer(rt, name, cluster_server, old.admission, policy, kinds);
    tracing::info!(tenant = %name, kinds = ?run.kinds, "tenant spec changed: syncer restarted");
    syncers.insert(name.to_string(), run);
}

/// The syncer policy a Tenant's spec asks for.
/// The policy a tenant's syncer and pod admission run with: the spec's, and where this
/// control plane is reached from the tenant's pods.
fn tenant_policy(rt: &Runtime, tenant: &Tenant) -> syncer::Policy {
    let mut policy = policy_of(tenant);
    policy.api_address = rt.api_address.clone();
    policy.dns_nameserver = rt.dns_nameserver.clone();
    policy.gpu_queue = rt.gpu_queue.load(std::sync::atomic::Ordering::Relaxed);
    policy
}

fn policy_of(tenant: &Tenant) -> syncer::Policy {
    let iso = tenant.spec.isolation.clone().unwrap_or_default();
    let allows = |p: &str| iso.allow.iter().any(|a| a == p);
    let mut tolerations = Vec::new();
    if iso.dedicated_nodes {
        tolerations.push(k8s_openapi::api::core::v1::Toleration {
            key: Some("fabrik.dev/tenant".into()),
            operator: Some("Equal".into()),
            value: Some(tenant.name_any()),
            effect: Some("NoSchedule".into()),
            ..Default::default()
        });
    }
    // Checked by `fabrik_api::validation` before a tenant is served; anything else is whole GPUs.
    let quota = tenant.spec.quota.as_ref();
    let gpu_sharing = quota
        .and_then(|q| q.gpu_sharing.as_deref())
        .and_then(gpu_kind)
        .unwrap_or_default();
    let gpu_types: Vec<syncer::GpuSharing> = quota
        .map(|q| q.gpu_types.iter().filter_map(|t| gpu_kind(t)).collect())
        .unwrap_or_default();
    syncer::Policy {
        node_selector: iso.node_selector.clone(),
        tolerations,
        runtime_class: iso.runtime_class.clone(),
        allow_privileged: allows("privileged"),
        allow_host_namespaces: allows("hostNamespaces"),
        allow_host_path: allows("hostPath"),
        gpu_sharing,
        gpu_types,
        allowed_priority_classes: Vec::new(),
        dns_nameserver: None,
        sync_ingresses: extra_kinds(tenant)
            .0
            .contains(&syncer::kinds::Kind::Ingress),
        ingress_classes: iso.ingress_classes.clone(),
        synced_routes: extra_kinds(tenant)
            .0
            .into_iter()
            .filter(|k| k.is_route())
            .collect(),
        gateways: iso.gateways.clone(),
        route_hostnames: iso.route_hostnames.clone(),
        external_names: iso.external_names.clone(),
        api_address: None,
        device_classes: tenant.spec.gpu_cap() != Some(0),
        gpu_queue: false,
    }
}

/// The host GPU resources a tenant's pods are given (one per kind it may request).
pub fn gpu_resources(tenant: &Tenant) -> Vec<String> {
    let policy = policy_of(tenant);
    let mut out: Vec<String> = syncer::gpu::kinds(&policy)
        .map(syncer::gpu::host_resource)
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The syncer's form of one `gpuSharing` / `gpuTypes` value; `None` when it does not parse.
fn gpu_kind(mode: &str) -> Option<syncer::GpuSharing> {
    use fabrik_api::tenant::GpuSharingMode;
    Some(match GpuSharingMode::parse(mode).ok()? {
        GpuSharingMode::Whole => syncer::GpuSharing::Whole,
        GpuSharingMode::Mig { slices, memory_gb } => {
            syncer::GpuSharing::Mig(format!("{slices}g.{memory_gb}gb"))
        }
        GpuSharingMode::Share {
            memory_mib,
            compute_pct,
        } => syncer::GpuSharing::Shared {
            memory_mib,
            compute_pct: u32::from(compute_pct),
        },
        GpuSharingMode::TimeSlice => syncer::GpuSharing::TimeSliced,
    })
}

async fn reconcile_apply(tenant: Arc<Tenant>, ctx: &Ctx) -> Result<Action, Error> {
    let name = tenant.name_any();
    let tenants: Api<Tenant> = Api::all(ctx.host.clone());
    let problems = fabrik_api::validation::validate_tenant(&tenant);
    if !problems.is_empty() {
        let why = fabrik_api::validation::describe(&problems);
        let status = TenantStatus {
            phase: Some("Failed".into()),
            conditions: vec![ready_condition(
                false,
                "InvalidSpec",
                &format!("tenant {name:?}: {why}"),
                tenant.metadata.generation,
            )],
            ..Default::default()
        };
        tenants
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        return Ok(Action::await_change());
    }
    let ns = host_namespace(&name);
    let namespaces: Api<Namespace> = Api::all(ctx.host.clone());
    let existing = namespaces.get_opt(&ns).await?;
    if let Some(why) = host_namespace_problem(&name, existing.as_ref(), &ctx.rt.reserved_namespaces)
    {
        let status = TenantStatus {
            phase: Some("Failed".into()),
            conditions: vec![ready_condition(
                false,
                "HostNamespaceTaken",
                &format!("tenant {name:?}: {why}"),
                tenant.metadata.generation,
            )],
            ..Default::default()
        };
        tenants
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        return Ok(Action::await_change());
    }
    apply(&namespaces, &ns, json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns, "labels": {"fabrik.dev/tenant": name}}})).await?;
    let secrets: Api<Secret> = Api::namespaced(ctx.host.clone(), &ns);
    let (ca, sa_key) = tenant_ca(&secrets, &name).await?;

    // The tenant's API server.
    let endpoint = format!("{}/clusters/{name}", ctx.rt.public_url);
    {
        // The lock is not held while the tenant starts: tenants start in parallel (the
        // controller never reconciles one tenant twice at the same time).
        let started = ctx.rt.running.lock().await.contains_key(&name);
        if !started {
            let store: Arc<dyn Store> = ctx.rt.backend.open(&keyspace(&name)).await?;
            let ca_copy = Ca::from_pem(&ca.pair().cert_pem, &ca.pair().key_pem)?;
            let mut settings = ctx.rt.settings.clone();
            settings.server_address = endpoint.clone();
            settings.auth.service_account_key = Some(sa_key.clone());
            settings.auth.service_account_issuer = endpoint.clone();
            settings.auth.client_ca_pem = Some(ca.cert_pem().to_string());
            with_host_addresses(&mut settings, ctx, &name);
            with_host_backends(&mut settings, &ctx.rt, &tenant);
            let policy = tenant_policy(&ctx.rt, &tenant);
            let admission = Arc::new(SyncerAdmission::new(policy.clone()));
            let plugins = tenant_admission(&ctx.rt, admission.clone(), &tenant);
            let controllers = crate::cluster::Controllers {
                pod_api_address: pod_api_address(ctx),
                // Clients verify the tenant's server with the serving CA (the tenant's own CA
                // issues only its client certificates).
                root_ca_pem: Some(ctx.rt.serving_ca_pem.clone()),
                ..Default::default()
            };
            let cluster = crate::cluster::builder(store, ca_copy, settings, controllers)
                .admission(plugins)
                .start()
                .await?;
            cluster
                .server
                .set_pod_streams(Arc::new(crate::pod_streams::HostPods {
                    host: ctx.host.clone(),
                    tenant: name.clone(),
                }));
            let run = start_syncer(
                &ctx.rt,
                &name,
                cluster.server.clone(),
                admission,
                policy,
                extra_kinds(&tenant).0,
            );
            if let Some(old) = ctx.rt.syncers.lock().await.insert(name.clone(), run) {
                old.task.abort();
            }
            ctx.rt
                .router
                .add_tenant(&name, cluster.server.clone(), ca.cert_pem());
            // Taking over: the follower served until now; the owner's server is routed.
            if let Some(shards) = ctx.rt.shards.get() {
                shards.stop_following(&name, &ctx.rt.router).await;
            }
            tracing::info!(tenant = %name, "tenant API server started");
            ctx.rt.running.lock().await.insert(name.clone(), cluster);
        }
    }

    // The syncer and the pod policy follow the spec: a changed policy or list of extra kinds
    // restarts the syncer (every sync is idempotent, so a restart only re-checks).
    restart_syncer_if_changed(&ctx.rt, &name, &tenant).await;

    // The store quota follows the spec (on etcd it is kept in the store, so every replica
    // serving the tenant enforces it).
    let limits = crate::keyspaces::tenant_storage_limits(tenant.spec.quota.as_ref())
        .map_err(Error::Invalid)?;
    ctx.rt
        .backend
        .open(&keyspace(&name))
        .await?
        .set_limits(limits)
        .await?;

    // The quota follows the spec.
    if let Some(q) = ctx
        .rt
        .quotas
        .lock()
        .ok()
        .and_then(|q| q.get(&name).cloned())
    {
        q.set_hard(tenant_quota_hard(&tenant));
    }
    // So do the webhook targets.
    webhook_targets(&ctx.rt, &tenant);

    // The admin kubeconfig: issued once, kept in a Secret (and a file for `fabrik up`).
    let kubeconfig =
        match secrets
            .get_opt(KUBECONFIG_SECRET)
            .await?
            .and_then(|s| secret_text(&s, "kubeconfig"))
        {
            Some(k) if k.contains(&endpoint) => k,
            _ => {
                let client = ca.issue_client("fabrik-tenant-admin", Some("system:masters"))?;
                let k = fabrik_apiserver::kubeconfig::render(
                    &format!("fabrik-{name}"),
                    &endpoint,
                    &ctx.rt.serving_ca_pem,
                    &client,
                );
                apply(&secrets, KUBECONFIG_SECRET, json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": KUBECONFIG_SECRET, "labels": {"fabrik.dev/tenant": name}},
                "type": "Opaque",
                "data": {"kubeconfig": b64(&k)},
            }))
            .await?;
                k
            }
        };
    if let Some(dir) = &ctx.rt.data_dir {
        let path = dir.join("tenants").join(format!("{name}.kubeconfig"));
        let current = std::fs::read_to_string(&path).ok();
        if current.as_deref() != Some(kubeconfig.as_str()) {
            std::fs::create_dir_all(dir.join("tenants")).map_err(|source| Error::Io {
                path: path.clone(),
                source,
            })?;
            fabrik_apiserver::pki::write_private(&path, kubeconfig.as_bytes())
                .map_err(|e| Error::Invalid(e.to_string()))?;
        }
    }

    // Host guard rails.
    let hard = quota_hard(&tenant);
    let quotas: Api<ResourceQuota> = Api::namespaced(ctx.host.clone(), &ns);
    if hard.is_empty() {
        let _ = quotas
            .delete("fabrik-quota", &DeleteParams::default())
            .await;
    } else {
        apply(&quotas, "fabrik-quota", json!({"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "fabrik-quota"}, "spec": {"hard": hard}})).await?;
    }
    let limits: Api<LimitRange> = Api::namespaced(ctx.host.clone(), &ns);
    apply(
        &limits,
        "fabrik-defaults",
        json!({"apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "fabrik-defaults"},
        "spec": host_limit_range()}),
    )
    .await?;
    let policies: Api<NetworkPolicy> = Api::namespaced(ctx.host.clone(), &ns);
    apply(&policies, "fabrik-isolation", json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "fabrik-isolation"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"from": [{"podSelector": {}}]}]}})).await?;

    // Owners are cluster-admin inside the tenant.
    if let Some(cluster) = ctx.rt.running.lock().await.get(&name) {
        let tc = fabrik_apiserver::client::in_process_client(
            cluster.server.clone(),
            fabrik_apiserver::client::controller_identity("tenant-manager"),
        );
        let subjects: Vec<serde_json::Value> = tenant
            .spec
            .owners
            .iter()
            .map(|o| match o.strip_prefix("group:") {
                Some(g) => {
                    json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": g})
                }
                None => json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": o}),
            })
            .collect();
        let crbs: Api<ClusterRoleBinding> = Api::all(tc);
        apply(&crbs, "fabrik-owners", json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": "fabrik-owners"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"}, "subjects": subjects})).await?;
    }

    let status = TenantStatus {
        phase: Some("Ready".into()),
        endpoint: Some(endpoint),
        kubeconfig_secret: Some(SecretRef {
            namespace: ns,
            name: KUBECONFIG_SECRET.into(),
        }),
        conditions: vec![
            ready_condition(
                true,
                "Serving",
                "the tenant API server is serving",
                tenant.metadata.generation,
            ),
            sync_condition(&tenant),
        ],
        // Left out of the merge patch: `usage` is the usage reporter's (tenants::usage).
        usage: None,
        observed_generation: tenant.metadata.generation,
        // Left out too (empty): `queue` is the GPU queue's (crate::queue).
        queue: Vec::new(),
    };
    let unchanged = tenant.status.as_ref().is_some_and(|s| {
        s.phase == status.phase
            && s.endpoint == status.endpoint
            && s.observed_generation == status.observed_generation
            && s.kubeconfig_secret == status.kubeconfig_secret
    });
    if !unchanged {
        tenants
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
    }
    Ok(Action::requeue(Duration::from_secs(600)))
}

async fn reconcile_cleanup(tenant: Arc<Tenant>, ctx: &Ctx) -> Result<Action, Error> {
    let name = tenant.name_any();
    if let Some(server) = ctx.rt.router.remove_tenant(&name) {
        drop(server);
    }
    if let Ok(mut q) = ctx.rt.quotas.lock() {
        q.remove(&name);
    }
    if let Ok(mut t) = ctx.rt.webhook_targets.lock() {
        t.remove(&name);
    }
    ctx.rt.syncers.lock().await.remove(&name);
    let cluster = ctx.rt.running.lock().await.remove(&name);
    if let Some(c) = cluster {
        c.shutdown().await;
    }
    ctx.rt.backend.drop(&keyspace(&name)).await?;
    let namespaces: Api<Namespace> = Api::all(ctx.host.clone());
    let ns = host_namespace(&name);
    // Only a namespace the tenant manager created for this tenant is deleted with it.
    let ours = namespaces.get_opt(&ns).await?.is_some_and(|n| {
        host_namespace_problem(&name, Some(&n), &ctx.rt.reserved_namespaces).is_none()
    });
    if ours {
        match namespaces.delete(&ns, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => return Err(e.into()),
        }
    }
    if let Some(dir) = &ctx.rt.data_dir {
        let _ = std::fs::remove_file(dir.join("tenants").join(format!("{name}.kubeconfig")));
    }
    tracing::info!(tenant = %name, "tenant removed");
    Ok(Action::await_change())
}

/// The spec of the LimitRange in every tenant's host namespace: the requests a container that
/// states none is given on the host.
fn host_limit_range() -> serde_json::Value {
    json!({"limits": [{"type": "Container", "defaultRequest": {"cpu": "100m", "memory": "128Mi"}}]})
}

/// The host namespace's LimitRange applied in the tenant too (after the tenant's own), so that a
/// pod the host would default over the tenant's quota is refused at once in the tenant instead
/// of admitted there and refused on the host.
fn host_defaults() -> Arc<dyn fabrik_apiserver::admission::Admission> {
    Arc::new(LimitRanger::fixed(
        "HostLimitRange",
        vec![host_limit_range()],
    ))
}

/// The admission plugins of a tenant's cluster after the standard chain, in order — the same
/// on the replica that owns the tenant and on the replicas that follow it: the pod policy
/// (`pods`), the host namespace's defaults, the tenant quota and, where other replicas write
/// the tenant's store too, namespace quotas counted exactly.
fn tenant_admission(
    rt: &Runtime,
    pods: Arc<SyncerAdmission>,
    tenant: &Tenant,
) -> Vec<Arc<dyn fabrik_apiserver::admission::Admission>> {
    let mut plugins: Vec<Arc<dyn fabrik_apiserver::admission::Admission>> =
        vec![pods, host_defaults(), tenant_quota(rt, tenant)];
    if rt.shards.get().is_some() {
        plugins.push(Arc::new(ResourceQuotaAdmission::exact()));
    }
    plugins
}

/// The tenant quota this replica enforces for `tenant`: one per tenant (created on first use,
/// kept while the replica serves the tenant as owner or follower), following the spec. Where
/// replicas share the store (HA) it counts exactly: every replica serving the tenant writes
/// its store, so no replica's own bookkeeping sees all writes.
fn tenant_quota(rt: &Runtime, tenant: &Tenant) -> Arc<ClusterQuota> {
    let name = tenant.name_any();
    let hard = tenant_quota_hard(tenant);
    let fresh = || {
        Arc::new(ClusterQuota::new(
            &format!("tenant \"{name}\""),
            hard.clone(),
        ))
    };
    let quota = match rt.quotas.lock() {
        Ok(mut quotas) => quotas.entry(name.clone()).or_insert_with(fresh).clone(),
        Err(_) => fresh(),
    };
    quota.set_hard(hard);
    quota.set_exact(rt.shards.get().is_some());
    quota
}

/// Sharding hook: on a replica that does not own the tenant's shard, stop running the tenant
/// (if it did) and serve it from the shared store instead; returns None when this replica runs
/// it.
async fn follow_unless_owned(tenant: &Tenant, ctx: &Ctx) -> Option<Result<Action, Error>> {
    let shards = ctx.rt.shards.get()?;
    if shards.owns(tenant) {
        ctx.rt
            .followed_policies
            .lock()
            .await
            .remove(&tenant.name_any());
        shards.run_here(tenant).await;
        return None;
    }
    let name = tenant.name_any();
    ctx.rt.syncers.lock().await.remove(&name);
    // Handing over: the server run here keeps serving until the follower is routed in its
    // place, so that requests never find the tenant unserved.
    let handed_over = ctx.rt.running.lock().await.remove(&name);
    // A follower admits the tenant's pods too: its policy follows the spec like the owner's.
    let admission = {
        let mut followed = ctx.rt.followed_policies.lock().await;
        let policy = tenant_policy(&ctx.rt, tenant);
        if tenant.metadata.deletion_timestamp.is_some() {
            followed.remove(&name);
        }
        match followed.get(&name) {
            _ if tenant.metadata.deletion_timestamp.is_some() => {
                Arc::new(SyncerAdmission::new(policy))
            }
            Some(a) => {
                a.set(policy);
                a.clone()
            }
            None => {
                let a = Arc::new(SyncerAdmission::new(policy));
                followed.insert(name.clone(), a.clone());
                a
            }
        }
    };
    // ... and runs the owner's admission.
    let admission = tenant_admission(&ctx.rt, admission, tenant);
    let rt = &ctx.rt;
    let mut settings = rt.settings.clone();
    with_host_addresses(&mut settings, ctx, &name);
    with_host_backends(&mut settings, rt, tenant);
    let followed = shards
        .follow(
            tenant,
            &ctx.host,
            &rt.router,
            &rt.backend,
            &keyspace(&name),
            &settings,
            &rt.public_url,
            admission,
        )
        .await
        .map_err(|e| Error::Shards(Box::new(e)));
    if let Some(c) = handed_over {
        rt.router.remove_tenant_if(&name, &c.server);
        c.shutdown().await;
        tracing::info!(tenant = %name, "tenant handed over to another replica");
    }
    Some(followed)
}

async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Ctx>) -> Result<Action, Error> {
    if let Some(followed) = follow_unless_owned(&tenant, &ctx).await {
        return followed;
    }
    let api: Api<Tenant> = Api::all(ctx.host.clone());
    finalizer(&api, TENANT_FINALIZER, tenant, |event| async {
        match event {
            Event::Apply(t) => reconcile_apply(t, &ctx).await,
            Event::Cleanup(t) => reconcile_cleanup(t, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(e.to_string()))
}

fn error_policy(tenant: Arc<Tenant>, err: &Error, _ctx: Arc<Ctx>) -> Action {
    tracing::warn!(tenant = %tenant.name_any(), error = %err, "tenant reconciliation failed; retrying");
    Action::requeue(Duration::from_secs(2))
}

/// Runs the tenant manager until `shutdown` resolves, then stops every tenant.
pub async fn run(
    host: Client,
    rt: Arc<Runtime>,
    usage_settings: super::usage::Settings,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let ctx = Arc::new(Ctx {
        host: host.clone(),
        rt: rt.clone(),
    });
    let api: Api<Tenant> = Api::all(host.clone());
    // The controller wants a Sync future; relay the signal through a channel.
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let (usage_tx, usage_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        shutdown.await;
        let _ = tx.send(());
        let _ = usage_tx.send(());
    });
    // Tenants' status.usage, from shared host watches; with shards, only the tenants run here.
    let owner = rt.clone();
    let owns: Arc<dyn Fn(&Tenant) -> bool + Send + Sync> =
        Arc::new(move |t: &Tenant| owner.shards.get().is_none_or(|s| s.owns(t)));
    let usage = tokio::spawn(super::usage::run(
        host,
        owns,
        rt.usage_history.clone(),
        usage_settings,
        async move {
            let _ = usage_rx.await;
        },
    ));
    // Every tenant is looked at again when this replica's shards change.
    let resync = rt.shards.get().map(|s| s.changes());
    Controller::new(api, watcher::Config::default())
        .reconcile_all_on(futures::stream::iter(resync).flatten())
        .graceful_shutdown_on(async move {
            let _ = rx.await;
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
    usage.abort();
    rt.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_api::tenant::{TenantQuota, TenantSpec};
    use fabrik_api::validation::{validate_name, validate_tenant};

    fn tenant(cpu: Option<&str>, pods: Option<i64>) -> Tenant {
        Tenant::new(
            "t",
            TenantSpec {
                quota: Some(TenantQuota {
                    cpu: cpu.map(str::to_string),
                    pods,
                    ..Default::default()
                }),
                ..Default::default()
            },
        )
    }

    #[test]
    fn names_and_quotas_are_checked() {
        assert!(validate_name("team-a").is_ok());
        for bad in ["Team", "a_b", "", &"x".repeat(41)] {
            assert!(validate_name(bad).is_err(), "{bad}");
        }
        assert!(validate_tenant(&tenant(Some("500m"), Some(10))).is_empty());
        assert!(!validate_tenant(&tenant(Some("lots"), None)).is_empty());
        assert!(!validate_tenant(&tenant(None, Some(-1))).is_empty());
    }

    #[test]
    fn node_ports_and_load_balancers_are_refused_unless_the_tenant_allows_them() {
        let zero = "0"
            .parse::<fabrik_machinery::quantity::Quantity>()
            .expect("q");
        // No quota at all: none, on the host and at the tenant's admission.
        let t = tenant(None, None);
        for key in ["services.nodeports", "services.loadbalancers"] {
            assert_eq!(
                quota_hard(&t).get(key).map(String::as_str),
                Some("0"),
                "{key}"
            );
            assert_eq!(tenant_quota_hard(&t).get(key), Some(&zero), "{key}");
        }
        let mut t = tenant(Some("1"), None);
        if let Some(q) = t.spec.quota.as_mut() {
            q.node_ports = Some(3);
            q.load_balancers = Some(1);
        }
        assert_eq!(
            quota_hard(&t).get("services.nodeports").map(String::as_str),
            Some("3")
        );
        assert_eq!(
            tenant_quota_hard(&t).get("services.loadbalancers"),
            Some(&"1".parse().expect("q"))
        );
        if let Some(q) = t.spec.quota.as_mut() {
            q.node_ports = Some(-1);
        }
        assert!(!validate_tenant(&t).is_empty());
    }

    #[test]
    fn tenants_never_take_a_namespace_they_did_not_create() {
        assert!(validate_name("system").is_err());
        let reserved = vec!["fabrik-system".to_string(), "fabrik-billing".to_string()];
        let ns = |labels: Option<(&str, &str)>| Namespace {
            metadata: kube::api::ObjectMeta {
                labels: labels.map(|(k, v)| [(k.to_string(), v.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        };
        // Free, or already the tenant's own.
        assert_eq!(host_namespace_problem("a", None, &reserved), None);
        let own = ns(Some(("fabrik.dev/tenant", "a")));
        assert_eq!(host_namespace_problem("a", Some(&own), &reserved), None);
        // Fabrik's own namespaces, even when absent or labelled for the tenant.
        assert!(host_namespace_problem("billing", None, &reserved).is_some());
        let forged = ns(Some(("fabrik.dev/tenant", "billing")));
        assert!(host_namespace_problem("billing", Some(&forged), &reserved).is_some());
        // A namespace the platform made, or another tenant's label.
        assert!(host_namespace_problem("a", Some(&ns(None)), &reserved).is_some());
        let other = ns(Some(("fabrik.dev/tenant", "b")));
        assert!(host_namespace_problem("a", Some(&other), &reserved).is_some());
    }

    #[test]
    fn policies_follow_the_spec() {
        let mut t = tenant(None, None);
        t.spec.quota = Some(TenantQuota {
            gpus: Some(2),
            gpu_sharing: Some("share:8192,25".into()),
            ..Default::default()
        });
        t.spec.isolation = Some(fabrik_api::tenant::TenantIsolation {
            dedicated_nodes: true,
            allow: vec!["hostPath".into()],
            ..Default::default()
        });
        let p = policy_of(&t);
        assert!(!p.sync_ingresses && p.ingress_classes.is_empty() && p.external_names.is_empty());
        let mut synced = t.clone();
        synced.spec.sync = Some(fabrik_api::tenant::TenantSync {
            extra_kinds: vec!["ingresses.networking.k8s.io".into()],
        });
        if let Some(iso) = synced.spec.isolation.as_mut() {
            iso.ingress_classes = vec!["tenant-nginx".into()];
            iso.external_names = vec!["*.db.example.com".into()];
        }
        let synced = policy_of(&synced);
        assert!(synced.sync_ingresses);
        assert_eq!(synced.ingress_classes, vec!["tenant-nginx".to_string()]);
        assert!(synced.allows_external_name("main.db.example.com"));
        assert_eq!(
            p.gpu_sharing,
            syncer::GpuSharing::Shared {
                memory_mib: 8192,
                compute_pct: 25
            }
        );
        assert!(p.allow_host_path && !p.allow_privileged && !p.allow_host_namespaces);
        assert_eq!(p.tolerations.len(), 1);
        assert_eq!(
            quota_hard(&t)
                .get("requests.fabrik.dev/shared-gpu-8192mib-25pct")
                .map(String::as_str),
            Some("2")
        );
        assert!(!tenant_quota_hard(&t).contains_key(fabrik_machinery::quota::GPU_DEVICES));

        // Several kinds: each mapped, each capped on the host, their sum in the tenant.
        let mut mixed = t.clone();
        if let Some(q) = mixed.spec.quota.as_mut() {
            q.gpu_sharing = Some("whole".into());
            q.gpu_types = vec!["mig:1g.18gb".into(), "timeslice".into()];
        }
        let p = policy_of(&mixed);
        assert_eq!(p.gpu_sharing, syncer::GpuSharing::Whole);
        assert_eq!(
            p.gpu_types,
            [
                syncer::GpuSharing::Mig("1g.18gb".into()),
                syncer::GpuSharing::TimeSliced
            ]
        );
        let host = quota_hard(&mixed);
        for key in [
            "requests.nvidia.com/gpu",
            "requests.nvidia.com/mig-1g.18gb",
            "requests.nvidia.com/gpu.shared",
        ] {
            assert_eq!(host.get(key).map(String::as_str), Some("2"), "{key}");
        }
        assert!(tenant_quota_hard(&mixed).contains_key(fabrik_machinery::quota::GPU_DEVICES));
    }
}
