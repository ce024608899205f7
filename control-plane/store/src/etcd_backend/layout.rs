//! Where a keyspace's data lives in etcd's flat key space, and the conversions between etcd's
//! records and the store's.
//!
//! Layout under the configured prefix `P` (default `/fabrik`):
//! * `P/data/<keyspace>/<key>`: the value of `<key>` in `<keyspace>`, stored as is;
//! * `P/keyspaces/<keyspace>`: the keyspace's marker (empty value). Its create revision is the
//!   keyspace's *incarnation*: every write compares it, so a handle on a dropped (and maybe
//!   re-created) keyspace can never write into it;
//! * `P/usage/<keyspace>/...`: the keyspace's quota limits and usage counters (see
//!   [`usage`](super::usage));
//! * `P/compacted`: the revision the last compaction by Fabrik went to (decimal), the source of
//!   [`Store::compacted_revision`](crate::Store::compacted_revision).
//!
//! Keyspace names are `[A-Za-z0-9._-]`, so no keyspace's data range contains another's.

use bytes::Bytes;

use crate::error::{Result, StoreError};
use crate::types::{KeyValue, Revision};

/// The etcd keys of one keyspace.
#[derive(Clone, Debug)]
pub(crate) struct KeyspaceKeys {
    /// `P/data/<keyspace>/`: every data key starts with it.
    pub(crate) data: String,
    /// `P/keyspaces/<keyspace>`.
    pub(crate) marker: String,
    /// `P/usage/<keyspace>/`: quota limits and usage counters (see [`usage`](super::usage)).
    pub(crate) usage: String,
}

impl KeyspaceKeys {
    /// The keys of keyspace `name` under root `prefix` (no trailing slash).
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        Self {
            data: format!("{prefix}/data/{name}/"),
            marker: format!("{}{name}", markers_root(prefix)),
            usage: format!("{prefix}/usage/{name}/"),
        }
    }

    /// The etcd key of store key `key`.
    pub(crate) fn data_key(&self, key: &str) -> String {
        format!("{}{key}", self.data)
    }

    /// The store key of etcd key `raw`, None if `raw` is not in this keyspace or not UTF-8.
    pub(crate) fn store_key<'a>(&self, raw: &'a [u8]) -> Option<&'a str> {
        let rest = raw.strip_prefix(self.data.as_bytes())?;
        std::str::from_utf8(rest).ok()
    }
}

/// `P/keyspaces/`: the prefix of every keyspace marker.
pub(crate) fn markers_root(prefix: &str) -> String {
    format!("{prefix}/keyspaces/")
}

/// `P/compacted`.
pub(crate) fn compacted_key(prefix: &str) -> String {
    format!("{prefix}/compacted")
}

/// The configured prefix without trailing slashes (`"/"` and `""` become `""`).
pub(crate) fn normalize_prefix(prefix: &str) -> String {
    prefix.trim_end_matches('/').to_owned()
}

/// The smallest key greater than every key starting with `prefix` (etcd's range end for a
/// prefix); `[0]` (every key) when `prefix` is empty or all 0xff bytes.
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

/// An etcd revision as a store revision (etcd revisions are never negative).
pub(crate) fn revision(raw: i64) -> Revision {
    Revision::try_from(raw).unwrap_or(0)
}

/// A store revision as an etcd revision (saturating: no store reaches 2^63 writes).
pub(crate) fn etcd_revision(rev: Revision) -> i64 {
    i64::try_from(rev).unwrap_or(i64::MAX)
}

/// Convert an etcd record of this keyspace; fails with Corrupt for a key outside the
/// keyspace or not UTF-8 (nothing Fabrik writes).
pub(crate) fn key_value(
    keys: &KeyspaceKeys,
    keyspace: &str,
    kv: &etcd_client::KeyValue,
) -> Result<KeyValue> {
    let key = keys
        .store_key(kv.key())
        .ok_or_else(|| StoreError::Corrupt {
            keyspace: keyspace.to_owned(),
            what: "etcd key",
        })?;
    Ok(KeyValue {
        key: key.to_owned(),
        value: Bytes::copy_from_slice(kv.value()),
        create_revision: revision(kv.create_revision()),
        mod_revision: revision(kv.mod_revision()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_ranges() {
        let keys = KeyspaceKeys::new(&normalize_prefix("/fabrik/"), "tenant-a");
        assert_eq!(keys.data, "/fabrik/data/tenant-a/");
        assert_eq!(keys.marker, "/fabrik/keyspaces/tenant-a");
        assert_eq!(keys.data_key("/pods/x"), "/fabrik/data/tenant-a//pods/x");
        assert_eq!(
            keys.store_key(b"/fabrik/data/tenant-a//pods/x"),
            Some("/pods/x")
        );
        assert_eq!(keys.store_key(b"/fabrik/data/tenant-b//pods/x"), None);
        assert_eq!(prefix_end(b"/fabrik/data/a/"), b"/fabrik/data/a0");
        assert_eq!(prefix_end(b"a\xff\xff"), b"b");
        assert_eq!(prefix_end(b""), [0]);
        assert_eq!(prefix_end(b"\xff"), [0]);
        // Keyspace "a" never covers keyspace "a.b" or "ab".
        let a = KeyspaceKeys::new("/fabrik", "a");
        assert!(!"/fabrik/data/a.b/k".starts_with(&a.data));
        assert!(!"/fabrik/data/ab/k".starts_with(&a.data));
    }

    #[test]
    fn revisions_convert() {
        assert_eq!(revision(-1), 0);
        assert_eq!(revision(7), 7);
        assert_eq!(etcd_revision(u64::MAX), i64::MAX);
        assert_eq!(etcd_revision(9), 9);
    }
}
