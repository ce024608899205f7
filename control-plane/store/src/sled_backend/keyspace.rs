//! One keyspace of the sled backend: its trees, its revision counters and the [`Store`]
//! implementation that ties writes, lists and watches together.
//!
//! Layout: four sled trees per keyspace, `fabrik/<name>/objects`, `fabrik/<name>/log`,
//! `fabrik/<name>/meta` (see [`codec`](super::codec)) and `fabrik/<name>/chunks` (large values,
//! see [`chunks`](super::chunks)). Every write updates them in one sled transaction, so object,
//! log entry, value chunks, revision counter and usage never disagree, also after a crash.
//!
//! Visibility: a write is *committed* when its transaction is (in memory) and *durable* once
//! a flush of the group-commit thread covers it. Readers only ever see durable revisions:
//! `current_revision` is the latest durable one, lists are taken at it (undoing newer log
//! entries), watch events are broadcast by the flusher after the flush (once readers see
//! their revision, so a woken watcher never reads an older state), and a `get` that may
//! have read a not yet durable value waits for the next flush. So a revision a client has
//! seen survives any crash and is never handed out again.
//!
//! Blocking: sled reads and transactions are in-memory B-tree operations and run inline on
//! the calling task; the only slow operation, `fsync`, runs on the group-commit thread (see
//! [`group_commit`](super::group_commit)).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use tokio::sync::broadcast;

use super::chunks::{self, ChunkError};
use super::codec::{self, StoredValue, META_COMPACTED, META_CURRENT, META_USAGE};
use super::group_commit::{FlushListener, GroupCommit};
use super::{history, watch, write};
use crate::error::{Result, StoreError};
use crate::quota::{StorageLimits, StorageUsage};
use crate::store::Store;
use crate::types::{Event, KeyValue, ListOptions, ListResult, Revision, WatchStream};

/// The revision of a keyspace that has never been written.
pub const INITIAL_REVISION: Revision = 1;

/// State guarded by the keyspace's writer lock. Holding it orders writes, broadcasts and
/// watch subscriptions.
#[derive(Debug)]
pub(crate) struct Writer {
    /// Latest committed revision (the last one handed out).
    pub(crate) committed: Revision,
    /// Latest durable revision: what readers see.
    pub(crate) durable: Revision,
    /// Log entries at or below this revision have been removed.
    pub(crate) compacted: Revision,
    /// Committed events not yet durable, in revision order (broadcast once durable).
    pub(crate) pending: VecDeque<Arc<Event>>,
    /// Bytes and objects held (as of the committed revision).
    pub(crate) usage: StorageUsage,
    /// Bytes of the log entries kept (as of the committed revision).
    pub(crate) log_bytes: u64,
    /// The keyspace's quota.
    pub(crate) limits: StorageLimits,
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
    pub(crate) chunks: sled::Tree,
    /// Copy of `Writer::durable` readable without the lock: the revision readers see.
    pub(crate) current: AtomicU64,
    /// At least the revision of every transaction that has started to commit (set before the
    /// transaction, so a reader that saw a write's object also sees a value >= its revision).
    pub(crate) committed: AtomicU64,
    /// Whether `Writer::pending` is non-empty (lets the flusher skip idle keyspaces).
    pub(crate) has_pending: AtomicBool,
    /// Copy of `Writer::compacted` readable without the lock.
    pub(crate) compacted: AtomicU64,
    pub(crate) dropped: AtomicBool,
    pub(crate) history: u64,
    pub(crate) history_bytes: u64,
    pub(crate) writer: Mutex<Writer>,
    pub(crate) commit: Arc<GroupCommit>,
}

impl Keyspace {
    /// Open (creating if needed) the trees of keyspace `name` and load its counters.
    pub(crate) fn open(
        db: &sled::Db,
        name: &str,
        (history, history_bytes): (u64, u64),
        watch_buffer: usize,
        commit: Arc<GroupCommit>,
    ) -> Result<Self> {
        let [objects, log, meta, chunks] = tree_names(name).map(|tree| db.open_tree(tree));
        let (objects, log, meta, chunks) = (objects?, log?, meta?, chunks?);
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
        let (usage, log_bytes) = match meta.get(META_USAGE)? {
            Some(bytes) => codec::decode_usage(&bytes).ok_or_else(|| StoreError::Corrupt {
                keyspace: name.to_owned(),
                what: "usage",
            })?,
            // Written before usage was recorded: count once, then every write keeps it.
            None => {
                let counted = count_usage(&objects, &log)?;
                meta.insert(META_USAGE, &codec::encode_usage(counted.0, counted.1)[..])?;
                counted
            }
        };
        let (events, _) = broadcast::channel(watch_buffer.max(1));
        Ok(Self {
            name: name.to_owned(),
            objects,
            log,
            meta,
            chunks,
            current: AtomicU64::new(current),
            committed: AtomicU64::new(current),
            has_pending: AtomicBool::new(false),
            compacted: AtomicU64::new(compacted),
            dropped: AtomicBool::new(false),
            history,
            history_bytes,
            writer: Mutex::new(Writer {
                committed: current,
                durable: current,
                compacted,
                pending: VecDeque::new(),
                usage,
                log_bytes,
                limits: StorageLimits::UNLIMITED,
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

    /// The error for a large value whose chunks cannot be read back.
    pub(crate) fn corrupt_value(&self, source: ChunkError) -> StoreError {
        StoreError::CorruptValue {
            keyspace: self.name.clone(),
            source,
        }
    }

    /// The bytes of a value as a record holds it, reading chunks from the chunks tree. The
    /// inner error says the chunks are not there (freed by a racing write, or corrupt).
    pub(crate) fn read_value(
        &self,
        value: &StoredValue,
    ) -> Result<std::result::Result<Bytes, ChunkError>> {
        match value {
            StoredValue::Inline(bytes) => Ok(Ok(bytes.clone())),
            StoredValue::Chunked { revision, len } => {
                Ok(chunks::read(*revision, *len, |key| self.chunks.get(key))?)
            }
        }
    }

    /// Read one object.
    ///
    /// A value in chunks is read after its record, so a write may replace it and, once the
    /// replacement has been compacted from the log, free its chunks in between; then the
    /// record has changed, and the read starts over. Chunks missing under an unchanged record
    /// are corruption.
    pub(crate) fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.check_live()?;
        let mut stored = self.objects.get(key.as_bytes())?;
        loop {
            let Some(bytes) = stored else {
                return Ok(None);
            };
            let record = codec::decode_object(&bytes).ok_or_else(|| self.corrupt("object"))?;
            let error = match self.read_value(&record.value)? {
                Ok(value) => return Ok(Some(record.into_kv(key, value))),
                Err(error) => error,
            };
            stored = self.objects.get(key.as_bytes())?;
            if stored.as_ref() == Some(&bytes) {
                return Err(self.corrupt_value(error));
            }
        }
    }
}

/// The usage of a keyspace written before usage was recorded: one scan of both trees
/// (values and entries counted at their logical sizes; an undecodable record at its stored
/// size, the reads that meet it report it).
fn count_usage(objects: &sled::Tree, log: &sled::Tree) -> Result<(StorageUsage, u64)> {
    let mut usage = StorageUsage::default();
    for entry in objects.iter() {
        let (key, value) = entry?;
        let value_len = codec::object_value_len(&value)
            .unwrap_or_else(|| value.len().saturating_sub(codec::OBJECT_HEADER) as u64);
        usage.bytes = usage
            .bytes
            .saturating_add(key.len() as u64)
            .saturating_add(value_len);
        usage.objects += 1;
    }
    let mut log_bytes = 0u64;
    for entry in log.iter() {
        let (key, value) = entry?;
        let logical = codec::decode_u64(&key)
            .and_then(|rev| codec::decode_log(rev, &value))
            .map_or(value.len() as u64, |record| record.logical_len());
        log_bytes = log_bytes.saturating_add(logical);
    }
    Ok((usage, log_bytes))
}

impl FlushListener for Keyspace {
    fn before_flush(&self) -> Option<Revision> {
        if !self.has_pending.load(Ordering::Acquire) {
            return None;
        }
        let writer = self.lock_writer();
        writer.pending.back().map(|event| event.revision())
    }

    fn after_flush(&self, durable: Revision) {
        let mut writer = self.lock_writer();
        // Readers see the new revision before any watcher hears of it: a watcher woken by an
        // event that then reads (a controller listing what changed) must read at least that
        // event's revision, never the one before it.
        if durable > writer.durable {
            writer.durable = durable;
            self.current.store(durable, Ordering::Release);
        }
        while writer
            .pending
            .front()
            .is_some_and(|event| event.revision() <= durable)
        {
            let Some(event) = writer.pending.pop_front() else {
                break;
            };
            if let Some(events) = &writer.events {
                // No receivers is not an error: nobody is watching.
                let _ = events.send(event);
            }
        }
        self.has_pending
            .store(!writer.pending.is_empty(), Ordering::Release);
    }
}

/// The sled tree names of keyspace `name`: objects, log, meta, chunks.
pub(crate) fn tree_names(name: &str) -> [String; 4] {
    ["objects", "log", "meta", "chunks"].map(|suffix| format!("fabrik/{name}/{suffix}"))
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
        let kv = write::apply(&self.inner, key, op)?;
        // The flusher publishes the event (and moves the visible revision) before it releases
        // this wait, so a writer sees its own write in `current_revision` and in watches.
        self.inner.commit.wait_durable().await?;
        Ok(kv)
    }

    /// Bytes of change history this keyspace keeps now.
    pub fn history_bytes(&self) -> u64 {
        self.inner.lock_writer().log_bytes
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
        let kv = self.inner.get(key)?;
        // The read may reflect a committed write that is not durable yet: then wait for the
        // flush that covers it (only reads racing with writes pay this).
        let committed = self.inner.committed.load(Ordering::Acquire);
        if committed > self.inner.current.load(Ordering::Acquire) {
            self.inner.commit.wait_durable().await?;
        }
        Ok(kv)
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

    async fn set_limits(&self, limits: StorageLimits) -> Result<()> {
        self.inner.check_live()?;
        self.inner.lock_writer().limits = limits;
        Ok(())
    }

    async fn usage(&self) -> Result<StorageUsage> {
        self.inner.check_live()?;
        Ok(self.inner.lock_writer().usage)
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
