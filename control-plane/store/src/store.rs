//! The [`Store`] trait: the revisioned key-value contract every backend (sled, etcd)
//! implements, modelled on etcd's MVCC API.
//!
//! Guarantees every implementation gives:
//! * revisions per keyspace strictly increasing with every successful write, never reused
//!   (also across restarts). sled gives each keyspace its own gap-free counter (first write
//!   at 2, then one per write); etcd shares one counter across its whole cluster, so a
//!   keyspace's revisions have gaps and an empty keyspace reports the cluster's revision;
//! * a write returns only once it is durable, and no reader (get, list, watch,
//!   `current_revision`) sees a write before it is durable, so a revision a client has seen
//!   is never lost or reused after a crash;
//! * creates and growing updates beyond the keyspace's [`StorageLimits`] fail with
//!   [`StoreError::QuotaExceeded`]; deletes never do;
//! * `list` and `watch` can start at any revision from [`Store::compacted_revision`] to
//!   [`Store::current_revision`]; older ones fail with [`StoreError::Compacted`];
//! * a watch yields every matching change after its start revision exactly once, in revision
//!   order, with no gap between history and live changes.

use std::time::Duration;

use bytes::Bytes;

use crate::error::StoreError;
use crate::quota::{StorageLimits, StorageUsage};
use crate::types::{KeyValue, ListOptions, ListResult, Revision, WatchStream};

/// A revisioned key-value store for one keyspace (one cluster).
#[async_trait::async_trait]
pub trait Store: Send + Sync + 'static {
    /// The current (latest committed) revision of this keyspace. Never 0 (which Kubernetes
    /// treats as "any"): an empty, never written sled keyspace is at revision 1 and its first
    /// write takes revision 2; an etcd keyspace reports the etcd cluster's current revision.
    async fn current_revision(&self) -> Result<Revision, StoreError>;

    /// Oldest revision a watch/list can still start from.
    async fn compacted_revision(&self) -> Result<Revision, StoreError>;

    /// The key's current value, or None.
    async fn get(&self, key: &str) -> Result<Option<KeyValue>, StoreError>;

    /// Keys under a prefix, sorted, paginated, at the current or an older revision.
    async fn list(&self, opts: ListOptions) -> Result<ListResult, StoreError>;

    /// Create a key. Fails with AlreadyExists.
    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue, StoreError>;

    /// Replace the value. `expected`: Some(rev) = compare-and-swap on the key's mod_revision
    /// (Conflict otherwise); NotFound if absent.
    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<KeyValue, StoreError>;

    /// Delete; same `expected` semantics as `update`; returns the deleted value with
    /// mod_revision = deletion revision.
    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue, StoreError>;

    /// Set this keyspace's storage quota (takes effect for the next write; usage already over
    /// a lowered limit stays, only growth is refused). Every handle of the keyspace shares the
    /// limits (etcd: every process, the limits are stored in etcd). Unset = unlimited.
    async fn set_limits(&self, limits: StorageLimits) -> Result<(), StoreError>;

    /// The keyspace's current usage (bytes of keys and values, objects).
    async fn usage(&self) -> Result<StorageUsage, StoreError>;

    /// Every change under `prefix` with revision > `after`, in revision order, exactly once,
    /// then live changes forever. `after` older than the compacted revision -> Err(Compacted)
    /// (either from this call or as the stream's first item). Progress items at about
    /// `progress_interval` when Some.
    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
        progress_interval: Option<Duration>,
    ) -> Result<WatchStream, StoreError>;
}
