//! The write path of the etcd backend: each create, update or delete is one etcd transaction,
//! hence one etcd revision.
//!
//! Every transaction compares the keyspace marker's create revision with the handle's
//! incarnation (a dropped keyspace takes no write) and the key's precondition:
//! * create: `create_revision(key) == 0` (absent);
//! * update / delete: `mod_revision(key) == expected` for compare-and-swap, else
//!   `version(key) > 0` (present).
//!
//! When the comparison fails, the else branch reads the key and the marker in the same
//! transaction, so the error (KeyspaceDropped, NotFound, AlreadyExists, Conflict) describes the
//! state the comparison saw.
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
use crate::error::{Result, StoreError};
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

/// Create `key`; see [`Store::create`](crate::Store::create).
pub(crate) async fn create(ks: &Keyspace, key: &str, value: Bytes) -> Result<KeyValue> {
    ks.check_live()?;
    let data_key = ks.keys.data_key(key);
    let (response, retried) = run(ks, || {
        Txn::new()
            .when([
                marker_compare(ks),
                Compare::create_revision(data_key.clone(), CompareOp::Equal, 0),
            ])
            .and_then([TxnOp::put(data_key.clone(), value.to_vec(), None)])
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
        Some(kv) if retried && kv.value == value && kv.create_revision == kv.mod_revision => Ok(kv),
        Some(_) => Err(StoreError::AlreadyExists {
            key: key.to_owned(),
        }),
        // Deleted between the comparison and the read cannot happen (one transaction): the
        // marker compare failed with the key absent, which `existing` reported.
        None => Err(StoreError::EtcdProtocol {
            op: "txn",
            detail: format!("create of {key:?} failed although the key is absent"),
        }),
    }
}

/// The precondition compare of update and delete.
fn precondition(data_key: &str, expected: Option<Revision>) -> Compare {
    match expected {
        Some(rev) => Compare::mod_revision(data_key, CompareOp::Equal, layout::etcd_revision(rev)),
        None => Compare::version(data_key, CompareOp::Greater, 0),
    }
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
    let (response, retried) = run(ks, || {
        Txn::new()
            .when([marker_compare(ks), precondition(&data_key, expected)])
            .and_then([TxnOp::put(
                data_key.clone(),
                value.to_vec(),
                Some(PutOptions::new().with_prev_key()),
            )])
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
        Some(kv) if retried && expected.is_some() && kv.value == value => Ok(kv),
        other => Err(precondition_error(key, other)),
    }
}

/// Delete `key`; see [`Store::delete`](crate::Store::delete).
pub(crate) async fn delete(
    ks: &Keyspace,
    key: &str,
    expected: Option<Revision>,
) -> Result<KeyValue> {
    ks.check_live()?;
    let data_key = ks.keys.data_key(key);
    let (response, _) = run(ks, || {
        Txn::new()
            .when([marker_compare(ks), precondition(&data_key, expected)])
            .and_then([TxnOp::delete(
                data_key.clone(),
                Some(DeleteOptions::new().with_prev_key()),
            )])
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
    Err(precondition_error(key, existing(ks, &response)?))
}
