//! Tenant networks on a node: each tenant gets a layer-2 segment of its own on the
//! high-speed fabric, and the objects that let its pods — and only its pods — attach to it.
//!
//! * [`segment`]: the checked identifiers (VNI, CIDR, tenant) and the device names.
//! * [`vxlan`] over [`netlink`]: per tenant VNI `N`, a VXLAN device `vx-N` and a bridge
//!   `br-N` on the node, through route netlink (rtnetlink), idempotently. (This environment's
//!   kernel has no 802.1Q VLAN devices, so segments are VXLAN VNIs; on an SR-IOV fabric the
//!   tenant's VLAN is set on its VFs instead.)
//! * [`sriov`]: SR-IOV VF count and per-VF VLAN / trust / spoof checking, through sysfs (root
//!   configurable; netlink `IFLA_VFINFO_LIST` for VF attributes on real NICs).
//! * [`nad`]: the tenant's Multus NetworkAttachmentDefinition (pure).
//! * [`policy`]: NetworkPolicies (and a CiliumNetworkPolicy) isolating tenant namespaces
//!   (pure).
//! * [`reconcile`]: what the agent runs each pass — a tenant's segment (its Tenant's
//!   `spec.network.segment`) exists on a node exactly while the tenant has pods bound there —
//!   over a [`backend::SegmentBackend`]: [`backend::NetlinkSegments`] on real nodes,
//!   [`simulated::SimNetwork`] on simulated ones.
//!
//! Not here: choosing VNIs and CIDRs per tenant (the tenant manager's). Wired into the agent:
//! segments only; SR-IOV VFs, NetworkAttachmentDefinitions and NetworkPolicies are built by
//! these functions but nothing calls them yet.

pub mod backend;
pub mod nad;
pub mod netlink;
pub mod policy;
pub mod reconcile;
pub mod segment;
pub mod simulated;
pub mod sriov;
pub mod vxlan;

pub use backend::{NetlinkSegments, SegmentBackend};
pub use nad::network_attachment;
pub use netlink::NetlinkBackend;
pub use policy::{cilium_isolation_policy, isolation_policies};
pub use reconcile::Reconciler;
pub use segment::{InputError, Ipv4Cidr, Vni};
pub use simulated::SimNetwork;
