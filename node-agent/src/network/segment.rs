//! The identifiers of a tenant segment, checked once at the edge: a VXLAN network identifier
//! ([`Vni`]), an IPv4 prefix ([`Ipv4Cidr`]) and the tenant name; and the device names derived
//! from a VNI (`vx-<vni>`, `br-<vni>`), which always fit Linux's 15-byte interface names.

use std::fmt;
use std::net::Ipv4Addr;
use std::str::FromStr;

use thiserror::Error;

/// Bad input for a tenant network.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum InputError {
    /// A VNI outside 1..=16777215 (24 bits; 0 is reserved).
    #[error("invalid VNI {0}: a VXLAN network identifier is 1..=16777215")]
    Vni(u64),
    /// A Tenant's `spec.network.segment` that is not a VNI (negative, 0 or over 24 bits).
    #[error("invalid VNI {0}: a VXLAN network identifier is 1..=16777215")]
    Segment(i64),
    /// A CIDR that does not parse or is unusable.
    #[error("invalid CIDR {input:?}: {reason}")]
    Cidr {
        /// What was given.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// A tenant name that cannot name a host namespace.
    #[error("invalid tenant name {input:?}: {reason}")]
    Tenant {
        /// What was given.
        input: String,
        /// What is wrong.
        reason: String,
    },
}

/// A VXLAN network identifier: 1..=16777215.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Vni(u32);

impl Vni {
    /// The largest VNI (2^24 - 1).
    pub const MAX: u32 = 0x00FF_FFFF;

    /// Checks `value`.
    pub fn new(value: u64) -> Result<Vni, InputError> {
        match u32::try_from(value) {
            Ok(v) if (1..=Vni::MAX).contains(&v) => Ok(Vni(v)),
            _ => Err(InputError::Vni(value)),
        }
    }

    /// Checks a Tenant's `spec.network.segment` (an `i64` in the API).
    pub fn from_segment(segment: i64) -> Result<Vni, InputError> {
        match u64::try_from(segment) {
            Ok(v) if Vni::new(v).is_ok() => Vni::new(v),
            _ => Err(InputError::Segment(segment)),
        }
    }

    /// The number.
    pub fn get(self) -> u32 {
        self.0
    }

    /// The node's VXLAN device of this segment: `vx-<vni>`.
    pub fn vxlan_name(self) -> String {
        format!("vx-{}", self.0)
    }

    /// The node's bridge of this segment: `br-<vni>`.
    pub fn bridge_name(self) -> String {
        format!("br-{}", self.0)
    }
}

impl fmt::Display for Vni {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// An IPv4 prefix whose address is the network address (`10.77.0.0/24`, not `10.77.0.5/24`),
/// with room for at least two hosts (prefix length ≤ 30).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Cidr {
    network: Ipv4Addr,
    prefix: u8,
}

impl Ipv4Cidr {
    /// The network address.
    pub fn network(&self) -> Ipv4Addr {
        self.network
    }

    /// The prefix length.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    fn nth(&self, n: u32) -> Ipv4Addr {
        Ipv4Addr::from(u32::from(self.network).wrapping_add(n))
    }

    fn size(&self) -> u64 {
        1u64 << (32 - u32::from(self.prefix))
    }

    /// The first host address (reserved for a gateway on the segment).
    pub fn first_host(&self) -> Ipv4Addr {
        self.nth(1)
    }

    /// The last host address (before broadcast).
    pub fn last_host(&self) -> Ipv4Addr {
        // size ≥ 4 (prefix ≤ 30), so size - 2 fits and is ≥ 2.
        self.nth(u32::try_from(self.size() - 2).unwrap_or(u32::MAX))
    }
}

impl fmt::Display for Ipv4Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

impl FromStr for Ipv4Cidr {
    type Err = InputError;

    fn from_str(input: &str) -> Result<Ipv4Cidr, InputError> {
        let bad = |reason: &str| InputError::Cidr {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let (addr, len) = input
            .split_once('/')
            .ok_or_else(|| bad("expected ADDRESS/PREFIX, e.g. 10.77.0.0/24"))?;
        let addr: Ipv4Addr = addr
            .parse()
            .map_err(|_| bad("the address is not an IPv4 address"))?;
        if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad("the prefix length is not a number"));
        }
        let prefix: u8 = len
            .parse()
            .map_err(|_| bad("the prefix length is not 0..=32"))?;
        if prefix > 32 {
            return Err(bad("the prefix length is not 0..=32"));
        }
        if prefix > 30 {
            return Err(bad(
                "a segment needs at least two host addresses (prefix ≤ 30)",
            ));
        }
        let mask = if prefix == 0 {
            0
        } else {
            u32::MAX << (32 - u32::from(prefix))
        };
        if u32::from(addr) & !mask != 0 {
            return Err(bad(&format!(
                "host bits are set: the network address is {}",
                Ipv4Addr::from(u32::from(addr) & mask)
            )));
        }
        Ok(Ipv4Cidr {
            network: addr,
            prefix,
        })
    }
}

/// Checks a tenant name: a DNS-1123 label short enough that `fabrik-<tenant>` is one too.
pub fn check_tenant(tenant: &str) -> Result<(), InputError> {
    let bad = |reason: &str| InputError::Tenant {
        input: tenant.to_string(),
        reason: reason.to_string(),
    };
    if tenant.is_empty() {
        return Err(bad("it is empty"));
    }
    let max = 63 - fabrik_api::HOST_NAMESPACE_PREFIX.len();
    if tenant.len() > max {
        return Err(bad(&format!("it is longer than {max} characters")));
    }
    let ok = tenant
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if !ok || tenant.starts_with('-') || tenant.ends_with('-') {
        return Err(bad(
            "it must be lower-case letters, digits and '-', starting and ending with a letter or digit",
        ));
    }
    Ok(())
}

/// The tenant's host namespace, `fabrik-<tenant>`.
pub use fabrik_api::naming::host_namespace;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vni_range_is_enforced() {
        assert_eq!(Vni::new(0), Err(InputError::Vni(0)));
        assert_eq!(Vni::new(16_777_216), Err(InputError::Vni(16_777_216)));
        assert_eq!(Vni::new(u64::MAX), Err(InputError::Vni(u64::MAX)));
        let v = Vni::new(16_777_215).expect("max");
        assert_eq!(v.vxlan_name(), "vx-16777215");
        assert!(v.vxlan_name().len() <= 15 && v.bridge_name().len() <= 15);
        assert_eq!(Vni::new(100).expect("100").bridge_name(), "br-100");
        assert_eq!(Vni::from_segment(100), Vni::new(100));
        for bad in [0, -1, 1 << 24, i64::MIN] {
            assert_eq!(Vni::from_segment(bad), Err(InputError::Segment(bad)));
        }
        assert!(Vni::from_segment(-5)
            .expect_err("-5")
            .to_string()
            .starts_with("invalid VNI -5: "));
        assert!(Vni::new(0)
            .expect_err("0")
            .to_string()
            .contains("1..=16777215"));
    }

    #[test]
    fn cidrs_parse_and_bad_ones_say_why() {
        let c: Ipv4Cidr = "10.77.0.0/24".parse().expect("cidr");
        assert_eq!(c.to_string(), "10.77.0.0/24");
        assert_eq!(c.first_host(), Ipv4Addr::new(10, 77, 0, 1));
        assert_eq!(c.last_host(), Ipv4Addr::new(10, 77, 0, 254));
        let c: Ipv4Cidr = "10.0.0.0/30".parse().expect("cidr");
        assert_eq!(c.last_host(), Ipv4Addr::new(10, 0, 0, 2));
        for (input, why) in [
            ("10.77.0.0", "ADDRESS/PREFIX"),
            ("10.77.0/24", "not an IPv4 address"),
            ("10.77.0.0/", "not a number"),
            ("10.77.0.0/+8", "not a number"),
            ("10.77.0.0/33", "0..=32"),
            ("10.77.0.0/31", "two host addresses"),
            ("10.77.0.5/24", "network address is 10.77.0.0"),
            ("fd00::/64", "not an IPv4 address"),
        ] {
            let e = input.parse::<Ipv4Cidr>().expect_err(input).to_string();
            assert!(e.contains(why), "{input}: {e}");
            assert!(e.contains(input), "{input}: {e}");
        }
    }

    #[test]
    fn tenant_names_are_dns_labels() {
        assert!(check_tenant("team-a").is_ok());
        assert!(check_tenant(&"a".repeat(56)).is_ok());
        for bad in ["", "Team", "a_b", "-a", "a-", &"a".repeat(57)] {
            assert!(check_tenant(bad).is_err(), "{bad}");
        }
        assert_eq!(host_namespace("team-a"), "fabrik-team-a");
    }
}
