//! One keyspace of the sled backend: its trees, its revision counters and the [`Store`]
//! implementation that ties writes, lists and watches together.
//!
//! Layout: three sled trees per keyspace, `fabrik/<name>/objects`, `fabrik/<name>/log` and
//! `fabrik/<name>/meta` (see [`codec`](super::codec)). Every write updates all three in one
//! sled transaction, so object, log entry and revision counter never disagree, also after a
//! crash.
//!
//! Blocking: sled reads and transactions are in-memory B-tree operations and run inline on
//! the calling task; the only slow operation, `fsync`, runs on the group-commit thread (see
//! [`group_commit`](super::group_commit)).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::codec::{self, META_COMPACTED, META_CURRENT};
use super::group_commit::GroupCommit;
use super::{history, watch, write};
use crate::error::{Result, StoreError};
use crate::store::Store;
use crate::types::{Event, KeyValue, ListOptions, ListResult, Revision, WatchStream};

/// The revision of a keyspace that has never been written.
pub const INITIAL_REVISION: Revision = 1;

/// State guarded by the keyspace's writer lock. Holding it orders writes and watch
/// subscriptions.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Latest committed revision.
    pub(crate) current: Revision,
    /// Log entries at or below this revision have been removed.
    pub(crate) compacted: Revision,
    /// Live events, sent in revision order under this lock; None once the keyspace is dropped.
    pub(crate) events: Option<broadcast::Sender<Arc<Event>>>,
}

/// Everything one keyspace shares between its handles.
#[derive(Debug)]
pub(crate) struct Keyspace {
    pub(crate) name: String,
    pub(crate) objects: sled::Tree,
    pub(crate) log: sled::Tree,
    pub(crate) meta: sled::Tree,
    /// Copy of `Writer::current` readable without the lock.
    pub(crate) current: AtomicU64,
    /// Copy of `Writer::compacted` readable without the lock.
    pub(crate) compacted: AtomicU64,
    pub(crate) dropped: AtomicBool,
    pub(crate) history: u64,
    pub(crate) writer: Mutex<Writer>,
    pub(crate) commit: Arc<GroupCommit>,
}

impl Keyspace {
    /// Open (creating if needed) the trees of keyspace `name` and load its counters.
    pub(crate) fn open(
        db: &sled::Db,
        name: &str,
        history: u64,
        watch_buffer: usize,
        commit: Arc<GroupCommit>,
    ) -> Result<Self> {
        let [objects, log, meta] = tree_names(name).map(|tree| db.open_tree(tree));
        let (objects, log, meta) = (objects?, log?, meta?);
        let read_meta = |key: &[u8]| -> Result<Revision> {
            match meta.get(key)? {
                None => Ok(INITIAL_REVISION),
                Some(bytes) => codec::decode_u64(&bytes).ok_or_else(|| StoreError::Corrupt {
                    keyspace: name.to_owned(),
                    what: "meta",
                }),
            }
        };
        let current = read_meta(META_CURRENT)?;
        let compacted = read_meta(META_COMPACTED)?;
        let (events, _) = broadcast::channel(watch_buffer.max(1));
        Ok(Self {
            name: name.to_owned(),
            objects,
            log,
            meta,
            current: AtomicU64::new(current),
            compacted: AtomicU64::new(compacted),
            dropped: AtomicBool::new(false),
            history,
            writer: Mutex::new(Writer {
                current,
                compacted,
                events: Some(events),
            }),
            commit,
        })
    }

    /// Take the writer lock (a poisoned lock is still consistent: counters are only updated
    /// after a successful commit).
    pub(crate) fn lock_writer(&self) -> MutexGuard<'_, Writer> {
        self.writer.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Fail if the keyspace has been dropped.
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.dropped.load(Ordering::Acquire) {
            return Err(StoreError::KeyspaceDropped {
                name: self.name.clone(),
            });
        }
        Ok(())
    }

    /// The error for undecodable bytes.
    pub(crate) fn corrupt(&self, what: &'static str) -> StoreError {
        StoreError::Corrupt {
            keyspace: self.name.clone(),
            what,
        }
    }

    /// Read one object.
    pub(crate) fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.check_live()?;
        match self.objects.get(key.as_bytes())? {
            None => Ok(None),
            Some(bytes) => codec::decode_object(key, &bytes)
                .map(Some)
                .ok_or_else(|| self.corrupt("object")),
        }
    }
}

/// The sled tree names of keyspace `name`: objects, log, meta.
pub(crate) fn tree_names(name: &str) -> [String; 3] {
    ["objects", "log", "meta"].map(|suffix| format!("fabrik/{name}/{suffix}"))
}

/// A handle on one keyspace of a [`SledBackend`](crate::SledBackend). Cheap to clone; all
/// clones (and all handles returned for the same name) share one revision counter.
#[derive(Clone, Debug)]
pub struct SledStore {
    pub(crate) inner: Arc<Keyspace>,
}

impl SledStore {
    /// The keyspace name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    async fn write(&self, key: &str, op: write::Op) -> Result<KeyValue> {
        let event = write::apply(&self.inner, key, op)?;
        self.inner.commit.wait_durable().await?;
        Ok(event.kv)
    }
}

#[async_trait::async_trait]
impl Store for SledStore {
    async fn current_revision(&self) -> Result<Revision> {
        self.inner.check_live()?;
        Ok(self.inner.current.load(Ordering::Acquire))
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.check_live()?;
        Ok(self.inner.compacted.load(Ordering::Acquire))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key)
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        history::list(&self.inner, &opts)
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        self.write(key, write::Op::Create(value)).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<KeyValue> {
        self.write(key, write::Op::Update { value, expected }).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        self.write(key, write::Op::Delete { expected }).await
    }

    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
        progress_interval: Option<Duration>,
    ) -> Result<WatchStream> {
        watch::start(Arc::clone(&self.inner), prefix, after, progress_interval)
    }
}
