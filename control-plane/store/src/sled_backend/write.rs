//! The single write path of a keyspace: one create, update or delete becomes one revision.
//!
//! Under the keyspace's writer lock, one sled transaction across the objects, log, meta and
//! chunks trees checks the precondition and the quota, writes the object (a large value as
//! chunks, once, referred to by the object and the log entry, see [`chunks`](super::chunks)),
//! appends the log entry, bumps the revision counter, updates the usage record and compacts
//! old log entries (those beyond the history's revision bound, and the oldest ones while the
//! history's bytes exceed its byte bound), removing the chunks of the values they were the
//! last to refer to. The event is then queued, still under the lock; the group-commit flusher
//! broadcasts it once a flush has made it durable (see [`keyspace`](super::keyspace)).
//! Durability is the caller's next step (group commit, outside the lock).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use sled::transaction::{
    ConflictableTransactionError, TransactionError, TransactionalTree, UnabortableTransactionError,
};
use sled::Transactional;

use super::chunks;
use super::codec::{
    self, LogEntry, StoredValue, ValueRef, META_COMPACTED, META_CURRENT, META_USAGE,
};
use super::keyspace::Keyspace;
use crate::error::{Result, StoreError};
use crate::quota::{self, object_bytes, WriteKind};
use crate::types::{Event, EventKind, KeyValue, Revision};

/// At most this many old log entries beyond the revision bound are removed per write.
/// Normally a write removes exactly one (the entry falling out of the history window); the cap
/// bounds the work after `history` has been lowered between restarts, spreading the backlog
/// over later writes.
const MAX_COMPACT_PER_WRITE: u64 = 64;

/// At most this many old log entries are removed per write to bring the history under its
/// byte bound (one large write can push out many small entries).
const MAX_COMPACT_BYTES_PER_WRITE: u64 = 4096;

/// A requested change.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    /// Create; fails if the key exists.
    Create(Bytes),
    /// Replace; fails if absent or (with `expected`) if the mod revision differs.
    Update {
        value: Bytes,
        expected: Option<Revision>,
    },
    /// Remove; same preconditions as Update.
    Delete { expected: Option<Revision> },
}

/// What one transaction changed besides the object.
struct Outcome {
    event: Event,
    compacted: Revision,
    usage: quota::StorageUsage,
    log_bytes: u64,
}

/// Apply `op` to `key` as the next revision; returns the written record (for a delete, the
/// last value with the deletion revision). The write is committed, not yet durable.
pub(crate) fn apply(ks: &Keyspace, key: &str, op: Op) -> Result<KeyValue> {
    let mut writer = ks.lock_writer();
    ks.check_live()?;
    let rev = writer.committed + 1;
    let count_target = writer.compacted.max(rev.saturating_sub(ks.history));
    // Never compact past what readers can see (they list and watch from durable revisions),
    // and always keep the new entry.
    let ceiling = writer.durable.min(rev - 1);
    let history_bound = ks
        .history_bytes
        .min(writer.limits.bytes.unwrap_or(u64::MAX));
    let (limits, usage, log_bytes, compacted) = (
        writer.limits,
        writer.usage,
        writer.log_bytes,
        writer.compacted,
    );
    // Readers that see this write's object must see a committed mark >= rev (see `get`).
    ks.committed.store(rev, Ordering::Release);

    let trees = (&ks.objects, &ks.log, &ks.meta, &ks.chunks);
    let outcome = trees.transaction(|(objects, log, meta, chunk_tree)| {
        let existing = read_existing(ks, objects, chunk_tree, key)?;
        let prev_chunked = existing.as_ref().is_some_and(|(_, chunked)| *chunked);
        let existing = existing.map(|(kv, _)| kv);
        let event =
            next_event(key, &op, existing, rev).map_err(ConflictableTransactionError::Abort)?;
        let (kind, old, new, objects_delta) = match (&event.kind, &event.prev) {
            (EventKind::Create, _) => (
                WriteKind::Create,
                0,
                object_bytes(key, event.kv.value.len()),
                1,
            ),
            (EventKind::Update, prev) => (
                WriteKind::Update,
                prev.as_ref()
                    .map_or(0, |p| object_bytes(key, p.value.len())),
                object_bytes(key, event.kv.value.len()),
                0,
            ),
            (EventKind::Delete, prev) => (
                WriteKind::Delete,
                prev.as_ref()
                    .map_or(0, |p| object_bytes(key, p.value.len())),
                0,
                -1,
            ),
        };
        quota::check(&ks.name, limits, usage, kind, old, new)
            .map_err(ConflictableTransactionError::Abort)?;
        // The new value, written once (in chunks when large) for the object and the log entry.
        let value = match event.kind {
            EventKind::Delete => {
                objects.remove(key.as_bytes())?;
                None
            }
            EventKind::Create | EventKind::Update => {
                let value = value_ref(&event.kv.value, chunks::is_chunked(event.kv.value.len()));
                if let ValueRef::Chunked { .. } = value {
                    chunks::insert(chunk_tree, rev, &event.kv.value)?;
                }
                let record =
                    codec::encode_object(event.kv.create_revision, event.kv.mod_revision, value);
                objects.insert(key.as_bytes(), record)?;
                Some(value)
            }
        };
        // The previous value stays where it is: its chunks, if any, now belong to this entry.
        let prev = event
            .prev
            .as_ref()
            .map(|p| (p.mod_revision, value_ref(&p.value, prev_chunked)));
        let entry = LogEntry {
            kind: event.kind,
            create_revision: event.kv.create_revision,
            key,
            value,
            prev,
        };
        let encoded = codec::encode_log(&entry)
            .ok_or_else(|| ConflictableTransactionError::Abort(ks.corrupt("oversized log")))?;
        let logical = codec::entry_len(
            key.len(),
            value.map(|_| event.kv.value.len() as u64),
            event.prev.as_ref().map(|p| p.value.len() as u64),
        );
        let mut log_bytes = log_bytes.saturating_add(logical);
        log.insert(&codec::revision_key(rev), encoded)?;
        let mut compact_to = compacted;
        let mut removed = 0u64;
        while compact_to < ceiling
            && ((compact_to < count_target && removed < MAX_COMPACT_PER_WRITE)
                || (log_bytes > history_bound && removed < MAX_COMPACT_BYTES_PER_WRITE))
        {
            compact_to += 1;
            removed += 1;
            if let Some(old) = log.remove(&codec::revision_key(compact_to))? {
                let freed = free_entry(ks, chunk_tree, compact_to, &old)?;
                log_bytes = log_bytes.saturating_sub(freed);
            }
        }
        let usage = quota::apply(usage, old, new, objects_delta);
        meta.insert(META_CURRENT, &rev.to_be_bytes())?;
        meta.insert(META_USAGE, &codec::encode_usage(usage, log_bytes)[..])?;
        if compact_to > compacted {
            meta.insert(META_COMPACTED, &compact_to.to_be_bytes())?;
        }
        Ok(Outcome {
            event,
            compacted: compact_to,
            usage,
            log_bytes,
        })
    });
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(error) => {
            ks.committed.store(writer.committed, Ordering::Release);
            return Err(match error {
                TransactionError::Abort(error) => error,
                TransactionError::Storage(error) => StoreError::Backend(error),
            });
        }
    };

    writer.committed = rev;
    writer.compacted = outcome.compacted;
    writer.usage = outcome.usage;
    writer.log_bytes = outcome.log_bytes;
    ks.compacted.store(outcome.compacted, Ordering::Release);
    let kv = outcome.event.kv.clone();
    if writer.events.is_some() {
        writer.pending.push_back(Arc::new(outcome.event));
        ks.has_pending.store(true, Ordering::Release);
    }
    drop(writer);
    Ok(kv)
}

/// How a value is written into a record: by reference to its chunks, or inline.
fn value_ref(value: &[u8], chunked: bool) -> ValueRef<'_> {
    if chunked {
        ValueRef::Chunked {
            len: value.len() as u64,
        }
    } else {
        ValueRef::Inline(value)
    }
}

/// Read and decode the current object inside the transaction, with whether its value is kept
/// in chunks.
fn read_existing(
    ks: &Keyspace,
    objects: &TransactionalTree,
    chunk_tree: &TransactionalTree,
    key: &str,
) -> Result<Option<(KeyValue, bool)>, ConflictableTransactionError<StoreError>> {
    let Some(bytes) = objects.get(key.as_bytes())? else {
        return Ok(None);
    };
    let record = codec::decode_object(&bytes)
        .ok_or_else(|| ConflictableTransactionError::Abort(ks.corrupt("object")))?;
    let (value, chunked) = match &record.value {
        StoredValue::Inline(value) => (value.clone(), false),
        StoredValue::Chunked { revision, len } => {
            let value = chunks::read(*revision, *len, |key| chunk_tree.get(key))?
                .map_err(|error| ConflictableTransactionError::Abort(ks.corrupt_value(error)))?;
            (value, true)
        }
    };
    Ok(Some((record.into_kv(key, value), chunked)))
}

/// Account for the removal of the log entry `bytes` at revision `rev`: remove the chunks of
/// the previous value it was the last to refer to (the object moved on at `rev`, and the
/// entry that wrote that value is older, so already gone), and return the bytes the entry
/// counted in the history. An undecodable entry counts its stored size and frees nothing: its
/// removal heals the log, and keeping writes going matters more than the few chunks it may
/// leave behind.
fn free_entry(
    ks: &Keyspace,
    chunk_tree: &TransactionalTree,
    rev: Revision,
    bytes: &[u8],
) -> Result<u64, UnabortableTransactionError> {
    let Some(record) = codec::decode_log(rev, bytes) else {
        tracing::warn!(
            keyspace = %ks.name,
            revision = rev,
            "compacted an undecodable log entry; chunks it referred to may be left behind"
        );
        return Ok(bytes.len() as u64);
    };
    if let Some((_, StoredValue::Chunked { revision, len })) = &record.prev {
        chunks::remove(chunk_tree, *revision, *len)?;
    }
    Ok(record.logical_len())
}

/// Check the precondition of `op` against `existing` and build the event at revision `rev`.
fn next_event(key: &str, op: &Op, existing: Option<KeyValue>, rev: Revision) -> Result<Event> {
    let check = |existing: Option<KeyValue>, expected: Option<Revision>| match existing {
        None => Err(StoreError::NotFound {
            key: key.to_owned(),
        }),
        Some(kv) if expected.is_some_and(|e| e != kv.mod_revision) => Err(StoreError::Conflict {
            key: key.to_owned(),
            current: kv.mod_revision,
        }),
        Some(kv) => Ok(kv),
    };
    match op {
        Op::Create(value) => match existing {
            Some(_) => Err(StoreError::AlreadyExists {
                key: key.to_owned(),
            }),
            None => Ok(Event {
                kind: EventKind::Create,
                kv: KeyValue {
                    key: key.to_owned(),
                    value: value.clone(),
                    create_revision: rev,
                    mod_revision: rev,
                },
                prev: None,
            }),
        },
        Op::Update { value, expected } => {
            let prev = check(existing, *expected)?;
            Ok(Event {
                kind: EventKind::Update,
                kv: KeyValue {
                    key: key.to_owned(),
                    value: value.clone(),
                    create_revision: prev.create_revision,
                    mod_revision: rev,
                },
                prev: Some(prev),
            })
        }
        Op::Delete { expected } => {
            let prev = check(existing, *expected)?;
            Ok(Event {
                kind: EventKind::Delete,
                kv: KeyValue {
                    mod_revision: rev,
                    ..prev.clone()
                },
                prev: Some(prev),
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kv(rev: Revision) -> KeyValue {
        KeyValue {
            key: "k".to_owned(),
            value: Bytes::from_static(b"old"),
            create_revision: 2,
            mod_revision: rev,
        }
    }

    #[test]
    fn preconditions() {
        let new = || Bytes::from_static(b"new");
        assert!(matches!(
            next_event("k", &Op::Create(new()), Some(kv(3)), 4),
            Err(StoreError::AlreadyExists { .. })
        ));
        assert!(matches!(
            next_event(
                "k",
                &Op::Update {
                    value: new(),
                    expected: None
                },
                None,
                4
            ),
            Err(StoreError::NotFound { .. })
        ));
        assert!(matches!(
            next_event("k", &Op::Delete { expected: Some(2) }, Some(kv(3)), 4),
            Err(StoreError::Conflict { current: 3, .. })
        ));
        let ok = next_event(
            "k",
            &Op::Update {
                value: new(),
                expected: Some(3),
            },
            Some(kv(3)),
            4,
        );
        assert!(matches!(
            ok,
            Ok(Event {
                kind: EventKind::Update,
                ..
            })
        ));
    }

    #[test]
    fn delete_event_carries_deletion_revision() -> Result<()> {
        let event = next_event("k", &Op::Delete { expected: None }, Some(kv(3)), 9)?;
        assert_eq!(event.kv.mod_revision, 9);
        assert_eq!(event.kv.create_revision, 2);
        assert_eq!(event.kv.value, Bytes::from_static(b"old"));
        assert_eq!(event.prev.map(|p| p.mod_revision), Some(3));
        Ok(())
    }
}
