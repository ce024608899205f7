//! A consistent-hash ring: keys (shard names) onto members (replica ids).
//!
//! Each member is placed at [`VNODES`] points of a 64-bit circle (SHA-256 of `member#i`); a key
//! belongs to the first point at or after its own hash, wrapping around. The hash is SHA-256,
//! not `std`'s hasher, so every replica — whatever its build — computes the same placement.
//!
//! Guarantees: the owner of a key depends only on the set of members (not on their order);
//! when a member joins, only keys moving *to* it change owner; when one leaves, only its keys
//! move. With [`VNODES`] points per member the load is spread within a few tens of percent.

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

/// Points per member on the circle.
pub const VNODES: u32 = 64;

/// The first 8 bytes of SHA-256 of `text`, as a number.
pub fn hash64(text: &str) -> u64 {
    let digest = Sha256::digest(text.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(first)
}

/// The ring over a set of members.
#[derive(Clone, Debug, Default)]
pub struct Ring {
    points: BTreeMap<u64, String>,
}

impl Ring {
    /// A ring over `members` (duplicates count once).
    pub fn new<I, S>(members: I) -> Ring
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut points: BTreeMap<u64, String> = BTreeMap::new();
        for member in members {
            let member = member.as_ref();
            for i in 0..VNODES {
                let point = hash64(&format!("{member}#{i}"));
                // A collision (vanishingly rare) is settled the same way everywhere: the
                // smaller name keeps the point.
                let keep = match points.get(&point) {
                    Some(existing) => member < existing.as_str(),
                    None => true,
                };
                if keep {
                    points.insert(point, member.to_string());
                }
            }
        }
        Ring { points }
    }

    /// The member owning `key`; None for an empty ring.
    pub fn owner(&self, key: &str) -> Option<&str> {
        let h = hash64(key);
        self.points
            .range(h..)
            .next()
            .or_else(|| self.points.iter().next())
            .map(|(_, m)| m.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys() -> Vec<String> {
        (0..1000).map(|i| format!("shard-{i}")).collect()
    }

    fn owners(ring: &Ring) -> Vec<String> {
        keys()
            .iter()
            .map(|k| ring.owner(k).unwrap_or_default().to_string())
            .collect()
    }

    #[test]
    fn an_empty_ring_owns_nothing() {
        assert_eq!(Ring::new(Vec::<String>::new()).owner("shard-0"), None);
        assert_eq!(Ring::new(["a"]).owner("shard-0"), Some("a"));
    }

    #[test]
    fn assignment_is_stable_and_independent_of_order() {
        let a = Ring::new(["r0", "r1", "r2"]);
        let b = Ring::new(["r2", "r0", "r1", "r0"]);
        assert_eq!(owners(&a), owners(&b));
        // Fixed by the hash: the same on every build and machine.
        assert_eq!(hash64("shard-0"), hash64("shard-0"));
        assert_ne!(hash64("shard-0"), hash64("shard-1"));
    }

    #[test]
    fn every_member_gets_a_fair_share() {
        let ring = Ring::new(["r0", "r1", "r2"]);
        let all = owners(&ring);
        for m in ["r0", "r1", "r2"] {
            let n = all.iter().filter(|o| *o == m).count();
            assert!((200..=470).contains(&n), "{m} owns {n} of 1000");
        }
        // The ids the end-to-end test uses each own some of the 16 shards.
        let shards: Vec<String> = (0..16)
            .map(|i| {
                ring.owner(&format!("shard-{i}"))
                    .unwrap_or_default()
                    .to_string()
            })
            .collect();
        for m in ["r0", "r1", "r2"] {
            assert!(shards.iter().any(|o| o == m), "{m} owns none of {shards:?}");
        }
        let two = Ring::new(["r0", "r1"]);
        for m in ["r0", "r1"] {
            assert!(
                (0..16).any(|i| two.owner(&format!("shard-{i}")) == Some(m)),
                "{m} owns none of 16 shards"
            );
        }
    }

    #[test]
    fn a_joining_member_only_takes_keys() {
        let before = owners(&Ring::new(["r0", "r1", "r2"]));
        let after = owners(&Ring::new(["r0", "r1", "r2", "r3"]));
        let mut moved = 0;
        for (b, a) in before.iter().zip(&after) {
            if b != a {
                assert_eq!(a, "r3", "a key moved between old members");
                moved += 1;
            }
        }
        // About a quarter moves to the new member; none moves otherwise.
        assert!((150..=350).contains(&moved), "{moved} keys moved");
    }

    #[test]
    fn a_leaving_member_only_gives_its_keys_away() {
        let before = owners(&Ring::new(["r0", "r1", "r2"]));
        let after = owners(&Ring::new(["r0", "r2"]));
        for (b, a) in before.iter().zip(&after) {
            if b != "r1" {
                assert_eq!(a, b, "a key of a remaining member moved");
            } else {
                assert_ne!(a, "r1");
            }
        }
    }
}
