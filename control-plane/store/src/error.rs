//! The one error type of the store: what callers match on (not found, conflict, compacted, ...)
//! and backend failures with their source kept.

use std::sync::Arc;

use crate::types::Revision;

/// Result alias for store operations.
pub type Result<T, E = StoreError> = std::result::Result<T, E>;

/// Everything a store operation can fail with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The key does not exist.
    #[error("key {key:?} not found")]
    NotFound {
        /// The missing key.
        key: String,
    },
    /// `create` found the key already present.
    #[error("key {key:?} already exists")]
    AlreadyExists {
        /// The existing key.
        key: String,
    },
    /// Compare-and-swap failed: the key's current mod_revision differs from the expected one.
    #[error("key {key:?} was modified: current mod revision is {current}")]
    Conflict {
        /// The key whose revision did not match.
        key: String,
        /// Its mod_revision at the time of the attempt.
        current: Revision,
    },
    /// The requested revision has been compacted away (the API turns this into 410 Gone).
    /// Carries the oldest revision still available.
    #[error("revision {requested} has been compacted; oldest available is {compacted}")]
    Compacted {
        /// The revision asked for.
        requested: Revision,
        /// The oldest revision a list or watch can still start from.
        compacted: Revision,
    },
    /// A revision in the future was requested.
    #[error("revision {requested} is in the future; current revision is {current}")]
    FutureRevision {
        /// The revision asked for.
        requested: Revision,
        /// The current revision of the keyspace.
        current: Revision,
    },
    /// A create or a growing update would take the keyspace over its storage quota (see
    /// [`StorageLimits`](crate::StorageLimits)). Deletes are never refused for this.
    #[error(
        "exceeded quota: {resource} of keyspace {keyspace:?}, requested: {requested}, \
         used: {used}, limited: {limit}"
    )]
    QuotaExceeded {
        /// The keyspace.
        keyspace: String,
        /// Which limit: `"storage"` (bytes of keys and values) or `"objects"`.
        resource: &'static str,
        /// What the write would add (bytes, or 1 object).
        requested: u64,
        /// The keyspace's usage before the write.
        used: u64,
        /// The limit.
        limit: u64,
    },
    /// Backend failure (I/O, corruption reported by sled).
    #[error("storage backend failure: {0}")]
    Backend(#[from] sled::Error),
    /// Making a write durable failed; the write may or may not survive a crash.
    #[error("failed to flush writes to disk: {0}")]
    Flush(#[source] Arc<sled::Error>),
    /// The background flusher is gone (the backend is shutting down).
    #[error("store is shutting down; write durability cannot be confirmed")]
    ShuttingDown,
    /// Stored bytes could not be decoded: the data on disk is not what this crate wrote.
    #[error("corrupt {what} record in keyspace {keyspace:?}")]
    Corrupt {
        /// The keyspace holding the record.
        keyspace: String,
        /// Which kind of record (object, log entry, meta) failed to decode.
        what: &'static str,
    },
    /// A large value, kept in chunks by the sled backend, cannot be read back: a chunk is
    /// missing or malformed. The data on disk is not what this crate wrote.
    #[error("corrupt large value in keyspace {keyspace:?}: {source}")]
    CorruptValue {
        /// The keyspace holding the value.
        keyspace: String,
        /// What is wrong with its chunks.
        #[source]
        source: crate::ChunkError,
    },
    /// A keyspace name is empty, too long or holds characters outside `[A-Za-z0-9._-]`.
    #[error("invalid keyspace name {name:?}: use 1 to 200 characters from [A-Za-z0-9._-]")]
    InvalidKeyspace {
        /// The rejected name.
        name: String,
    },
    /// The keyspace was removed by `drop_keyspace` while this handle was still in use.
    #[error("keyspace {name:?} has been dropped")]
    KeyspaceDropped {
        /// The dropped keyspace.
        name: String,
    },
    /// A blocking backend task panicked or was cancelled.
    #[error("background storage task failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[cfg(feature = "etcd")]
    /// An etcd request failed (after the retries transient failures get, see
    /// [`EtcdConfig::retry_timeout`](crate::EtcdConfig::retry_timeout)).
    #[error("etcd {op} failed: {source}")]
    Etcd {
        /// What was being done (`"txn"`, `"range"`, `"watch"`, ...).
        op: &'static str,
        /// The client's error.
        #[source]
        source: Box<etcd_client::Error>,
    },
    /// etcd answered something the protocol does not allow (a missing header, a watch that
    /// was never created).
    #[error("unexpected etcd response to {op}: {detail}")]
    EtcdProtocol {
        /// What was being done.
        op: &'static str,
        /// What was wrong.
        detail: String,
    },
    /// A TLS file named in the etcd configuration could not be read.
    #[error("cannot read etcd TLS file {path:?}: {source}")]
    EtcdTlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The etcd configuration is unusable (no endpoints, a client certificate without its key).
    #[error("invalid etcd configuration: {0}")]
    EtcdConfig(String),
}
