//! What the syncer's integration tests share: polling and creating objects from JSON.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use kube::api::{Api, PostParams};

/// Polls `check` until it returns `Some`, for at most 60 s.
pub async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Creates the object `v` describes; returns what the server stored.
pub async fn create<K>(api: &Api<K>, v: serde_json::Value) -> Result<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + serde::Serialize,
{
    let obj: K = serde_json::from_value(v)?;
    Ok(api.create(&PostParams::default(), &obj).await?)
}
