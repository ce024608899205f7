//! The write path of the etcd backend: each create, update or delete is one etcd transaction,
//! hence one etcd revision.
//!
//! Every transaction compares the keyspace marker's create revision with the handle's
//! incarnation (a dropped keyspace takes no write) and the key's precondition:
//! * create: `create_revision(key) == 0` (absent);
//! * update / delete: `mod_revision(key) ==` the mod revision read just before (which is
//!   `expected` for compare-and-swap; a mismatch there fails with Conflict before any write).
//!
//! When the comparison fails, the else branch reads the key and the marker in the same
//! transaction, so the error (KeyspaceDropped, NotFound, AlreadyExists, Conflict) describes the
//! state the comparison saw.
//!
//! Quota: before the transaction, each write reads the keyspace's usage counters and limits
//! (and, for update and delete, the key: its old size) and checks the quota; the transaction
//! then also compares the usage stripe(s) it read and the key's mod revision, and updates the
//! key's stripe (see [`usage`](super::usage)). When only those extra compares fail (a
//! concurrent write), the write reads again and retries.
//!
//! Retries: a transient failure (see [`client`](super::client)) may hide a success. On a retry,
//! a create that finds the key holding exactly its value, or a compare-and-swap update that
//! finds exactly its value, reports success with the stored record. A retried delete that
//! finds the key gone reports NotFound: the deleted value is no longer readable.

use bytes::Bytes;
use etcd_client::{
    Compare, CompareOp, DeleteOptions, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse,
};

use super::backend::missing_header;
use super::client::retry;
use super::keyspace::Keyspace;
use super::layout;
use super::usage::{self, View};
use crate::error::{Result, StoreError};
use crate::quota::{self, object_bytes, WriteKind};
use crate::types::{KeyValue, Revision};

/// Run `txn` (rebuilt per attempt) with retries; returns the response and whether an earlier
/// attempt failed.
async fn run(ks: &Keyspace, txn: impl Fn() -> Txn) -> Result<(TxnResponse, bool)> {
    retry(ks.shared.retry_timeout, "txn", |failed_before| {
        let mut client = ks.shared.client();
        let txn = txn();
        async move { client.txn(txn).await.map(|r| (r, failed_before)) }
    })
    .await
}

/// The compare every write makes: the keyspace is the one this handle opened.
fn marker_compare(ks: &Keyspace) -> Compare {
    Compare::create_revision(ks.keys.marker.clone(), CompareOp::Equal, ks.incarnation)
}

/// The else branch of every write: read the key and the marker.
fn read_back(ks: &Keyspace, data_key: &str) -> [TxnOp; 2] {
    [
        TxnOp::get(data_key, None),
        TxnOp::get(ks.keys.marker.clone(), None),
    ]
}

/// The revision a successful transaction committed at.
fn committed_revision(response: &TxnResponse) -> Result<Revision> {
    response
        .header()
        .map(|h| layout::revision(h.revision()))
        .ok_or_else(|| missing_header("txn"))
}

/// What the else branch read: the key's record, failing with KeyspaceDropped if the marker
/// is not this handle's.
fn existing(ks: &Keyspace, response: &TxnResponse) -> Result<Option<KeyValue>> {
    let reads: Vec<_> = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    let [key, marker] = reads.as_slice() else {
        return Err(StoreError::EtcdProtocol {
            op: "txn",
            detail: format!("expected 2 reads in the else branch, got {}", reads.len()),
        });
    };
    if !ks.is_own_marker(marker.kvs().first()) {
        return Err(ks.dropped_error());
    }
    key.kvs().first().map(|kv| ks.key_value(kv)).transpose()
}

/// How often a write re-reads after losing a race on the usage counters before giving up.
const MAX_USAGE_RACES: usize = 1000;

/// The error after too many lost races on the usage counters.
fn contended(key: &str) -> StoreError {
    StoreError::EtcdProtocol {
        op: "txn",
        detail: format!("write of {key:?} kept losing races on the keyspace's usage counters"),
    }
}

/// Check the quota for a write described by `view` and build its usage compares and update.
fn quota_guard(
    ks: &Keyspace,
    view: &View,
    key: &str,
    kind: WriteKind,
    (old, new, objects): (u64, u64, i64),
) -> Result<(Vec<Compare>, TxnOp)> {
    quota::check(&ks.name, view.limits, view.total(), kind, old, new)?;
    Ok(view.guard(ks, key, (old, new, objects)))
}

/// Create `key`; see [`Store::create`](crate::Store::create).
pub(crate) async fn create(ks: &Keyspace, key: &str, value: Bytes) -> Result<KeyValue> {
    ks.check_live()?;
    let data_key = ks.keys.data_key(key);
    let size = object_bytes(key, value.len());
    for _ in 0..MAX_USAGE_RACES {
        let view = usage::read_view(ks, None).await?;
        let (compares, count) = quota_guard(ks, &view, key, WriteKind::Create, (0, size, 1))?;
        let (response, retried) = run(ks, || {
            let mut when = vec![
                marker_compare(ks),
                Compare::create_revision(data_key.clone(), CompareOp::Equal, 0),
            ];
            when.extend(compares.iter().cloned());
            Txn::new()
                .when(when)
                .and_then([
                    TxnOp::put(data_key.clone(), value.to_vec(), None),
                    count.clone(),
                ])
                .or_else(read_back(ks, &data_key))
        })
        .await?;
        if response.succeeded() {
            let rev = committed_revision(&response)?;
            return Ok(KeyValue {
                key: key.to_owned(),
                value,
                create_revision: rev,
                mod_revision: rev,
            });
        }
        match existing(ks, &response)? {
            // Our own earlier attempt was applied before its answer got lost.
            Some(kv) if retried && kv.value == value && kv.create_revision == kv.mod_revision => {
                return Ok(kv)
            }
            Some(_) => {
                return Err(StoreError::AlreadyExists {
                    key: key.to_owned(),
                })
            }
            // The key is absent: the usage counters moved meanwhile; read them again.
            None => {}
        }
    }
    Err(contended(key))
}

/// The error for a failed update or delete precondition, given what the else branch read.
fn precondition_error(key: &str, existing: Option<KeyValue>) -> StoreError {
    match existing {
        None => StoreError::NotFound {
            key: key.to_owned(),
        },
        Some(kv) => StoreError::Conflict {
            key: key.to_owned(),
            current: kv.mod_revision,
        },
    }
}

/// Replace `key`'s value; see [`Store::update`](crate::Store::update).
pub(crate) async fn update(
    ks: &Keyspace,
    key: &str,
    value: Bytes,
    expected: Option<Revision>,
) -> Result<KeyValue> {
    ks.check_live()?;
    let data_key = ks.keys.data_key(key);
    let size = object_bytes(key, value.len());
    for _ in 0..MAX_USAGE_RACES {
        let view = usage::read_view(ks, Some(&data_key)).await?;
        let current = view.key.clone().ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        if expected.is_some_and(|e| e != current.mod_revision) {
            return Err(precondition_error(key, Some(current)));
        }
        let old = object_bytes(key, current.value.len());
        let (compares, count) = quota_guard(ks, &view, key, WriteKind::Update, (old, size, 0))?;
        let seen = layout::etcd_revision(current.mod_revision);
        let (response, retried) = run(ks, || {
            let mut when = vec![
                marker_compare(ks),
                Compare::mod_revision(data_key.clone(), CompareOp::Equal, seen),
            ];
            when.extend(compares.iter().cloned());
            Txn::new()
                .when(when)
                .and_then([
                    TxnOp::put(
                        data_key.clone(),
                        value.to_vec(),
                        Some(PutOptions::new().with_prev_key()),
                    ),
                    count.clone(),
                ])
                .or_else(read_back(ks, &data_key))
        })
        .await?;
        if response.succeeded() {
            let rev = committed_revision(&response)?;
            let prev = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Put(put) => put.prev_key().map(|kv| kv.create_revision()),
                _ => None,
            });
            let create_revision = prev.ok_or_else(|| StoreError::EtcdProtocol {
                op: "txn",
                detail: format!("update of {key:?} returned no previous value"),
            })?;
            return Ok(KeyValue {
                key: key.to_owned(),
                value,
                create_revision: layout::revision(create_revision),
                mod_revision: rev,
            });
        }
        match existing(ks, &response)? {
            Some(kv) if retried && expected.is_some() && kv.value == value => return Ok(kv),
            None => return Err(precondition_error(key, None)),
            Some(kv) if expected.is_some_and(|e| e != kv.mod_revision) => {
                return Err(precondition_error(key, Some(kv)))
            }
            // The key or the usage counters moved meanwhile; read them again.
            Some(_) => {}
        }
    }
    Err(contended(key))
}

/// Delete `key`; see [`Store::delete`](crate::Store::delete). Never refused by the quota.
pub(crate) async fn delete(
    ks: &Keyspace,
    key: &str,
    expected: Option<Revision>,
) -> Result<KeyValue> {
    ks.check_live()?;
    let data_key = ks.keys.data_key(key);
    for _ in 0..MAX_USAGE_RACES {
        let view = usage::read_view(ks, Some(&data_key)).await?;
        let current = view.key.clone().ok_or_else(|| StoreError::NotFound {
            key: key.to_owned(),
        })?;
        if expected.is_some_and(|e| e != current.mod_revision) {
            return Err(precondition_error(key, Some(current)));
        }
        let old = object_bytes(key, current.value.len());
        let (compares, count) = quota_guard(ks, &view, key, WriteKind::Delete, (old, 0, -1))?;
        let seen = layout::etcd_revision(current.mod_revision);
        let (response, _) = run(ks, || {
            let mut when = vec![
                marker_compare(ks),
                Compare::mod_revision(data_key.clone(), CompareOp::Equal, seen),
            ];
            when.extend(compares.iter().cloned());
            Txn::new()
                .when(when)
                .and_then([
                    TxnOp::delete(data_key.clone(), Some(DeleteOptions::new().with_prev_key())),
                    count.clone(),
                ])
                .or_else(read_back(ks, &data_key))
        })
        .await?;
        if response.succeeded() {
            let rev = committed_revision(&response)?;
            let prev = response.op_responses().into_iter().find_map(|op| match op {
                TxnOpResponse::Delete(delete) => delete.prev_kvs().first().cloned(),
                _ => None,
            });
            let prev = prev.ok_or_else(|| StoreError::EtcdProtocol {
                op: "txn",
                detail: format!("delete of {key:?} returned no previous value"),
            })?;
            let prev = ks.key_value(&prev)?;
            return Ok(KeyValue {
                mod_revision: rev,
                ..prev
            });
        }
        match existing(ks, &response)? {
            None => return Err(precondition_error(key, None)),
            Some(kv) if expected.is_some_and(|e| e != kv.mod_revision) => {
                return Err(precondition_error(key, Some(kv)))
            }
            // The key or the usage counters moved meanwhile; read them again.
            Some(_) => {}
        }
    }
    Err(contended(key))
}
