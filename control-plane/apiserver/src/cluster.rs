//! One running cluster: store, registry, bootstrap objects, the API server's own loops (RBAC
//! cache, CRDs, API aggregation, namespace finalization), the tasks its assembler runs over
//! in-process clients (the controller manager: see the control plane's `cluster` module) and
//! the HTTPS listener, started and stopped as a unit.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use fabrik_store::Store;
use futures::future::BoxFuture;
use serde_json::json;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::admission::Admission;
use crate::error::ApiError;
use crate::pki::{Ca, PkiError};
use crate::registry::{Registry, WriteOptions};
use crate::resources::Catalog;
use crate::router::Router;
use crate::server::{self, ApiServer, ServeError, Settings};

/// How long shutdown waits for the listener and controllers to stop by themselves.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Namespaces every cluster has.
pub const SYSTEM_NAMESPACES: [&str; 4] =
    ["default", "kube-system", "kube-public", "kube-node-lease"];

/// Errors starting a cluster.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// Certificates.
    #[error(transparent)]
    Pki(#[from] PkiError),
    /// Listener or TLS.
    #[error(transparent)]
    Serve(#[from] ServeError),
    /// Binding the listen address.
    #[error("failed to listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Creating the bootstrap objects.
    #[error("failed to create bootstrap objects: {0}")]
    Bootstrap(#[from] ApiError),
    /// Authentication settings.
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
}

/// A started cluster: its API server, CA and in-process controllers (served by a
/// [`Listener`] through a [`Router`]).
pub struct Cluster {
    /// The cluster's CA (client certificates it issues are this cluster's identities).
    pub ca: Ca,
    /// The API server.
    pub server: Arc<ApiServer>,
    stop: watch::Sender<bool>,
    tasks: Vec<JoinHandle<()>>,
}

/// Creates the system namespaces and the built-in PriorityClasses when missing.
pub async fn bootstrap(registry: &Registry) -> Result<(), ApiError> {
    let Some(def) = registry.catalog().get("", "v1", "namespaces") else {
        return Ok(());
    };
    for ns in SYSTEM_NAMESPACES {
        let obj = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        match registry
            .create(&def, None, obj, &WriteOptions::default())
            .await
        {
            Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if let Some(def) = registry
        .catalog()
        .get("scheduling.k8s.io", "v1", "priorityclasses")
    {
        for class in crate::admission::priority::system_classes() {
            match registry
                .create(&def, None, class, &WriteOptions::default())
                .await
            {
                Ok(_) | Err(ApiError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
        }
    }
    Ok(())
}

/// A cluster's registry over `store`, with its whole admission chain: the standard plugins,
/// RBAC's escalation check (deciding with `authz`, the server's authorizer), the admission
/// webhooks, then `plugins`; and the caller of CRD conversion webhooks. Every server of a
/// cluster, owner or follower, builds its registry here, so all admit alike.
pub fn registry(
    store: Arc<dyn Store>,
    settings: &Settings,
    authz: &crate::rbac::Authorizer,
    plugins: impl IntoIterator<Item = Arc<dyn Admission>>,
) -> Registry {
    let caller = || {
        crate::webhook::Caller::new(
            settings.webhooks.targets.clone(),
            settings.webhooks.backends.clone(),
        )
    };
    let standard: [Arc<dyn Admission>; 2] = [
        Arc::new(crate::rbac::escalation::Escalation::new(authz.clone())),
        Arc::new(crate::webhook::Webhooks::new(caller())),
    ];
    Registry::new(store, Arc::new(Catalog::builtin()))
        .with_service_ips(settings.service_ips.clone())
        .with_admission(standard.into_iter().chain(plugins))
        .with_converter(Arc::new(caller()))
}

/// A task a cluster runs over an in-process client (with its own identity) until the cluster
/// stops: given the client and the shutdown signal.
pub type InProcessTask =
    Box<dyn FnOnce(kube::Client, BoxFuture<'static, ()>) -> BoxFuture<'static, ()> + Send>;

/// What a cluster is assembled from: its store, CA and settings, and the admission plugins it
/// runs after the standard chain. Every plugin is in place before the cluster writes or serves
/// anything and before its controllers start, so that no write ever skips one.
pub struct ClusterBuilder {
    store: Arc<dyn Store>,
    ca: Ca,
    settings: Settings,
    admission: Vec<Arc<dyn Admission>>,
    tasks: Vec<(String, InProcessTask)>,
}

impl ClusterBuilder {
    /// Adds admission plugins after the standard chain (and those added before), in order.
    pub fn admission(mut self, plugins: impl IntoIterator<Item = Arc<dyn Admission>>) -> Self {
        self.admission.extend(plugins);
        self
    }

    /// Runs `task` over an in-process client with the identity of controller `name` (e.g. the
    /// controller manager), once the server serves, until the cluster stops.
    pub fn in_process<F, Fut>(mut self, name: &str, task: F) -> Self
    where
        F: FnOnce(kube::Client, BoxFuture<'static, ()>) -> Fut + Send + 'static,
        Fut: std::future::Future<Output = ()> + Send + 'static,
    {
        let task: InProcessTask =
            Box::new(move |client, shutdown| Box::pin(task(client, shutdown)));
        self.tasks.push((name.to_string(), task));
        self
    }

    /// Starts the cluster: bootstrap objects, CRDs, the server's loops, the in-process tasks.
    pub async fn start(self) -> Result<Cluster, StartError> {
        Cluster::start_built(self).await
    }
}

impl Cluster {
    /// A cluster over `store` to assemble ([`ClusterBuilder::admission`]) and start.
    pub fn builder(store: Arc<dyn Store>, ca: Ca, settings: Settings) -> ClusterBuilder {
        ClusterBuilder {
            store,
            ca,
            settings,
            admission: Vec::new(),
            tasks: Vec::new(),
        }
    }

    /// Starts a cluster over `store` with the standard admission chain and no in-process tasks
    /// (no controllers).
    pub async fn start(
        store: Arc<dyn Store>,
        ca: Ca,
        settings: Settings,
    ) -> Result<Cluster, StartError> {
        Cluster::builder(store, ca, settings).start().await
    }

    async fn start_built(built: ClusterBuilder) -> Result<Cluster, StartError> {
        let ClusterBuilder {
            store,
            ca,
            mut settings,
            admission,
            tasks: in_process,
        } = built;
        if settings.auth.client_ca_pem.is_none() {
            settings.auth.client_ca_pem = Some(ca.cert_pem().to_string());
        }
        let authz = crate::rbac::Authorizer::default();
        let registry = Arc::new(registry(store, &settings, &authz, admission));
        bootstrap(&registry).await?;
        crate::rbac::bootstrap::ensure(&registry).await?;
        // Serve the CRDs that exist before answering anything, so their objects are reachable
        // from the first request after a restart.
        let mut crds = crate::controllers::crd::CrdController::default();
        crds.reconcile_all(&registry).await?;
        let client_ca = settings.auth.client_ca_pem.clone().unwrap_or_default();
        crate::aggregation::authentication::publish(&registry, &client_ca).await?;
        let (stop, stop_rx) = watch::channel(false);
        let server = ApiServer::new(registry.clone(), authz, settings, stop_rx)?;
        // The front proxy of API aggregation presents a client certificate of this cluster's CA.
        if let Err(e) = server.aggregator.issue_identity(&ca) {
            tracing::warn!(error = %e, "API aggregation runs without a front-proxy identity");
        }
        let mut tasks = Vec::new();
        // Authorization decisions come from the RBAC cache: load it before serving.
        let rbac = server.authorizer().cache().clone();
        tasks.push(tokio::spawn(
            rbac.clone().run(registry.clone(), server.shutdown_signal()),
        ));
        rbac.synced().await;
        tasks.push(tokio::spawn(crate::rbac::aggregation::run(
            registry.clone(),
            server.shutdown_signal(),
        )));
        // Build the OpenAPI documents in the background: the first kubectl that asks for them
        // then gets them from the cache instead of waiting for their generation.
        let warm = server.clone();
        tokio::task::spawn_blocking(move || {
            let catalog = warm.registry.catalog();
            let _ = warm.openapi.v3_index(catalog);
            let _ = warm.openapi.v2_protobuf(catalog);
        });
        tasks.push(tokio::spawn(crate::controllers::namespace::run(
            registry.clone(),
            server.shutdown_signal(),
        )));
        tasks.push(tokio::spawn(crate::aggregation::available::run(
            server.aggregator.clone(),
            registry.clone(),
            crate::aggregation::available::Role::Owner,
            server.shutdown_signal(),
        )));
        tasks.push(tokio::spawn(crds.run(registry, server.shutdown_signal())));
        for (name, task) in in_process {
            let client = crate::client::in_process_client(
                server.clone(),
                crate::client::controller_identity(&name),
            );
            let shutdown: BoxFuture<'static, ()> = Box::pin(server.shutdown_signal());
            tasks.push(tokio::spawn(task(client, shutdown)));
        }
        Ok(Cluster {
            ca,
            server,
            stop,
            tasks,
        })
    }

    /// An admin kubeconfig (client certificate in `system:masters`) for `server_url`.
    pub fn admin_kubeconfig(&self, name: &str, server_url: &str) -> Result<String, PkiError> {
        let client = self
            .ca
            .issue_client("fabrik-admin", Some("system:masters"))?;
        Ok(crate::kubeconfig::render(
            name,
            server_url,
            self.ca.cert_pem(),
            &client,
        ))
    }

    /// Stops accepting, ends watches, waits for the tasks.
    /// Tasks that have not finished within [`SHUTDOWN_GRACE`] are aborted: every write they
    /// acknowledged is already durable, and controllers resume from the store on restart.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let aborts: Vec<_> = self.tasks.iter().map(|t| t.abort_handle()).collect();
        let all = futures::future::join_all(self.tasks);
        if tokio::time::timeout(SHUTDOWN_GRACE, all).await.is_err() {
            tracing::warn!("some tasks did not stop within {SHUTDOWN_GRACE:?}; aborting them");
            for a in aborts {
                a.abort();
            }
        }
    }
}

/// A bound but not yet serving listener: its address is known before the clusters start.
pub struct Bound {
    listener: TcpListener,
    /// The bound address.
    pub addr: SocketAddr,
}

/// Binds `listen` (port 0 picks a free port).
pub async fn bind(listen: SocketAddr) -> Result<Bound, StartError> {
    let listener = TcpListener::bind(listen)
        .await
        .map_err(|source| StartError::Bind {
            addr: listen,
            source,
        })?;
    let addr = listener.local_addr().map_err(|source| StartError::Bind {
        addr: listen,
        source,
    })?;
    Ok(Bound { listener, addr })
}

/// `https://HOST:PORT` for an address (loopback when bound to all interfaces).
pub fn url_of(addr: SocketAddr) -> String {
    match addr {
        SocketAddr::V6(a) if !a.ip().is_unspecified() => {
            format!("https://[{}]:{}", a.ip(), a.port())
        }
        SocketAddr::V6(a) => format!("https://127.0.0.1:{}", a.port()),
        SocketAddr::V4(a) if a.ip().is_unspecified() => format!("https://127.0.0.1:{}", a.port()),
        SocketAddr::V4(a) => format!("https://{}:{}", a.ip(), a.port()),
    }
}

/// The HTTPS listener serving a [`Router`].
pub struct Listener {
    /// The bound address.
    pub addr: SocketAddr,
    stop: watch::Sender<bool>,
    task: JoinHandle<()>,
}

impl Bound {
    /// `https://127.0.0.1:PORT` (or the bound address).
    pub fn url(&self) -> String {
        url_of(self.addr)
    }

    /// Serves `router` with a serving certificate from `ca` for the listener's names.
    pub fn serve(self, router: Arc<Router>, ca: &Ca) -> Result<Listener, StartError> {
        let mut hosts = vec![
            "localhost".to_string(),
            "127.0.0.1".to_string(),
            "::1".to_string(),
        ];
        if !self.addr.ip().is_unspecified() {
            hosts.push(self.addr.ip().to_string());
        }
        let serving = ca.issue_server(&hosts)?;
        let tls = server::tls_config(&serving, router.client_verifier())?;
        let (stop, stop_rx) = watch::channel(false);
        let task = tokio::spawn(async move {
            if let Err(e) =
                server::serve(self.listener, router, tls, stop_rx, Duration::from_secs(5)).await
            {
                tracing::error!(error = %e, "listener stopped");
            }
        });
        Ok(Listener {
            addr: self.addr,
            stop,
            task,
        })
    }
}

impl Listener {
    /// `https://127.0.0.1:PORT` (or the bound address).
    pub fn url(&self) -> String {
        url_of(self.addr)
    }

    /// Stops accepting and waits (bounded) for open connections.
    pub async fn shutdown(self) {
        let _ = self.stop.send(true);
        let _ = tokio::time::timeout(SHUTDOWN_GRACE + Duration::from_secs(1), self.task).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::admission::cluster_quota::ClusterQuota;
    use fabrik_store::{SledBackend, SledConfig};

    /// Owners and followers build their registry with this one function, so they admit alike:
    /// the standard plugins, RBAC's escalation check, then the webhooks (after every built-in
    /// mutation), then the quotas (counting only what everything else admitted) — whatever
    /// order the caller's plugins come in.
    #[test]
    fn every_server_of_a_cluster_has_the_whole_chain_in_order() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let quota: Arc<dyn Admission> = Arc::new(ClusterQuota::new("t", Default::default()));
        let registry = registry(
            store,
            &Settings::default(),
            &crate::rbac::Authorizer::default(),
            [quota],
        );
        assert_eq!(
            registry.admission_names(),
            [
                "NamespaceLifecycle",
                "ServiceAccount",
                "Priority",
                "LimitRanger",
                "PodSecurity",
                "ValidatingAdmissionPolicy",
                "RBACEscalation",
                "AdmissionWebhooks",
                "ResourceQuota",
                "ClusterQuota",
            ]
        );
    }
}
