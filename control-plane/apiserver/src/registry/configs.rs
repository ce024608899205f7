//! Snapshots of the kinds admission reads on every write — the admission configurations
//! (`admissionregistration.k8s.io`: webhook configurations, admission policies and their
//! bindings) and PriorityClasses (`scheduling.k8s.io`, read for every pod). A snapshot is listed
//! from the store once and reused until this registry writes any object of those groups (so an
//! object written here applies to the very next request) or it is [`TTL`] old (what another
//! replica over a shared store wrote is seen within it).

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The groups whose objects are kept.
pub const GROUPS: [&str; 2] = ["admissionregistration.k8s.io", "scheduling.k8s.io"];

/// How long a snapshot is used without a write here.
pub const TTL: Duration = Duration::from_secs(1);

struct Snapshot {
    generation: u64,
    taken: Instant,
    items: Arc<Vec<Value>>,
}

/// The snapshots of one registry, by `plural.group`.
#[derive(Default)]
pub(crate) struct Snapshots {
    /// Bumped after every write of an object of [`GROUPS`].
    generation: AtomicU64,
    taken: Mutex<HashMap<String, Snapshot>>,
}

impl Snapshots {
    /// The generation to tag a snapshot with: read before listing, so that a write that
    /// commits during the list leaves the snapshot stale.
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// The snapshot of `kind` (`plural.group`), when still current.
    pub(crate) fn fresh(&self, kind: &str) -> Option<Arc<Vec<Value>>> {
        let now = self.generation();
        let taken = self.taken.lock().ok()?;
        let s = taken.get(kind)?;
        (s.generation == now && s.taken.elapsed() < TTL).then(|| s.items.clone())
    }

    /// Keeps `items` of `kind`, listed at `generation`.
    pub(crate) fn keep(&self, kind: &str, generation: u64, items: Arc<Vec<Value>>) {
        if let Ok(mut taken) = self.taken.lock() {
            taken.insert(
                kind.to_string(),
                Snapshot {
                    generation,
                    taken: Instant::now(),
                    items,
                },
            );
        }
    }

    /// A guard for a write of an object of `group`: when it ends (committed or not, on any
    /// path), the snapshots are stale if the group is one of [`GROUPS`].
    pub(crate) fn write(&self, group: &str) -> WriteGuard<'_> {
        WriteGuard {
            snapshots: GROUPS.contains(&group).then_some(self),
        }
    }
}

/// See [`Snapshots::write`].
pub(crate) struct WriteGuard<'a> {
    snapshots: Option<&'a Snapshots>,
}

impl Drop for WriteGuard<'_> {
    fn drop(&mut self) {
        if let Some(s) = self.snapshots {
            s.generation.fetch_add(1, Ordering::AcqRel);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_of_the_groups_makes_snapshots_stale() {
        let s = Snapshots::default();
        let vwc = "validatingwebhookconfigurations.admissionregistration.k8s.io";
        let g = s.generation();
        s.keep(vwc, g, Arc::new(vec![]));
        assert!(s.fresh(vwc).is_some());
        assert!(s
            .fresh("mutatingwebhookconfigurations.admissionregistration.k8s.io")
            .is_none());
        drop(s.write("apps"));
        assert!(s.fresh(vwc).is_some());
        drop(s.write("admissionregistration.k8s.io"));
        assert!(s.fresh(vwc).is_none());
        s.keep(vwc, s.generation(), Arc::new(vec![]));
        drop(s.write("scheduling.k8s.io"));
        assert!(s.fresh(vwc).is_none());
    }

    #[test]
    fn a_snapshot_listed_while_a_write_committed_is_not_used() {
        let s = Snapshots::default();
        let g = s.generation();
        // The write ends after the generation was read for the list.
        drop(s.write(GROUPS[0]));
        s.keep("validatingadmissionpolicies", g, Arc::new(vec![]));
        assert!(s.fresh("validatingadmissionpolicies").is_none());
    }
}
