//! Where a cluster's webhooks may be called: the address rules that keep a tenant's webhook
//! from reaching the control plane, the host or another tenant (server-side request forgery).
//!
//! The host cluster's own webhooks are [`Targets::open`]: its administrator may call anything.
//! A tenant's are [`Targets::restricted`]:
//! - a `url` webhook's host must be on the Tenant's list of webhook targets (a DNS name, a
//!   `*.` suffix, an IP address or a CIDR), checked when the configuration is written
//!   ([`Targets::check_url`]) and again at every call;
//! - every address the call connects to — an IP in the URL, or each DNS answer, checked after
//!   resolution so a name cannot be re-pointed at a forbidden address between check and call —
//!   is refused when loopback, link-local (cloud metadata), unspecified, multicast or
//!   broadcast, one of the control plane's own addresses, or a private or shared range (which
//!   hold the host's Service and pod networks) that no CIDR on the Tenant's list names.
//!
//! A `service` webhook is not subject to these rules: it resolves to the tenant's own Service
//! on the host ([`super::Backends`]), never to an address the tenant wrote.

use std::net::IpAddr;
use std::sync::RwLock;

pub use fabrik_machinery::net::{Allowed, Cidr};

/// Ranges a tenant may never call, whatever its list says.
fn never(ip: IpAddr) -> Option<&'static str> {
    let ip = canonical(ip);
    if ip.is_loopback() {
        return Some("a loopback address");
    }
    if ip.is_unspecified() {
        return Some("an unspecified address");
    }
    if ip.is_multicast() {
        return Some("a multicast address");
    }
    match ip {
        IpAddr::V4(v4) if v4.is_link_local() => Some("a link-local address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("a broadcast address"),
        IpAddr::V6(v6) if v6.segments()[0] & 0xffc0 == 0xfe80 => Some("a link-local address"),
        _ => None,
    }
}

/// Ranges a tenant may call only where its list names them (they hold the host's own
/// networks: Service and pod CIDRs, node addresses).
fn internal(ip: IpAddr) -> bool {
    const RANGES: [&str; 7] = [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "198.18.0.0/15",
        "fc00::/7",
        "64:ff9b::/96",
    ];
    let ip = canonical(ip);
    RANGES
        .iter()
        .filter_map(|r| Cidr::parse(r).ok())
        .any(|c| c.contains(ip))
}

/// IPv4-mapped IPv6 addresses are judged as the IPv4 address they carry.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The address rules of one cluster's webhooks.
#[derive(Debug, Default)]
pub struct Targets {
    restricted: bool,
    allowed: RwLock<Vec<Allowed>>,
    own: RwLock<Vec<IpAddr>>,
}

impl Targets {
    /// No rules: the host cluster's administrator may call anything.
    pub fn open() -> Targets {
        Targets::default()
    }

    /// A tenant's rules, with its list of allowed targets.
    pub fn restricted(allowed: Vec<Allowed>) -> Targets {
        Targets {
            restricted: true,
            allowed: RwLock::new(allowed),
            own: RwLock::default(),
        }
    }

    /// Whether the rules apply (a tenant's cluster).
    pub fn is_restricted(&self) -> bool {
        self.restricted
    }

    /// Replaces the list of allowed targets (the Tenant's spec changed).
    pub fn set_allowed(&self, allowed: Vec<Allowed>) {
        if let Ok(mut a) = self.allowed.write() {
            *a = allowed;
        }
    }

    /// The control plane's own addresses, refused as targets.
    pub fn set_own(&self, own: Vec<IpAddr>) {
        if let Ok(mut o) = self.own.write() {
            *o = own;
        }
    }

    fn allowed(&self) -> Vec<Allowed> {
        self.allowed.read().map(|a| a.clone()).unwrap_or_default()
    }

    fn nets(&self) -> Vec<Cidr> {
        self.allowed()
            .into_iter()
            .filter_map(|a| match a {
                Allowed::Net(c) => Some(c),
                _ => None,
            })
            .collect()
    }

    /// Whether a `url` webhook may name `url`'s host (when its configuration is written, and
    /// before each call).
    pub fn check_url(&self, url: &reqwest::Url) -> Result<(), String> {
        if !self.restricted {
            return Ok(());
        }
        let Some(host) = url.host_str() else {
            return Err("the URL names no host".into());
        };
        if let Ok(ip) = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<IpAddr>()
        {
            if !self
                .nets()
                .iter()
                .any(|c| c.contains(canonical(ip)) || c.contains(ip))
            {
                return Err(format!(
                    "address {ip} is not among the tenant's webhook targets (spec.isolation.webhookTargets)"
                ));
            }
            return self.check_ip(ip);
        }
        let host = host.trim_end_matches('.').to_ascii_lowercase();
        let listed = self.allowed().iter().any(|a| match a {
            Allowed::Host(h) => *h == host,
            Allowed::Suffix(s) => host.ends_with(s.as_str()),
            Allowed::Net(_) => false,
        });
        if listed {
            Ok(())
        } else {
            Err(format!(
                "host {host:?} is not among the tenant's webhook targets (spec.isolation.webhookTargets)"
            ))
        }
    }

    /// Whether a call may connect to `ip` (an address in a URL, or a DNS answer).
    pub fn check_ip(&self, ip: IpAddr) -> Result<(), String> {
        if !self.restricted {
            return Ok(());
        }
        if let Some(what) = never(ip) {
            return Err(format!(
                "{ip} is {what}, which tenant webhooks may not call"
            ));
        }
        if self.own.read().is_ok_and(|o| o.contains(&canonical(ip))) {
            return Err(format!(
                "{ip} is an address of the control plane, which tenant webhooks may not call"
            ));
        }
        let listed = self
            .nets()
            .iter()
            .any(|c| c.contains(canonical(ip)) || c.contains(ip));
        if internal(ip) && !listed {
            return Err(format!(
                "{ip} is in a private range, which tenant webhooks may call only where the \
                 tenant's webhook targets name it"
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("url")
    }

    #[test]
    fn the_host_cluster_may_call_anything() {
        let t = Targets::open();
        assert!(t.check_url(&url("https://127.0.0.1/x")).is_ok());
        assert!(t.check_ip("169.254.169.254".parse().expect("ip")).is_ok());
    }

    #[test]
    fn a_tenant_may_call_only_listed_hosts_and_public_addresses() {
        let t = Targets::restricted(vec![
            Allowed::parse("hooks.example.com").expect("entry"),
            Allowed::parse("*.corp.example").expect("entry"),
            Allowed::parse("10.20.0.0/16").expect("entry"),
            Allowed::parse("127.0.0.0/8").expect("entry"),
        ]);
        t.set_own(vec!["203.0.113.5".parse().expect("ip")]);
        assert!(t.check_url(&url("https://hooks.example.com/v")).is_ok());
        assert!(t.check_url(&url("https://a.corp.example/v")).is_ok());
        assert!(t.check_url(&url("https://other.example.com/v")).is_err());
        assert!(t.check_url(&url("https://10.20.1.1/v")).is_ok());
        assert!(t.check_url(&url("https://198.51.100.7/v")).is_err());
        assert!(t.check_url(&url("https://127.0.0.1:8443/v")).is_err());
        for refused in [
            "127.0.0.1",
            "169.254.169.254",
            "10.96.0.1",
            "192.168.1.1",
            "0.0.0.0",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "fe80::1",
            "fd00::1",
            "224.0.0.1",
            "203.0.113.5",
        ] {
            let ip: IpAddr = refused.parse().expect("ip");
            assert!(t.check_ip(ip).is_err(), "{refused}");
        }
        for allowed in ["10.20.3.4", "198.51.100.7", "2001:db8::5"] {
            assert!(
                t.check_ip(allowed.parse().expect("ip")).is_ok(),
                "{allowed}"
            );
        }
    }
}
