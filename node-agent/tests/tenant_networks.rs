//! Tenant segments over real netlink, in network namespaces: two simulated nodes (`node-a`,
//! `node-b`) joined by a veth underlay, two tenants (VNI 100 and 200) with one "pod"
//! namespace per node each, all four pods in the same /24 (so only the segments keep the
//! tenants apart, not routing). The segments are made by the agent's `NetlinkBackend` inside
//! the node namespaces; `ip` builds the scaffolding (namespaces, veths, addresses) and `ping`
//! checks what reaches what. A third test runs the agent's reconciliation
//! (`network::reconcile`) over `NetlinkSegments` in a namespace of its own.
//!
//! Needs root, `ip netns` and `ping` (`scripts/deps/netns.sh` installs iputils-ping): without
//! them the test fails and says so — it is never skipped. Every namespace it makes has a
//! unique name and is deleted by a guard, also when an assertion fails.

use std::net::Ipv4Addr;
use std::process::Command;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Instant;

use fabrik_api::tenant::{Tenant, TenantNetwork, TenantSpec};
use node_agent::network::netlink::Error as NetlinkError;
use node_agent::network::reconcile::{self, Reconciler};
use node_agent::network::vxlan::SegmentConfig;
use node_agent::network::{NetlinkBackend, NetlinkSegments, SegmentBackend, Vni};

/// Deletes the namespaces it names when dropped.
struct Namespaces {
    names: Vec<String>,
}

impl Drop for Namespaces {
    fn drop(&mut self) {
        for n in self.names.iter().rev() {
            let _ = Command::new("ip").args(["netns", "del", n]).status();
        }
    }
}

impl Namespaces {
    fn add(&mut self, name: &str) {
        ip(&["netns", "add", name]);
        self.names.push(name.to_string());
        ip(&["-n", name, "link", "set", "lo", "up"]);
    }
}

/// Runs `ip ARGS`, panicking with its output when it fails.
fn ip(args: &[&str]) {
    let out = Command::new("ip")
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("cannot run ip {args:?}: {e}"));
    assert!(
        out.status.success(),
        "ip {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// One ping from namespace `ns` to `dst` (`ping -c1 -W1`).
fn ping_once(ns: &str, dst: Ipv4Addr) -> bool {
    Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-c1", "-W1", "-q"])
        .arg(dst.to_string())
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// Reachable: up to three pings (the first may wait on ARP across the segment).
fn reaches(ns: &str, dst: Ipv4Addr) -> bool {
    (0..3).any(|_| ping_once(ns, dst))
}

/// Unreachable: two pings, both must fail.
fn blocked(ns: &str, dst: Ipv4Addr) -> bool {
    (0..2).all(|_| !ping_once(ns, dst))
}

fn require_environment() {
    let uid = nix::unistd::geteuid();
    assert!(
        uid.is_root(),
        "tenant network tests need root (network namespaces, veth, vxlan); running as uid {uid}. \
         Run them as root (CI does)."
    );
    let ip_ok = Command::new("ip")
        .args(["netns", "list"])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(ip_ok, "`ip netns` is unavailable: install iproute2");
    let ping_ok = Command::new("ping")
        .arg("-V")
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false);
    assert!(
        ping_ok,
        "`ping` is unavailable: install iputils-ping (scripts/deps/netns.sh)"
    );
}

/// A prefix unique to this run, for namespace names.
fn prefix() -> String {
    format!("fabtn{}", std::process::id())
}

const UNDERLAY_A: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 1);
const UNDERLAY_B: Ipv4Addr = Ipv4Addr::new(192, 168, 250, 2);

/// Pod address of tenant `vni` on node `node` (0 or 1): one /24 for everybody.
fn pod_ip(vni: u32, node: u8) -> Ipv4Addr {
    let tenant = if vni == 100 { 10 } else { 20 };
    Ipv4Addr::new(10, 77, 0, tenant + node + 1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenant_segments_connect_a_tenant_across_nodes_and_nothing_else() {
    require_environment();
    let p = prefix();
    let mut ns = Namespaces { names: Vec::new() };
    let nodes = [format!("{p}-node-a"), format!("{p}-node-b")];
    for n in &nodes {
        ns.add(n);
    }
    // Underlay: a veth pair between the nodes.
    ip(&[
        "-n",
        &nodes[0],
        "link",
        "add",
        "underlay0",
        "type",
        "veth",
        "peer",
        "name",
        "underlay0",
        "netns",
        &nodes[1],
    ]);
    for (n, addr) in nodes.iter().zip([UNDERLAY_A, UNDERLAY_B]) {
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            &format!("{addr}/24"),
            "dev",
            "underlay0",
        ]);
        ip(&["-n", n, "link", "set", "underlay0", "up"]);
    }
    // Pods: one namespace per tenant per node, eth0 ↔ p<vni> on the node.
    let vnis = [100u32, 200];
    for vni in vnis {
        for (i, node) in nodes.iter().enumerate() {
            let pod = format!("{p}-pod-{vni}-{i}");
            ns.add(&pod);
            let host_side = format!("p{vni}");
            ip(&[
                "-n", &pod, "link", "add", "eth0", "type", "veth", "peer", "name", &host_side,
                "netns", node,
            ]);
            let addr = pod_ip(vni, u8::try_from(i).expect("node index"));
            ip(&[
                "-n",
                &pod,
                "addr",
                "add",
                &format!("{addr}/24"),
                "dev",
                "eth0",
            ]);
            ip(&["-n", &pod, "link", "set", "eth0", "up"]);
        }
    }

    // The segments, through the agent's netlink backend inside each node namespace.
    let backends: Vec<NetlinkBackend> = nodes
        .iter()
        .map(|n| NetlinkBackend::in_netns(n).expect("netlink in node namespace"))
        .collect();
    for (i, backend) in backends.iter().enumerate() {
        let (local, remote) = if i == 0 {
            (UNDERLAY_A, UNDERLAY_B)
        } else {
            (UNDERLAY_B, UNDERLAY_A)
        };
        for vni in vnis {
            let vni = Vni::new(u64::from(vni)).expect("vni");
            let config = SegmentConfig::new(vni, "underlay0", local, vec![remote]);
            let first = backend
                .ensure_segment(&config)
                .await
                .expect("ensure segment");
            assert!(first.bridge_created && first.vxlan_created, "{first:?}");
            assert_eq!(first.remotes_added, vec![std::net::IpAddr::V4(remote)]);
            // Idempotent: a second pass changes nothing.
            let second = backend.ensure_segment(&config).await.expect("ensure again");
            assert!(second.is_empty(), "second pass changed {second:?}");
            backend
                .attach(&format!("p{vni}"), vni)
                .await
                .expect("attach pod veth");
            backend
                .attach(&format!("p{vni}"), vni)
                .await
                .expect("attach again");
            let (vx, br, flood) = backend
                .segment(vni)
                .await
                .expect("read segment")
                .expect("segment exists");
            let br = br.expect("bridge exists");
            assert_eq!(vx.vni, Some(vni.get()));
            assert_eq!(
                vx.controller,
                Some(br.index),
                "vx-{vni} is a port of br-{vni}"
            );
            assert_eq!(flood, vec![std::net::IpAddr::V4(remote)]);
        }
    }

    let pod = |vni: u32, node: usize| format!("{p}-pod-{vni}-{node}");
    // A tenant's pods reach each other across nodes.
    assert!(
        reaches(&pod(100, 0), pod_ip(100, 1)),
        "tenant 100: node-a pod cannot reach node-b pod"
    );
    assert!(
        reaches(&pod(100, 1), pod_ip(100, 0)),
        "tenant 100: node-b pod cannot reach node-a pod"
    );
    assert!(
        reaches(&pod(200, 0), pod_ip(200, 1)),
        "tenant 200: node-a pod cannot reach node-b pod"
    );
    assert!(
        reaches(&pod(200, 1), pod_ip(200, 0)),
        "tenant 200: node-b pod cannot reach node-a pod"
    );
    // Never the other tenant's, on the same node or across.
    for (from_vni, to_vni) in [(100, 200), (200, 100)] {
        for from in 0..2 {
            for to in 0..2u8 {
                assert!(
                    blocked(&pod(from_vni, from), pod_ip(to_vni, to)),
                    "tenant {from_vni} pod on node {from} reached tenant {to_vni}'s pod on node {to}"
                );
            }
        }
    }

    // The segment is what carries the traffic: without node-b's segment 100, tenant 100 is cut
    // off, tenant 200 is not; deleting twice is fine; ensuring again restores it.
    let v100 = Vni::new(100).expect("vni");
    assert!(backends[1].delete_segment(v100).await.expect("delete"));
    assert!(!backends[1]
        .delete_segment(v100)
        .await
        .expect("delete again"));
    assert!(backends[1].segment(v100).await.expect("read").is_none());
    assert!(
        blocked(&pod(100, 0), pod_ip(100, 1)),
        "tenant 100 still reachable without its segment"
    );
    assert!(
        reaches(&pod(200, 0), pod_ip(200, 1)),
        "tenant 200 lost connectivity"
    );
    let config = SegmentConfig::new(v100, "underlay0", UNDERLAY_B, vec![UNDERLAY_A]);
    backends[1].ensure_segment(&config).await.expect("recreate");
    backends[1].attach("p100", v100).await.expect("reattach");
    assert!(
        reaches(&pod(100, 0), pod_ip(100, 1)),
        "tenant 100 not restored"
    );

    // A changed remote list is made exact (the old remote leaves the flood list).
    let moved = SegmentConfig::new(
        v100,
        "underlay0",
        UNDERLAY_B,
        vec![Ipv4Addr::new(192, 168, 250, 9)],
    );
    let changes = backends[1]
        .ensure_segment(&moved)
        .await
        .expect("move remote");
    assert_eq!(
        changes.remotes_added,
        vec![std::net::IpAddr::V4(Ipv4Addr::new(192, 168, 250, 9))]
    );
    assert_eq!(
        changes.remotes_removed,
        vec![std::net::IpAddr::V4(UNDERLAY_A)]
    );
    drop(backends);
    drop(ns);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn netlink_failures_are_clear_errors() {
    require_environment();
    let p = prefix();
    let mut ns = Namespaces { names: Vec::new() };
    let node = format!("{p}-errs");
    ns.add(&node);
    let backend = NetlinkBackend::in_netns(&node).expect("netlink");
    let vni = Vni::new(300).expect("vni");

    // A missing underlay.
    let e = backend
        .ensure_segment(&SegmentConfig::new(
            vni,
            "nope0",
            Ipv4Addr::new(192, 0, 2, 1),
            vec![],
        ))
        .await
        .expect_err("missing underlay");
    assert!(matches!(e, NetlinkError::MissingLink { .. }), "{e}");
    assert!(
        e.to_string()
            .contains("underlay device \"nope0\" does not exist"),
        "{e}"
    );

    // A same-named device of another kind is never replaced.
    ip(&[
        "-n", &node, "link", "add", "up0", "type", "veth", "peer", "name", "br-300",
    ]);
    let e = backend
        .ensure_segment(&SegmentConfig::new(
            vni,
            "up0",
            Ipv4Addr::new(192, 0, 2, 1),
            vec![],
        ))
        .await
        .expect_err("conflict");
    assert!(
        e.to_string()
            .contains("\"br-300\" exists but is a veth device, not a bridge"),
        "{e}"
    );
    let e = backend
        .delete_segment(vni)
        .await
        .expect_err("conflict on delete");
    assert!(matches!(e, NetlinkError::Conflict { .. }), "{e}");
    let e = backend
        .attach("nope1", vni)
        .await
        .expect_err("attach to a non-bridge");
    assert!(matches!(e, NetlinkError::Conflict { .. }), "{e}");

    // The kernel refuses a second VXLAN device with a VNI in use (same port): the error names
    // the operation and the kernel's reason, and the bridge made on the way is gone again.
    ip(&[
        "-n", &node, "link", "add", "other0", "type", "vxlan", "id", "302", "dstport", "4789",
        "dev", "up0",
    ]);
    let taken = Vni::new(302).expect("vni");
    let e = backend
        .ensure_segment(&SegmentConfig::new(
            taken,
            "up0",
            Ipv4Addr::new(192, 0, 2, 1),
            vec![],
        ))
        .await
        .expect_err("vni in use");
    assert!(matches!(e, NetlinkError::Request { .. }), "{e}");
    assert!(e.to_string().contains("create vxlan vx-302 failed"), "{e}");
    assert!(
        backend.link("br-302").await.expect("look up").is_none(),
        "br-302 left behind"
    );

    // A port for a segment that does not exist, and a namespace that does not exist.
    let other = Vni::new(301).expect("vni");
    let e = backend.attach("up0", other).await.expect_err("no bridge");
    assert!(
        e.to_string().contains("bridge \"br-301\" does not exist"),
        "{e}"
    );
    let e = NetlinkBackend::in_netns(&format!("{p}-absent")).expect_err("no such namespace");
    assert!(
        e.to_string().contains("cannot enter network namespace"),
        "{e}"
    );
    drop(backend);
    drop(ns);
}

/// The agent's reconciliation over the real backend ([`NetlinkSegments`]) in a namespace:
/// a tenant's segment is built with the flood list it is given, a leftover segment device is
/// removed, devices that only look alike are left alone, a bad segment builds nothing, and no
/// tenant here removes everything.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agents_reconciliation_builds_and_removes_segments_over_netlink() {
    require_environment();
    let p = prefix();
    let mut ns = Namespaces { names: Vec::new() };
    let node = format!("{p}-rec");
    ns.add(&node);
    ip(&[
        "-n", &node, "link", "add", "up0", "type", "veth", "peer", "name", "up1",
    ]);
    ip(&["-n", &node, "link", "set", "up0", "up"]);
    // A leftover segment (from before a restart) and a device that is not a segment by name.
    ip(&[
        "-n", &node, "link", "add", "vx-7", "type", "vxlan", "id", "7", "dstport", "4789", "dev",
        "up0",
    ]);
    ip(&[
        "-n", &node, "link", "add", "vx-09", "type", "vxlan", "id", "9", "dstport", "4789", "dev",
        "up0",
    ]);
    let netlink = NetlinkBackend::in_netns(&node).expect("netlink");
    let backend = NetlinkSegments::new(netlink, "up0", Ipv4Addr::new(192, 0, 2, 1));
    let v = |n| Vni::new(n).expect("vni");
    assert_eq!(
        backend.present().await.expect("present"),
        BTreeSet::from([v(7)])
    );

    let tenant = |name: &str, segment: i64| {
        Tenant::new(
            name,
            TenantSpec {
                network: Some(TenantNetwork {
                    segment: Some(segment),
                }),
                ..TenantSpec::default()
            },
        )
    };
    let tenants = [tenant("a", 100), tenant("bad", 0)];
    let here = BTreeMap::from([("a".to_string(), 1), ("bad".to_string(), 1)]);
    let desired = reconcile::desired(&here, &tenants);
    let remote = Ipv4Addr::new(192, 0, 2, 2);
    let remotes = BTreeMap::from([(v(100), vec![remote])]);
    let mut r = Reconciler::new();
    let o = r.pass(&backend, &desired, &remotes, Instant::now()).await;
    assert_eq!(o.built, BTreeMap::from([("a".to_string(), v(100))]));
    assert_eq!(o.removed, [v(7)]);
    assert_eq!(o.errors.len(), 1, "{o:?}");
    assert!(o.new_errors[0].contains("invalid VNI 0"), "{o:?}");
    let (vx, br, flood) = backend
        .netlink()
        .segment(v(100))
        .await
        .expect("look up")
        .expect("vx-100 exists");
    assert_eq!(vx.vni, Some(100));
    let br = br.expect("br-100 exists");
    assert_eq!(vx.controller, Some(br.index));
    assert_eq!(flood, [std::net::IpAddr::V4(remote)]);
    assert!(backend
        .netlink()
        .link("vx-7")
        .await
        .expect("look up")
        .is_none());
    assert!(backend
        .netlink()
        .link("vx-09")
        .await
        .expect("look up")
        .is_some());
    assert_eq!(
        backend.present().await.expect("present"),
        BTreeSet::from([v(100)])
    );

    // Again: nothing to do.
    let o = r.pass(&backend, &desired, &remotes, Instant::now()).await;
    assert!(o.changed.is_empty() && o.removed.is_empty(), "{o:?}");

    // No tenant here any more: removed, the look-alike kept.
    let none = reconcile::desired(&BTreeMap::new(), &tenants);
    let o = r.pass(&backend, &none, &remotes, Instant::now()).await;
    assert_eq!(o.removed, [v(100)]);
    assert!(o.errors.is_empty(), "{o:?}");
    assert!(backend.present().await.expect("present").is_empty());
    assert!(backend
        .netlink()
        .link("br-100")
        .await
        .expect("look up")
        .is_none());
    assert!(backend
        .netlink()
        .link("vx-09")
        .await
        .expect("look up")
        .is_some());
    drop(backend);
    drop(ns);
}
