//! The work queue of one tenant's syncer: deduplicated keys, taken in batches.

use std::collections::{HashSet, VecDeque};
use std::sync::Mutex;

use tokio::sync::Notify;

use crate::kinds::Kind;

/// What to reconcile: a tenant object of a kind (for Nodes the namespace is empty; for Events
/// it is the host Event's namespace and name).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    /// The kind.
    pub kind: Kind,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
}

/// A set of pending keys in arrival order.
#[derive(Debug, Default)]
pub struct Queue {
    pending: Mutex<(VecDeque<Key>, HashSet<Key>)>,
    notify: Notify,
}

impl Queue {
    /// Adds a key unless it is already pending.
    pub fn push(&self, key: Key) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if p.1.insert(key.clone()) {
            p.0.push_back(key);
            drop(p);
            self.notify.notify_one();
        }
    }

    /// Takes up to `max` keys, waiting for one.
    pub async fn take(&self, max: usize) -> Vec<Key> {
        loop {
            {
                let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                if !p.0.is_empty() {
                    let n = p.0.len().min(max);
                    let batch: Vec<Key> = p.0.drain(..n).collect();
                    for k in &batch {
                        p.1.remove(k);
                    }
                    return batch;
                }
            }
            self.notify.notified().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(n: &str) -> Key {
        Key {
            kind: Kind::Pod,
            namespace: "ns".into(),
            name: n.into(),
        }
    }

    #[tokio::test]
    async fn keys_are_deduplicated_and_ordered() {
        let q = Queue::default();
        q.push(key("a"));
        q.push(key("b"));
        q.push(key("a"));
        assert_eq!(q.take(10).await, vec![key("a"), key("b")]);
        q.push(key("a"));
        assert_eq!(q.take(10).await, vec![key("a")]);
    }
}
