//! A lock held across every server of a cluster — the replicas that write one store: a key
//! created while the lock is held and deleted when it is released. A holder that dies leaves
//! the key behind; it expires after [`TTL`] and the next taker replaces it (compare-and-swap on
//! its revision, so two takers never both win).

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use fabrik_store::{Revision, Store, StoreError};
use rand::Rng;
use serde_json::{json, Value};

use crate::error::ApiError;

/// Where the locks live: a prefix no resource can have (API groups of resources have a dot,
/// built-in ones are listed).
const PREFIX: &str = "/locks/";
/// How long a lock outlives a holder that died without releasing it.
pub const TTL: Duration = Duration::from_secs(10);
/// How long a taker waits before answering 429.
const WAIT: Duration = Duration::from_secs(5);

/// A held lock; released (its key deleted) when dropped.
pub struct StoreLock {
    store: Arc<dyn Store>,
    key: String,
    revision: Revision,
}

fn now_ms() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis())
        .unwrap_or(0)
}

fn expired(value: &[u8]) -> bool {
    let expires = serde_json::from_slice::<Value>(value)
        .ok()
        .and_then(|v| v["expires"].as_u64())
        .map(u128::from)
        .unwrap_or(0);
    expires < now_ms()
}

/// Takes lock `name` over `store`, waiting while another server holds it.
pub async fn acquire(store: Arc<dyn Store>, name: &str) -> Result<StoreLock, ApiError> {
    let key = format!("{PREFIX}{name}");
    let started = std::time::Instant::now();
    loop {
        let value = Bytes::from(
            json!({"expires": now_ms() + TTL.as_millis(), "holder": uuid::Uuid::new_v4().to_string()})
                .to_string(),
        );
        let taken = match store.create(&key, value.clone()).await {
            Ok(kv) => Some(kv),
            Err(StoreError::AlreadyExists { .. }) => match store.get(&key).await? {
                // Left by a holder that died: replace it, unless another taker did first.
                Some(kv) if expired(&kv.value) => {
                    match store.update(&key, value, Some(kv.mod_revision)).await {
                        Ok(kv) => Some(kv),
                        Err(StoreError::Conflict { .. } | StoreError::NotFound { .. }) => None,
                        Err(e) => return Err(e.into()),
                    }
                }
                _ => None,
            },
            Err(e) => return Err(e.into()),
        };
        if let Some(kv) = taken {
            return Ok(StoreLock {
                store,
                key,
                revision: kv.mod_revision,
            });
        }
        if started.elapsed() > WAIT {
            return Err(ApiError::Throttled {
                message: format!("{name} is busy on another server of this cluster; retry"),
                retry_after: 1,
            });
        }
        let pause = rand::rng().random_range(1..8);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
}

impl Drop for StoreLock {
    fn drop(&mut self) {
        let (store, key, revision) = (self.store.clone(), self.key.clone(), self.revision);
        // Released in the background; without a runtime (shutdown) it expires instead.
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = store.delete(&key, Some(revision)).await {
                    tracing::debug!(key, error = %e, "lock not released; it expires");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fabrik_store::{SledBackend, SledConfig};

    #[tokio::test]
    async fn one_holder_at_a_time_and_a_dead_holder_s_lock_expires() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let first = acquire(store.clone(), "q").await.expect("first");
        // A second taker waits until the first is released.
        let second = tokio::spawn(acquire(store.clone(), "q"));
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!second.is_finished(), "taken while held");
        drop(first);
        let second = second.await.expect("task").expect("second, once released");
        // A holder that died: its key stays, expired; the next taker replaces it.
        std::mem::forget(second);
        let key = format!("{PREFIX}q");
        let kv = store.get(&key).await.expect("get").expect("left behind");
        let stale = Bytes::from(json!({"expires": 0, "holder": "gone"}).to_string());
        store
            .update(&key, stale, Some(kv.mod_revision))
            .await
            .expect("expire it");
        acquire(store, "q").await.expect("taken over");
    }
}
