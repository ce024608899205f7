//! One keyspace of the etcd backend: its keys, its drop signal and the [`Store`]
//! implementation (reads here, writes in [`write`](super::write), watches in
//! [`watch`](super::watch)).
//!
//! Revisions are etcd's: one counter for the whole etcd cluster, shared by every keyspace. A
//! keyspace therefore sees strictly increasing revisions with gaps (other keyspaces' writes),
//! and an empty keyspace reports the cluster's current revision (at least 1), not 1. Lists
//! and watches at a revision are etcd range and watch requests at that revision.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use etcd_client::GetOptions;
use tokio::sync::watch as signal;

use super::backend::{missing_header, Shared};
use super::client::{self, etcd_error, retry};
use super::layout::{self, KeyspaceKeys};
use super::{watch, write};
use crate::error::{Result, StoreError};
use crate::quota::{StorageLimits, StorageUsage};
use crate::store::Store;
use crate::types::{KeyValue, ListOptions, ListResult, Revision, WatchStream};

/// Everything one keyspace shares between its handles in this process.
#[derive(Debug)]
pub(crate) struct Keyspace {
    pub(crate) name: String,
    pub(crate) keys: KeyspaceKeys,
    /// Create revision of the keyspace marker when this handle was opened.
    pub(crate) incarnation: i64,
    pub(crate) shared: Arc<Shared>,
    /// Becomes true when this process drops the keyspace.
    dropped: signal::Sender<bool>,
}

impl Keyspace {
    /// A keyspace handle state for marker incarnation `incarnation`.
    pub(crate) fn new(
        name: &str,
        keys: KeyspaceKeys,
        incarnation: i64,
        shared: Arc<Shared>,
    ) -> Self {
        Self {
            name: name.to_owned(),
            keys,
            incarnation,
            shared,
            dropped: signal::Sender::new(false),
        }
    }

    /// Whether this process has dropped the keyspace.
    pub(crate) fn is_dropped(&self) -> bool {
        *self.dropped.borrow()
    }

    /// Signal every handle and watch of this process that the keyspace is gone.
    pub(crate) fn mark_dropped(&self) {
        self.dropped.send_replace(true);
    }

    /// A receiver of the drop signal (for watch streams).
    pub(crate) fn drop_signal(&self) -> signal::Receiver<bool> {
        self.dropped.subscribe()
    }

    /// The KeyspaceDropped error of this keyspace.
    pub(crate) fn dropped_error(&self) -> StoreError {
        StoreError::KeyspaceDropped {
            name: self.name.clone(),
        }
    }

    /// Fail if this process has dropped the keyspace.
    pub(crate) fn check_live(&self) -> Result<()> {
        if self.is_dropped() {
            return Err(self.dropped_error());
        }
        Ok(())
    }

    /// Whether an etcd marker record (None = absent) is this handle's incarnation.
    pub(crate) fn is_own_marker(&self, marker: Option<&etcd_client::KeyValue>) -> bool {
        marker.is_some_and(|kv| kv.create_revision() == self.incarnation)
    }

    /// Convert an etcd record of this keyspace.
    pub(crate) fn key_value(&self, kv: &etcd_client::KeyValue) -> Result<KeyValue> {
        layout::key_value(&self.keys, &self.name, kv)
    }

    /// The cluster's current revision, also checking that the keyspace still exists.
    async fn current_revision(&self) -> Result<Revision> {
        self.check_live()?;
        let marker = self.keys.marker.clone();
        let response = retry(self.shared.retry_timeout, "range", |_| {
            let mut client = self.shared.client();
            let marker = marker.clone();
            async move { client.get(marker, None).await }
        })
        .await?;
        if !self.is_own_marker(response.kvs().first()) {
            return Err(self.dropped_error());
        }
        response
            .header()
            .map(|h| layout::revision(h.revision()))
            .ok_or_else(|| missing_header("range"))
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.check_live()?;
        let data_key = self.keys.data_key(key);
        let response = retry(self.shared.retry_timeout, "range", |_| {
            let mut client = self.shared.client();
            let data_key = data_key.clone();
            async move { client.get(data_key, None).await }
        })
        .await?;
        response
            .kvs()
            .first()
            .map(|kv| self.key_value(kv))
            .transpose()
    }

    /// A list as etcd ranges of at most [`RANGE_PAGE`] keys at one revision (the first range's,
    /// unless `opts` names one); see [`Store::list`]. Paging keeps every gRPC response under the
    /// client's 4 MiB message limit whatever the list's size: a page that is still too large
    /// (big objects) is asked for again at half the size.
    async fn list(&self, opts: &ListOptions) -> Result<ListResult> {
        self.check_live()?;
        let prefix = format!("{}{}", self.keys.data, opts.prefix);
        let end = layout::prefix_end(prefix.as_bytes());
        let mut start = match opts.start_after.as_deref() {
            // Strictly after `after`: the smallest key greater than it.
            Some(after) if after >= opts.prefix.as_str() => {
                let mut start = self.keys.data_key(after).into_bytes();
                start.push(0);
                start
            }
            _ => prefix.into_bytes(),
        };
        let want = opts.limit.unwrap_or(usize::MAX);
        let mut page = RANGE_PAGE;
        let mut etcd_revision = opts.revision.map(layout::etcd_revision);
        let mut items = Vec::new();
        // Keys in the range from the first start on, as the first range counted them.
        let mut total: Option<u64> = None;
        loop {
            let mut options = GetOptions::new().with_range(end.clone());
            if want == 0 {
                options = options.with_count_only();
            } else {
                let left = want - items.len();
                options = options.with_limit(i64::try_from(left.min(page)).unwrap_or(i64::MAX));
            }
            if let Some(rev) = etcd_revision {
                options = options.with_revision(rev);
            }
            let outcome = client::retry(self.shared.retry_timeout, "range", |_| {
                let mut client = self.shared.client();
                let (start, options) = (start.clone(), options.clone());
                async move { client.get(start, Some(options)).await }
            })
            .await;
            let response = match outcome {
                Ok(response) => response,
                Err(StoreError::Etcd { source, .. })
                    if client::is_too_large(&source) && page > 1 =>
                {
                    page /= 2;
                    continue;
                }
                Err(StoreError::Etcd { op, source }) => {
                    return Err(self.revision_error(op, *source, opts.revision).await)
                }
                Err(other) => return Err(other),
            };
            let header = response
                .header()
                .map(|h| h.revision())
                .ok_or_else(|| missing_header("range"))?;
            etcd_revision.get_or_insert(header);
            total.get_or_insert(u64::try_from(response.count()).unwrap_or(0));
            for kv in response.kvs() {
                items.push(self.key_value(kv)?);
            }
            let done = want == 0 || items.len() >= want || !response.more();
            match response.kvs().last() {
                Some(last) if !done => {
                    start = last.key().to_vec();
                    start.push(0);
                }
                _ => break,
            }
        }
        let revision = match opts.revision {
            Some(r) => r,
            None => layout::revision(etcd_revision.unwrap_or_default()),
        };
        Ok(ListResult {
            remaining: total.unwrap_or(0).saturating_sub(items.len() as u64),
            items,
            revision,
        })
    }

    /// Turn etcd's "compacted" / "future revision" answers for a read at `requested` into the
    /// store's errors; anything else stays an etcd error.
    async fn revision_error(
        &self,
        op: &'static str,
        error: etcd_client::Error,
        requested: Option<Revision>,
    ) -> StoreError {
        let Some(requested) = requested else {
            return etcd_error(op, error);
        };
        if client::is_compacted(&error) {
            let compacted = match self.shared.compaction_record().await {
                Ok((recorded, _, _)) => recorded,
                Err(other) => return other,
            };
            return StoreError::Compacted {
                requested,
                // etcd itself may have compacted further than Fabrik recorded.
                compacted: compacted.max(requested + 1),
            };
        }
        if client::is_future_revision(&error) {
            return match self.current_revision().await {
                Ok(current) => StoreError::FutureRevision { requested, current },
                Err(other) => other,
            };
        }
        etcd_error(op, error)
    }
}

/// Keys asked for per etcd range of a list.
const RANGE_PAGE: usize = 500;

/// A handle on one keyspace of an [`EtcdBackend`](crate::EtcdBackend). Cheap to clone.
#[derive(Clone, Debug)]
pub struct EtcdStore {
    pub(crate) inner: Arc<Keyspace>,
}

impl EtcdStore {
    /// The keyspace name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }
}

#[async_trait::async_trait]
impl Store for EtcdStore {
    async fn current_revision(&self) -> Result<Revision> {
        self.inner.current_revision().await
    }

    async fn compacted_revision(&self) -> Result<Revision> {
        self.inner.check_live()?;
        Ok(self.inner.shared.compaction_record().await?.0)
    }

    async fn get(&self, key: &str) -> Result<Option<KeyValue>> {
        self.inner.get(key).await
    }

    async fn list(&self, opts: ListOptions) -> Result<ListResult> {
        self.inner.list(&opts).await
    }

    async fn create(&self, key: &str, value: Bytes) -> Result<KeyValue> {
        write::create(&self.inner, key, value).await
    }

    async fn update(
        &self,
        key: &str,
        value: Bytes,
        expected: Option<Revision>,
    ) -> Result<KeyValue> {
        write::update(&self.inner, key, value, expected).await
    }

    async fn delete(&self, key: &str, expected: Option<Revision>) -> Result<KeyValue> {
        write::delete(&self.inner, key, expected).await
    }

    async fn set_limits(&self, limits: StorageLimits) -> Result<()> {
        super::usage::set_limits(&self.inner, limits).await
    }

    async fn usage(&self) -> Result<StorageUsage> {
        self.inner.check_live()?;
        Ok(super::usage::read_view(&self.inner, None).await?.total())
    }

    async fn watch(
        &self,
        prefix: &str,
        after: Revision,
        progress_interval: Option<Duration>,
    ) -> Result<WatchStream> {
        watch::start(Arc::clone(&self.inner), prefix, after, progress_interval).await
    }
}
