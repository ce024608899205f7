//! What the agent's segment reconciliation ([`super::reconcile`]) needs from a node's network:
//! the tenant segments present, and building or removing one. Two implementations —
//! [`NetlinkSegments`] (the kernel's VXLAN devices and bridges through [`NetlinkBackend`];
//! needs `CAP_NET_ADMIN`) and [`super::simulated::SimNetwork`] (segments recorded in memory, for
//! simulated nodes and tests).
//!
//! The reconciler only ever sees this trait; simulation is a backend, never a branch in the
//! real path. Calls are async (netlink is); the trait returns boxed futures so the agent can
//! hold any backend as a `Box<dyn SegmentBackend>`.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use futures::future::BoxFuture;
use thiserror::Error;

use super::netlink::{self, NetlinkBackend};
use super::segment::Vni;
use super::simulated;
use super::vxlan::SegmentConfig;

/// Errors of a segment backend.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The netlink backend failed.
    #[error(transparent)]
    Netlink(#[from] netlink::Error),
    /// The simulated backend failed.
    #[error("simulated network: {0}")]
    Simulated(#[from] simulated::Error),
}

/// Result of a backend call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A node's tenant segments.
pub trait SegmentBackend: Send + Sync {
    /// A short name for logs (`netlink`, `simulated`).
    fn name(&self) -> &'static str;

    /// This node's VTEP address on the underlay, which other nodes put in their flood lists;
    /// `None` when the backend has none.
    fn vtep(&self) -> Option<Ipv4Addr>;

    /// The segments present on the node now, whoever made them (after an agent restart, the
    /// ones it made before are found here).
    fn present(&self) -> BoxFuture<'_, Result<BTreeSet<Vni>>>;

    /// Creates or repairs segment `vni` with exactly `remotes` (the other nodes' VTEPs) as its
    /// flood list; idempotent. `true` when something changed. A failure leaves nothing half
    /// made by this call.
    fn ensure<'a>(&'a self, vni: Vni, remotes: &'a [Ipv4Addr]) -> BoxFuture<'a, Result<bool>>;

    /// Removes segment `vni`; `false` when nothing was there.
    fn delete(&self, vni: Vni) -> BoxFuture<'_, Result<bool>>;
}

/// Segments as kernel devices: for VNI `N`, `vx-N` over the underlay device from this node's
/// VTEP address, enslaved to bridge `br-N` (see [`super::vxlan`]). Every `vx-<N>` VXLAN device
/// and `br-<N>` bridge in the agent's network namespace counts as a Fabrik segment.
#[derive(Debug)]
pub struct NetlinkSegments {
    netlink: NetlinkBackend,
    underlay: String,
    local: Ipv4Addr,
}

impl NetlinkSegments {
    /// Segments over `underlay` (the fabric's device) from VTEP address `local`, through
    /// `netlink` (usually [`NetlinkBackend::connect`]).
    pub fn new(netlink: NetlinkBackend, underlay: &str, local: Ipv4Addr) -> NetlinkSegments {
        NetlinkSegments {
            netlink,
            underlay: underlay.to_string(),
            local,
        }
    }

    /// The connection, for looking at the devices.
    pub fn netlink(&self) -> &NetlinkBackend {
        &self.netlink
    }
}

impl SegmentBackend for NetlinkSegments {
    fn name(&self) -> &'static str {
        "netlink"
    }

    fn vtep(&self) -> Option<Ipv4Addr> {
        Some(self.local)
    }

    fn present(&self) -> BoxFuture<'_, Result<BTreeSet<Vni>>> {
        Box::pin(async move { Ok(self.netlink.segment_vnis().await?) })
    }

    fn ensure<'a>(&'a self, vni: Vni, remotes: &'a [Ipv4Addr]) -> BoxFuture<'a, Result<bool>> {
        Box::pin(async move {
            let config = SegmentConfig::new(vni, &self.underlay, self.local, remotes.to_vec());
            let changes = self.netlink.ensure_segment(&config).await?;
            Ok(!changes.is_empty())
        })
    }

    fn delete(&self, vni: Vni) -> BoxFuture<'_, Result<bool>> {
        Box::pin(async move { Ok(self.netlink.delete_segment(vni).await?) })
    }
}
