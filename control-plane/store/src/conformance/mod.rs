//! One behaviour suite for every backend: the test bodies in [`cases`] are generic over a
//! [`Harness`] and instantiated once per backend by [`backend_suite!`] (modules `sled` and
//! `etcd` here). Backend-specific tests live beside their backend (sled: lagging watchers,
//! crash safety) or in [`etcd_cluster`] (multi-member etcd, TLS, drops seen by another
//! process).
//!
//! The etcd instantiation starts its own etcd member per test on free loopback ports
//! ([`LocalEtcd`](crate::local_etcd::LocalEtcd)); without an `etcd` binary the tests fail and
//! say to run `scripts/install-test-deps.sh`.

mod cases;
#[cfg(feature = "etcd")]
mod etcd_cluster;

use std::error::Error;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

#[cfg(feature = "etcd")]
use crate::local_etcd::LocalEtcd;
#[cfg(feature = "etcd")]
use crate::{EtcdBackend, EtcdConfig, EtcdStore};
use crate::{Event, SledBackend, SledConfig, SledStore, Store, WatchItem, WatchStream};

/// Error type of the tests (Send + Sync so spawned tasks can return it).
pub(crate) type BoxError = Box<dyn Error + Send + Sync>;
/// Result type of the tests.
pub(crate) type TestResult<T = ()> = Result<T, BoxError>;

/// A backend under test.
#[async_trait::async_trait]
pub(crate) trait Harness: Send + Sync + Sized {
    /// The backend's store handle.
    type Store: Store + Clone;
    /// Whether each keyspace has its own gap-free revision counter (sled) rather than the
    /// cluster-wide, shared one of etcd. Exact revision arithmetic is checked only then.
    const DENSE: bool;

    /// A fresh, empty backend keeping `history` revisions where that is configuration (sled).
    async fn open(history: u64) -> TestResult<Self>;
    /// A keyspace handle.
    async fn keyspace(&self, name: &str) -> TestResult<Self::Store>;
    /// Drop a keyspace.
    async fn drop_keyspace(&self, name: &str) -> TestResult;
    /// Stored keyspace names, sorted.
    async fn keyspace_names(&self) -> TestResult<Vec<String>>;
    /// Make sure at most the last `keep` revisions of `store` are available (sled: its
    /// configured history already does it; etcd: compact now).
    async fn compact_keep(&self, store: &Self::Store, keep: u64) -> TestResult;
    /// Restart the backend on the same data (sled: reopen the database; etcd: kill the member
    /// with SIGKILL, start it again, reconnect). Handles taken before are invalid.
    async fn restart(&mut self) -> TestResult;
}

/// The sled backend in a temporary directory.
pub(crate) struct SledHarness {
    dir: tempfile::TempDir,
    history: u64,
    backend: Option<SledBackend>,
}

impl SledHarness {
    fn backend(&self) -> TestResult<&SledBackend> {
        self.backend.as_ref().ok_or_else(|| "backend closed".into())
    }
}

fn sled_open(dir: &std::path::Path, history: u64) -> TestResult<SledBackend> {
    Ok(SledBackend::open(SledConfig {
        path: dir.to_owned(),
        cache_capacity_bytes: crate::DEFAULT_CACHE_BYTES,
        history,
        history_bytes: crate::DEFAULT_HISTORY_BYTES,
    })?)
}

#[async_trait::async_trait]
impl Harness for SledHarness {
    type Store = SledStore;
    const DENSE: bool = true;

    async fn open(history: u64) -> TestResult<Self> {
        let dir = tempfile::tempdir()?;
        let backend = sled_open(dir.path(), history)?;
        Ok(Self {
            dir,
            history,
            backend: Some(backend),
        })
    }

    async fn keyspace(&self, name: &str) -> TestResult<SledStore> {
        Ok(self.backend()?.keyspace(name)?)
    }

    async fn drop_keyspace(&self, name: &str) -> TestResult {
        Ok(self.backend()?.drop_keyspace(name)?)
    }

    async fn keyspace_names(&self) -> TestResult<Vec<String>> {
        let mut names = self.backend()?.keyspace_names();
        names.sort();
        Ok(names)
    }

    async fn compact_keep(&self, _store: &SledStore, keep: u64) -> TestResult {
        assert_eq!(keep, self.history, "sled keeps its configured history");
        Ok(())
    }

    async fn restart(&mut self) -> TestResult {
        self.backend = None;
        // A task of the closed backend (a watch's) may hold the database's file lock a moment
        // longer: wait for it (up to 5 s) rather than fail on a busy lock.
        let mut tries = 0;
        loop {
            match sled_open(self.dir.path(), self.history) {
                Ok(backend) => {
                    self.backend = Some(backend);
                    return Ok(());
                }
                Err(e) if tries < 50 && e.to_string().contains("could not acquire lock") => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// A one-member etcd cluster of its own and a backend connected to it.
#[cfg(feature = "etcd")]
pub(crate) struct EtcdHarness {
    etcd: LocalEtcd,
    backend: EtcdBackend,
}

/// Start a local etcd cluster, failing with the install hint when etcd is missing.
#[cfg(feature = "etcd")]
pub(crate) async fn start_etcd(members: usize) -> TestResult<LocalEtcd> {
    LocalEtcd::start(members)
        .await
        .map_err(|e| format!("{e} (the etcd tests never skip: install etcd first)").into())
}

/// A backend on `endpoints` without background compaction.
#[cfg(feature = "etcd")]
pub(crate) async fn etcd_connect(endpoints: Vec<String>) -> TestResult<EtcdBackend> {
    let mut config = EtcdConfig::new(endpoints);
    config.compaction_interval = None;
    Ok(EtcdBackend::connect(config).await?)
}

#[cfg(feature = "etcd")]
#[async_trait::async_trait]
impl Harness for EtcdHarness {
    type Store = EtcdStore;
    const DENSE: bool = false;

    async fn open(_history: u64) -> TestResult<Self> {
        let etcd = start_etcd(1).await?;
        let backend = etcd_connect(etcd.endpoints()).await?;
        Ok(Self { etcd, backend })
    }

    async fn keyspace(&self, name: &str) -> TestResult<EtcdStore> {
        Ok(self.backend.keyspace(name).await?)
    }

    async fn drop_keyspace(&self, name: &str) -> TestResult {
        Ok(self.backend.drop_keyspace(name).await?)
    }

    async fn keyspace_names(&self) -> TestResult<Vec<String>> {
        let mut names = self.backend.keyspace_names().await?;
        names.sort();
        Ok(names)
    }

    async fn compact_keep(&self, store: &EtcdStore, keep: u64) -> TestResult {
        let current = store.current_revision().await?;
        let target = current.saturating_sub(keep);
        assert_eq!(self.backend.compact(target).await?, target);
        Ok(())
    }

    async fn restart(&mut self) -> TestResult {
        self.etcd.restart(0).await?;
        self.backend = etcd_connect(self.etcd.endpoints()).await?;
        Ok(())
    }
}

/// Bytes of a string.
pub(crate) fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next stream item, failing the test after 10 s.
pub(crate) async fn next_item(stream: &mut WatchStream) -> TestResult<WatchItem> {
    let item = tokio::time::timeout(Duration::from_secs(10), stream.next()).await?;
    Ok(item.ok_or("watch stream ended")??)
}

/// The next event (skipping progress items).
pub(crate) async fn next_event(stream: &mut WatchStream) -> TestResult<Event> {
    loop {
        if let WatchItem::Event(event) = next_item(stream).await? {
            return Ok(event);
        }
    }
}

/// Instantiate every generic case of [`cases`] for one harness, as `#[tokio::test]`s in a
/// module named after the backend.
macro_rules! backend_suite {
    ($module:ident, $harness:ty, [$($case:ident),* $(,)?]) => {
        mod $module {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $case() -> super::TestResult {
                    super::cases::$case::<$harness>().await
                }
            )*
        }
    };
}

macro_rules! all_cases {
    ($module:ident, $harness:ty) => {
        backend_suite!(
            $module,
            $harness,
            [
                create_get_update_delete,
                compare_and_swap,
                concurrent_cas_increments_lose_nothing,
                list_prefix_pagination,
                large_lists_come_back_whole,
                list_at_older_revision_while_writing,
                watch_from_mid_stream_is_exactly_once_in_order,
                watch_follows_live_changes,
                progress_reports_the_cursor,
                compacted_revisions_are_refused,
                restart_keeps_data_revision_and_history,
                keyspaces_are_isolated,
                drop_keyspace_removes_everything,
                future_watch_is_refused,
                quota_limits_bytes_and_objects,
                quota_holds_under_concurrent_writers,
            ]
        );
    };
}

all_cases!(sled, super::SledHarness);
#[cfg(feature = "etcd")]
all_cases!(etcd, super::EtcdHarness);
