//! Byte encodings of the records kept in a keyspace's sled trees.
//!
//! * objects tree: key bytes -> `create_rev (u64 BE) | mod_rev (u64 BE) | value`
//! * log tree: revision (u64 BE) -> `kind (u8) | create_rev (u64) | key_len (u32) | key |`
//!   then `value_len (u32) | value` for Create and Update, and
//!   `prev_mod_rev (u64) | prev_len (u32) | prev_value` for Update and Delete.
//!   A Delete's event value is its previous value, so it is stored once.
//! * meta tree: fixed names -> u64 BE; `usage` -> `bytes | objects | log_bytes` (3 u64 BE).
//!
//! Revisions are big-endian so sled's byte order is revision order. Decoding checks every
//! length and returns None on any mismatch (including trailing bytes); callers turn that into
//! [`StoreError::Corrupt`](crate::StoreError::Corrupt).

use bytes::Bytes;

use crate::quota::StorageUsage;
use crate::types::{Event, EventKind, KeyValue, Revision};

/// Meta key holding the current revision.
pub(crate) const META_CURRENT: &[u8] = b"current_revision";
/// Meta key holding the compacted revision.
pub(crate) const META_COMPACTED: &[u8] = b"compacted_revision";

/// Meta key holding the usage record (bytes and objects held, bytes of history kept).
pub(crate) const META_USAGE: &[u8] = b"usage";

/// Bytes an object record adds before the value (create and mod revisions).
pub(crate) const OBJECT_HEADER: usize = 16;

/// Encode the usage record.
pub(crate) fn encode_usage(usage: StorageUsage, log_bytes: u64) -> [u8; 24] {
    let mut out = [0u8; 24];
    for (slot, n) in out
        .chunks_exact_mut(8)
        .zip([usage.bytes, usage.objects, log_bytes])
    {
        slot.copy_from_slice(&n.to_be_bytes());
    }
    out
}

/// Decode the usage record.
pub(crate) fn decode_usage(bytes: &[u8]) -> Option<(StorageUsage, u64)> {
    let mut reader = Reader { bytes };
    let usage = StorageUsage {
        bytes: reader.u64()?,
        objects: reader.u64()?,
    };
    let log_bytes = reader.u64()?;
    reader.bytes.is_empty().then_some((usage, log_bytes))
}

/// The sled key of a log entry.
pub(crate) fn revision_key(rev: Revision) -> [u8; 8] {
    rev.to_be_bytes()
}

/// Decode a u64 stored big-endian (a log key or a meta value).
pub(crate) fn decode_u64(bytes: &[u8]) -> Option<u64> {
    let array: [u8; 8] = bytes.try_into().ok()?;
    Some(u64::from_be_bytes(array))
}

/// Encode an object record.
pub(crate) fn encode_object(create_rev: Revision, mod_rev: Revision, value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(16 + value.len());
    out.extend_from_slice(&create_rev.to_be_bytes());
    out.extend_from_slice(&mod_rev.to_be_bytes());
    out.extend_from_slice(value);
    out
}

/// Decode an object record stored under `key`.
pub(crate) fn decode_object(key: &str, bytes: &[u8]) -> Option<KeyValue> {
    let mut reader = Reader { bytes };
    let create_revision = reader.u64()?;
    let mod_revision = reader.u64()?;
    Some(KeyValue {
        key: key.to_owned(),
        value: Bytes::copy_from_slice(reader.bytes),
        create_revision,
        mod_revision,
    })
}

fn kind_tag(kind: EventKind) -> u8 {
    match kind {
        EventKind::Create => 1,
        EventKind::Update => 2,
        EventKind::Delete => 3,
    }
}

fn kind_from_tag(tag: u8) -> Option<EventKind> {
    match tag {
        1 => Some(EventKind::Create),
        2 => Some(EventKind::Update),
        3 => Some(EventKind::Delete),
        _ => None,
    }
}

fn put_len(out: &mut Vec<u8>, len: usize) -> Option<()> {
    let len = u32::try_from(len).ok()?;
    out.extend_from_slice(&len.to_be_bytes());
    Some(())
}

/// Encode a log entry for `event`. None if a key or value exceeds 4 GiB, or if the event is
/// inconsistent (an Update or Delete without `prev`).
pub(crate) fn encode_event(event: &Event) -> Option<Vec<u8>> {
    let prev_len = event.prev.as_ref().map_or(0, |p| p.value.len() + 12);
    let mut out = Vec::with_capacity(25 + event.kv.key.len() + event.kv.value.len() + prev_len);
    out.push(kind_tag(event.kind));
    out.extend_from_slice(&event.kv.create_revision.to_be_bytes());
    put_len(&mut out, event.kv.key.len())?;
    out.extend_from_slice(event.kv.key.as_bytes());
    if event.kind != EventKind::Delete {
        put_len(&mut out, event.kv.value.len())?;
        out.extend_from_slice(&event.kv.value);
    }
    if event.kind != EventKind::Create {
        let prev = event.prev.as_ref()?;
        out.extend_from_slice(&prev.mod_revision.to_be_bytes());
        put_len(&mut out, prev.value.len())?;
        out.extend_from_slice(&prev.value);
    }
    Some(out)
}

/// Decode the log entry written at revision `rev`.
pub(crate) fn decode_event(rev: Revision, bytes: &[u8]) -> Option<Event> {
    let mut reader = Reader { bytes };
    let kind = kind_from_tag(reader.u8()?)?;
    let create_revision = reader.u64()?;
    let key_len = reader.len()?;
    let key = std::str::from_utf8(reader.take(key_len)?).ok()?.to_owned();
    let value = if kind == EventKind::Delete {
        None
    } else {
        let len = reader.len()?;
        Some(Bytes::copy_from_slice(reader.take(len)?))
    };
    let prev = if kind == EventKind::Create {
        None
    } else {
        let mod_revision = reader.u64()?;
        let len = reader.len()?;
        Some(KeyValue {
            key: key.clone(),
            value: Bytes::copy_from_slice(reader.take(len)?),
            create_revision,
            mod_revision,
        })
    };
    if !reader.bytes.is_empty() {
        return None;
    }
    let value = match (value, &prev) {
        (Some(value), _) => value,
        (None, Some(prev)) => prev.value.clone(),
        (None, None) => return None,
    };
    Some(Event {
        kind,
        kv: KeyValue {
            key,
            value,
            create_revision,
            mod_revision: rev,
        },
        prev,
    })
}

/// A bounds-checked cursor over a byte slice.
struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.bytes.len() < n {
            return None;
        }
        let (head, tail) = self.bytes.split_at(n);
        self.bytes = tail;
        Some(head)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1)?.first().copied()
    }

    fn u64(&mut self) -> Option<u64> {
        decode_u64(self.take(8)?)
    }

    fn len(&mut self) -> Option<usize> {
        let array: [u8; 4] = self.take(4)?.try_into().ok()?;
        usize::try_from(u32::from_be_bytes(array)).ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(key: &str, value: &str, create: Revision, modr: Revision) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: create,
            mod_revision: modr,
        }
    }

    fn roundtrip(event: &Event) -> Event {
        let bytes = encode_event(event).unwrap_or_default();
        match decode_event(event.kv.mod_revision, &bytes) {
            Some(decoded) => decoded,
            None => panic!("failed to decode {event:?}"),
        }
    }

    #[test]
    fn usage_roundtrip() {
        let usage = StorageUsage {
            bytes: 7,
            objects: 3,
        };
        let bytes = encode_usage(usage, 99);
        assert_eq!(decode_usage(&bytes), Some((usage, 99)));
        assert_eq!(decode_usage(&bytes[..23]), None);
    }

    #[test]
    fn object_roundtrip() {
        let bytes = encode_object(3, 7, b"hello");
        assert_eq!(decode_object("k", &bytes), Some(kv("k", "hello", 3, 7)));
        assert_eq!(decode_object("k", &bytes[..10]), None);
    }

    #[test]
    fn events_roundtrip() {
        let create = Event {
            kind: EventKind::Create,
            kv: kv("/a", "v1", 2, 2),
            prev: None,
        };
        let got = roundtrip(&create);
        assert_eq!(got.kind, EventKind::Create);
        assert_eq!(got.kv, create.kv);
        assert_eq!(got.prev, None);

        let update = Event {
            kind: EventKind::Update,
            kv: kv("/a", "v2", 2, 5),
            prev: Some(kv("/a", "v1", 2, 2)),
        };
        let got = roundtrip(&update);
        assert_eq!(got.kind, EventKind::Update);
        assert_eq!(got.kv, update.kv);
        assert_eq!(got.prev, update.prev);

        let delete = Event {
            kind: EventKind::Delete,
            kv: kv("/a", "v2", 2, 9),
            prev: Some(kv("/a", "v2", 2, 5)),
        };
        let got = roundtrip(&delete);
        assert_eq!(got.kind, EventKind::Delete);
        assert_eq!(got.kv, delete.kv);
        assert_eq!(got.prev, delete.prev);
    }

    #[test]
    fn rejects_truncated_and_trailing_bytes() {
        let update = Event {
            kind: EventKind::Update,
            kv: kv("/a", "v2", 2, 5),
            prev: Some(kv("/a", "v1", 2, 2)),
        };
        let mut bytes = encode_event(&update).unwrap_or_default();
        assert!(decode_event(5, &bytes[..bytes.len() - 1]).is_none());
        bytes.push(0);
        assert!(decode_event(5, &bytes).is_none());
        assert!(decode_event(5, &[9]).is_none());
    }

    #[test]
    fn update_without_prev_is_not_encoded() {
        let bad = Event {
            kind: EventKind::Update,
            kv: kv("/a", "v2", 2, 5),
            prev: None,
        };
        assert!(encode_event(&bad).is_none());
    }
}
