//! What `fabrik up` and `fabrik serve` share: the store under the data directory, the API
//! tunables of tenant servers, the Tenant CRD on the host, the tenant manager's start and stop,
//! and waiting for SIGINT / SIGTERM.
//!
//! The two commands differ only in where the host is: `fabrik up` embeds it (an in-process
//! client to its own API server, served at `/` of the listener); `fabrik serve` reaches a real
//! cluster over HTTPS and serves tenants only. Everything below takes the host as a
//! `kube::Client`, so it does not know which.
//!
//! With a shared store (`fabrik serve --store etcd://…`) the manager runs sharded: see
//! [`crate::shards`].

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabrik_api::tenant::Tenant;
use fabrik_apiserver::auth::OidcAuthenticator;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::Settings;
use fabrik_store::{SledBackend, SledConfig};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::CustomResourceExt;
use tokio::task::JoinHandle;

use crate::keyspaces::Keyspaces;
use crate::shards::Shards;
use crate::tenants;

/// The name of the Tenant CRD.
pub const TENANT_CRD: &str = "tenants.fabrik.dev";
/// How long the Tenant CRD may take to be served after it is installed (a readiness poll:
/// generous, so that a start on a busy machine does not fail).
const CRD_SERVED_WITHIN: Duration = Duration::from_secs(60);
/// How long shutdown waits for the tenant manager to stop its tenants.
const MANAGER_STOP_GRACE: Duration = Duration::from_secs(6);

/// How long the GPU queue is given to save its ledger and stop.
const QUEUE_STOP_GRACE: Duration = Duration::from_secs(5);

/// Errors of the shared start-up steps.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The store could not be opened.
    #[error("cannot open the store in {} (is another fabrik process using this data directory?): {source}", path.display())]
    Store {
        /// The store's directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: fabrik_store::StoreError,
    },
    /// Reading or writing the Tenant CRD failed.
    #[error("cannot install the Tenant CRD ({TENANT_CRD}) on the host: {0}")]
    Crd(#[source] kube::Error),
    /// The CRD exists but its resource is not served.
    #[error("the Tenant CRD was not served by the host within {0:?}")]
    CrdNotServed(Duration),
    /// A signal handler could not be installed.
    #[error("cannot listen for {signal}: {source}")]
    Signal {
        /// SIGINT or SIGTERM.
        signal: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Opens the sled store in `DIR/store` (one keyspace per cluster).
pub fn open_store(dir: &Path, cache_mib: u64, history: u64) -> Result<SledBackend> {
    let path = dir.join("store");
    SledBackend::open(SledConfig {
        path: path.clone(),
        cache_capacity_bytes: cache_mib * 1024 * 1024,
        history,
        history_bytes: fabrik_store::DEFAULT_HISTORY_BYTES,
    })
    .map_err(|source| Error::Store { path, source })
}

/// The API tunables every cluster of this process starts from (tenants set their own
/// address, CA and signing key on top).
pub fn api_settings(
    bookmark_interval_secs: u64,
    server_address: String,
    oidc: Option<Arc<OidcAuthenticator>>,
) -> Settings {
    let mut settings = Settings {
        bookmark_interval: Duration::from_secs(bookmark_interval_secs.max(1)),
        server_address,
        ..Settings::default()
    };
    settings.auth.oidc = oidc;
    settings
}

/// What to do with the Tenant CRD on the host.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrdPolicy {
    /// Apply this binary's CRD (create or update it): the host is ours (`fabrik up`).
    Apply,
    /// Create it only when it is missing: on a real host it may be managed by someone else
    /// (the Helm chart's `crds/`), and a newer one must not be overwritten.
    IfMissing,
}

/// Installs the `tenants.fabrik.dev` CRD on the host per `policy` and waits until Tenants are
/// served. Returns whether the CRD was written.
pub async fn install_tenant_crd(host: &kube::Client, policy: CrdPolicy) -> Result<bool> {
    let crds: Api<CustomResourceDefinition> = Api::all(host.clone());
    let write = match policy {
        CrdPolicy::Apply => true,
        CrdPolicy::IfMissing => crds
            .get_opt(TENANT_CRD)
            .await
            .map_err(Error::Crd)?
            .is_none(),
    };
    if write {
        crds.patch(
            TENANT_CRD,
            &PatchParams::apply("fabrik").force(),
            &Patch::Apply(&Tenant::crd()),
        )
        .await
        .map_err(Error::Crd)?;
    }
    let tenants: Api<Tenant> = Api::all(host.clone());
    let deadline = Instant::now() + CRD_SERVED_WITHIN;
    while tenants.list(&Default::default()).await.is_err() {
        if Instant::now() > deadline {
            return Err(Error::CrdNotServed(CRD_SERVED_WITHIN));
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    Ok(write)
}

/// Where the tenant manager serves and keeps tenants.
pub struct ManagerConfig {
    /// The client of the host cluster (Tenants, host namespaces, synced objects).
    pub host: kube::Client,
    /// The listener's router: tenants are added at `/clusters/<name>`.
    pub router: Arc<Router>,
    /// One keyspace per tenant.
    pub backend: Keyspaces,
    /// Run only the tenants of the shards this replica owns (a shared store); None runs all.
    pub shards: Option<Arc<Shards>>,
    /// API tunables of tenant servers.
    pub settings: Settings,
    /// The URL tenant kubeconfigs name (`https://HOST:PORT`).
    pub public_url: String,
    /// The CA that signed the listener's serving certificate (into tenant kubeconfigs).
    pub serving_ca_pem: String,
    /// Where `tenants/<name>.kubeconfig` files are written (`fabrik up`), or none.
    pub data_dir: Option<PathBuf>,
    /// Host namespace of the node agents' usage ConfigMaps.
    pub usage_namespace: String,
    /// Where tenant pods reach their tenant's API (put into every synced container), if known.
    pub api_address: Option<syncer::ApiAddress>,
    /// The nameserver synced pods are given (the tenant DNS on port 53), if any.
    pub dns_nameserver: Option<String>,
    /// Local ports that may serve Services' webhooks (`fabrik up --local-backends`).
    pub local_backends: Option<std::ops::RangeInclusive<u16>>,
    /// The GPU queue (tenants' GPU pods wait at its gate), or none (GPU pods go straight to
    /// the host's scheduler).
    pub gpu_queue: Option<crate::queue::Settings>,
}

/// The running tenant manager.
pub struct TenantManager {
    task: JoinHandle<()>,
    /// The shard lease loop, this replica's shards and the host, when sharded.
    sharding: Option<(JoinHandle<()>, Arc<Shards>, kube::Client)>,
    usage_history: Arc<tenants::usage::History>,
    queue: Option<Queue>,
}

/// The running GPU queue.
struct Queue {
    task: JoinHandle<()>,
    figures: Arc<crate::queue::Figures>,
    /// Tells it to stop (it saves its ledger first); `None` once told.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
}

impl TenantManager {
    /// Starts the tenant manager; it stops every tenant and ends once `shutdown` resolves.
    pub fn start(
        config: ManagerConfig,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> TenantManager {
        let runtime = tenants::manager::Runtime::new(
            config.router,
            config.backend,
            config.settings,
            config.public_url,
            config.serving_ca_pem,
            config.data_dir,
            config.host.clone(),
            vec![
                config.usage_namespace.clone(),
                fabrik_api::tenant::USAGE_NAMESPACE.to_string(),
            ],
            config.api_address,
            config.dns_nameserver,
            config.local_backends,
        );
        // The lease loop runs until the manager has stopped its tenants (see `stopped`).
        let sharding = config.shards.map(|shards| {
            runtime.set_shards(shards.clone());
            let task = tokio::spawn(
                shards
                    .clone()
                    .run(config.host.clone(), std::future::pending::<()>()),
            );
            (task, shards, config.host.clone())
        });
        if config.gpu_queue.is_none() {
            // Pods an earlier run held for the queue go to the host's scheduler now.
            tokio::spawn(crate::queue::release_gates(config.host.clone()));
        }
        // The GPU queue decides on one replica: the holder of shard 0 when sharded.
        let queue = config.gpu_queue.map(|settings| {
            runtime.set_gpu_queue(true);
            let figures = Arc::new(crate::queue::Figures::default());
            let leader: Arc<dyn Fn() -> bool + Send + Sync> = match &sharding {
                Some((_, shards, _)) => {
                    let shards = shards.clone();
                    Arc::new(move || shards.owns_shard(0))
                }
                None => Arc::new(|| true),
            };
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let task = tokio::spawn(crate::queue::run(
                config.host.clone(),
                settings,
                figures.clone(),
                leader,
                Arc::new(tenants::manager::gpu_resources),
                async move {
                    let _ = stopped.await;
                },
            ));
            Queue {
                task,
                figures,
                stop: Some(stop),
            }
        });
        let usage_history = runtime.usage_history.clone();
        let usage = tenants::usage::Settings {
            namespace: config.usage_namespace,
            ..Default::default()
        };
        let task = tokio::spawn(tenants::manager::run(config.host, runtime, usage, shutdown));
        TenantManager {
            task,
            sharding,
            usage_history,
            queue,
        }
    }

    /// The GPU queue's figures (for `/metrics`), when it runs.
    pub fn queue_figures(&self) -> Option<Arc<crate::queue::Figures>> {
        self.queue.as_ref().map(|q| q.figures.clone())
    }

    /// Stops the GPU queue (bounded), which first saves its ledger for the next leader: call
    /// it while the host still answers.
    pub async fn stop_queue(&mut self) {
        let Some(queue) = self.queue.as_mut() else {
            return;
        };
        // Once: a second call finds it stopped.
        let Some(stop) = queue.stop.take() else {
            return;
        };
        let _ = stop.send(());
        if tokio::time::timeout(QUEUE_STOP_GRACE, &mut queue.task)
            .await
            .is_err()
        {
            tracing::warn!("the GPU queue did not stop within {QUEUE_STOP_GRACE:?}");
            queue.task.abort();
        }
    }

    /// The nodes' GPU-second counters over time, for the OpenCost allocation export.
    pub fn usage_history(&self) -> Arc<tenants::usage::History> {
        self.usage_history.clone()
    }

    /// Waits (bounded) for the manager to stop its tenants after its shutdown signal; when
    /// sharded, then gives this replica's shards up so that the others take over at once.
    pub async fn stopped(mut self) {
        self.stop_queue().await;
        if tokio::time::timeout(MANAGER_STOP_GRACE, self.task)
            .await
            .is_err()
        {
            tracing::warn!("the tenant manager did not stop within {MANAGER_STOP_GRACE:?}");
        }
        if let Some((task, shards, host)) = self.sharding {
            task.abort();
            if tokio::time::timeout(MANAGER_STOP_GRACE, shards.leave(host))
                .await
                .is_err()
            {
                tracing::warn!("the shard Leases were not released within {MANAGER_STOP_GRACE:?}");
            }
        }
    }
}

/// Resolves on the first SIGINT or SIGTERM.
pub async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).map_err(|source| Error::Signal {
        signal: "SIGTERM",
        source,
    })?;
    tokio::select! {
        r = tokio::signal::ctrl_c() => r.map_err(|source| Error::Signal { signal: "SIGINT", source })?,
        _ = term.recv() => {},
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_carry_the_address_and_a_positive_bookmark_interval() {
        let s = api_settings(0, "https://127.0.0.1:1".into(), None);
        assert_eq!(s.bookmark_interval, Duration::from_secs(1));
        assert_eq!(s.server_address, "https://127.0.0.1:1");
        assert!(s.auth.oidc.is_none());
    }

    #[test]
    fn a_second_open_of_one_store_names_the_directory() {
        let dir = tempfile::tempdir().expect("tempdir");
        let first = open_store(dir.path(), 4, 100).expect("first open");
        let second = open_store(dir.path(), 4, 100);
        let Err(e) = second else {
            panic!("a second open of the same store succeeded");
        };
        assert!(
            e.to_string()
                .contains(&dir.path().join("store").display().to_string()),
            "{e}"
        );
        drop(first);
    }
}
