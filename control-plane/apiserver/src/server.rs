//! Serving: the rustls HTTPS listener (HTTP/1.1 and HTTP/2), client-certificate identities,
//! and orderly shutdown (stop accepting, end watches, let in-flight requests finish).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde_json::{json, Value};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinSet;

use crate::metrics::Metrics;
use crate::openapi::OpenApi;
use crate::pki::CertPair;
use crate::registry::Registry;
use crate::router::Router;

/// The Kubernetes version this server reports (the API level it follows).
pub const KUBE_MINOR: &str = "35";

/// `GET /version`.
pub fn version_info() -> Value {
    json!({
        "major": "1",
        "minor": KUBE_MINOR,
        "gitVersion": format!("v1.{KUBE_MINOR}.0-fabrik.{}", env!("CARGO_PKG_VERSION")),
        "gitCommit": "",
        "gitTreeState": "clean",
        "buildDate": "",
        "goVersion": "",
        "compiler": "rustc",
        "platform": format!("{}/{}", std::env::consts::OS, std::env::consts::ARCH),
    })
}

/// Errors of serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    /// The TLS configuration was refused.
    #[error("invalid TLS configuration: {0}")]
    Tls(#[from] rustls::Error),
    /// The client verifier could not be built.
    #[error("invalid client CA: {0}")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A PEM could not be read.
    #[error("invalid PEM: {0}")]
    Pem(String),
    /// Socket I/O.
    #[error("listener failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Default of [`Settings::max_watches_per_user`]: enough for a controller that watches every
/// kind of a cluster with many CRDs (Argo CD, Flux), far from what a flood needs.
pub const DEFAULT_WATCHES_PER_USER: usize = 250;

/// Default of [`Settings::max_watches`].
pub const DEFAULT_WATCHES: usize = 2_000;

/// How a cluster behind a shared listener is served: its tenant name and the seats it shares
/// with the other tenants.
#[derive(Clone)]
pub(crate) struct Tenancy {
    pub(crate) name: String,
    pub(crate) fairness: Arc<crate::fairness::Fairness>,
}

/// Open watches of network callers, per user; a [`WatchSlot`] is one of them.
#[derive(Default)]
pub(crate) struct Watches {
    per_user: std::sync::Mutex<std::collections::HashMap<String, usize>>,
}

/// One open watch, counted until dropped (when its stream ends).
pub(crate) struct WatchSlot {
    server: std::sync::Weak<ApiServer>,
    user: String,
}

impl Drop for WatchSlot {
    fn drop(&mut self) {
        if let Some(server) = self.server.upgrade() {
            let mut map = server
                .watches
                .per_user
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if let Some(n) = map.get_mut(&self.user) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    map.remove(&self.user);
                }
            }
        }
    }
}

/// Tunables of the API behaviour.
#[derive(Clone, Debug)]
pub struct Settings {
    /// How often watches with `allowWatchBookmarks` receive a bookmark.
    pub bookmark_interval: Duration,
    /// The longest a watch runs without `timeoutSeconds`.
    pub max_watch: Duration,
    /// The address clients use (for `/api`'s serverAddressByClientCIDRs).
    pub server_address: String,
    /// Who may authenticate, and how.
    pub auth: crate::auth::AuthSettings,
    /// The most watches one user (of the network; in-process callers are not counted) may have
    /// open at once on this cluster; more are refused with 429.
    pub max_watches_per_user: usize,
    /// The most watches all network users together may have open at once on this cluster.
    pub max_watches: usize,
    /// Where the cluster's Service IPs come from when not from its own range.
    pub service_ips: Option<Arc<dyn crate::service_ips::ServiceIps>>,
    /// How the cluster's admission webhooks are called.
    pub webhooks: crate::webhook::WebhookSettings,
    /// Where the built-in `metrics.k8s.io` gets its figures (none: not served).
    pub resource_metrics: Option<Arc<dyn crate::resource_metrics::ResourceMetrics>>,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            bookmark_interval: Duration::from_secs(60),
            max_watch: Duration::from_secs(1800),
            server_address: String::new(),
            auth: crate::auth::AuthSettings::default(),
            max_watches_per_user: DEFAULT_WATCHES_PER_USER,
            max_watches: DEFAULT_WATCHES,
            service_ips: None,
            webhooks: Default::default(),
            resource_metrics: None,
        }
    }
}

/// Produces Prometheus text for `/metrics`.
pub type MetricsSource = Arc<dyn Fn() -> String + Send + Sync>;

/// Answers `GET` of a path the embedder serves beside the API (see [`ApiServer::add_route`]):
/// given the query parameters, a JSON document or an error (sent as a `Status`).
pub type ExtensionRoute = Arc<
    dyn Fn(&std::collections::HashMap<String, String>) -> Result<Value, crate::error::ApiError>
        + Send
        + Sync,
>;

/// One cluster's API server: the registry plus what serving needs.
pub struct ApiServer {
    pub(crate) registry: Arc<Registry>,
    pub(crate) metrics: Metrics,
    pub(crate) openapi: OpenApi,
    pub(crate) settings: Settings,
    pub(crate) auth: crate::auth::Authenticator,
    pub(crate) authz: crate::rbac::Authorizer,
    pub(crate) pod_streams: std::sync::RwLock<Option<Arc<dyn crate::pod_streams::PodStreams>>>,
    pub(crate) metrics_sources: std::sync::RwLock<Vec<MetricsSource>>,
    pub(crate) routes: std::sync::RwLock<std::collections::HashMap<String, ExtensionRoute>>,
    pub(crate) tenancy: std::sync::RwLock<Option<Tenancy>>,
    pub(crate) watches: Watches,
    /// API aggregation: APIServices and their backends.
    pub(crate) aggregator: Arc<crate::aggregation::Aggregator>,
    me: std::sync::Weak<ApiServer>,
    shutdown: watch::Receiver<bool>,
}

impl ApiServer {
    /// An API server over `registry`, authorizing with `authz` (the authorizer the registry's
    /// RBAC escalation check uses: see [`crate::cluster::registry`]); `shutdown` turning true
    /// ends watches.
    pub fn new(
        registry: Arc<Registry>,
        authz: crate::rbac::Authorizer,
        settings: Settings,
        shutdown: watch::Receiver<bool>,
    ) -> Result<Arc<ApiServer>, crate::auth::AuthError> {
        let auth = crate::auth::Authenticator::new(&settings.auth)?;
        let mut builtin = std::collections::HashMap::new();
        if settings.resource_metrics.is_some() {
            let list = crate::resource_metrics::resource_list();
            builtin.insert(
                list["groupVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
                list,
            );
        }
        let aggregator = Arc::new(crate::aggregation::Aggregator::new(
            settings.webhooks.clone(),
            builtin,
        ));
        Ok(Arc::new_cyclic(|me| ApiServer {
            registry,
            metrics: Metrics::default(),
            openapi: OpenApi::default(),
            settings,
            auth,
            authz,
            pod_streams: std::sync::RwLock::new(None),
            metrics_sources: std::sync::RwLock::new(Vec::new()),
            routes: std::sync::RwLock::new(std::collections::HashMap::new()),
            tenancy: std::sync::RwLock::new(None),
            watches: Watches::default(),
            aggregator,
            me: me.clone(),
            shutdown,
        }))
    }

    /// The cluster's aggregation layer.
    pub fn aggregator(&self) -> &Arc<crate::aggregation::Aggregator> {
        &self.aggregator
    }

    /// Serves this cluster as tenant `name` behind a shared listener: its network requests
    /// take seats of `fairness`, CEL evaluation is bounded per tenant, and no path is public
    /// (an unauthenticated request gets 401 whatever the path, as for a tenant that does not
    /// exist: the answer does not tell which tenants exist).
    pub fn serve_as_tenant(&self, name: &str, fairness: Arc<crate::fairness::Fairness>) {
        if let Ok(mut t) = self.tenancy.write() {
            *t = Some(Tenancy {
                name: name.to_string(),
                fairness,
            });
        }
    }

    pub(crate) fn tenancy(&self) -> Option<Tenancy> {
        self.tenancy.read().ok().and_then(|t| t.clone())
    }

    /// Counts one more watch of network user `user`; refused (429) over the limits.
    pub(crate) fn open_watch(&self, user: &str) -> crate::error::Result<WatchSlot> {
        let mut map = self
            .watches
            .per_user
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let total: usize = map.values().sum();
        let mine = map.get(user).copied().unwrap_or(0);
        if mine >= self.settings.max_watches_per_user {
            return Err(crate::error::ApiError::Throttled {
                message: format!(
                    "too many watches open for user {user:?}: the limit is {}",
                    self.settings.max_watches_per_user
                ),
                retry_after: 5,
            });
        }
        if total >= self.settings.max_watches {
            return Err(crate::error::ApiError::Throttled {
                message: format!(
                    "too many watches open on this cluster: the limit is {}",
                    self.settings.max_watches
                ),
                retry_after: 5,
            });
        }
        map.insert(user.to_string(), mine + 1);
        Ok(WatchSlot {
            server: self.me.clone(),
            user: user.to_string(),
        })
    }

    /// Watches open per network user (for tests and metrics).
    pub fn open_watches(&self, user: &str) -> usize {
        self.watches
            .per_user
            .lock()
            .map(|m| m.get(user).copied().unwrap_or(0))
            .unwrap_or(0)
    }

    /// Adds Prometheus text appended to `/metrics` (e.g. the GPU-second counters of the
    /// simulated nodes).
    pub fn add_metrics_source(&self, source: MetricsSource) {
        if let Ok(mut s) = self.metrics_sources.write() {
            s.push(source);
        }
    }

    /// Serves `GET path` (outside `/api` and `/apis`, e.g. `/opencost/allocation`) with
    /// `route`. Authorized like any non-resource URL: RBAC `nonResourceURLs` with verb `get`.
    pub fn add_route(&self, path: &str, route: ExtensionRoute) {
        if let Ok(mut r) = self.routes.write() {
            r.insert(path.trim_end_matches('/').to_string(), route);
        }
    }

    /// Sets who serves `pods/log`, `exec`, `attach` and `portforward` of this cluster's pods.
    pub fn set_pod_streams(&self, streams: Arc<dyn crate::pod_streams::PodStreams>) {
        if let Ok(mut s) = self.pod_streams.write() {
            *s = Some(streams);
        }
    }

    /// The authorizer (RBAC).
    pub fn authorizer(&self) -> &crate::rbac::Authorizer {
        &self.authz
    }

    /// The authenticator.
    pub fn authenticator(&self) -> &crate::auth::Authenticator {
        &self.auth
    }

    /// The registry.
    pub fn registry(&self) -> &Arc<Registry> {
        &self.registry
    }

    /// Resolves when this server's shutdown begins (for tasks that live as long as it).
    pub fn shutdown_signal(&self) -> impl std::future::Future<Output = ()> + Send + 'static {
        let mut rx = self.shutdown.clone();
        async move {
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// The rustls configuration: our serving certificate; client certificates signed by `ca_pem`
/// are verified and become identities, requests without one are anonymous.
pub fn tls_config(
    serving: &CertPair,
    clients: Arc<dyn rustls::server::danger::ClientCertVerifier>,
) -> Result<Arc<rustls::ServerConfig>, ServeError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let certs: Vec<CertificateDer<'static>> =
        rustls_pemfile::certs(&mut serving.cert_pem.as_bytes())
            .collect::<Result<_, _>>()
            .map_err(|e| ServeError::Pem(e.to_string()))?;
    let key: PrivateKeyDer<'static> = rustls_pemfile::private_key(&mut serving.key_pem.as_bytes())
        .map_err(|e| ServeError::Pem(e.to_string()))?
        .ok_or_else(|| ServeError::Pem("no private key".into()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_client_cert_verifier(clients)
        .with_single_cert(certs, key)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts connections on `listener` until `shutdown` turns true, then waits up to
/// `drain` for open connections.
pub async fn serve(
    listener: TcpListener,
    server: Arc<Router>,
    tls: Arc<rustls::ServerConfig>,
    mut shutdown: watch::Receiver<bool>,
    drain: Duration,
) -> Result<(), ServeError> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let mut conns = JoinSet::new();
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(ok) => ok,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            _ = async { shutdown.wait_for(|s| *s).await.is_ok() } => break,
        };
        let _ = tcp.set_nodelay(true);
        let acceptor = acceptor.clone();
        let server = server.clone();
        conns.spawn(async move {
            serve_connection(acceptor, tcp, peer, server).await;
        });
        // Reap finished connections so the set stays small.
        while conns.try_join_next().is_some() {}
    }
    let _ = tokio::time::timeout(drain, async { while conns.join_next().await.is_some() {} }).await;
    conns.abort_all();
    Ok(())
}

async fn serve_connection(
    acceptor: tokio_rustls::TlsAcceptor,
    tcp: tokio::net::TcpStream,
    peer: SocketAddr,
    server: Arc<Router>,
) {
    // The handshake's CPU work is done off the listener's workers, which meanwhile go on
    // serving the connections already open: a flood of new connections delays new
    // connections, not every tenant's requests.
    let handshake = crate::fairness::off_listener(async move {
        tokio::time::timeout(Duration::from_secs(10), acceptor.accept(tcp)).await
    });
    let tls = match handshake.await {
        Some(Ok(Ok(tls))) => tls,
        Some(Ok(Err(e))) => {
            tracing::debug!(%peer, error = %e, "TLS handshake failed");
            return;
        }
        Some(Err(_)) | None => return,
    };
    let cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|certs| certs.first())
        .map(|c| c.clone().into_owned());
    let service = service_fn(move |req| {
        let server = server.clone();
        let cert = cert.clone();
        async move {
            let req = req.map(|body: hyper::body::Incoming| body.map_err(|e| e.into()).boxed());
            Ok::<_, Infallible>(server.handle(req, cert).await)
        }
    });
    let builder = auto::Builder::new(TokioExecutor::new());
    if let Err(e) = builder
        .serve_connection_with_upgrades(TokioIo::new(tls), service)
        .await
    {
        tracing::debug!(%peer, error = %e, "connection ended with an error");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;
    use fabrik_store::{SledBackend, SledConfig, Store};

    #[tokio::test]
    async fn watches_are_bounded_per_user_and_in_all_and_given_back_when_they_end() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let registry = Arc::new(Registry::new(store, Arc::new(Catalog::builtin())));
        let (_stop, stop_rx) = watch::channel(false);
        let settings = Settings {
            max_watches_per_user: 3,
            max_watches: 5,
            ..Settings::default()
        };
        let server =
            ApiServer::new(registry, Default::default(), settings, stop_rx).expect("server");
        let mut held: Vec<WatchSlot> = (0..3).filter_map(|_| server.open_watch("u").ok()).collect();
        assert_eq!(held.len(), 3);
        let over = server.open_watch("u").err();
        assert!(
            matches!(&over, Some(e @ crate::error::ApiError::Throttled { .. }) if e.code() == 429 && e.retry_after() == Some(5)),
            "{over:?}"
        );
        assert_eq!(server.open_watches("u"), 3);
        // Another user has its own count, up to the total.
        let v: Vec<WatchSlot> = (0..2).filter_map(|_| server.open_watch("v").ok()).collect();
        assert_eq!(v.len(), 2);
        assert!(server.open_watch("w").is_err(), "the total of 5 is reached");
        // A watch that ends gives its count back.
        held.pop();
        assert_eq!(server.open_watches("u"), 2);
        assert!(server.open_watch("u").is_ok());
    }
}
