//! What the controllers' integration tests share.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{bail, Result};

/// Polls `check` until it returns Some, or fails after `secs`.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(secs);
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => return Ok(v),
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what} (last error: {last_err:?})");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
