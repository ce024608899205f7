//! What the simulated containers "printed": a short synthetic log per container, kept in
//! memory so that `kubectl logs` can be served from it later (serving it is not here yet).
//! Bounded: at most [`MAX_LINES`] lines per container; a deleted pod's logs are dropped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// Lines kept per container.
pub const MAX_LINES: usize = 100;

/// Lines per (namespace, pod, container).
type Logs = BTreeMap<(String, String, String), Vec<String>>;

/// Container logs of the simulated nodes, shared between the kubelets and whoever serves them.
#[derive(Clone, Debug, Default)]
pub struct LogStore {
    inner: Arc<Mutex<Logs>>,
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

    /// Appends a line to a container's log.
    pub fn append(&self, namespace: &str, pod: &str, container: &str, line: String) {
        self.with(|m| {
            let lines = m
                .entry((namespace.into(), pod.into(), container.into()))
                .or_default();
            if lines.len() >= MAX_LINES {
                lines.remove(0);
            }
            lines.push(line);
        });
    }

    /// A container's log, newline-terminated lines; `None` when the container is unknown.
    pub fn get(&self, namespace: &str, pod: &str, container: &str) -> Option<String> {
        self.with(|m| {
            m.get(&(namespace.into(), pod.into(), container.into()))
                .map(|lines| lines.iter().map(|l| format!("{l}\n")).collect())
        })
    }

    /// Drops a pod's logs.
    pub fn remove_pod(&self, namespace: &str, pod: &str) {
        self.with(|m| m.retain(|(ns, p, _), _| !(ns == namespace && p == pod)));
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
}
