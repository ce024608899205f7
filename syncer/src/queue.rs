//! The work queue of one tenant's syncer: deduplicated keys, taken in batches, and keys pushed
//! later ([`Queue::push_after`]: token refreshes, backoff) without any polling loop.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

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
    /// The earliest time each delayed key is due (one timer task per entry).
    delayed: Mutex<HashMap<Key, Instant>>,
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

    /// Pushes `key` once `delay` has passed. Of several delays asked for one key only the
    /// earliest is kept: the reconcile it starts asks again for whatever it still needs, so a
    /// later timer that finds an earlier one in its place does nothing. Needs a Tokio runtime.
    pub fn push_after(self: &Arc<Self>, key: Key, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut d = self.delayed.lock().unwrap_or_else(|e| e.into_inner());
            match d.get(&key) {
                Some(earlier) if *earlier <= at => return,
                _ => {
                    d.insert(key.clone(), at);
                }
            }
        }
        let queue = Arc::downgrade(self);
        tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            let Some(queue) = queue.upgrade() else {
                return;
            };
            let due = {
                let mut d = queue.delayed.lock().unwrap_or_else(|e| e.into_inner());
                let mine = d.get(&key) == Some(&at);
                if mine {
                    d.remove(&key);
                }
                mine
            };
            if due {
                queue.push(key);
            }
        });
    }

    /// How many keys wait for a delay.
    pub fn delayed_len(&self) -> usize {
        self.delayed.lock().unwrap_or_else(|e| e.into_inner()).len()
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

    #[tokio::test]
    async fn delayed_keys_arrive_once_at_the_earliest_time() {
        let ms = Duration::from_millis;
        let q = Arc::new(Queue::default());
        let start = Instant::now();
        q.push_after(key("a"), ms(300));
        q.push_after(key("a"), ms(100));
        q.push_after(key("a"), ms(600));
        q.push_after(key("b"), ms(200));
        assert_eq!(q.delayed_len(), 2);
        assert_eq!(q.take(10).await, vec![key("a")]);
        assert!(start.elapsed() >= ms(100), "{:?}", start.elapsed());
        assert_eq!(q.take(10).await, vec![key("b")]);
        assert!(start.elapsed() >= ms(200), "{:?}", start.elapsed());
        // The 300 ms and 600 ms timers of `a` find that an earlier one was in their place.
        let more = tokio::time::timeout(ms(900), q.take(10)).await;
        assert!(more.is_err(), "{more:?}");
        assert_eq!(q.delayed_len(), 0);
    }
}
