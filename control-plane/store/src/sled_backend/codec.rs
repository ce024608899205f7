//! Byte encodings of the records kept in a keyspace's sled trees.
//!
//! * objects tree: key bytes -> `create_rev (u64 BE) | mod_rev (u64 BE) | value` (inline), or
//!   `0 (u64) | create_rev | mod_rev | value_len (u64)` for a value kept in chunks (see
//!   [`chunks`](super::chunks): the value written at `mod_rev`). Revisions start at 2, so a
//!   create revision of 0 never begins an inline record: it marks the chunked form.
//! * log tree: revision (u64 BE) -> `kind (u8) | create_rev (u64) | key_len (u32) | key |`
//!   then `value_len (u32) | value` for Create and Update, and
//!   `prev_mod_rev (u64) | prev_len (u32) | prev_value` for Update and Delete.
//!   A Delete's event value is its previous value, so it is stored once. When a value is kept
//!   in chunks, the entry takes the extended form: `kind | 0x80` as its first byte, and each
//!   value is `0 (u8) | len (u32) | bytes` (inline) or `1 (u8) | len (u64)` (in chunks: the new
//!   value is the one written at the entry's revision, the previous one at `prev_mod_rev`).
//!   Entries whose values are all inline keep the first form, the one written before chunking.
//! * chunks tree: see [`chunks`](super::chunks).
//! * meta tree: fixed names -> u64 BE; `usage` -> `bytes | objects | log_bytes` (3 u64 BE).
//!   `log_bytes` counts every entry at its size in the first (all inline) form, so the
//!   history's byte bound means what it meant before chunking.
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

/// A value as a record holds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum StoredValue {
    /// The bytes themselves, in the record.
    Inline(Bytes),
    /// `len` bytes in the chunks tree: the value written at `revision`.
    Chunked { revision: Revision, len: u64 },
}

impl StoredValue {
    /// The value's length in bytes.
    pub(crate) fn len(&self) -> u64 {
        match self {
            Self::Inline(bytes) => bytes.len() as u64,
            Self::Chunked { len, .. } => *len,
        }
    }
}

/// A value to write into a record: its bytes, or the length of a value kept in chunks (whose
/// revision the record implies).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ValueRef<'a> {
    Inline(&'a [u8]),
    Chunked { len: u64 },
}

/// A decoded object record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ObjectRecord {
    pub(crate) create_revision: Revision,
    pub(crate) mod_revision: Revision,
    pub(crate) value: StoredValue,
}

impl ObjectRecord {
    /// The record as a [`KeyValue`] of `key`, with its value's bytes.
    pub(crate) fn into_kv(self, key: &str, value: Bytes) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value,
            create_revision: self.create_revision,
            mod_revision: self.mod_revision,
        }
    }
}

/// First u64 of an object record whose value is kept in chunks.
const CHUNKED_OBJECT: u64 = 0;

/// Encode an object record.
pub(crate) fn encode_object(create_rev: Revision, mod_rev: Revision, value: ValueRef) -> Vec<u8> {
    match value {
        ValueRef::Inline(value) => {
            let mut out = Vec::with_capacity(OBJECT_HEADER + value.len());
            out.extend_from_slice(&create_rev.to_be_bytes());
            out.extend_from_slice(&mod_rev.to_be_bytes());
            out.extend_from_slice(value);
            out
        }
        ValueRef::Chunked { len } => [CHUNKED_OBJECT, create_rev, mod_rev, len]
            .iter()
            .flat_map(|n| n.to_be_bytes())
            .collect(),
    }
}

/// Decode an object record.
pub(crate) fn decode_object(bytes: &[u8]) -> Option<ObjectRecord> {
    let mut reader = Reader { bytes };
    let first = reader.u64()?;
    if first != CHUNKED_OBJECT {
        return Some(ObjectRecord {
            create_revision: first,
            mod_revision: reader.u64()?,
            value: StoredValue::Inline(Bytes::copy_from_slice(reader.bytes)),
        });
    }
    let create_revision = reader.u64()?;
    let mod_revision = reader.u64()?;
    let len = reader.u64()?;
    reader.bytes.is_empty().then_some(ObjectRecord {
        create_revision,
        mod_revision,
        value: StoredValue::Chunked {
            revision: mod_revision,
            len,
        },
    })
}

/// The length of the value of an object record, without copying it.
pub(crate) fn object_value_len(bytes: &[u8]) -> Option<u64> {
    let mut reader = Reader { bytes };
    if reader.u64()? != CHUNKED_OBJECT {
        reader.u64()?;
        return Some(reader.bytes.len() as u64);
    }
    reader.take(16)?;
    let len = reader.u64()?;
    reader.bytes.is_empty().then_some(len)
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

/// Bit of a log entry's first byte marking the extended form (values may be in chunks).
const EXTENDED: u8 = 0x80;
/// Value forms of the extended log entry.
const FORM_INLINE: u8 = 0;
const FORM_CHUNKED: u8 = 1;

fn put_len(out: &mut Vec<u8>, len: usize) -> Option<()> {
    let len = u32::try_from(len).ok()?;
    out.extend_from_slice(&len.to_be_bytes());
    Some(())
}

fn put_value(out: &mut Vec<u8>, value: ValueRef, extended: bool) -> Option<()> {
    match value {
        ValueRef::Inline(bytes) => {
            if extended {
                out.push(FORM_INLINE);
            }
            put_len(out, bytes.len())?;
            out.extend_from_slice(bytes);
        }
        ValueRef::Chunked { len } => {
            out.push(FORM_CHUNKED);
            out.extend_from_slice(&len.to_be_bytes());
        }
    }
    Some(())
}

/// The size of a log entry in the all-inline form: what the history's byte bound counts.
pub(crate) fn entry_len(key_len: usize, value_len: Option<u64>, prev_len: Option<u64>) -> u64 {
    (13 + key_len as u64)
        .saturating_add(value_len.map_or(0, |len| len.saturating_add(4)))
        .saturating_add(prev_len.map_or(0, |len| len.saturating_add(12)))
}

/// A log entry to encode: the change's kind, key and create revision, its new value (absent
/// for a Delete) and its previous value with that value's mod revision (absent for a Create).
#[derive(Clone, Copy, Debug)]
pub(crate) struct LogEntry<'a> {
    pub(crate) kind: EventKind,
    pub(crate) create_revision: Revision,
    pub(crate) key: &'a str,
    pub(crate) value: Option<ValueRef<'a>>,
    pub(crate) prev: Option<(Revision, ValueRef<'a>)>,
}

/// Encode a log entry. None if a key or inline value exceeds 4 GiB, or if the entry is
/// inconsistent (a value where its kind has none, or none where it has one).
pub(crate) fn encode_log(entry: &LogEntry) -> Option<Vec<u8>> {
    let has_value = entry.kind != EventKind::Delete;
    let has_prev = entry.kind != EventKind::Create;
    if entry.value.is_some() != has_value || entry.prev.is_some() != has_prev {
        return None;
    }
    let values = entry.value.iter().chain(entry.prev.iter().map(|(_, v)| v));
    let extended = values
        .clone()
        .any(|v| matches!(v, ValueRef::Chunked { .. }));
    let inline_len: usize = values
        .map(|v| match v {
            ValueRef::Inline(bytes) => bytes.len() + 5,
            ValueRef::Chunked { .. } => 9,
        })
        .sum();
    let mut out = Vec::with_capacity(25 + entry.key.len() + inline_len);
    let tag = kind_tag(entry.kind);
    out.push(if extended { tag | EXTENDED } else { tag });
    out.extend_from_slice(&entry.create_revision.to_be_bytes());
    put_len(&mut out, entry.key.len())?;
    out.extend_from_slice(entry.key.as_bytes());
    if let Some(value) = entry.value {
        put_value(&mut out, value, extended)?;
    }
    if let Some((mod_revision, prev)) = entry.prev {
        out.extend_from_slice(&mod_revision.to_be_bytes());
        put_value(&mut out, prev, extended)?;
    }
    Some(out)
}

/// A decoded log entry; values kept in chunks are not read yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct LogRecord {
    pub(crate) kind: EventKind,
    pub(crate) create_revision: Revision,
    pub(crate) key: String,
    /// The new value (None for a Delete).
    pub(crate) value: Option<StoredValue>,
    /// The previous value and its mod revision (None for a Create).
    pub(crate) prev: Option<(Revision, StoredValue)>,
}

impl LogRecord {
    /// The entry's size in the all-inline form (see [`entry_len`]).
    pub(crate) fn logical_len(&self) -> u64 {
        entry_len(
            self.key.len(),
            self.value.as_ref().map(StoredValue::len),
            self.prev.as_ref().map(|(_, prev)| prev.len()),
        )
    }

    /// The event at revision `rev`, reading values kept in chunks with `read`.
    pub(crate) fn into_event<E>(
        self,
        rev: Revision,
        mut read: impl FnMut(&StoredValue) -> Result<Bytes, E>,
    ) -> Result<Event, E> {
        let prev = match &self.prev {
            None => None,
            Some((mod_revision, value)) => Some(KeyValue {
                key: self.key.clone(),
                value: read(value)?,
                create_revision: self.create_revision,
                mod_revision: *mod_revision,
            }),
        };
        let value = match (&self.value, &prev) {
            (Some(value), _) => read(value)?,
            // A Delete's event value is its previous value.
            (None, Some(prev)) => prev.value.clone(),
            (None, None) => Bytes::new(),
        };
        Ok(Event {
            kind: self.kind,
            kv: KeyValue {
                key: self.key,
                value,
                create_revision: self.create_revision,
                mod_revision: rev,
            },
            prev,
        })
    }
}

/// Decode the log entry written at revision `rev`.
pub(crate) fn decode_log(rev: Revision, bytes: &[u8]) -> Option<LogRecord> {
    let mut reader = Reader { bytes };
    let tag = reader.u8()?;
    let extended = tag & EXTENDED != 0;
    let kind = kind_from_tag(tag & !EXTENDED)?;
    let create_revision = reader.u64()?;
    let key_len = reader.len()?;
    let key = std::str::from_utf8(reader.take(key_len)?).ok()?.to_owned();
    let value = if kind == EventKind::Delete {
        None
    } else {
        Some(reader.value(rev, extended)?)
    };
    let prev = if kind == EventKind::Create {
        None
    } else {
        let mod_revision = reader.u64()?;
        Some((mod_revision, reader.value(mod_revision, extended)?))
    };
    let all_inline = value
        .iter()
        .chain(prev.iter().map(|(_, v)| v))
        .all(|v| matches!(v, StoredValue::Inline(_)));
    // The extended form is only written when some value is in chunks.
    if !reader.bytes.is_empty() || (extended && all_inline) {
        return None;
    }
    Some(LogRecord {
        kind,
        create_revision,
        key,
        value,
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

    /// A value of a log entry written at `revision` (in the extended form or not).
    fn value(&mut self, revision: Revision, extended: bool) -> Option<StoredValue> {
        let form = if extended { self.u8()? } else { FORM_INLINE };
        match form {
            FORM_INLINE => {
                let len = self.len()?;
                Some(StoredValue::Inline(Bytes::copy_from_slice(self.take(len)?)))
            }
            FORM_CHUNKED => Some(StoredValue::Chunked {
                revision,
                len: self.u64()?,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::convert::Infallible;

    use super::*;

    fn kv(key: &str, value: &str, create: Revision, modr: Revision) -> KeyValue {
        KeyValue {
            key: key.to_owned(),
            value: Bytes::copy_from_slice(value.as_bytes()),
            create_revision: create,
            mod_revision: modr,
        }
    }

    /// The all-inline log entry of `event`.
    fn entry(event: &Event) -> LogEntry<'_> {
        LogEntry {
            kind: event.kind,
            create_revision: event.kv.create_revision,
            key: &event.kv.key,
            value: (event.kind != EventKind::Delete).then_some(ValueRef::Inline(&event.kv.value)),
            prev: event
                .prev
                .as_ref()
                .map(|p| (p.mod_revision, ValueRef::Inline(&p.value[..]))),
        }
    }

    fn inline_only(value: &StoredValue) -> Result<Bytes, Infallible> {
        match value {
            StoredValue::Inline(bytes) => Ok(bytes.clone()),
            StoredValue::Chunked { .. } => panic!("unexpected chunked value {value:?}"),
        }
    }

    fn roundtrip(event: &Event) -> Event {
        let bytes = encode_log(&entry(event)).unwrap_or_default();
        let Some(record) = decode_log(event.kv.mod_revision, &bytes) else {
            panic!("failed to decode {event:?}");
        };
        assert_eq!(record.logical_len(), bytes.len() as u64);
        match record.into_event(event.kv.mod_revision, inline_only) {
            Ok(event) => event,
            Err(never) => match never {},
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
        let bytes = encode_object(3, 7, ValueRef::Inline(b"hello"));
        let record = decode_object(&bytes);
        assert_eq!(
            record.map(|r| r.value),
            Some(StoredValue::Inline(Bytes::from_static(b"hello")))
        );
        assert_eq!(object_value_len(&bytes), Some(5));
        assert_eq!(decode_object(&bytes[..10]), None);

        let bytes = encode_object(3, 7, ValueRef::Chunked { len: 1 << 20 });
        assert_eq!(
            decode_object(&bytes),
            Some(ObjectRecord {
                create_revision: 3,
                mod_revision: 7,
                value: StoredValue::Chunked {
                    revision: 7,
                    len: 1 << 20
                },
            })
        );
        assert_eq!(object_value_len(&bytes), Some(1 << 20));
        assert_eq!(decode_object(&bytes[..31]), None);
        assert_eq!(object_value_len(&bytes[..31]), None);
    }

    /// Records written before chunking (bytes spelled out here) still decode.
    #[test]
    fn records_of_the_first_format_decode() {
        let mut object = Vec::new();
        object.extend_from_slice(&2u64.to_be_bytes());
        object.extend_from_slice(&5u64.to_be_bytes());
        object.extend_from_slice(b"{}");
        assert_eq!(
            decode_object(&object),
            Some(ObjectRecord {
                create_revision: 2,
                mod_revision: 5,
                value: StoredValue::Inline(Bytes::from_static(b"{}")),
            })
        );
        // An update of "/a" from "v1" (mod revision 2) to "v2" at revision 5.
        let mut log = vec![2u8];
        log.extend_from_slice(&2u64.to_be_bytes());
        log.extend_from_slice(&2u32.to_be_bytes());
        log.extend_from_slice(b"/a");
        log.extend_from_slice(&2u32.to_be_bytes());
        log.extend_from_slice(b"v2");
        log.extend_from_slice(&2u64.to_be_bytes());
        log.extend_from_slice(&2u32.to_be_bytes());
        log.extend_from_slice(b"v1");
        let record = decode_log(5, &log);
        assert_eq!(
            record.as_ref().map(LogRecord::logical_len),
            Some(log.len() as u64)
        );
        assert_eq!(
            record.map(|r| (r.value, r.prev)),
            Some((
                Some(StoredValue::Inline(Bytes::from_static(b"v2"))),
                Some((2, StoredValue::Inline(Bytes::from_static(b"v1"))))
            ))
        );
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
    fn extended_entries_roundtrip() {
        let big = 5 * 1024 * 1024u64;
        let update = LogEntry {
            kind: EventKind::Update,
            create_revision: 2,
            key: "/big",
            value: Some(ValueRef::Chunked { len: big }),
            prev: Some((4, ValueRef::Inline(b"small"))),
        };
        let bytes = encode_log(&update).unwrap_or_default();
        assert_eq!(bytes.first(), Some(&(2 | EXTENDED)));
        let record = decode_log(9, &bytes);
        assert_eq!(
            record.as_ref().map(LogRecord::logical_len),
            Some(entry_len(4, Some(big), Some(5)))
        );
        assert_eq!(
            record.map(|r| (r.value, r.prev)),
            Some((
                Some(StoredValue::Chunked {
                    revision: 9,
                    len: big
                }),
                Some((4, StoredValue::Inline(Bytes::from_static(b"small"))))
            ))
        );

        let delete = LogEntry {
            kind: EventKind::Delete,
            create_revision: 2,
            key: "/big",
            value: None,
            prev: Some((9, ValueRef::Chunked { len: big })),
        };
        let bytes = encode_log(&delete).unwrap_or_default();
        let record = decode_log(12, &bytes);
        assert_eq!(
            record.and_then(|r| r.prev),
            Some((
                9,
                StoredValue::Chunked {
                    revision: 9,
                    len: big
                }
            ))
        );
        // The event of a chunked Delete carries the previous value, read once.
        let record = decode_log(12, &encode_log(&delete).unwrap_or_default());
        let mut reads = 0;
        let event = record.map(|r| {
            r.into_event(12, |_| {
                reads += 1;
                Ok::<_, Infallible>(Bytes::from_static(b"read"))
            })
        });
        assert!(matches!(event, Some(Ok(Event { ref kv, .. })) if kv.value == "read"));
        assert_eq!(reads, 1);
    }

    #[test]
    fn rejects_truncated_and_trailing_bytes() {
        let update = Event {
            kind: EventKind::Update,
            kv: kv("/a", "v2", 2, 5),
            prev: Some(kv("/a", "v1", 2, 2)),
        };
        let mut bytes = encode_log(&entry(&update)).unwrap_or_default();
        assert!(decode_log(5, &bytes[..bytes.len() - 1]).is_none());
        bytes.push(0);
        assert!(decode_log(5, &bytes).is_none());
        assert!(decode_log(5, &[9]).is_none());
        // The extended form with every value inline is never written.
        bytes.pop();
        bytes[0] |= EXTENDED;
        assert!(decode_log(5, &bytes).is_none());
    }

    #[test]
    fn inconsistent_entries_are_not_encoded() {
        let bad = Event {
            kind: EventKind::Update,
            kv: kv("/a", "v2", 2, 5),
            prev: None,
        };
        assert!(encode_log(&entry(&bad)).is_none());
        let bad = LogEntry {
            kind: EventKind::Create,
            create_revision: 2,
            key: "/a",
            value: Some(ValueRef::Inline(b"v")),
            prev: Some((1, ValueRef::Inline(b"v"))),
        };
        assert!(encode_log(&bad).is_none());
    }
}
