//! Assembling a cluster — `fabrik up`'s host and every tenant: the API server
//! (`fabrik-apiserver`'s [`ClusterBuilder`], with the admission plugins the caller adds) and
//! the controller manager (`fabrik-controllers`) over an in-process client. The API server
//! knows nothing of the controllers (as kube-apiserver knows nothing of
//! kube-controller-manager); this is the one place the two meet.

use std::net::SocketAddr;
use std::sync::Arc;

use fabrik_apiserver::pki::Ca;
use fabrik_apiserver::{Cluster, ClusterBuilder, Settings};
use fabrik_store::Store;

/// What the controller manager needs to know of the cluster it runs in.
#[derive(Clone, Debug, Default)]
pub struct Controllers {
    /// The address the cluster's pods reach its API at: the `kubernetes` Service's cluster IP
    /// and port, and its endpoint. None: the Service (10.96.0.1:443) points at the listener in
    /// the server address, where that is an IP address.
    pub pod_api_address: Option<SocketAddr>,
    /// The CA bundle that verifies the serving certificate clients of this cluster see,
    /// published as `kube-root-ca.crt` in every namespace (none: not published).
    pub root_ca_pem: Option<String>,
    /// Addresses the controllers give `type: LoadBalancer` Services (none: no load balancer is
    /// simulated; a real host has its own).
    pub load_balancer_pool: Option<fabrik_controllers::loadbalancer::Pool>,
    /// The cluster's own scheduler allocates its ResourceClaims (`fabrik up`'s host): its
    /// claim controller also releases them when their pods finish. A tenant's claims are
    /// allocated on the host, whose status the syncer copies.
    pub releases_claims: bool,
}

/// A cluster over `store` with the controller manager configured by `controllers`; the caller
/// adds its admission plugins ([`ClusterBuilder::admission`]) and starts it.
pub fn builder(
    store: Arc<dyn Store>,
    ca: Ca,
    settings: Settings,
    controllers: Controllers,
) -> ClusterBuilder {
    let mut config = match controllers.pod_api_address {
        Some(addr) => fabrik_controllers::Config::for_pod_api_address(addr),
        None => fabrik_controllers::Config::for_server_address(&settings.server_address),
    };
    config.root_ca_pem = controllers.root_ca_pem;
    config.load_balancer_pool = controllers.load_balancer_pool;
    config.claims.releases = controllers.releases_claims;
    Cluster::builder(store, ca, settings)
        .in_process("controller-manager", move |client, shutdown| {
            fabrik_controllers::run_with(client, config, shutdown)
        })
}
