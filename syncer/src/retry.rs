//! Retrying a failed reconcile: per key, with exponential backoff (1 s doubling to 5 min, as
//! client-go's per-item rate limiter), and logged once per distinct error — a host that keeps
//! refusing one object costs a log line when the refusal changes, not one per retry.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use crate::queue::Key;

/// The first wait after a failure.
pub const FIRST: Duration = Duration::from_secs(1);
/// The longest wait between retries.
pub const MOST: Duration = Duration::from_secs(300);

#[derive(Default)]
struct Failing {
    failures: u32,
    last_error: String,
}

/// The keys whose last reconcile failed.
#[derive(Default)]
pub struct Retries {
    failing: Mutex<HashMap<Key, Failing>>,
}

impl Retries {
    /// Records a failure of `key` with `error`; returns how long to wait before the retry.
    pub fn failed(&self, tenant: &str, key: &Key, error: &str) -> Duration {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        let f = failing.entry(key.clone()).or_default();
        f.failures = f.failures.saturating_add(1);
        let wait = backoff(f.failures);
        if f.last_error != error {
            tracing::warn!(%tenant, ?key, %error, retry_in = ?wait, "sync failed; retrying with backoff");
            f.last_error = error.to_string();
        } else {
            tracing::debug!(%tenant, ?key, failures = f.failures, retry_in = ?wait, "sync failed again");
        }
        wait
    }

    /// Records a success of `key`: its backoff starts over.
    pub fn succeeded(&self, tenant: &str, key: &Key) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(f) = failing.remove(key) {
            tracing::info!(%tenant, ?key, after = f.failures, "sync succeeded after failures");
        }
    }

    /// Keys failing now (for tests).
    pub fn failing(&self) -> usize {
        self.failing.lock().map(|f| f.len()).unwrap_or_default()
    }
}

/// The wait after the `n`th failure in a row (n ≥ 1): FIRST · 2^(n-1), at most MOST.
pub fn backoff(n: u32) -> Duration {
    let exp = n.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << exp).min(MOST)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kinds::Kind;

    fn key(name: &str) -> Key {
        Key {
            kind: Kind::Pod,
            namespace: "default".into(),
            name: name.into(),
        }
    }

    #[test]
    fn waits_double_up_to_five_minutes_and_start_over_after_a_success() {
        let r = Retries::default();
        let waits: Vec<u64> = (0..12)
            .map(|_| r.failed("t", &key("a"), "refused").as_secs())
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        // Another key has its own count.
        assert_eq!(r.failed("t", &key("b"), "refused"), FIRST);
        r.succeeded("t", &key("a"));
        assert_eq!(r.failing(), 1);
        assert_eq!(r.failed("t", &key("a"), "refused"), FIRST);
        assert_eq!(backoff(u32::MAX), MOST);
    }
}
