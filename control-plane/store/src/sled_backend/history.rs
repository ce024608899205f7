//! Reading the past: the change log of a keyspace, and lists at the current or an older
//! revision.
//!
//! A list at revision R scans the objects tree without any lock, then reads every log entry
//! after R and undoes it: for each key changed after R, its state at R is the `prev` of its
//! first change after R (absent for a Create). Keys not in that log read were not changed
//! after R, so the scanned value is their value at R. Because the log is read *after* the scan
//! and object + log entry are written in one transaction, any write racing with the scan is
//! also in the log read, so the result is exactly the state at R; the current-revision list
//! is the special case R = current revision at the start of the call. The current revision is
//! the latest *durable* one: writes committed but not yet flushed are in the objects tree and
//! the log, and are undone like any later change, so a list never shows a write that a crash
//! could still lose.
//!
//! Values kept in chunks (see [`chunks`](super::chunks)) are read after their record. A write
//! can free a value's chunks between the two reads only once the change that replaced it has
//! been compacted; a log read then fails with Compacted, as it would a moment later, and a list
//! at the current revision starts over (one at a given revision fails with Compacted: that
//! revision is gone).
//!
//! Cost: O(keys under the prefix after `start_after`) for the scan (keys and sled's shared
//! value buffers, values are decoded only for returned items) plus O(log entries after R).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use super::codec::{self, ObjectRecord};
use super::keyspace::Keyspace;
use crate::error::{Result, StoreError};
use crate::types::{Event, KeyValue, ListOptions, ListResult, Revision};

/// Read up to `limit` log entries with revision in `from..=to`, in order. The entries are
/// consecutive and, if any, the first is exactly `from`; otherwise (entries removed by
/// compaction or by dropping the keyspace) this fails with Compacted or KeyspaceDropped. An
/// empty result means no entry at or after `from` exists (yet).
pub(crate) fn read_log(
    ks: &Keyspace,
    from: Revision,
    to: Revision,
    limit: usize,
) -> Result<Vec<Event>> {
    let mut events = Vec::new();
    if from > to {
        return Ok(events);
    }
    let range = codec::revision_key(from)..=codec::revision_key(to);
    for (expected, entry) in (from..).zip(ks.log.range(range).take(limit)) {
        let (key, value) = entry?;
        let rev = codec::decode_u64(&key).ok_or_else(|| ks.corrupt("log key"))?;
        if rev != expected {
            return Err(missing(ks, from));
        }
        let record = codec::decode_log(rev, &value).ok_or_else(|| ks.corrupt("log entry"))?;
        let event = record.into_event(rev, |stored| match ks.read_value(stored)? {
            Ok(bytes) => Ok(bytes),
            // Freed by compaction since the entry was read: it is gone too.
            Err(_) if ks.log.get(codec::revision_key(rev))?.is_none() => Err(missing(ks, from)),
            Err(error) => Err(ks.corrupt_value(error)),
        })?;
        events.push(event);
    }
    Ok(events)
}

/// The error for history that should start at `from` but does not: the keyspace was dropped
/// or the entries were compacted away.
pub(crate) fn missing(ks: &Keyspace, from: Revision) -> StoreError {
    if let Err(dropped) = ks.check_live() {
        return dropped;
    }
    StoreError::Compacted {
        requested: from.saturating_sub(1),
        compacted: ks.compacted.load(Ordering::Acquire).max(from),
    }
}

/// One key in the view being assembled by a list.
enum Slot {
    /// As scanned from the objects tree (not yet decoded).
    Stored(sled::IVec),
    /// As reconstructed from the log.
    Known(KeyValue),
    /// Did not exist at the list revision.
    Absent,
}

/// How many times a list at the current revision starts over when a value it scanned was
/// freed before it could read it (each time, a write replaced that value and was compacted).
const LIST_ATTEMPTS: usize = 8;

/// What one attempt at a list produced.
enum Attempt {
    Listed(ListResult),
    /// A scanned value was freed by compaction before it was read (see the module docs).
    Overtaken(StoreError),
}

/// List `opts` (see the module docs for the method).
pub(crate) fn list(ks: &Keyspace, opts: &ListOptions) -> Result<ListResult> {
    let mut attempts = 0;
    loop {
        attempts += 1;
        match list_once(ks, opts)? {
            Attempt::Listed(result) => return Ok(result),
            Attempt::Overtaken(error) if opts.revision.is_some() || attempts >= LIST_ATTEMPTS => {
                return Err(error)
            }
            Attempt::Overtaken(_) => {}
        }
    }
}

/// One attempt at [`list`].
fn list_once(ks: &Keyspace, opts: &ListOptions) -> Result<Attempt> {
    ks.check_live()?;
    let current = ks.current.load(Ordering::Acquire);
    let at = opts.revision.unwrap_or(current);
    if at > current {
        return Err(StoreError::FutureRevision {
            requested: at,
            current,
        });
    }
    let compacted = ks.compacted.load(Ordering::Acquire);
    if at < compacted {
        return Err(StoreError::Compacted {
            requested: at,
            compacted,
        });
    }

    let prefix = opts.prefix.as_str();
    let after = opts
        .start_after
        .as_deref()
        .filter(|s| *s >= prefix)
        .map(str::as_bytes);
    let in_range = |key: &str| key.starts_with(prefix) && after.is_none_or(|a| key.as_bytes() > a);
    let lower = match after {
        Some(a) => Bound::Excluded(a),
        None => Bound::Included(prefix.as_bytes()),
    };

    let mut view = BTreeMap::new();
    for entry in ks.objects.range::<&[u8], _>((lower, Bound::Unbounded)) {
        let (key, value) = entry?;
        if !key.starts_with(prefix.as_bytes()) {
            break;
        }
        let key = String::from_utf8(key.to_vec()).map_err(|_| ks.corrupt("object key"))?;
        view.insert(key, Slot::Stored(value));
    }

    // Undo every change after `at`, reading the log only now (after the scan).
    let mut undone = BTreeMap::new();
    let mut next = at + 1;
    loop {
        let events = read_log(ks, next, Revision::MAX, 1024)?;
        if events.is_empty() {
            break;
        }
        next += events.len() as u64;
        for event in events {
            if in_range(&event.kv.key) {
                if let Entry::Vacant(slot) = undone.entry(event.kv.key.clone()) {
                    slot.insert(event.prev);
                }
            }
        }
    }
    // Every revision up to `current` was written before the scan; its log entry must have
    // been read unless compaction removed it meanwhile.
    if next <= current {
        return Err(missing(ks, at + 1));
    }
    for (key, prev) in undone {
        view.insert(key, prev.map_or(Slot::Absent, Slot::Known));
    }

    let limit = opts.limit.unwrap_or(usize::MAX);
    let mut items = Vec::new();
    let mut remaining = 0u64;
    for (key, slot) in view {
        let kv = match slot {
            Slot::Absent => continue,
            _ if items.len() >= limit => {
                remaining += 1;
                continue;
            }
            Slot::Known(kv) => kv,
            Slot::Stored(bytes) => {
                let record = codec::decode_object(&bytes).ok_or_else(|| ks.corrupt("object"))?;
                match read_scanned(ks, &key, &bytes, record, at)? {
                    Ok(kv) => kv,
                    Err(overtaken) => return Ok(Attempt::Overtaken(overtaken)),
                }
            }
        };
        items.push(kv);
    }
    Ok(Attempt::Listed(ListResult {
        items,
        revision: at,
        remaining,
    }))
}

/// The object a list at revision `at` scanned as `bytes` (decoded: `record`), reading its
/// value. The inner error is the list's outcome if the value was freed meanwhile: the object
/// has changed since the scan, so after `at`, and the change that freed the value has been
/// compacted, so `at` has been too.
fn read_scanned(
    ks: &Keyspace,
    key: &str,
    bytes: &sled::IVec,
    record: ObjectRecord,
    at: Revision,
) -> Result<Result<KeyValue, StoreError>> {
    let error = match ks.read_value(&record.value)? {
        Ok(value) => return Ok(Ok(record.into_kv(key, value))),
        Err(error) => error,
    };
    if ks.objects.get(key.as_bytes())?.as_ref() == Some(bytes) {
        return Err(ks.corrupt_value(error));
    }
    let compacted = ks.compacted.load(Ordering::Acquire);
    Ok(Err(StoreError::Compacted {
        requested: at,
        compacted: compacted.max(at + 1),
    }))
}
