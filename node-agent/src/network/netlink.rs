//! A route-netlink connection ([`NetlinkBackend`]) in the agent's own network namespace or in
//! a named one (`/run/netns/<name>`, as `ip netns add` makes them), and the link look-ups the
//! segment code ([`super::vxlan`]) and the SR-IOV netlink path ([`NetlinkBackend::set_vf`])
//! share.
//!
//! A netlink socket belongs to the network namespace of the thread that opened it, for its
//! whole life. [`NetlinkBackend::in_netns`] therefore opens the socket on a short-lived thread
//! that first joins the namespace (`setns`, through `nix`'s safe wrapper) and then exits; the
//! connection itself runs as a task of the caller's tokio runtime. No process-wide state
//! changes, and the calling threads never leave their namespace.

use std::net::IpAddr;
use std::path::{Path, PathBuf};

use futures::{StreamExt, TryStreamExt};
use rtnetlink::packet_core::{
    NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_APPEND, NLM_F_CREATE, NLM_F_REQUEST,
};
use rtnetlink::packet_route::link::{
    InfoData, InfoKind, InfoVxlan, LinkAttribute, LinkInfo, LinkMessage, LinkVfInfo, VfInfo,
    VfInfoSpoofCheck, VfInfoTrust, VfInfoVlan,
};
use rtnetlink::packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use rtnetlink::packet_route::route::RouteType;
use rtnetlink::packet_route::{AddressFamily, RouteNetlinkMessage};
use rtnetlink::{Handle, LinkUnspec};
use thiserror::Error;
use tokio::task::JoinHandle;

use super::segment::InputError;
use super::sriov::VfConfig;

/// `ENODEV`: no such device.
const ENODEV: i32 = 19;

/// Errors of netlink operations.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// No tokio runtime to run the connection on.
    #[error("netlink needs a tokio runtime: {0}")]
    NoRuntime(#[source] tokio::runtime::TryCurrentError),
    /// The netlink socket could not be opened.
    #[error("cannot open a netlink socket: {0}")]
    Connect(#[source] std::io::Error),
    /// The network namespace could not be opened or joined.
    #[error("cannot enter network namespace {path}: {reason}")]
    Netns {
        /// The namespace file.
        path: PathBuf,
        /// What failed.
        reason: String,
    },
    /// A device that must exist does not.
    #[error("{what} {name:?} does not exist")]
    MissingLink {
        /// Its role (`underlay device`, `port`, …).
        what: &'static str,
        /// Its name.
        name: String,
    },
    /// A device of the segment's name exists but is something else.
    #[error("{name:?} exists but is {found}, not {expected}: remove or rename it")]
    Conflict {
        /// The name.
        name: String,
        /// What it is.
        found: String,
        /// What the segment needs.
        expected: String,
    },
    /// The kernel refused a request.
    #[error("netlink: {op} failed: {source}")]
    Request {
        /// What was asked (`create vxlan vx-100`, …).
        op: String,
        /// The kernel's (or the library's) error.
        #[source]
        source: rtnetlink::Error,
    },
    /// Bad input.
    #[error(transparent)]
    Input(#[from] InputError),
}

/// What went wrong in `op`.
pub(crate) fn request(op: impl Into<String>) -> impl FnOnce(rtnetlink::Error) -> Error {
    let op = op.into();
    move |source| Error::Request { op, source }
}

/// A device as netlink reports it (the parts the segments use).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Link {
    /// Interface index.
    pub index: u32,
    /// Name.
    pub name: String,
    /// `IFLA_INFO_KIND` (`bridge`, `vxlan`, `veth`, …; `device` for a physical one).
    pub kind: String,
    /// The bridge it is a port of (`IFLA_MASTER`).
    pub controller: Option<u32>,
    /// The VNI, for a VXLAN device.
    pub vni: Option<u32>,
    /// The local VTEP address, for a VXLAN device.
    pub local: Option<IpAddr>,
    /// The underlay device index, for a VXLAN device.
    pub underlay: Option<u32>,
    /// The UDP destination port, for a VXLAN device.
    pub port: Option<u16>,
}

impl Link {
    pub(crate) fn from_message(m: &LinkMessage) -> Link {
        let mut link = Link {
            index: m.header.index,
            name: String::new(),
            kind: "device".to_string(),
            controller: None,
            vni: None,
            local: None,
            underlay: None,
            port: None,
        };
        for a in &m.attributes {
            match a {
                LinkAttribute::IfName(n) => link.name = n.clone(),
                LinkAttribute::Controller(c) => link.controller = Some(*c),
                LinkAttribute::LinkInfo(infos) => {
                    for i in infos {
                        match i {
                            LinkInfo::Kind(k) => link.kind = kind_name(k),
                            LinkInfo::Data(InfoData::Vxlan(v)) => {
                                for x in v {
                                    match x {
                                        InfoVxlan::Id(id) => link.vni = Some(*id),
                                        InfoVxlan::Local(l) => link.local = Some(IpAddr::V4(*l)),
                                        InfoVxlan::Link(l) => link.underlay = Some(*l),
                                        InfoVxlan::Port(p) => link.port = Some(*p),
                                        _ => {}
                                    }
                                }
                            }
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
        link
    }
}

fn kind_name(k: &InfoKind) -> String {
    match k {
        InfoKind::Bridge => "bridge".into(),
        InfoKind::Vxlan => "vxlan".into(),
        other => other.to_string(),
    }
}

/// A netlink connection, in one network namespace. Dropping it ends the connection.
pub struct NetlinkBackend {
    pub(crate) handle: Handle,
    connection: JoinHandle<()>,
}

impl std::fmt::Debug for NetlinkBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetlinkBackend").finish_non_exhaustive()
    }
}

impl Drop for NetlinkBackend {
    fn drop(&mut self) {
        self.connection.abort();
    }
}

impl NetlinkBackend {
    /// A connection in the calling thread's network namespace (the node's). Needs a tokio
    /// runtime.
    pub fn connect() -> Result<NetlinkBackend, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(Error::NoRuntime)?;
        let (connection, handle, _) = rtnetlink::new_connection().map_err(Error::Connect)?;
        Ok(NetlinkBackend {
            handle,
            connection: runtime.spawn(connection),
        })
    }

    /// A connection in the named network namespace (`/run/netns/<name>`).
    pub fn in_netns(name: &str) -> Result<NetlinkBackend, Error> {
        if name.is_empty() || name.contains('/') || name == "." || name == ".." {
            return Err(Error::Netns {
                path: PathBuf::from(name),
                reason: "not a namespace name".into(),
            });
        }
        NetlinkBackend::in_netns_path(&Path::new(rtnetlink::NETNS_PATH).join(name))
    }

    /// A connection in the network namespace of the file `path` (a bind mount of a
    /// `/proc/<pid>/ns/net`).
    pub fn in_netns_path(path: &Path) -> Result<NetlinkBackend, Error> {
        let runtime = tokio::runtime::Handle::try_current().map_err(Error::NoRuntime)?;
        let netns = |reason: String| Error::Netns {
            path: path.to_path_buf(),
            reason,
        };
        let file = std::fs::File::open(path).map_err(|e| netns(e.to_string()))?;
        let opener = runtime.clone();
        // The socket is opened on a thread of its own, which joins the namespace first and
        // ends right after: no other thread's namespace changes.
        let opened = std::thread::spawn(move || {
            let _entered = opener.enter();
            nix::sched::setns(&file, nix::sched::CloneFlags::CLONE_NEWNET)
                .map_err(|e| format!("setns: {e} (is this root?)"))?;
            rtnetlink::new_connection().map_err(|e| format!("netlink socket: {e}"))
        })
        .join()
        .map_err(|_| netns("the thread opening the socket panicked".into()))?;
        let (connection, handle, _) = opened.map_err(netns)?;
        Ok(NetlinkBackend {
            handle,
            connection: runtime.spawn(connection),
        })
    }

    /// The device named `name`, if any.
    pub async fn link(&self, name: &str) -> Result<Option<Link>, Error> {
        let mut stream = self
            .handle
            .link()
            .get()
            .match_name(name.to_string())
            .execute();
        match stream.try_next().await {
            Ok(Some(m)) => Ok(Some(Link::from_message(&m))),
            Ok(None) => Ok(None),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -ENODEV => Ok(None),
            Err(source) => Err(Error::Request {
                op: format!("look up {name}"),
                source,
            }),
        }
    }

    /// The device named `name`, which must exist (`what` names its role in the error).
    pub async fn require(&self, name: &str, what: &'static str) -> Result<Link, Error> {
        self.link(name).await?.ok_or_else(|| Error::MissingLink {
            what,
            name: name.to_string(),
        })
    }

    /// Sets `up` and the bridge (`controller`) of device `index`.
    pub(crate) async fn set_up(
        &self,
        index: u32,
        controller: Option<u32>,
        op: &str,
    ) -> Result<(), Error> {
        let mut msg = LinkUnspec::new_with_index(index).up();
        if let Some(c) = controller {
            msg = msg.controller(c);
        }
        self.handle
            .link()
            .set(msg.build())
            .execute()
            .await
            .map_err(request(op))
    }

    /// Deletes device `index`; `false` when it was already gone.
    pub(crate) async fn delete(&self, index: u32, op: &str) -> Result<bool, Error> {
        match self.handle.link().del(index).execute().await {
            Ok(()) => Ok(true),
            Err(rtnetlink::Error::NetlinkError(e)) if e.raw_code() == -ENODEV => Ok(false),
            Err(source) => Err(Error::Request {
                op: op.to_string(),
                source,
            }),
        }
    }

    /// The flood list of VXLAN device `index`: destinations of its all-zero-MAC FDB entries.
    pub async fn flood_list(&self, index: u32) -> Result<Vec<IpAddr>, Error> {
        let entries: Vec<NeighbourMessage> = self
            .handle
            .neighbours()
            .get()
            .set_address_family(AddressFamily::Bridge)
            .execute()
            .try_collect()
            .await
            .map_err(request("list FDB entries"))?;
        let mut out = Vec::new();
        for e in entries.iter().filter(|e| e.header.ifindex == index) {
            let zero_mac = e
                .attributes
                .iter()
                .any(|a| matches!(a, NeighbourAttribute::LinkLayerAddress(l) if l.iter().all(|b| *b == 0)));
            if !zero_mac {
                continue;
            }
            for a in &e.attributes {
                match a {
                    NeighbourAttribute::Destination(NeighbourAddress::Inet(v4)) => {
                        out.push(IpAddr::V4(*v4))
                    }
                    NeighbourAttribute::Destination(NeighbourAddress::Inet6(v6)) => {
                        out.push(IpAddr::V6(*v6))
                    }
                    // Bridge-family entries carry the destination as raw bytes.
                    NeighbourAttribute::Destination(NeighbourAddress::Other(raw)) => {
                        if let Ok(v4) = <[u8; 4]>::try_from(raw.as_slice()) {
                            out.push(IpAddr::from(v4));
                        } else if let Ok(v6) = <[u8; 16]>::try_from(raw.as_slice()) {
                            out.push(IpAddr::from(v6));
                        }
                    }
                    _ => {}
                }
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    fn flood_entry(index: u32, dst: IpAddr) -> NeighbourMessage {
        let mut m = NeighbourMessage::default();
        m.header.family = AddressFamily::Bridge;
        m.header.ifindex = index;
        m.header.state = NeighbourState::Permanent;
        m.header.flags = NeighbourFlags::Own;
        m.header.kind = RouteType::Unspec;
        m.attributes
            .push(NeighbourAttribute::LinkLayerAddress(vec![0; 6]));
        m.attributes
            .push(NeighbourAttribute::Destination(match dst {
                IpAddr::V4(v4) => NeighbourAddress::Inet(v4),
                IpAddr::V6(v6) => NeighbourAddress::Inet6(v6),
            }));
        m
    }

    /// Appends `dst` to the flood list of VXLAN device `index` (`bridge fdb append
    /// 00:00:00:00:00:00 dev … dst …`); appending one already there is a no-op.
    pub(crate) async fn flood_add(&self, index: u32, dst: IpAddr) -> Result<(), Error> {
        let mut req = NetlinkMessage::from(RouteNetlinkMessage::NewNeighbour(
            NetlinkBackend::flood_entry(index, dst),
        ));
        req.header.flags = NLM_F_REQUEST | NLM_F_ACK | NLM_F_CREATE | NLM_F_APPEND;
        self.send(req, &format!("add flood entry {dst}")).await
    }

    /// Removes `dst` from the flood list of VXLAN device `index`.
    pub(crate) async fn flood_del(&self, index: u32, dst: IpAddr) -> Result<(), Error> {
        self.handle
            .neighbours()
            .del(NetlinkBackend::flood_entry(index, dst))
            .execute()
            .await
            .map_err(request(format!("remove flood entry {dst}")))
    }

    async fn send(&self, req: NetlinkMessage<RouteNetlinkMessage>, op: &str) -> Result<(), Error> {
        let mut handle = self.handle.clone();
        let mut response = handle.request(req).map_err(request(op))?;
        while let Some(m) = response.next().await {
            if let NetlinkPayload::Error(e) = m.payload {
                return Err(Error::Request {
                    op: op.to_string(),
                    source: rtnetlink::Error::NetlinkError(e),
                });
            }
        }
        Ok(())
    }

    /// Sets VF `vf` of the physical function `pf` through the PF's `IFLA_VFINFO_LIST`
    /// (VLAN, trust, spoof checking) — the path for real SR-IOV NICs, whose VF count is still
    /// set through sysfs ([`super::sriov`]).
    pub async fn set_vf(&self, pf: &str, vf: u32, config: &VfConfig) -> Result<(), Error> {
        let link = self.require(pf, "physical function").await?;
        self.handle
            .link()
            .set(vf_message(link.index, vf, config))
            .execute()
            .await
            .map_err(request(format!("configure VF {vf} of {pf}")))
    }
}

/// The `RTM_SETLINK` message that sets VF `vf` of the PF with index `pf_index`.
pub fn vf_message(pf_index: u32, vf: u32, config: &VfConfig) -> LinkMessage {
    LinkUnspec::new_with_index(pf_index)
        .append_extra_attribute(LinkAttribute::VfInfoList(vec![LinkVfInfo(vec![
            VfInfo::Vlan(VfInfoVlan::new(vf, u32::from(config.vlan), 0)),
            VfInfo::Trust(VfInfoTrust::new(vf, config.trust)),
            VfInfo::SpoofCheck(VfInfoSpoofCheck::new(vf, config.spoof_check)),
        ])]))
        .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vf_message_carries_vlan_trust_and_spoof_check() {
        let m = vf_message(
            7,
            3,
            &VfConfig {
                vlan: 120,
                trust: true,
                spoof_check: false,
            },
        );
        assert_eq!(m.header.index, 7);
        let infos: Vec<&VfInfo> = m
            .attributes
            .iter()
            .filter_map(|a| match a {
                LinkAttribute::VfInfoList(l) => Some(l),
                _ => None,
            })
            .flatten()
            .flat_map(|l| l.0.iter())
            .collect();
        assert!(infos.contains(&&VfInfo::Vlan(VfInfoVlan::new(3, 120, 0))));
        assert!(infos.contains(&&VfInfo::Trust(VfInfoTrust::new(3, true))));
        assert!(infos.contains(&&VfInfo::SpoofCheck(VfInfoSpoofCheck::new(3, false))));
    }

    #[test]
    fn bad_namespace_names_are_refused_before_any_io() {
        for bad in ["", "a/b", "..", "."] {
            let e = NetlinkBackend::in_netns(bad).expect_err(bad);
            assert!(e.to_string().contains("namespace"), "{e}");
        }
    }
}
