//! Storage quota of the etcd backend: a keyspace's usage and limits live in etcd, next to its
//! data, so every replica enforces the same quota on the same numbers.
//!
//! Layout under `P/usage/<keyspace>/`:
//! * `limits`: `"<bytes>,<objects>"` (decimal, empty = unlimited), written by
//!   [`Store::set_limits`](crate::Store::set_limits);
//! * `<incarnation>/s<NN>`: one of [`STRIPES`] (64) usage counters `"<bytes>,<objects>"`. A key
//!   always counts in the same stripe (a hash of the key), so a write updates one small record
//!   in the same transaction as the data, and concurrent writes of different keys rarely
//!   contend. The incarnation (the marker's create revision) keeps a re-created keyspace from
//!   inheriting a dropped one's counters;
//! * `<incarnation>/init`: present once the counters hold the keyspace's usage (a keyspace
//!   written before usage was recorded is counted once, when first opened).
//!
//! Every write first reads the counters, the limits and (update, delete) the key, checks the
//! quota ([`crate::quota::check`]) and then commits with a compare on its stripe's mod
//! revision (and on the key); a concurrent change makes it read again. Close to a limit
//! (within [`STRICT_BYTES`] or [`STRICT_OBJECTS`]) it compares *every* stripe, so concurrent
//! writes from any number of replicas can never take the keyspace over its limit; further
//! away, concurrent writes to other stripes can add at most what fits in that margin.

use std::collections::HashMap;

use etcd_client::{Compare, CompareOp, GetOptions, Txn, TxnOp, TxnOpResponse};

use super::client::retry;
use super::keyspace::Keyspace;
use super::layout::{self, KeyspaceKeys};
use crate::error::{Result, StoreError};
use crate::quota::{StorageLimits, StorageUsage};
use crate::types::KeyValue;

/// Usage counters per keyspace.
pub(crate) const STRIPES: u64 = 64;
/// Within this many bytes of the bytes limit, writes compare every stripe.
pub(crate) const STRICT_BYTES: u64 = 64 * 1024 * 1024;
/// Within this many objects of the objects limit, writes compare every stripe.
pub(crate) const STRICT_OBJECTS: u64 = 1024;

/// `P/usage/<keyspace>/`: everything about the keyspace's quota.
pub(crate) fn root(keys: &KeyspaceKeys) -> &str {
    &keys.usage
}

fn limits_key(keys: &KeyspaceKeys) -> String {
    format!("{}limits", keys.usage)
}

fn counters_prefix(keys: &KeyspaceKeys, incarnation: i64) -> String {
    format!("{}{incarnation}/", keys.usage)
}

fn stripe_key(keys: &KeyspaceKeys, incarnation: i64, stripe: u64) -> String {
    format!("{}s{stripe:02}", counters_prefix(keys, incarnation))
}

fn init_key(keys: &KeyspaceKeys, incarnation: i64) -> String {
    format!("{}init", counters_prefix(keys, incarnation))
}

/// The stripe a key counts in (FNV-1a, stable across processes and versions).
pub(crate) fn stripe_of(key: &str) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in key.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash % STRIPES
}

fn encode_pair(a: Option<u64>, b: Option<u64>) -> String {
    let show = |n: Option<u64>| n.map(|n| n.to_string()).unwrap_or_default();
    format!("{},{}", show(a), show(b))
}

fn decode_pair(raw: &[u8]) -> Option<(Option<u64>, Option<u64>)> {
    let text = std::str::from_utf8(raw).ok()?;
    let (a, b) = text.split_once(',')?;
    let parse = |s: &str| -> Option<Option<u64>> {
        if s.is_empty() {
            Some(None)
        } else {
            s.parse().ok().map(Some)
        }
    };
    Some((parse(a)?, parse(b)?))
}

fn encode_usage(usage: StorageUsage) -> String {
    encode_pair(Some(usage.bytes), Some(usage.objects))
}

/// What a write reads before committing.
#[derive(Debug)]
pub(crate) struct View {
    /// Each stripe's usage and mod revision (0 = absent).
    stripes: HashMap<u64, (StorageUsage, i64)>,
    /// The keyspace's limits.
    pub(crate) limits: StorageLimits,
    /// The key's current record, when asked for.
    pub(crate) key: Option<KeyValue>,
}

impl View {
    /// The keyspace's usage: the sum of its stripes.
    pub(crate) fn total(&self) -> StorageUsage {
        self.stripes
            .values()
            .fold(StorageUsage::default(), |sum, (usage, _)| StorageUsage {
                bytes: sum.bytes.saturating_add(usage.bytes),
                objects: sum.objects.saturating_add(usage.objects),
            })
    }

    /// The compares and the counter update of a write to `key` that moves the usage by
    /// (`old` bytes -> `new` bytes, `objects` delta).
    pub(crate) fn guard(
        &self,
        ks: &Keyspace,
        key: &str,
        (old, new, objects): (u64, u64, i64),
    ) -> (Vec<Compare>, TxnOp) {
        let stripe = stripe_of(key);
        let (own, _) = self.stripes.get(&stripe).copied().unwrap_or_default();
        let total = self.total();
        let near = self
            .limits
            .bytes
            .is_some_and(|l| total.bytes.saturating_add(STRICT_BYTES) > l)
            || self
                .limits
                .objects
                .is_some_and(|l| total.objects.saturating_add(STRICT_OBJECTS) > l);
        let compared: Vec<u64> = if near {
            (0..STRIPES).collect()
        } else {
            vec![stripe]
        };
        let compares = compared
            .into_iter()
            .map(|s| {
                let seen = self.stripes.get(&s).map_or(0, |(_, rev)| *rev);
                Compare::mod_revision(
                    stripe_key(&ks.keys, ks.incarnation, s),
                    CompareOp::Equal,
                    seen,
                )
            })
            .collect();
        let updated = crate::quota::apply(own, old, new, objects);
        let put = TxnOp::put(
            stripe_key(&ks.keys, ks.incarnation, stripe),
            encode_usage(updated),
            None,
        );
        (compares, put)
    }
}

/// Read the counters, the limits and (when `data_key` is Some) the key, in one read.
pub(crate) async fn read_view(ks: &Keyspace, data_key: Option<&str>) -> Result<View> {
    let prefix = counters_prefix(&ks.keys, ks.incarnation);
    let limits = limits_key(&ks.keys);
    let response = retry(ks.shared.retry_timeout, "txn", |_| {
        let mut client = ks.shared.client();
        let end = layout::prefix_end(prefix.as_bytes());
        let mut ops = vec![
            TxnOp::get(prefix.clone(), Some(GetOptions::new().with_range(end))),
            TxnOp::get(limits.clone(), None),
        ];
        if let Some(key) = data_key {
            ops.push(TxnOp::get(key, None));
        }
        let txn = Txn::new().and_then(ops);
        async move { client.txn(txn).await }
    })
    .await?;
    let reads: Vec<_> = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    let corrupt = || StoreError::Corrupt {
        keyspace: ks.name.clone(),
        what: "usage record",
    };
    let (counters, limits) = match reads.as_slice() {
        [counters, limits, ..] => (counters, limits),
        _ => {
            return Err(StoreError::EtcdProtocol {
                op: "txn",
                detail: "usage read returned too few results".to_owned(),
            })
        }
    };
    let mut stripes = HashMap::new();
    for kv in counters.kvs() {
        let Some(name) = kv.key().strip_prefix(prefix.as_bytes()) else {
            continue;
        };
        let Some(stripe) = name
            .strip_prefix(b"s")
            .and_then(|n| std::str::from_utf8(n).ok())
            .and_then(|n| n.parse::<u64>().ok())
        else {
            continue;
        };
        let (Some(bytes), Some(objects)) = decode_pair(kv.value()).ok_or_else(corrupt)? else {
            return Err(corrupt());
        };
        stripes.insert(stripe, (StorageUsage { bytes, objects }, kv.mod_revision()));
    }
    let limits = match limits.kvs().first() {
        None => StorageLimits::UNLIMITED,
        Some(kv) => {
            let (bytes, objects) = decode_pair(kv.value()).ok_or_else(corrupt)?;
            StorageLimits { bytes, objects }
        }
    };
    let key = match reads.get(2).and_then(|get| get.kvs().first()) {
        Some(kv) => Some(ks.key_value(kv)?),
        None => None,
    };
    Ok(View {
        stripes,
        limits,
        key,
    })
}

/// Store `limits` for every replica.
pub(crate) async fn set_limits(ks: &Keyspace, limits: StorageLimits) -> Result<()> {
    ks.check_live()?;
    let key = limits_key(&ks.keys);
    let value = encode_pair(limits.bytes, limits.objects);
    retry(ks.shared.retry_timeout, "put", |_| {
        let mut client = ks.shared.client();
        let (key, value) = (key.clone(), value.clone());
        async move { client.put(key, value, None).await }
    })
    .await?;
    Ok(())
}

/// Make sure the counters of `ks` hold its usage: count a keyspace written before usage was
/// recorded (once; a keyspace created now is counted by an empty scan).
pub(crate) async fn ensure_counted(ks: &Keyspace) -> Result<()> {
    let init = init_key(&ks.keys, ks.incarnation);
    for _ in 0..8 {
        let found = retry(ks.shared.retry_timeout, "range", |_| {
            let mut client = ks.shared.client();
            let init = init.clone();
            async move { client.get(init, None).await }
        })
        .await?;
        if !found.kvs().is_empty() {
            return Ok(());
        }
        // Count every key at one revision, then record the counts only if no key has changed
        // since (a compare over the whole data range) and nobody else counted meanwhile.
        let mut sums: HashMap<u64, StorageUsage> = HashMap::new();
        let mut start = ks.keys.data.clone().into_bytes();
        let end = layout::prefix_end(ks.keys.data.as_bytes());
        let mut at: Option<i64> = None;
        loop {
            let mut options = GetOptions::new().with_range(end.clone()).with_limit(500);
            if let Some(rev) = at {
                options = options.with_revision(rev);
            }
            let page = retry(ks.shared.retry_timeout, "range", |_| {
                let mut client = ks.shared.client();
                let (start, options) = (start.clone(), options.clone());
                async move { client.get(start, Some(options)).await }
            })
            .await?;
            if at.is_none() {
                at = page.header().map(|h| h.revision());
            }
            for kv in page.kvs() {
                let record = ks.key_value(kv)?;
                let sum = sums.entry(stripe_of(&record.key)).or_default();
                *sum = crate::quota::apply(
                    *sum,
                    0,
                    crate::quota::object_bytes(&record.key, record.value.len()),
                    1,
                );
            }
            match page.kvs().last() {
                Some(last) if page.more() => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        let at = at.ok_or_else(|| super::backend::missing_header("range"))?;
        let mut ops: Vec<TxnOp> = sums
            .iter()
            .map(|(stripe, usage)| {
                TxnOp::put(
                    stripe_key(&ks.keys, ks.incarnation, *stripe),
                    encode_usage(*usage),
                    None,
                )
            })
            .collect();
        ops.push(TxnOp::put(init.clone(), Vec::new(), None));
        let compares = [
            Compare::create_revision(init.clone(), CompareOp::Equal, 0),
            Compare::create_revision(ks.keys.marker.clone(), CompareOp::Equal, ks.incarnation),
            Compare::mod_revision(ks.keys.data.clone(), CompareOp::Less, at.saturating_add(1))
                .with_range(end.clone()),
        ];
        let response = retry(ks.shared.retry_timeout, "txn", |_| {
            let mut client = ks.shared.client();
            let txn = Txn::new().when(compares.clone()).and_then(ops.clone());
            async move { client.txn(txn).await }
        })
        .await?;
        if response.succeeded() {
            return Ok(());
        }
    }
    Err(StoreError::EtcdProtocol {
        op: "txn",
        detail: format!(
            "could not count the usage of keyspace {:?}: it kept changing",
            ks.name
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_roundtrip() {
        assert_eq!(decode_pair(b"12,"), Some((Some(12), None)));
        assert_eq!(decode_pair(b",7"), Some((None, Some(7))));
        assert_eq!(
            decode_pair(encode_pair(Some(1), Some(2)).as_bytes()),
            Some((Some(1), Some(2)))
        );
        assert_eq!(decode_pair(b"x,1"), None);
        assert_eq!(decode_pair(b"1"), None);
    }

    #[test]
    fn stripes_are_stable_and_spread() {
        assert_eq!(stripe_of("/a"), stripe_of("/a"));
        let used: std::collections::HashSet<u64> =
            (0..2000).map(|i| stripe_of(&format!("/k/{i}"))).collect();
        assert_eq!(used.len() as u64, STRIPES);
    }
}
