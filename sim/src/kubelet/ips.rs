//! Pod IPs of one simulated node: node `i` of pod network `A.B` (by default 10.244) owns
//! `A.B.<i>.0/24` and hands out `.2`–`.254`, the next free one after the last handed out (as
//! host-local IPAM does, so that an address just released — a finished pod's — is not at once
//! someone else's while Endpoints may still name it).
//! (A pod network in 127.0.0.0/8 makes every simulated pod's address one a test on the same
//! machine can send from, as the pod would.)

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

/// The pod address range of one node.
#[derive(Clone, Debug)]
pub struct PodIps {
    network: [u8; 2],
    subnet: u8,
    used: BTreeSet<u8>,
    /// The last address handed out.
    last: u8,
}

impl PodIps {
    /// The default pod network, 10.244.0.0/16.
    pub const DEFAULT_NETWORK: [u8; 2] = [10, 244];

    /// The range of node `index` (0-based, at most 255 nodes) in pod network `A.B`.
    pub fn new(network: [u8; 2], index: u8) -> PodIps {
        PodIps {
            network,
            subnet: index,
            used: BTreeSet::new(),
            last: 1,
        }
    }

    /// Whether `ip` belongs to this node's range.
    pub fn owns(&self, ip: &str) -> Option<u8> {
        let ip: Ipv4Addr = ip.parse().ok()?;
        let [a, b, c, d] = ip.octets();
        ([a, b] == self.network && c == self.subnet && (2..=254).contains(&d)).then_some(d)
    }

    /// Marks an address (already in a pod's status) as taken.
    pub fn reserve(&mut self, ip: &str) -> bool {
        match self.owns(ip) {
            Some(d) => {
                self.used.insert(d);
                true
            }
            None => false,
        }
    }

    /// The next free address after the last one handed out, or `None` when all 253 are taken.
    pub fn allocate(&mut self) -> Option<String> {
        let d = (self.last.saturating_add(1)..=254u8)
            .chain(2..=self.last.min(254))
            .find(|d| !self.used.contains(d))?;
        self.used.insert(d);
        self.last = d;
        let [a, b] = self.network;
        Some(Ipv4Addr::new(a, b, self.subnet, d).to_string())
    }

    /// Returns an address.
    pub fn release(&mut self, ip: &str) {
        if let Some(d) = self.owns(ip) {
            self.used.remove(&d);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocate_release_reuse() {
        let mut ips = PodIps::new(PodIps::DEFAULT_NETWORK, 1);
        assert_eq!(ips.allocate().as_deref(), Some("10.244.1.2"));
        assert_eq!(ips.allocate().as_deref(), Some("10.244.1.3"));
        ips.release("10.244.1.2");
        // Not at once again: the next one, round the range.
        assert_eq!(ips.allocate().as_deref(), Some("10.244.1.4"));
        assert!(!ips.reserve("10.244.2.9"));
        assert!(ips.reserve("10.244.1.9"));
        for _ in 0..249 {
            assert!(ips.allocate().is_some());
        }
        // Only .2 is left, found after wrapping round.
        assert_eq!(ips.allocate().as_deref(), Some("10.244.1.2"));
        assert_eq!(ips.allocate(), None);
        let mut lo = PodIps::new([127, 244], 3);
        assert_eq!(lo.allocate().as_deref(), Some("127.244.3.2"));
        assert!(!lo.reserve("10.244.3.9"));
    }
}
