//! The controllers inside a Fabrik cluster — what kube-controller-manager does for a real one.
//!
//! Every controller is written with kube-runtime against a plain [`kube::Client`], so the same
//! code runs over the in-process client of a tenant cluster and over HTTPS in tests.
//!
//! ```text
//!   run(client, shutdown)
//!    ├── gc           metadata watches of every served resource → owner/dependent graph
//!    ├── replicaset   ReplicaSet → Pods
//!    ├── deployment   Deployment → ReplicaSets (rolling update, recreate, history)
//!    ├── job          Job → Pods (completions, parallelism, backoff, indexed, TTL)
//!    ├── statefulset  StatefulSet → Pods `<name>-<ordinal>`, PVCs, ControllerRevisions
//!    ├── daemonset    DaemonSet × Nodes → one Pod per fitting Node, ControllerRevisions
//!    ├── cronjob      CronJob → Jobs at scheduled times (woken at the next time, no polling)
//!    ├── hpa          HorizontalPodAutoscaler → its target's scale, from the metrics APIs (every 15 s)
//!    ├── resourcequota    ResourceQuota ← what its namespace uses (`status.used`)
//!    ├── resourceclaim    Pod claim templates → ResourceClaims; releasing finished pods' claims
//!    ├── endpoints    Service + Pods → Endpoints, EndpointSlices
//!    ├── kubernetes_service   the `kubernetes` Service in `default` (with Config::api_service)
//!    ├── root_ca      `kube-root-ca.crt` in every namespace (with Config::root_ca_pem)
//!    ├── loadbalancer addresses of LoadBalancer Services (with Config::load_balancer_pool)
//!    ├── gateway      a simulated Gateway API implementation (with Config::load_balancer_pool)
//!    └── serviceaccount   a `default` ServiceAccount in every namespace
//! ```
//!
//! Guarantees shared by all controllers:
//! - **Watch-driven.** A controller wakes only on a change of an object it watches (or a requeue
//!   it asked for with a deadline, e.g. `minReadySeconds`); idle objects cost no CPU.
//! - **Idempotent.** A reconcile reads the current state and computes the next step from it;
//!   running it twice changes nothing more.
//! - **No hot loops.** A failing reconcile is retried with a per-object exponential backoff
//!   (0.5 s doubling to 5 min) and reported as a `Warning` Event on the object.
//!
//! What this crate does not do: schedule pods, run them, or write pod status (that is a
//! kubelet's job; tests play it).

#![forbid(unsafe_code)]

pub mod cronjob;
pub mod daemonset;
pub mod deployment;
pub mod endpoints;
pub mod events;
pub mod gateway;
pub mod gc;
pub mod hpa;
pub mod job;
pub mod kubernetes_service;
pub mod loadbalancer;
pub mod replicaset;
pub mod resourceclaim;
pub mod resourcequota;
pub mod revision;
pub mod root_ca;
pub mod serviceaccount;
mod shared;
pub mod statefulset;

pub use shared::{selector_matches, Shutdown};

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// What the controllers need to know about the server they run in.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// What the `kubernetes` Service says; without it that Service is not managed.
    pub api_service: Option<kubernetes_service::ApiService>,
    /// The CA bundle that verifies the API server's serving certificate, published as
    /// `kube-root-ca.crt` in every namespace; without it no ConfigMap is published.
    pub root_ca_pem: Option<String>,
    /// Addresses for `type: LoadBalancer` Services, for a cluster with no load balancer of its
    /// own (`fabrik up`'s host); without it none are assigned. With it, the simulated Gateway
    /// API implementation ([`gateway`]) runs too: both stand in for what a cloud provides.
    pub load_balancer_pool: Option<loadbalancer::Pool>,
    /// What the resourceclaim controller does besides making claims from templates.
    pub claims: resourceclaim::Config,
}

impl Config {
    /// A config for a server listening on `addr` (an unspecified address becomes loopback).
    pub fn for_listener(addr: SocketAddr) -> Config {
        let ip = match addr.ip() {
            IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
            ip => ip,
        };
        Config {
            api_service: Some(kubernetes_service::ApiService::default_for(
                SocketAddr::new(ip, addr.port()),
            )),
            root_ca_pem: None,
            load_balancer_pool: None,
            claims: resourceclaim::Config::default(),
        }
    }

    /// A config for a cluster whose pods reach its API at `addr`, which the `kubernetes`
    /// Service then names as its cluster IP, port and endpoint.
    pub fn for_pod_api_address(addr: SocketAddr) -> Config {
        Config {
            api_service: Some(kubernetes_service::ApiService::at(addr)),
            root_ca_pem: None,
            load_balancer_pool: None,
            claims: resourceclaim::Config::default(),
        }
    }
}

impl Config {
    /// A config for a server reachable at `address` (`host:port` with an IP host, as in
    /// discovery's `serverAddress`); anything else leaves the `kubernetes` Service unmanaged.
    pub fn for_server_address(address: &str) -> Config {
        address
            .parse::<SocketAddr>()
            .map(Config::for_listener)
            .unwrap_or_default()
    }
}

/// Runs every controller until `shutdown` resolves, without the `kubernetes` Service.
pub async fn run(client: kube::Client, shutdown: impl Future<Output = ()> + Send + 'static) {
    run_with(client, Config::default(), shutdown).await;
}

/// Runs every controller until `shutdown` resolves. Returns when all stopped.
pub async fn run_with(
    client: kube::Client,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let shutdown = shared::shutdown(shutdown);
    let api_service = {
        let (client, shutdown) = (client.clone(), shutdown.clone());
        async move {
            if let Some(api) = config.api_service {
                kubernetes_service::run(client, api, shutdown).await;
            }
        }
    };
    let root_ca = {
        let (client, shutdown) = (client.clone(), shutdown.clone());
        async move {
            if let Some(bundle) = config.root_ca_pem {
                root_ca::run(client, bundle, shutdown).await;
            }
        }
    };
    let simulated_gateway = config.load_balancer_pool.is_some();
    let load_balancers = {
        let (client, shutdown) = (client.clone(), shutdown.clone());
        async move {
            if let Some(pool) = config.load_balancer_pool {
                loadbalancer::run(client, pool, shutdown).await;
            }
        }
    };
    let gateways = {
        let (client, shutdown) = (client.clone(), shutdown.clone());
        async move {
            if simulated_gateway {
                gateway::run(client, shutdown).await;
            }
        }
    };
    // Each controller is a task of its own: one busy controller (the garbage collector over a
    // burst, a reconcile with many writes) never holds up the others' watches and reconciles,
    // and they run on every worker thread.
    type Task = std::pin::Pin<Box<dyn Future<Output = ()> + Send>>;
    let tasks: Vec<Task> = vec![
        Box::pin(gc::run(client.clone(), shutdown.clone())),
        Box::pin(replicaset::run(client.clone(), shutdown.clone())),
        Box::pin(deployment::run(client.clone(), shutdown.clone())),
        Box::pin(job::run(client.clone(), shutdown.clone())),
        Box::pin(statefulset::run(client.clone(), shutdown.clone())),
        Box::pin(daemonset::run(client.clone(), shutdown.clone())),
        Box::pin(cronjob::run(client.clone(), shutdown.clone())),
        Box::pin(hpa::run(client.clone(), shutdown.clone())),
        Box::pin(resourcequota::run(client.clone(), shutdown.clone())),
        Box::pin(resourceclaim::run(
            client.clone(),
            config.claims,
            shutdown.clone(),
        )),
        Box::pin(endpoints::run(client.clone(), shutdown.clone())),
        Box::pin(api_service),
        Box::pin(root_ca),
        Box::pin(load_balancers),
        Box::pin(gateways),
        Box::pin(serviceaccount::run(client, shutdown)),
    ];
    let handles: Vec<tokio::task::JoinHandle<()>> = tasks.into_iter().map(tokio::spawn).collect();
    // Stopping this future (the cluster shutting down) stops them all.
    let _abort_on_drop: Vec<AbortOnDrop> = handles
        .iter()
        .map(|h| AbortOnDrop(h.abort_handle()))
        .collect();
    futures::future::join_all(handles).await;
}

/// Aborts a spawned controller when the future that runs the controllers is dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
