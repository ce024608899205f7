//! Serving a tenant this replica does not own: its API server over the shared store, without
//! the controllers that act on it (those run on the owner only).
//!
//! A follower answers every request of the tenant's kubeconfig — reads, writes, watches — from
//! the etcd keyspace every replica shares, so a client reaches the tenant through any replica.
//! It runs what serving needs: the RBAC cache and the CRD controller (both follow the store,
//! so objects and CRDs written through another replica are seen here), the tenant's pod policy
//! as admission. It does not run the workload controllers, garbage collection, namespace
//! finalization, RBAC aggregation or the syncer, and it writes no bootstrap objects: the owner
//! does all of that once.

use std::collections::HashMap;
use std::sync::Arc;

use fabrik_apiserver::admission::Admission;
use fabrik_apiserver::controllers::crd::CrdController;
use fabrik_apiserver::registry::Registry;
use fabrik_apiserver::resources::Catalog;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::server::ApiServer;
use fabrik_apiserver::Settings;
use fabrik_store::Store;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

/// Errors starting a follower.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tenant's authentication settings were refused.
    #[error("tenant {tenant}: authentication settings: {source}")]
    Auth {
        /// The tenant.
        tenant: String,
        /// The cause.
        #[source]
        source: fabrik_apiserver::auth::AuthError,
    },
    /// Reading the tenant's CRDs failed.
    #[error("tenant {tenant}: cannot load its CRDs: {source}")]
    Crds {
        /// The tenant.
        tenant: String,
        /// The cause.
        #[source]
        source: fabrik_apiserver::ApiError,
    },
}

/// One tenant served here without its controllers.
struct Follower {
    server: Arc<ApiServer>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

impl Follower {
    async fn start(
        tenant: &str,
        store: Arc<dyn Store>,
        settings: Settings,
        admission: Arc<dyn Admission>,
    ) -> Result<Follower, Error> {
        let registry = Arc::new(Registry::new(store, Arc::new(Catalog::builtin())));
        let mut crds = CrdController::default();
        crds.reconcile_all(&registry)
            .await
            .map_err(|source| Error::Crds {
                tenant: tenant.to_string(),
                source,
            })?;
        let (stop, stop_rx) = watch::channel(false);
        let server =
            ApiServer::new(registry.clone(), settings, stop_rx).map_err(|source| Error::Auth {
                tenant: tenant.to_string(),
                source,
            })?;
        server.registry().add_admission(admission);
        let rbac = server.authorizer().cache().clone();
        let tasks = vec![
            tokio::spawn(rbac.clone().run(registry.clone(), server.shutdown_signal())),
            tokio::spawn(crds.run(registry, server.shutdown_signal())),
        ];
        rbac.synced().await;
        Ok(Follower {
            server,
            stop,
            tasks,
        })
    }

    async fn shutdown(self) {
        let _ = self.stop.send(true);
        let aborts: Vec<_> = self.tasks.iter().map(|t| t.abort_handle()).collect();
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(fabrik_apiserver::cluster::SHUTDOWN_GRACE, all)
            .await
            .is_err()
        {
            for a in aborts {
                a.abort();
            }
        }
    }
}

/// The tenants this replica follows.
#[derive(Default)]
pub struct Followers {
    running: Mutex<HashMap<String, Follower>>,
}

impl Followers {
    /// Whether `tenant` is followed here.
    pub async fn contains(&self, tenant: &str) -> bool {
        self.running.lock().await.contains_key(tenant)
    }

    /// Starts following `tenant` and routes it (nothing when already followed).
    pub async fn follow(
        &self,
        tenant: &str,
        router: &Router,
        store: Arc<dyn Store>,
        settings: Settings,
        admission: Arc<dyn Admission>,
    ) -> Result<(), Error> {
        if self.contains(tenant).await {
            return Ok(());
        }
        let client_ca = settings.auth.client_ca_pem.clone().unwrap_or_default();
        let follower = Follower::start(tenant, store, settings, admission).await?;
        // The router checks nothing here; the tenant's server verifies client certificates.
        let _ = router.add_tenant(tenant, follower.server.clone(), &client_ca);
        tracing::info!(
            tenant,
            "following the tenant (served here, run by its owner)"
        );
        self.running
            .lock()
            .await
            .insert(tenant.to_string(), follower);
        Ok(())
    }

    /// Stops following `tenant` (its route too); false when it was not followed.
    pub async fn unfollow(&self, tenant: &str, router: &Router) -> bool {
        let Some(follower) = self.running.lock().await.remove(tenant) else {
            return false;
        };
        // Only our route: the owner's server may be routed already.
        router.remove_tenant_if(tenant, &follower.server);
        follower.shutdown().await;
        true
    }

    /// Stops every follower (process shutdown).
    pub async fn shutdown(&self) {
        let all: Vec<Follower> = self.running.lock().await.drain().map(|(_, f)| f).collect();
        for f in all {
            f.shutdown().await;
        }
    }
}
