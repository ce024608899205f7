//! What the simulated containers "printed": a short synthetic log per container, kept in
//! memory so that `kubectl logs` (and `kubectl logs --follow`) can be served from it.
//! Bounded: at most [`MAX_LINES`] lines per container; a deleted pod's logs are dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::stream::BoxStream;
use tokio::sync::watch;

/// Lines kept per container.
pub const MAX_LINES: usize = 100;

/// One container's log.
#[derive(Debug, Default)]
struct Log {
    /// The last [`MAX_LINES`] lines.
    lines: Vec<String>,
    /// Lines appended since the container started (followers count from it).
    total: u64,
    /// Whether the container has exited (a follower stops once it has read everything).
    ended: bool,
}

/// Logs per (namespace, pod, container).
type Logs = BTreeMap<(String, String, String), Log>;

/// Container logs of the simulated nodes, shared between the kubelets and whoever serves them.
#[derive(Clone, Debug)]
pub struct LogStore {
    inner: Arc<Mutex<Logs>>,
    /// Bumped on every change; followers wait on it.
    changed: Arc<watch::Sender<u64>>,
}

impl Default for LogStore {
    fn default() -> LogStore {
        LogStore {
            inner: Arc::default(),
            changed: Arc::new(watch::channel(0).0),
        }
    }
}

fn key(namespace: &str, pod: &str, container: &str) -> (String, String, String) {
    (namespace.into(), pod.into(), container.into())
}

impl LogStore {
    fn with<R>(&self, f: impl FnOnce(&mut Logs) -> R) -> R {
        // A poisoned lock only means a panic elsewhere mid-append; the map is still usable.
        let mut guard = match self.inner.lock() {
            Ok(g) => g,
            Err(poisoned) => poisoned.into_inner(),
        };
        f(&mut guard)
    }

    fn notify(&self) {
        self.changed.send_modify(|v| *v = v.wrapping_add(1));
    }

    /// Appends a line to a container's log.
    pub fn append(&self, namespace: &str, pod: &str, container: &str, line: String) {
        self.with(|m| {
            let log = m.entry(key(namespace, pod, container)).or_default();
            if log.lines.len() >= MAX_LINES {
                log.lines.remove(0);
            }
            log.lines.push(line);
            log.total += 1;
        });
        self.notify();
    }

    /// Marks a container as exited: followers of its log finish.
    pub fn end(&self, namespace: &str, pod: &str, container: &str) {
        self.with(|m| {
            if let Some(log) = m.get_mut(&key(namespace, pod, container)) {
                log.ended = true;
            }
        });
        self.notify();
    }

    /// A container's log, newline-terminated lines; `None` when the container is unknown.
    pub fn get(&self, namespace: &str, pod: &str, container: &str) -> Option<String> {
        self.with(|m| {
            m.get(&key(namespace, pod, container))
                .map(|log| log.lines.iter().map(|l| format!("{l}\n")).collect())
        })
    }

    /// Follows a container's log: the lines kept now (the last `tail` of them, if given),
    /// then each line as it is appended, until the container exits or its pod is gone.
    /// `None` when the container is unknown.
    pub fn follow(
        &self,
        namespace: &str,
        pod: &str,
        container: &str,
        tail: Option<usize>,
    ) -> Option<BoxStream<'static, String>> {
        let k = key(namespace, pod, container);
        let rx = self.changed.subscribe();
        let (first, seen, ended) = self.with(|m| {
            m.get(&k).map(|log| {
                let skip = tail.map_or(0, |t| log.lines.len().saturating_sub(t));
                let text: String = log.lines[skip..].iter().map(|l| format!("{l}\n")).collect();
                (text, log.total, log.ended)
            })
        })?;
        let store = self.clone();
        let rest = futures::stream::unfold((store, k, seen, rx, ended), |state| async move {
            let (store, k, mut seen, mut rx, mut ended) = state;
            loop {
                if ended {
                    return None;
                }
                let next = store.with(|m| {
                    m.get(&k).map(|log| {
                        let new = usize::try_from(log.total - seen).unwrap_or(usize::MAX);
                        let from = log.lines.len().saturating_sub(new);
                        let text: String =
                            log.lines[from..].iter().map(|l| format!("{l}\n")).collect();
                        (text, log.total, log.ended)
                    })
                });
                match next {
                    // The pod is gone.
                    None => return None,
                    Some((text, total, now_ended)) => {
                        seen = total;
                        ended = now_ended;
                        if !text.is_empty() {
                            return Some((text, (store, k, seen, rx, ended)));
                        }
                    }
                }
                if ended || rx.changed().await.is_err() {
                    return None;
                }
            }
        });
        let first = futures::stream::iter((!first.is_empty()).then_some(first));
        Some(futures::StreamExt::boxed(futures::StreamExt::chain(
            first, rest,
        )))
    }

    /// Drops a pod's logs (its followers finish).
    pub fn remove_pod(&self, namespace: &str, pod: &str) {
        self.with(|m| m.retain(|(ns, p, _), _| !(ns == namespace && p == pod)));
        self.notify();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounded_and_dropped_with_the_pod() {
        let logs = LogStore::default();
        for i in 0..MAX_LINES + 5 {
            logs.append("ns", "p", "c", format!("line {i}"));
        }
        let text = logs.get("ns", "p", "c").expect("log");
        assert_eq!(text.lines().count(), MAX_LINES);
        assert!(text.starts_with("line 5\n"));
        assert!(logs.get("ns", "p", "other").is_none());
        logs.remove_pod("ns", "p");
        assert!(logs.get("ns", "p", "c").is_none());
    }

    #[tokio::test]
    async fn followers_see_new_lines_until_the_container_ends() {
        use futures::StreamExt;
        let logs = LogStore::default();
        assert!(logs.follow("ns", "p", "c", None).is_none());
        for i in 0..3 {
            logs.append("ns", "p", "c", format!("old {i}"));
        }
        let mut follow = logs.follow("ns", "p", "c", Some(1)).expect("known");
        assert_eq!(follow.next().await.as_deref(), Some("old 2\n"));
        let writer = logs.clone();
        tokio::spawn(async move {
            writer.append("ns", "p", "c", "new 1".into());
            writer.append("ns", "p", "c", "new 2".into());
            writer.end("ns", "p", "c");
        });
        let mut rest = String::new();
        while let Some(chunk) = follow.next().await {
            rest.push_str(&chunk);
        }
        assert_eq!(rest, "new 1\nnew 2\n");
        // A deleted pod ends its followers too.
        logs.append("ns", "q", "c", "x".into());
        let mut f = logs.follow("ns", "q", "c", None).expect("known");
        assert_eq!(f.next().await.as_deref(), Some("x\n"));
        logs.remove_pod("ns", "q");
        assert!(f.next().await.is_none());
    }
}
