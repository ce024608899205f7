//! The tenant DNS of this process (`--dns-listen`): one `fabrik-dns` server answering the
//! cluster names of every tenant this process serves, as owner or follower — it follows the
//! router, so whatever serves a tenant's API here also answers its pods' DNS.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use anyhow::{Context, Result};
use clap::Args;
use fabrik_apiserver::router::Router;
use fabrik_apiserver::server::ApiServer;
use fabrik_dns::{Directory, Domain, Server, TenantHandle};
use tokio::task::JoinHandle;

/// DNS flags of `fabrik up` and `fabrik serve`.
#[derive(Args, Debug, Clone)]
pub struct DnsArgs {
    /// Serve the tenants' cluster DNS (UDP and TCP) on this address; port 0 picks a free port.
    /// A query is answered from the view of the tenant whose pod sent it (by its source IP);
    /// other names are forwarded to `--dns-upstream`. Synced pods are given it as their
    /// nameserver only through a port named `dns` of `--api-service` (`fabrik serve`).
    #[arg(long, value_name = "ADDR")]
    pub dns_listen: Option<SocketAddr>,
    /// Where names outside the cluster domain are forwarded. Default: the first nameserver of
    /// /etc/resolv.conf (in a pod: the host cluster's DNS).
    #[arg(long, value_name = "ADDR")]
    pub dns_upstream: Option<SocketAddr>,
}

/// The running DNS server.
pub struct TenantDns {
    /// Where it listens.
    pub local_addr: SocketAddr,
    server: JoinHandle<()>,
    follower: JoinHandle<()>,
}

impl TenantDns {
    /// Stops it.
    pub fn stop(self) {
        self.server.abort();
        self.follower.abort();
    }
}

/// Starts the DNS server of `args` (none without `--dns-listen`) for the tenants `router`
/// serves.
pub async fn start(args: &DnsArgs, router: Arc<Router>) -> Result<Option<TenantDns>> {
    let Some(listen) = args.dns_listen else {
        return Ok(None);
    };
    let upstream = match args.dns_upstream {
        Some(u) => Some(u),
        None => fabrik_dns::upstream_from_resolv_conf(Path::new("/etc/resolv.conf"))
            .unwrap_or_else(|e| {
                tracing::warn!(error = %e, "no DNS upstream: names outside the cluster domain are refused");
                None
            }),
    };
    let directory = Directory::new(Domain::default());
    let server = Server::bind(listen, directory.clone(), upstream)
        .await
        .with_context(|| format!("cannot serve DNS on {listen} (--dns-listen)"))?;
    let local_addr = server.local_addr();
    Ok(Some(TenantDns {
        local_addr,
        server: tokio::spawn(server.run(std::future::pending::<()>())),
        follower: tokio::spawn(follow(router, directory)),
    }))
}

/// Keeps `directory` to the tenants `router` serves: a tenant's view is watched through the
/// API server that serves it here, and replaced when another server takes over.
async fn follow(router: Arc<Router>, directory: Directory) {
    let mut changes = router.changes();
    let mut watched: HashMap<String, (Arc<ApiServer>, TenantHandle)> = HashMap::new();
    loop {
        changes.borrow_and_update();
        let now: HashMap<String, Arc<ApiServer>> = router.tenant_servers().into_iter().collect();
        watched.retain(|name, (server, _)| {
            now.get(name)
                .is_some_and(|current| Arc::ptr_eq(current, server))
        });
        for (name, server) in now {
            if watched.contains_key(&name) {
                continue;
            }
            let client = fabrik_apiserver::client::in_process_client(
                server.clone(),
                fabrik_apiserver::client::controller_identity("dns"),
            );
            let handle = directory.add_tenant(&name, client);
            watched.insert(name, (server, handle));
        }
        if changes.changed().await.is_err() {
            return;
        }
    }
}
