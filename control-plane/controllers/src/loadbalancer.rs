//! A load-balancer implementation for clusters that have none (`fabrik up`'s simulated host):
//! every `type: LoadBalancer` Service without a `loadBalancerClass` gets an address from a pool
//! in `status.loadBalancer.ingress`, kept while it stays a LoadBalancer and given back when it
//! stops being one — as MetalLB's address assignment does, without announcing the address
//! anywhere (nothing answers on it: it is a simulation, so that charts waiting for an address
//! finish). Allocation is derived from the Services' statuses alone, so a restart loses nothing.
//!
//! Woken by changes to Services.

use std::collections::BTreeSet;
use std::future::Future;
use std::net::Ipv4Addr;
use std::str::FromStr;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::EventType;
use kube::runtime::watcher;
use kube::ResourceExt;
use serde_json::json;

use crate::shared::{shutdown, Context};

/// The addresses handed out: the usable hosts of an IPv4 CIDR (its network and broadcast
/// addresses excluded when it has them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pool {
    first: u32,
    last: u32,
}

/// Errors of a pool's CIDR.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PoolError {
    /// Not `A.B.C.D/N`.
    #[error("{0:?} is not an IPv4 CIDR (e.g. 198.18.0.0/24)")]
    Syntax(String),
    /// Host bits set, or a prefix that leaves no address.
    #[error("{0:?}: {1}")]
    Range(String, &'static str),
}

impl FromStr for Pool {
    type Err = PoolError;

    fn from_str(cidr: &str) -> Result<Pool, PoolError> {
        let syntax = || PoolError::Syntax(cidr.to_string());
        let (addr, prefix) = cidr.split_once('/').ok_or_else(syntax)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| syntax())?;
        let prefix: u32 = prefix.parse().map_err(|_| syntax())?;
        if prefix > 32 {
            return Err(syntax());
        }
        let base = u32::from(addr);
        let size = 1u64 << (32 - prefix);
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - prefix)
        };
        if base & !mask != 0 {
            return Err(PoolError::Range(
                cidr.to_string(),
                "host bits are set: give the network address",
            ));
        }
        let last = (u64::from(base) + size - 1) as u32;
        let (first, last) = if size > 2 {
            (base + 1, last - 1)
        } else {
            (base, last)
        };
        if prefix == 0 {
            return Err(PoolError::Range(cidr.to_string(), "too large a pool"));
        }
        Ok(Pool { first, last })
    }
}

impl Pool {
    /// Whether `ip` is one of the pool's addresses.
    pub fn contains(&self, ip: &str) -> bool {
        ip.parse::<Ipv4Addr>()
            .map(|a| (self.first..=self.last).contains(&u32::from(a)))
            .unwrap_or(false)
    }

    /// The lowest address of the pool not in `used`.
    pub fn free(&self, used: &BTreeSet<String>) -> Option<Ipv4Addr> {
        (self.first..=self.last)
            .map(Ipv4Addr::from)
            .find(|a| !used.contains(&a.to_string()))
    }
}

/// Errors of the load-balancer controller.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing Services failed.
    #[error("failed to list services: {why}", why = crate::shared::brief(.0))]
    List(#[source] kube::Error),
    /// Writing a Service's status failed.
    #[error("failed to update the load balancer status: {why}", why = crate::shared::brief(.0))]
    Status(#[source] kube::Error),
    /// Every address of the pool is taken.
    #[error("no address left in the load balancer pool")]
    Exhausted,
}

impl Error {
    fn reason(&self) -> &'static str {
        match self {
            Error::Exhausted => "AllocationFailed",
            _ => "ReconcileError",
        }
    }
}

struct State {
    ctx: Arc<Context>,
    pool: Pool,
    /// One allocation at a time: two Services must not pick the same free address.
    allocating: tokio::sync::Mutex<()>,
}

/// Runs the controller until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    pool: Pool,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
) {
    let state = Arc::new(State {
        ctx: Context::new(client.clone(), "load-balancer-controller"),
        pool,
        allocating: tokio::sync::Mutex::new(()),
    });
    Controller::new(Api::<Service>::all(client), watcher::Config::default())
        .graceful_shutdown_on(shutdown(shutdown_signal))
        .run(
            reconcile,
            |s, e: &Error, st: Arc<State>| st.ctx.failed_as(s.as_ref(), e.reason(), e),
            state,
        )
        .for_each(|_| async {})
        .await;
}

/// Whether this controller serves `svc`: a LoadBalancer Service of no other implementation.
pub fn served(svc: &Service) -> bool {
    let spec = svc.spec.as_ref();
    spec.and_then(|s| s.type_.as_deref()) == Some("LoadBalancer")
        && spec
            .and_then(|s| s.load_balancer_class.as_deref())
            .is_none()
        && svc.metadata.deletion_timestamp.is_none()
}

/// The addresses in a Service's load-balancer status.
fn addresses(svc: &Service) -> Vec<String> {
    svc.status
        .as_ref()
        .and_then(|s| s.load_balancer.as_ref())
        .and_then(|l| l.ingress.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|i| i.ip.clone())
        .collect()
}

async fn set_status(state: &State, svc: &Service, load_balancer: serde_json::Value) -> Result<()> {
    let api: Api<Service> = Api::namespaced(
        state.ctx.client.clone(),
        &svc.namespace().unwrap_or_default(),
    );
    api.patch_status(
        &svc.name_any(),
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"loadBalancer": load_balancer}})),
    )
    .await
    .map(drop)
    .map_err(Error::Status)
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

async fn reconcile(svc: Arc<Service>, state: Arc<State>) -> Result<Action> {
    let current = addresses(&svc);
    let ours = current.iter().any(|ip| state.pool.contains(ip));
    if !served(&svc) {
        if ours {
            // No longer a LoadBalancer of ours: the address goes back to the pool.
            set_status(&state, &svc, json!({"ingress": null})).await?;
        }
        state.ctx.succeeded(svc.as_ref());
        return Ok(Action::await_change());
    }
    if !current.is_empty() {
        state.ctx.succeeded(svc.as_ref());
        return Ok(Action::await_change());
    }
    let _one_at_a_time = state.allocating.lock().await;
    let used: BTreeSet<String> = Api::<Service>::all(state.ctx.client.clone())
        .list(&ListParams::default())
        .await
        .map_err(Error::List)?
        .items
        .iter()
        .flat_map(addresses)
        .collect();
    let ip = state.pool.free(&used).ok_or(Error::Exhausted)?;
    set_status(
        &state,
        &svc,
        json!({"ingress": [{"ip": ip.to_string(), "ipMode": "VIP"}]}),
    )
    .await?;
    state.ctx.publish(
        svc.as_ref(),
        EventType::Normal,
        "IPAllocated",
        &format!("Assigned IP [\"{ip}\"]"),
    );
    state.ctx.succeeded(svc.as_ref());
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pools_hand_out_their_hosts_lowest_first() {
        let pool: Pool = "198.18.0.0/30".parse().expect("pool");
        assert!(pool.contains("198.18.0.1") && pool.contains("198.18.0.2"));
        assert!(!pool.contains("198.18.0.0") && !pool.contains("198.18.0.3"));
        let mut used = BTreeSet::new();
        assert_eq!(pool.free(&used), Some(Ipv4Addr::new(198, 18, 0, 1)));
        used.insert("198.18.0.1".to_string());
        assert_eq!(pool.free(&used), Some(Ipv4Addr::new(198, 18, 0, 2)));
        used.insert("198.18.0.2".to_string());
        assert_eq!(pool.free(&used), None);
        let one: Pool = "10.0.0.7/32".parse().expect("one address");
        assert!(one.contains("10.0.0.7"));
        for bad in [
            "198.18.0.1/24",
            "198.18.0.0",
            "x/24",
            "198.18.0.0/33",
            "0.0.0.0/0",
        ] {
            assert!(bad.parse::<Pool>().is_err(), "{bad}");
        }
    }
}
