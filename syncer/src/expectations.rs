//! Host objects the syncer created and its host watch has not delivered yet.
//!
//! Between a create and the watch event that brings the object into the host cache, another
//! reconcile of the same tenant object finds no host object and would create it again. The
//! second create fails (409) — but not harmlessly: a real kube-apiserver charges the host
//! namespace's ResourceQuota at admission, before the store refuses the duplicate, and gives it
//! back only at the quota controller's next full resync (five minutes by default), so a tenant
//! near its pod quota would see host pods refused. As upstream's ReplicaSet controller does, the
//! syncer expects its creations: a create of a name created less than [`WINDOW`] ago is put off
//! until then (by which time the watch has brought the object, and no create is needed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::kinds::Kind;

/// How long a creation is expected to take to reach the host cache.
pub const WINDOW: Duration = Duration::from_secs(5);

/// Creations by kind and host name, with when they were made.
#[derive(Debug, Default)]
pub struct Expectations {
    created: Mutex<HashMap<(Kind, String), Instant>>,
}

impl Expectations {
    /// How long to put off a create of `kind` `name` (`None`: go ahead).
    pub fn wait(&self, kind: Kind, name: &str) -> Option<Duration> {
        let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        created.retain(|_, at| now.duration_since(*at) < WINDOW);
        let at = created.get(&(kind, name.to_string()))?;
        Some(WINDOW.saturating_sub(now.duration_since(*at)))
    }

    /// Records a create of `kind` `name`.
    pub fn created(&self, kind: Kind, name: &str) {
        let mut created = self.created.lock().unwrap_or_else(|e| e.into_inner());
        created.insert((kind, name.to_string()), Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_creation_is_expected_for_a_while() {
        let e = Expectations::default();
        assert_eq!(e.wait(Kind::Pod, "a"), None);
        e.created(Kind::Pod, "a");
        assert!(e.wait(Kind::Pod, "a").is_some_and(|d| d <= WINDOW));
        assert_eq!(e.wait(Kind::Service, "a"), None);
        assert_eq!(e.wait(Kind::Pod, "b"), None);
    }
}
