//! Per-tenant VXLAN segments on a node: for VNI `N`, a bridge `br-N` and a VXLAN device
//! `vx-N` (over the underlay device, from the node's VTEP address, UDP port 4789) enslaved to
//! it, with the other nodes' VTEPs as its flood list (head-end replication: the all-zero-MAC
//! FDB entries `bridge fdb append` makes). Pods' host-side veths are attached to `br-N`
//! ([`NetlinkBackend::attach`]); the bridge CNI does the same for Multus attachments.
//!
//! Guarantees: [`NetlinkBackend::ensure_segment`] is idempotent — it creates what is missing,
//! recreates a `vx-N` whose VNI, VTEP, underlay or port differ, brings both up, and makes the
//! flood list exactly the configured remotes; a same-named device of another kind is an error,
//! never replaced; when the kernel refuses the VXLAN device, a bridge made by the same call is
//! removed again. [`NetlinkBackend::delete_segment`] removes both devices and reports whether
//! anything was there. Segments of different VNIs share nothing on the node: frames of one
//! never reach another's bridge.

use std::collections::BTreeSet;
use std::net::{IpAddr, Ipv4Addr};

use futures::TryStreamExt;
use rtnetlink::packet_route::link::LinkMessage;
use rtnetlink::{LinkBridge, LinkVxlan};

use super::netlink::{request, Error, Link, NetlinkBackend};
use super::segment::Vni;

/// The IANA VXLAN port.
pub const VXLAN_PORT: u16 = 4789;

/// One tenant segment on one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentConfig {
    /// The tenant's VNI.
    pub vni: Vni,
    /// The underlay device VXLAN packets leave by (the high-speed fabric).
    pub underlay: String,
    /// This node's VTEP address (on the underlay).
    pub local: Ipv4Addr,
    /// The other nodes' VTEP addresses.
    pub remotes: Vec<Ipv4Addr>,
    /// UDP destination port ([`VXLAN_PORT`] by default).
    pub port: u16,
}

impl SegmentConfig {
    /// A segment with the default port.
    pub fn new(vni: Vni, underlay: &str, local: Ipv4Addr, remotes: Vec<Ipv4Addr>) -> SegmentConfig {
        SegmentConfig {
            vni,
            underlay: underlay.to_string(),
            local,
            remotes,
            port: VXLAN_PORT,
        }
    }
}

/// What [`NetlinkBackend::ensure_segment`] changed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Changes {
    /// The bridge was created.
    pub bridge_created: bool,
    /// The VXLAN device was created (or recreated).
    pub vxlan_created: bool,
    /// Remotes added to the flood list.
    pub remotes_added: Vec<IpAddr>,
    /// Remotes removed from it.
    pub remotes_removed: Vec<IpAddr>,
}

impl Changes {
    /// Nothing was changed.
    pub fn is_empty(&self) -> bool {
        *self == Changes::default()
    }
}

fn expect_kind(link: &Link, kind: &str) -> Result<(), Error> {
    if link.kind == kind {
        Ok(())
    } else {
        Err(Error::Conflict {
            name: link.name.clone(),
            found: format!("a {} device", link.kind),
            expected: format!("a {kind}"),
        })
    }
}

/// The segment `link` is a device of, if its name and kind make it one.
fn segment_of(link: &Link) -> Option<Vni> {
    let (number, kind) = if let Some(n) = link.name.strip_prefix("vx-") {
        (n, "vxlan")
    } else if let Some(n) = link.name.strip_prefix("br-") {
        (n, "bridge")
    } else {
        return None;
    };
    if link.kind != kind || !number.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let vni = Vni::new(number.parse().ok()?).ok()?;
    (vni.vxlan_name() == link.name || vni.bridge_name() == link.name).then_some(vni)
}

impl NetlinkBackend {
    /// Creates or repairs the segment (see the module documentation).
    pub async fn ensure_segment(&self, config: &SegmentConfig) -> Result<Changes, Error> {
        let mut changes = Changes::default();
        let underlay = self.require(&config.underlay, "underlay device").await?;
        let br_name = config.vni.bridge_name();
        let vx_name = config.vni.vxlan_name();

        let bridge = match self.link(&br_name).await? {
            Some(b) => {
                expect_kind(&b, "bridge")?;
                b
            }
            None => {
                self.handle
                    .link()
                    .add(LinkBridge::new(&br_name).build())
                    .execute()
                    .await
                    .map_err(request(format!("create bridge {br_name}")))?;
                changes.bridge_created = true;
                self.require(&br_name, "bridge").await?
            }
        };

        let existing = match self.link(&vx_name).await? {
            Some(v) => {
                expect_kind(&v, "vxlan")?;
                let same = v.vni == Some(config.vni.get())
                    && v.local == Some(IpAddr::V4(config.local))
                    && v.underlay == Some(underlay.index)
                    && v.port == Some(config.port);
                if same {
                    Some(v)
                } else {
                    self.delete(v.index, &format!("delete outdated {vx_name}"))
                        .await?;
                    None
                }
            }
            None => None,
        };
        let vxlan = match existing {
            Some(v) => v,
            None => {
                let msg = LinkVxlan::new(&vx_name, config.vni.get())
                    .dev(underlay.index)
                    .local(config.local)
                    .port(config.port)
                    .learning(true)
                    .build();
                let created = self
                    .handle
                    .link()
                    .add(msg)
                    .execute()
                    .await
                    .map_err(request(format!("create vxlan {vx_name}")));
                if let Err(e) = created {
                    // Leave nothing half made: a bridge made by this call goes again.
                    if changes.bridge_created {
                        self.delete(bridge.index, &format!("remove {br_name} again"))
                            .await?;
                    }
                    return Err(e);
                }
                changes.vxlan_created = true;
                self.require(&vx_name, "vxlan device").await?
            }
        };
        self.set_up(bridge.index, None, &format!("bring {br_name} up"))
            .await?;
        self.set_up(
            vxlan.index,
            Some(bridge.index),
            &format!("attach {vx_name} to {br_name}"),
        )
        .await?;

        let want: Vec<IpAddr> = config.remotes.iter().map(|r| IpAddr::V4(*r)).collect();
        let have = self.flood_list(vxlan.index).await?;
        for r in want.iter().filter(|r| !have.contains(r)) {
            self.flood_add(vxlan.index, *r).await?;
            changes.remotes_added.push(*r);
        }
        for r in have.iter().filter(|r| !want.contains(r)) {
            self.flood_del(vxlan.index, *r).await?;
            changes.remotes_removed.push(*r);
        }
        Ok(changes)
    }

    /// Removes the segment's devices; `false` when neither existed. A same-named device of
    /// another kind is left alone and reported.
    pub async fn delete_segment(&self, vni: Vni) -> Result<bool, Error> {
        let mut removed = false;
        for (name, kind) in [(vni.vxlan_name(), "vxlan"), (vni.bridge_name(), "bridge")] {
            if let Some(link) = self.link(&name).await? {
                expect_kind(&link, kind)?;
                removed |= self.delete(link.index, &format!("delete {name}")).await?;
            }
        }
        Ok(removed)
    }

    /// The VNIs of the segments on the node: every VXLAN device named `vx-<N>` and every
    /// bridge named `br-<N>` (exactly as [`Vni::vxlan_name`] and [`Vni::bridge_name`] write
    /// them; `vx-0100`, or a `br-7` that is not a bridge, is not a segment).
    pub async fn segment_vnis(&self) -> Result<BTreeSet<Vni>, Error> {
        let links: Vec<LinkMessage> = self
            .handle
            .link()
            .get()
            .execute()
            .try_collect()
            .await
            .map_err(request("list devices"))?;
        Ok(links
            .iter()
            .filter_map(|m| segment_of(&Link::from_message(m)))
            .collect())
    }

    /// Attaches the device `port` (a pod's host-side veth) to the segment's bridge and brings
    /// it up; attaching it again is a no-op.
    pub async fn attach(&self, port: &str, vni: Vni) -> Result<(), Error> {
        let bridge = self.require(&vni.bridge_name(), "bridge").await?;
        expect_kind(&bridge, "bridge")?;
        let link = self.require(port, "port").await?;
        self.set_up(
            link.index,
            Some(bridge.index),
            &format!("attach {port} to {}", bridge.name),
        )
        .await
    }

    /// The segment as it is on the node: the VXLAN device (with its VNI, VTEP and bridge),
    /// the bridge and the flood list; `None` when the VXLAN device is absent.
    pub async fn segment(
        &self,
        vni: Vni,
    ) -> Result<Option<(Link, Option<Link>, Vec<IpAddr>)>, Error> {
        let Some(vx) = self.link(&vni.vxlan_name()).await? else {
            return Ok(None);
        };
        let br = self.link(&vni.bridge_name()).await?;
        let flood = self.flood_list(vx.index).await?;
        Ok(Some((vx, br, flood)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(name: &str, kind: &str) -> Link {
        Link {
            index: 1,
            name: name.to_string(),
            kind: kind.to_string(),
            controller: None,
            vni: None,
            local: None,
            underlay: None,
            port: None,
        }
    }

    #[test]
    fn only_canonical_segment_devices_are_segments() {
        let vni = |n| Vni::new(n).ok();
        assert_eq!(segment_of(&link("vx-100", "vxlan")), vni(100));
        assert_eq!(segment_of(&link("br-100", "bridge")), vni(100));
        for (name, kind) in [
            ("vx-0100", "vxlan"),
            ("vx-100", "bridge"),
            ("br-7", "veth"),
            ("vx-0", "vxlan"),
            ("vx-16777216", "vxlan"),
            ("vx-+5", "vxlan"),
            ("vx-", "vxlan"),
            ("eth0", "device"),
            ("vxlan0", "vxlan"),
        ] {
            assert_eq!(segment_of(&link(name, kind)), None, "{name} ({kind})");
        }
    }
}
