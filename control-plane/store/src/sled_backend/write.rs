//! The single write path of a keyspace: one create, update or delete becomes one revision.
//!
//! Under the keyspace's writer lock, one sled transaction across the objects, log and meta
//! trees checks the precondition, writes the object, appends the log entry, bumps the revision
//! counter and compacts a bounded number of old log entries. The event is then broadcast to
//! live watchers, still under the lock, so broadcasts are in revision order. Durability is the
//! caller's next step (group commit, outside the lock).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use sled::transaction::{ConflictableTransactionError, TransactionError, TransactionalTree};
use sled::Transactional;

use super::codec::{self, META_COMPACTED, META_CURRENT};
use super::keyspace::Keyspace;
use crate::error::{Result, StoreError};
use crate::types::{Event, EventKind, KeyValue, Revision};

/// At most this many old log entries are removed per write. Normally a write removes exactly
/// one (the entry falling out of the history window); the cap bounds the work after `history`
/// has been lowered between restarts, spreading the backlog over later writes.
const MAX_COMPACT_PER_WRITE: u64 = 64;

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

/// Apply `op` to `key` as the next revision; returns the resulting event.
pub(crate) fn apply(ks: &Keyspace, key: &str, op: Op) -> Result<Event> {
    let mut writer = ks.lock_writer();
    ks.check_live()?;
    let rev = writer.current + 1;
    let compact_to = writer
        .compacted
        .max(rev.saturating_sub(ks.history))
        .min(writer.compacted + MAX_COMPACT_PER_WRITE);
    let compact_from = writer.compacted + 1;

    let outcome = (&ks.objects, &ks.log, &ks.meta).transaction(|(objects, log, meta)| {
        let existing = read_existing(ks, objects, key)?;
        let event =
            next_event(key, &op, existing, rev).map_err(ConflictableTransactionError::Abort)?;
        match event.kind {
            EventKind::Delete => {
                objects.remove(key.as_bytes())?;
            }
            EventKind::Create | EventKind::Update => {
                let record = codec::encode_object(
                    event.kv.create_revision,
                    event.kv.mod_revision,
                    &event.kv.value,
                );
                objects.insert(key.as_bytes(), record)?;
            }
        }
        let entry = codec::encode_event(&event)
            .ok_or_else(|| ConflictableTransactionError::Abort(ks.corrupt("oversized log")))?;
        log.insert(&codec::revision_key(rev), entry)?;
        for old in compact_from..=compact_to {
            log.remove(&codec::revision_key(old))?;
        }
        meta.insert(META_CURRENT, &rev.to_be_bytes())?;
        if compact_to >= compact_from {
            meta.insert(META_COMPACTED, &compact_to.to_be_bytes())?;
        }
        Ok(event)
    });
    let event = match outcome {
        Ok(event) => event,
        Err(TransactionError::Abort(error)) => return Err(error),
        Err(TransactionError::Storage(error)) => return Err(StoreError::Backend(error)),
    };

    writer.current = rev;
    writer.compacted = compact_to;
    ks.current.store(rev, Ordering::Release);
    ks.compacted.store(compact_to, Ordering::Release);
    if let Some(events) = &writer.events {
        // No receivers is not an error: nobody is watching.
        let _ = events.send(Arc::new(event.clone()));
    }
    drop(writer);
    Ok(event)
}

/// Read and decode the current object inside the transaction.
fn read_existing(
    ks: &Keyspace,
    objects: &TransactionalTree,
    key: &str,
) -> Result<Option<KeyValue>, ConflictableTransactionError<StoreError>> {
    match objects.get(key.as_bytes())? {
        None => Ok(None),
        Some(bytes) => codec::decode_object(key, &bytes)
            .map(Some)
            .ok_or_else(|| ConflictableTransactionError::Abort(ks.corrupt("object"))),
    }
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
