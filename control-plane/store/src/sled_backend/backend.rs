//! The sled backend: one sled database per process holding any number of independent
//! keyspaces (one per cluster), and their lifecycle (open, drop).
//!
//! Guarantees: every handle for the same keyspace name shares one revision counter and one
//! writer lock (the backend keeps a registry of open keyspaces); keyspaces never see each
//! other's keys (separate sled trees); dropping a keyspace removes all of its trees.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, PoisonError};

use super::config::{SledConfig, DEFAULT_WATCH_BUFFER};
use super::group_commit::{FlushHook, FlushListener, GroupCommit};
use super::keyspace::{tree_names, Keyspace, SledStore};
use crate::error::Result;
use crate::keyspace_name::validate as validate_name;

/// The process-wide sled database. Cheap to clone (Arc inside).
#[derive(Clone, Debug)]
pub struct SledBackend {
    inner: Arc<BackendInner>,
}

#[derive(Debug)]
struct BackendInner {
    db: sled::Db,
    commit: Arc<GroupCommit>,
    history: u64,
    history_bytes: u64,
    watch_buffer: usize,
    keyspaces: Mutex<HashMap<String, SledStore>>,
}

impl SledBackend {
    /// Open (or create) the database at `config.path`.
    pub fn open(config: SledConfig) -> Result<Self> {
        Self::open_with_watch_buffer(config, DEFAULT_WATCH_BUFFER)
    }

    /// [`open`](Self::open) with a given live-event channel capacity (tests use a tiny one to
    /// exercise lagging watchers).
    pub(crate) fn open_with_watch_buffer(config: SledConfig, watch_buffer: usize) -> Result<Self> {
        Self::open_with(config, watch_buffer, None)
    }

    /// [`open`](Self::open) with a live-event channel capacity and a hook run before every
    /// flush (tests delay flushes with it).
    pub(crate) fn open_with(
        config: SledConfig,
        watch_buffer: usize,
        flush_hook: Option<FlushHook>,
    ) -> Result<Self> {
        let db = sled::Config::new()
            .path(&config.path)
            .cache_capacity(config.cache_capacity_bytes)
            .open()?;
        let commit = Arc::new(GroupCommit::start_with_hook(db.clone(), flush_hook)?);
        Ok(Self {
            inner: Arc::new(BackendInner {
                db,
                commit,
                history: config.history,
                history_bytes: config.history_bytes,
                watch_buffer,
                keyspaces: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// One independent keyspace (own revision counter, own history) per cluster: "host" now,
    /// one per tenant later. Cheap to clone (Arc inside). Names are 1 to 200 characters from
    /// `[A-Za-z0-9._-]`.
    pub fn keyspace(&self, name: &str) -> Result<SledStore> {
        validate_name(name)?;
        let mut open = self.lock_keyspaces();
        if let Some(store) = open.get(name) {
            return Ok(store.clone());
        }
        let keyspace = Arc::new(Keyspace::open(
            &self.inner.db,
            name,
            (self.inner.history, self.inner.history_bytes),
            self.inner.watch_buffer,
            Arc::clone(&self.inner.commit),
        )?);
        let listener: Arc<dyn FlushListener> = keyspace.clone();
        self.inner.commit.add_listener(Arc::downgrade(&listener));
        let store = SledStore { inner: keyspace };
        open.insert(name.to_owned(), store.clone());
        Ok(store)
    }

    /// Remove a keyspace and all its data (tenant deletion). Handles still held fail with
    /// KeyspaceDropped from then on and its watch streams end with that error. Dropping a
    /// keyspace that does not exist is not an error. Returns once the removal is durable.
    pub fn drop_keyspace(&self, name: &str) -> Result<()> {
        validate_name(name)?;
        let mut open = self.lock_keyspaces();
        let store = open.remove(name);
        // Hold the keyspace's writer lock so no write can land in a half-dropped keyspace.
        let writer = store.as_ref().map(|s| {
            let mut writer = s.inner.lock_writer();
            s.inner.dropped.store(true, Ordering::Release);
            writer.events = None;
            writer.pending.clear();
            writer
        });
        for tree in tree_names(name) {
            self.inner.db.drop_tree(tree)?;
        }
        drop(writer);
        drop(open);
        self.inner.db.flush()?;
        Ok(())
    }

    /// Names of every keyspace stored in the database (opened in this process or not).
    pub fn keyspace_names(&self) -> Vec<String> {
        self.inner
            .db
            .tree_names()
            .iter()
            .filter_map(|tree| std::str::from_utf8(tree).ok())
            .filter_map(|tree| tree.strip_prefix("fabrik/")?.strip_suffix("/meta"))
            .map(str::to_owned)
            .collect()
    }

    fn lock_keyspaces(&self) -> std::sync::MutexGuard<'_, HashMap<String, SledStore>> {
        self.inner
            .keyspaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}
