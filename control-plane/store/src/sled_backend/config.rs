//! Configuration of the sled backend and its documented defaults.

use std::path::PathBuf;

/// Default sled page-cache size: 4 MiB.
///
/// The whole Fabrik process should stay under 30 MiB plus twice the stored JSON. sled's own
/// default (1 GiB) would let the cache alone blow that budget. Kubernetes objects are small
/// (a few KiB) and the hot set (recently written or watched objects) is small too; anything
/// colder is still served from the operating system's page cache, which does not count against
/// the process. 4 MiB keeps a few thousand hot objects in memory while leaving most of the
/// budget to the API server.
pub const DEFAULT_CACHE_BYTES: u64 = 4 * 1024 * 1024;

/// Default number of revisions of change history kept per keyspace: 10,000.
///
/// Watches and lists can start at most this many writes in the past. kube-apiserver's watch
/// cache keeps far less per resource; etcd keeps about five minutes. History lives on disk
/// (only its hot part occupies the cache), so this is a disk-space, not a memory, cost.
pub const DEFAULT_HISTORY: u64 = 10_000;

/// Default bound of a keyspace's change history in bytes: 64 MiB.
///
/// The history keeps, per revision, the new and the previous value, so a few rewrites of a
/// large object take as much as thousands of small writes. When the history's bytes exceed
/// this bound, its oldest revisions are compacted (watches and lists older than that get
/// 410 Gone and relist, as after any compaction). A keyspace with a bytes quota keeps at most
/// that quota of history when it is lower. With the quota, a keyspace's disk use is bounded
/// by `quota + grace + history bound` (plus sled's own overhead).
pub const DEFAULT_HISTORY_BYTES: u64 = 64 * 1024 * 1024;

/// Default capacity of a keyspace's live-event channel. A watcher that falls further behind
/// than this re-reads the change log instead, so this only trades memory for fewer log reads.
pub(crate) const DEFAULT_WATCH_BUFFER: usize = 1024;

/// How to open a [`SledBackend`](crate::SledBackend).
#[derive(Clone, Debug)]
pub struct SledConfig {
    /// Directory of the sled database (created if missing).
    pub path: PathBuf,
    /// sled page-cache size in bytes; see [`DEFAULT_CACHE_BYTES`].
    pub cache_capacity_bytes: u64,
    /// How many revisions of change history each keyspace keeps for watch/list-at-revision;
    /// see [`DEFAULT_HISTORY`].
    pub history: u64,
    /// Bound of each keyspace's change history in bytes; see [`DEFAULT_HISTORY_BYTES`].
    pub history_bytes: u64,
}

impl SledConfig {
    /// A config for `path` with the default cache size and history bounds.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            cache_capacity_bytes: DEFAULT_CACHE_BYTES,
            history: DEFAULT_HISTORY,
            history_bytes: DEFAULT_HISTORY_BYTES,
        }
    }
}
