//! Which addresses a tenant's Endpoints and EndpointSlices may name on the host.
//!
//! A host Endpoints / EndpointSlice is read by everything on the host that follows Services
//! (ingress controllers, gateways, meshes, proxies). Built from a tenant's object, it may only
//! name the tenant's **own synced pods**: the IPs in the `status.podIP` / `podIPs` of the
//! tenant's host pods that are still alive (not `Succeeded` / `Failed`, so that an IP the host
//! has handed on to another pod is never named) and do not share the node's network (a
//! `hostNetwork` pod's IP is the node's). Every other address — loopback, the metadata
//! endpoint, the host's API server, another tenant's pods or Services — is left out of the host
//! copy and reported in the tenant (an Event, reason [`REASON_REFUSED`]).
//!
//! Some addresses can never be a pod's; the tenant's admission refuses them at once
//! ([`special`]), as upstream's validation of Endpoints does.

use std::collections::{BTreeSet, HashMap};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use serde_json::Value;

use crate::cache::Cache;
use crate::kinds::Kind;
use crate::queue::Key;

/// The reason of the tenant Event that reports addresses left out of a host copy.
pub const REASON_REFUSED: &str = "AddressRefused";

/// Parses an IP address as the API server's validation does: dotted quad without leading zeros,
/// or IPv6 (no zone). Anything else is not an IP.
pub fn parse_ip(s: &str) -> Option<IpAddr> {
    // The standard parser refuses leading zeros in IPv4 octets and zones in IPv6.
    s.parse::<IpAddr>().ok()
}

/// Why an address can never be a pod's address, if it cannot: unspecified, loopback,
/// link-local, multicast or broadcast (IPv4-mapped IPv6 addresses judged as their IPv4).
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => special_v4(v4),
            None => special_v6(v6),
        },
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    if ip.is_unspecified() || ip.octets()[0] == 0 {
        Some("may not be unspecified (0.0.0.0/8)")
    } else if ip.is_loopback() {
        Some("may not be in the loopback range (127.0.0.0/8)")
    } else if ip.is_link_local() {
        Some("may not be in the link-local range (169.254.0.0/16)")
    } else if ip.is_multicast() {
        Some("may not be in the multicast range (224.0.0.0/4)")
    } else if ip.is_broadcast() {
        Some("may not be the broadcast address")
    } else {
        None
    }
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    if ip.is_unspecified() {
        Some("may not be unspecified (::)")
    } else if ip.is_loopback() {
        Some("may not be the loopback address (::1)")
    } else if first & 0xffc0 == 0xfe80 {
        Some("may not be in the link-local range (fe80::/10)")
    } else if ip.is_multicast() {
        Some("may not be in the multicast range (ff00::/8)")
    } else if ip.to_ipv4().is_some_and(|v4| special_v4(v4).is_some()) && first == 0 {
        // IPv4-compatible (deprecated) forms of special IPv4 addresses.
        Some("may not be an IPv4-compatible form of a special address")
    } else {
        None
    }
}

/// One of the tenant's host pods, as named by an address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    /// The host pod's name.
    pub name: String,
    /// The host pod's UID.
    pub uid: String,
    /// The node it runs on (empty when not scheduled).
    pub node: String,
}

/// The addresses of a tenant's live host pods: what its host Endpoints may name.
#[derive(Clone, Debug, Default)]
pub struct PodAddresses {
    by_ip: HashMap<IpAddr, PodRef>,
}

impl PodAddresses {
    /// Built from the tenant's host pods (the host pod cache holds only this tenant's).
    pub fn from_host_pods(host_pods: &[Arc<Value>], tenant: &str) -> PodAddresses {
        let mut by_ip = HashMap::new();
        for pod in host_pods {
            if pod["metadata"]["labels"][fabrik_api::LABEL_TENANT].as_str() != Some(tenant)
                || !is_live(pod)
            {
                continue;
            }
            let node_ips = node_ips(pod);
            let r = PodRef {
                name: pod["metadata"]["name"].as_str().unwrap_or("").to_string(),
                uid: pod["metadata"]["uid"].as_str().unwrap_or("").to_string(),
                node: pod["spec"]["nodeName"].as_str().unwrap_or("").to_string(),
            };
            for ip in pod_ips(pod) {
                if !node_ips.contains(&ip) && special(ip).is_none() {
                    by_ip.insert(ip, r.clone());
                }
            }
        }
        PodAddresses { by_ip }
    }

    /// The tenant pod an address belongs to, if it is one of the tenant's.
    pub fn get(&self, address: &str) -> Option<&PodRef> {
        parse_ip(address).and_then(|ip| self.by_ip.get(&ip))
    }

    /// Whether an address is one of the tenant's pods' addresses.
    pub fn allows(&self, address: &str) -> bool {
        self.get(address).is_some()
    }
}

/// A host pod whose IP still belongs to it: not finished, not sharing the node's network.
fn is_live(pod: &Value) -> bool {
    let phase = pod["status"]["phase"].as_str().unwrap_or("");
    !matches!(phase, "Succeeded" | "Failed") && pod["spec"]["hostNetwork"].as_bool() != Some(true)
}

/// The IPs in a pod's `status.podIP` and `status.podIPs`.
pub fn pod_ips(pod: &Value) -> BTreeSet<IpAddr> {
    let status = &pod["status"];
    let mut out: BTreeSet<IpAddr> = status["podIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["ip"].as_str().and_then(parse_ip))
        .collect();
    if let Some(ip) = status["podIP"].as_str().and_then(parse_ip) {
        out.insert(ip);
    }
    out
}

fn node_ips(pod: &Value) -> BTreeSet<IpAddr> {
    let status = &pod["status"];
    let mut out: BTreeSet<IpAddr> = status["hostIPs"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|p| p["ip"].as_str().and_then(parse_ip))
        .collect();
    if let Some(ip) = status["hostIP"].as_str().and_then(parse_ip) {
        out.insert(ip);
    }
    out
}

/// Every address a tenant Endpoints or EndpointSlice names (IPs as written).
pub fn named_addresses(obj: &Value) -> Vec<&str> {
    let mut out = Vec::new();
    for s in obj["subsets"].as_array().into_iter().flatten() {
        for list in ["addresses", "notReadyAddresses"] {
            for a in s[list].as_array().into_iter().flatten() {
                if let Some(ip) = a["ip"].as_str() {
                    out.push(ip);
                }
            }
        }
    }
    for e in obj["endpoints"].as_array().into_iter().flatten() {
        for a in e["addresses"].as_array().into_iter().flatten() {
            if let Some(a) = a.as_str() {
                out.push(a);
            }
        }
    }
    out
}

/// Whether a tenant Endpoints / EndpointSlice names one of `ips` (so that it is looked at again
/// when a pod holding them appears, changes or goes away).
pub fn names_any(obj: &Value, ips: &BTreeSet<IpAddr>) -> bool {
    !ips.is_empty()
        && named_addresses(obj)
            .into_iter()
            .filter_map(parse_ip)
            .any(|ip| ips.contains(&ip))
}

/// Finds the tenant Endpoints and EndpointSlices to look at again when a host pod changes.
pub struct Users {
    endpoints: Option<Arc<Cache>>,
    slices: Option<Arc<Cache>>,
}

impl Users {
    /// Over the tenant caches of the syncer.
    pub fn new(tenant_caches: &HashMap<Kind, Arc<Cache>>) -> Users {
        Users {
            endpoints: tenant_caches.get(&Kind::Endpoints).cloned(),
            slices: tenant_caches.get(&Kind::EndpointSlice).cloned(),
        }
    }

    /// The keys of the tenant objects naming one of a host pod's addresses (called with the
    /// pod as it is now, or as it was when it is deleted).
    pub fn naming(&self, host_pod: &Value) -> Vec<Key> {
        let ips = pod_ips(host_pod);
        if ips.is_empty() {
            return Vec::new();
        }
        let mut out = Vec::new();
        for (kind, cache) in [
            (Kind::Endpoints, &self.endpoints),
            (Kind::EndpointSlice, &self.slices),
        ] {
            for obj in cache.iter().flat_map(|c| c.list()) {
                if names_any(&obj, &ips) {
                    let (namespace, name) = crate::cache::key_of(&obj);
                    out.push(Key {
                        kind,
                        namespace,
                        name,
                    });
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn special_addresses_are_named() {
        for bad in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "0.1.2.3",
            "169.254.169.254",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
        ] {
            let ip = parse_ip(bad).expect(bad);
            assert!(special(ip).is_some(), "{bad} was not special");
        }
        for good in [
            "10.244.0.10",
            "10.96.0.1",
            "192.168.1.1",
            "fd00::1",
            "2001:db8::1",
        ] {
            let ip = parse_ip(good).expect(good);
            assert_eq!(special(ip), None, "{good}");
        }
    }

    #[test]
    fn ambiguous_spellings_are_not_ips() {
        for bad in [
            "010.0.0.1",
            "10.0.0",
            "0x7f.0.0.1",
            "2130706433",
            "fe80::1%eth0",
            " 10.0.0.1",
            "localhost",
        ] {
            assert_eq!(parse_ip(bad), None, "{bad}");
        }
    }

    fn pod(name: &str, tenant: &str, phase: &str, ip: &str, host_network: bool) -> Arc<Value> {
        Arc::new(
            json!({"metadata": {"name": name, "uid": format!("uid-{name}"),
                "labels": {"fabrik.dev/tenant": tenant}},
            "spec": {"nodeName": "n1", "hostNetwork": host_network},
            "status": {"phase": phase, "podIP": ip, "podIPs": [{"ip": ip}], "hostIP": "10.0.0.1"}}),
        )
    }

    #[test]
    fn only_live_pod_network_addresses_of_the_tenant_count() {
        let pods = vec![
            pod("a", "t", "Running", "10.244.0.10", false),
            pod("b", "t", "Pending", "10.244.0.11", false),
            pod("done", "t", "Succeeded", "10.244.0.12", false),
            pod("failed", "t", "Failed", "10.244.0.13", false),
            pod("other", "u", "Running", "10.244.0.14", false),
            pod("hostnet", "t", "Running", "10.0.0.1", true),
            pod("lies", "t", "Running", "127.0.0.1", false),
        ];
        let a = PodAddresses::from_host_pods(&pods, "t");
        assert!(a.allows("10.244.0.10"));
        assert!(a.allows("10.244.0.11"));
        assert_eq!(a.get("10.244.0.10").map(|p| p.name.as_str()), Some("a"));
        for refused in [
            "10.244.0.12",
            "10.244.0.13",
            "10.244.0.14",
            "10.0.0.1",
            "127.0.0.1",
            "10.96.0.1",
            "not-an-ip",
        ] {
            assert!(!a.allows(refused), "{refused}");
        }
    }

    #[test]
    fn objects_naming_an_address_are_found() {
        let ep = json!({"subsets": [{"notReadyAddresses": [{"ip": "10.244.0.10"}]}]});
        let slice = json!({"endpoints": [{"addresses": ["10.244.0.11"]}]});
        let ips: BTreeSet<IpAddr> = pod_ips(&pod("a", "t", "Running", "10.244.0.10", false));
        assert!(names_any(&ep, &ips));
        assert!(!names_any(&slice, &ips));
        assert!(!names_any(&ep, &BTreeSet::new()));
    }
}
