//! The etcd backend: one client per process (balanced over every member), any number of
//! keyspaces (one per cluster) under one key prefix, their lifecycle (open, drop, list) and
//! compaction.
//!
//! Guarantees: every handle for the same keyspace name in this process shares one drop
//! signal (a registry of open keyspaces); handles in other processes notice a drop on their
//! next write, `current_revision` or watch event (each compares the keyspace marker, see
//! [`layout`](super::layout)); keyspaces never see each other's keys.
//!
//! Compaction is cluster-wide in etcd, so it is a backend operation: [`EtcdBackend::compact`]
//! records the target in `P/compacted` (compare-and-swap, so replicas never move it back) and
//! then compacts etcd. The optional background compactor does this every
//! [`EtcdConfig::compaction_interval`], to the revision it saw one interval earlier.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use etcd_client::{Client, Compare, CompareOp, GetOptions, PutOptions, Txn, TxnOp, TxnOpResponse};
use tokio::task::JoinHandle;

use super::client::{self, retry};
use super::config::EtcdConfig;
use super::keyspace::{EtcdStore, Keyspace};
use super::layout::{self, KeyspaceKeys};
use crate::error::{Result, StoreError};
use crate::keyspace_name;
use crate::sled_backend::INITIAL_REVISION;
use crate::types::Revision;

/// What every keyspace of a backend shares: the client and the settings.
pub(crate) struct Shared {
    pub(crate) client: Client,
    /// The configured prefix, normalised (no trailing slash).
    pub(crate) prefix: String,
    pub(crate) retry_timeout: Duration,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("prefix", &self.prefix)
            .field("retry_timeout", &self.retry_timeout)
            .finish_non_exhaustive()
    }
}

impl Shared {
    /// A clone of the client (cheap: channels inside) for one request.
    pub(crate) fn client(&self) -> Client {
        self.client.clone()
    }

    /// The compaction record: (revision, mod revision of the record; 0 when absent) and the
    /// current revision of the cluster.
    pub(crate) async fn compaction_record(&self) -> Result<(Revision, i64, Revision)> {
        let key = layout::compacted_key(&self.prefix);
        let response = retry(self.retry_timeout, "range", |_| {
            let mut client = self.client();
            let key = key.clone();
            async move { client.get(key, None).await }
        })
        .await?;
        let current = response
            .header()
            .map(|h| layout::revision(h.revision()))
            .ok_or_else(|| missing_header("range"))?;
        match response.kvs().first() {
            None => Ok((INITIAL_REVISION, 0, current)),
            Some(kv) => {
                let recorded = std::str::from_utf8(kv.value())
                    .ok()
                    .and_then(|s| s.parse::<Revision>().ok())
                    .ok_or_else(|| StoreError::Corrupt {
                        keyspace: String::new(),
                        what: "compaction record",
                    })?;
                Ok((recorded.max(INITIAL_REVISION), kv.mod_revision(), current))
            }
        }
    }
}

/// The error for a response without its header.
pub(crate) fn missing_header(op: &'static str) -> StoreError {
    StoreError::EtcdProtocol {
        op,
        detail: "response without header".to_owned(),
    }
}

/// A connection to an etcd cluster holding Fabrik keyspaces. Cheap to clone (Arc inside).
#[derive(Clone, Debug)]
pub struct EtcdBackend {
    inner: Arc<BackendInner>,
}

#[derive(Debug)]
struct BackendInner {
    shared: Arc<Shared>,
    keyspaces: Mutex<HashMap<String, EtcdStore>>,
    compactor: Option<JoinHandle<()>>,
}

impl Drop for BackendInner {
    fn drop(&mut self) {
        if let Some(compactor) = &self.compactor {
            compactor.abort();
        }
    }
}

impl EtcdBackend {
    /// Connect to the cluster of `config` (retrying until it answers or
    /// [`EtcdConfig::retry_timeout`] has passed) and start the background compactor when
    /// configured. Must be called within a Tokio runtime.
    pub async fn connect(config: EtcdConfig) -> Result<Self> {
        let client = client::connect(&config).await?;
        let shared = Arc::new(Shared {
            client,
            prefix: layout::normalize_prefix(&config.prefix),
            retry_timeout: config.retry_timeout,
        });
        let compactor = config
            .compaction_interval
            .filter(|period| !period.is_zero())
            .map(|period| tokio::spawn(compact_periodically(Arc::clone(&shared), period)));
        Ok(Self {
            inner: Arc::new(BackendInner {
                shared,
                keyspaces: Mutex::new(HashMap::new()),
                compactor,
            }),
        })
    }

    /// One keyspace (one cluster), created in etcd if new. Handles for the same name share
    /// state within this process. Names are 1 to 200 characters from `[A-Za-z0-9._-]`.
    pub async fn keyspace(&self, name: &str) -> Result<EtcdStore> {
        keyspace_name::validate(name)?;
        if let Some(store) = self.lock_keyspaces().get(name) {
            if !store.inner.is_dropped() {
                return Ok(store.clone());
            }
        }
        let shared = &self.inner.shared;
        let keys = KeyspaceKeys::new(&shared.prefix, name);
        let marker = keys.marker.clone();
        let response = retry(shared.retry_timeout, "txn", |_| {
            let mut client = shared.client();
            let txn = Txn::new()
                .when([Compare::create_revision(
                    marker.clone(),
                    CompareOp::Equal,
                    0,
                )])
                .and_then([TxnOp::put(marker.clone(), Vec::new(), None)])
                .or_else([TxnOp::get(marker.clone(), None)]);
            async move { client.txn(txn).await }
        })
        .await?;
        let incarnation = if response.succeeded() {
            response
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| missing_header("txn"))?
        } else {
            response
                .op_responses()
                .into_iter()
                .find_map(|op| match op {
                    TxnOpResponse::Get(get) => get.kvs().first().map(|kv| kv.create_revision()),
                    _ => None,
                })
                // Dropped between the compare and the read: a retry creates it again.
                .ok_or_else(|| StoreError::KeyspaceDropped {
                    name: name.to_owned(),
                })?
        };
        let store = EtcdStore {
            inner: Arc::new(Keyspace::new(
                name,
                keys,
                incarnation,
                Arc::clone(&self.inner.shared),
            )),
        };
        super::usage::ensure_counted(&store.inner).await?;
        let mut open = self.lock_keyspaces();
        // Another task may have opened it meanwhile: keep one shared handle.
        if let Some(existing) = open.get(name) {
            if !existing.inner.is_dropped() && existing.inner.incarnation == incarnation {
                return Ok(existing.clone());
            }
        }
        open.insert(name.to_owned(), store.clone());
        Ok(store)
    }

    /// Remove a keyspace and all its data (tenant deletion). Handles of this process fail with
    /// KeyspaceDropped from then on and their watch streams end with that error; handles in
    /// other processes fail on their next write. Dropping a keyspace that does not exist is
    /// not an error.
    ///
    /// Three etcd writes: the marker first (from then on no write can land in the keyspace),
    /// then the data range, then the quota records.
    pub async fn drop_keyspace(&self, name: &str) -> Result<()> {
        keyspace_name::validate(name)?;
        if let Some(store) = self.lock_keyspaces().remove(name) {
            store.inner.mark_dropped();
        }
        let shared = &self.inner.shared;
        let keys = KeyspaceKeys::new(&shared.prefix, name);
        retry(shared.retry_timeout, "delete", |_| {
            let mut client = shared.client();
            let marker = keys.marker.clone();
            async move { client.delete(marker, None).await }
        })
        .await?;
        retry(shared.retry_timeout, "delete", |_| {
            let mut client = shared.client();
            let data = keys.data.clone();
            let end = layout::prefix_end(data.as_bytes());
            async move {
                client
                    .delete(
                        data,
                        Some(etcd_client::DeleteOptions::new().with_range(end)),
                    )
                    .await
            }
        })
        .await?;
        retry(shared.retry_timeout, "delete", |_| {
            let mut client = shared.client();
            let root = super::usage::root(&keys).to_owned();
            let end = layout::prefix_end(root.as_bytes());
            async move {
                client
                    .delete(
                        root,
                        Some(etcd_client::DeleteOptions::new().with_range(end)),
                    )
                    .await
            }
        })
        .await?;
        Ok(())
    }

    /// Names of every keyspace stored in the cluster under this prefix (opened by this
    /// process or not).
    pub async fn keyspace_names(&self) -> Result<Vec<String>> {
        let shared = &self.inner.shared;
        let root = layout::markers_root(&shared.prefix);
        let response = retry(shared.retry_timeout, "range", |_| {
            let mut client = shared.client();
            let root = root.clone();
            let end = layout::prefix_end(root.as_bytes());
            async move {
                client
                    .get(
                        root,
                        Some(GetOptions::new().with_range(end).with_keys_only()),
                    )
                    .await
            }
        })
        .await?;
        Ok(response
            .kvs()
            .iter()
            .filter_map(|kv| kv.key().strip_prefix(root.as_bytes()))
            .filter_map(|name| std::str::from_utf8(name).ok())
            .map(str::to_owned)
            .collect())
    }

    /// Compact the cluster's history up to `revision`: lists and watches can then start at
    /// `revision` or later only. Never moves the compacted revision back; returns the
    /// compacted revision after the call.
    pub async fn compact(&self, revision: Revision) -> Result<Revision> {
        compact(&self.inner.shared, revision).await
    }

    /// The oldest revision lists and watches can start from (what the last compaction by
    /// Fabrik recorded; 1 before any).
    pub async fn compacted_revision(&self) -> Result<Revision> {
        Ok(self.inner.shared.compaction_record().await?.0)
    }

    fn lock_keyspaces(&self) -> MutexGuard<'_, HashMap<String, EtcdStore>> {
        self.inner
            .keyspaces
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// See [`EtcdBackend::compact`].
async fn compact(shared: &Shared, revision: Revision) -> Result<Revision> {
    let key = layout::compacted_key(&shared.prefix);
    loop {
        let (recorded, record_mod, current) = shared.compaction_record().await?;
        if revision <= recorded {
            return Ok(recorded);
        }
        if revision > current {
            return Err(StoreError::FutureRevision {
                requested: revision,
                current,
            });
        }
        let response = retry(shared.retry_timeout, "txn", |_| {
            let mut client = shared.client();
            let txn = Txn::new()
                .when([Compare::mod_revision(
                    key.clone(),
                    CompareOp::Equal,
                    record_mod,
                )])
                .and_then([TxnOp::put(
                    key.clone(),
                    revision.to_string(),
                    None::<PutOptions>,
                )]);
            async move { client.txn(txn).await }
        })
        .await?;
        if response.succeeded() {
            break;
        }
        // Another replica moved the record: look again.
    }
    let outcome = retry(shared.retry_timeout, "compact", |_| {
        let mut client = shared.client();
        async move { client.compact(layout::etcd_revision(revision), None).await }
    })
    .await;
    match outcome {
        Ok(_) => Ok(revision),
        // etcd was already compacted further (by etcd itself or an operator).
        Err(StoreError::Etcd { ref source, .. }) if client::is_compacted(source) => Ok(revision),
        Err(other) => Err(other),
    }
}

/// The background compactor: every `period`, compact to the revision seen one period before.
async fn compact_periodically(shared: Arc<Shared>, period: Duration) {
    let mut previous = None;
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let current = match shared.compaction_record().await {
            Ok((_, _, current)) => current,
            Err(error) => {
                tracing::warn!(%error, "etcd compactor: cannot read the current revision");
                continue;
            }
        };
        if let Some(target) = previous {
            match compact(&shared, target).await {
                Ok(done) => tracing::debug!(revision = done, "etcd compacted"),
                Err(error) => tracing::warn!(%error, "etcd compaction failed"),
            }
        }
        previous = Some(current);
    }
}
