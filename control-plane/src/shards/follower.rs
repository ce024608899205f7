//! Serving a tenant this replica does not own: its API server over the shared store, without
//! the controllers that act on it (those run on the owner only).
//!
//! A follower answers every request of the tenant's kubeconfig — reads, writes, watches — from
//! the etcd keyspace every replica shares, so a client reaches the tenant through any replica.
//! It runs what serving needs: the RBAC cache and the CRD controller (both follow the store,
//! so objects and CRDs written through another replica are seen here), and the tenant's
//! admission plugins the tenant manager passes: its pod policy and its quota (the tenant quota
//! and namespace ResourceQuotas, counted exactly since every replica writes the store). It does not run the workload controllers, garbage collection, namespace
//! finalization, RBAC aggregation or the syncer, and it writes no bootstrap objects: the owner
//! does all of that once.

use std::collections::HashMap;
use std::sync::Arc;

use fabrik_apiserver::admission::Admission;
use fabrik_apiserver::controllers::crd::CrdController;
use fabrik_apiserver::pki::Ca;
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
        admission: Vec<Arc<dyn Admission>>,
        ca: Option<&Ca>,
    ) -> Result<Follower, Error> {
        // The same admission as the owner's: the chain is assembled in one place for both.
        let authz = fabrik_apiserver::rbac::Authorizer::default();
        let registry = Arc::new(fabrik_apiserver::cluster::registry(
            store, &settings, &authz, admission,
        ));
        let mut crds = CrdController::default();
        crds.reconcile_all(&registry)
            .await
            .map_err(|source| Error::Crds {
                tenant: tenant.to_string(),
                source,
            })?;
        let (stop, stop_rx) = watch::channel(false);
        let server =
            ApiServer::new(registry.clone(), authz, settings, stop_rx).map_err(|source| {
                Error::Auth {
                    tenant: tenant.to_string(),
                    source,
                }
            })?;
        // The same front-proxy identity as the owner's (its own certificate of the tenant's CA),
        // so aggregated APIs trust requests proxied through any replica.
        match ca.map(|ca| server.aggregator().issue_identity(ca)) {
            Some(Ok(())) => {}
            Some(Err(e)) => {
                tracing::warn!(tenant, error = %e, "API aggregation runs without a front-proxy identity")
            }
            None => tracing::warn!(
                tenant,
                "the tenant's CA key is not readable: API aggregation runs without a front-proxy identity"
            ),
        }
        let rbac = server.authorizer().cache().clone();
        let tasks = vec![
            tokio::spawn(rbac.clone().run(registry.clone(), server.shutdown_signal())),
            // Aggregated APIs' discovery (the owner keeps their condition).
            tokio::spawn(fabrik_apiserver::aggregation::available::run(
                server.aggregator().clone(),
                registry.clone(),
                fabrik_apiserver::aggregation::available::Role::Follower,
                server.shutdown_signal(),
            )),
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
        admission: Vec<Arc<dyn Admission>>,
        ca: Option<&Ca>,
    ) -> Result<(), Error> {
        if self.contains(tenant).await {
            return Ok(());
        }
        let client_ca = settings.auth.client_ca_pem.clone().unwrap_or_default();
        let follower = Follower::start(tenant, store, settings, admission, ca).await?;
        // The router checks nothing here; the tenant's server verifies client certificates.
        router.add_tenant(tenant, follower.server.clone(), &client_ca);
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

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_apiserver::admission::cluster_quota::ClusterQuota;
    use fabrik_apiserver::registry::{Registry, WriteOptions};
    use fabrik_apiserver::resources::Catalog;
    use fabrik_store::{SledBackend, SledConfig};
    use serde_json::json;

    fn pod(name: &str) -> serde_json::Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "containers": [{"name": "c", "image": "x", "resources": {
                "limits": {"nvidia.com/gpu": "1"}, "requests": {"nvidia.com/gpu": "1"}}}]}})
    }

    /// A follower enforces the tenant quota it is given, counting what the owner (another
    /// writer of the same store) admitted: no replica is a way around the quota.
    #[tokio::test]
    async fn a_follower_enforces_the_tenant_quota_over_the_owner_s_writes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let owner_store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let owner = Arc::new(Registry::new(
            owner_store.clone(),
            Arc::new(Catalog::builtin()),
        ));
        fabrik_apiserver::cluster::bootstrap(&owner)
            .await
            .expect("bootstrap");
        let hard: fabrik_machinery::quota::Usage = [(
            "requests.nvidia.com/gpu".to_string(),
            "1".parse().expect("q"),
        )]
        .into();
        let quota = Arc::new(ClusterQuota::new("tenant \"t\"", hard));
        quota.set_exact(true);
        let follower_store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let follower = Follower::start(
            "t",
            follower_store,
            Settings::default(),
            vec![quota.clone()],
            Some(&Ca::generate("tenant t").expect("ca")),
        )
        .await
        .expect("follower");
        // It calls aggregated APIs as the tenant's front proxy, as the owner does.
        assert!(follower.server.aggregator().has_identity());
        let pods = owner
            .catalog()
            .get("", "v1", "pods")
            .expect("pods are served");
        // The owner admits one GPU.
        owner
            .create(&pods, Some("default"), pod("a"), &WriteOptions::default())
            .await
            .expect("first pod");
        // The follower sees it and refuses a second.
        let err = follower
            .server
            .registry()
            .create(&pods, Some("default"), pod("b"), &WriteOptions::default())
            .await
            .expect_err("over the tenant quota");
        assert_eq!(err.code(), 403, "{err}");
        assert!(
            err.to_string().contains("exceeded the quota of tenant"),
            "{err}"
        );
        let listed = follower
            .server
            .registry()
            .list(&pods, Some("default"), &Default::default())
            .await
            .expect("list");
        assert_eq!(listed.items.len(), 1);
        follower.shutdown().await;
    }
}
