//! Address ranges and host patterns: the entries of allow-lists that name where a tenant's
//! traffic may go (a DNS name, every name under a `*.` suffix, an IP address or a CIDR).

use std::net::IpAddr;

/// One entry of a Tenant's list of webhook targets.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Allowed {
    /// A DNS name, exactly.
    Host(String),
    /// Every name under a suffix (`*.example.com` → `.example.com`).
    Suffix(String),
    /// An address range (an IP is a /32 or /128).
    Net(Cidr),
}

impl Allowed {
    /// Parses one entry: `name`, `*.suffix`, `IP` or `IP/prefix`.
    pub fn parse(s: &str) -> Result<Allowed, String> {
        let s = s.trim();
        if let Some(suffix) = s.strip_prefix("*.") {
            check_dns_name(suffix)?;
            return Ok(Allowed::Suffix(format!(".{}", suffix.to_ascii_lowercase())));
        }
        if s.contains('/') || s.parse::<IpAddr>().is_ok() {
            return Cidr::parse(s).map(Allowed::Net);
        }
        check_dns_name(s)?;
        Ok(Allowed::Host(s.to_ascii_lowercase()))
    }
}

fn check_dns_name(s: &str) -> Result<(), String> {
    let errs = crate::validation::dns1123_subdomain(&s.to_ascii_lowercase());
    match errs.first() {
        None => Ok(()),
        Some(e) => Err(format!("{s:?} is not a DNS name, IP address or CIDR: {e}")),
    }
}

/// An IPv4 or IPv6 range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    addr: IpAddr,
    prefix: u8,
}

impl Cidr {
    /// Parses `IP/prefix` or a single `IP`.
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (ip, prefix) = match s.split_once('/') {
            Some((ip, p)) => (ip, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = ip
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| format!("{s:?}: the prefix length must be 0 to {max}"))?,
        };
        Ok(Cidr { addr, prefix })
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse() {
        assert_eq!(
            Allowed::parse("Hooks.Example.com"),
            Ok(Allowed::Host("hooks.example.com".into()))
        );
        assert_eq!(
            Allowed::parse("*.example.com"),
            Ok(Allowed::Suffix(".example.com".into()))
        );
        assert!(matches!(Allowed::parse("10.1.0.0/16"), Ok(Allowed::Net(_))));
        assert!(matches!(Allowed::parse("2001:db8::1"), Ok(Allowed::Net(_))));
        for bad in ["10.0.0.0/33", "exa mple", "", "*.", "1.2.3.4/x"] {
            assert!(Allowed::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn cidrs_contain() {
        let c = Cidr::parse("10.0.0.0/8").expect("cidr");
        assert!(c.contains("10.255.0.1".parse().expect("ip")));
        assert!(!c.contains("11.0.0.1".parse().expect("ip")));
        let all = Cidr::parse("0.0.0.0/0").expect("cidr");
        assert!(all.contains("1.2.3.4".parse().expect("ip")));
        let v6 = Cidr::parse("fd00::/8").expect("cidr");
        assert!(v6.contains("fd12::1".parse().expect("ip")));
        assert!(!v6.contains("10.0.0.1".parse().expect("ip")));
    }
}
