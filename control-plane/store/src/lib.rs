//! Revisioned key-value storage for Fabrik clusters — what etcd is to kube-apiserver.
//!
//! The [`Store`] trait is the contract: per-keyspace monotonically increasing revisions,
//! create / update / delete with compare-and-swap on a key's mod revision, lists at the
//! current or an older revision with pagination, and watches from a revision that replay
//! history and then follow live changes. History is bounded; asking for a revision older than
//! [`Store::compacted_revision`] fails with [`StoreError::Compacted`] (HTTP 410 Gone upstream).
//!
//! Backends: [`SledBackend`] (embedded, default) holds one sled database per process and one
//! keyspace per cluster ([`SledBackend::keyspace`]). [`EtcdBackend`] keeps keyspaces under one
//! key prefix of an etcd cluster ([`EtcdBackend::keyspace`]), for several control-plane
//! replicas; its revisions are etcd's, shared by all keyspaces of the cluster (strictly
//! increasing per keyspace, with gaps). [`local_etcd`] starts throwaway etcd members on
//! loopback for tests and benchmarks. Both come with the `etcd` cargo feature (off by default:
//! its build needs `protoc`).
//!
//! Quota: each keyspace can be given [`StorageLimits`] (bytes of keys and values, number of
//! objects), enforced by both backends at write time ([`StoreError::QuotaExceeded`]; deletes
//! are always allowed). The sled backend also bounds each keyspace's history in bytes
//! ([`SledConfig::history_bytes`]), not only in revisions.
//!
//! What this crate does *not* do: interpret values (they are opaque bytes, JSON upstream),
//! enforce tenancy beyond keyspace isolation and quota, or expire keys (no leases yet).

#[cfg(test)]
mod conformance;
mod error;
#[cfg(feature = "etcd")]
mod etcd_backend;
mod keyspace_name;
#[cfg(feature = "etcd")]
pub mod local_etcd;
mod quota;
mod sled_backend;
mod store;
mod types;

pub use error::{Result, StoreError};
#[cfg(feature = "etcd")]
pub use etcd_backend::{
    EtcdBackend, EtcdConfig, EtcdStore, EtcdTls, DEFAULT_COMPACTION_INTERVAL, DEFAULT_ETCD_PREFIX,
    DEFAULT_RETRY_TIMEOUT,
};
pub use quota::{update_grace, StorageLimits, StorageUsage};
pub use sled_backend::{
    disk_use, ChunkError, SledBackend, SledConfig, SledStore, DEFAULT_CACHE_BYTES, DEFAULT_HISTORY,
    DEFAULT_HISTORY_BYTES, INITIAL_REVISION,
};
pub use store::Store;
pub use types::{
    Event, EventKind, KeyValue, ListOptions, ListResult, Revision, WatchItem, WatchStream,
};
