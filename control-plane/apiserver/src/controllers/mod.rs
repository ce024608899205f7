//! Controllers that run inside a cluster's API server process and act on the registry itself:
//! namespace finalization and CRD establishment. The workload controllers and the garbage
//! collector are `fabrik-controllers`, over the in-process client.

pub mod crd;
pub mod namespace;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use fabrik_store::WatchStream;
use futures::{FutureExt, StreamExt};

use crate::registry::Registry;

/// When a registry-level controller runs its next pass: on any change under its prefix, after
/// a short pause while something is still pending, after a long one otherwise — or never again
/// once shutdown begins.
pub(crate) struct Wakeups {
    registry: Arc<Registry>,
    prefix: String,
    changes: Option<WatchStream>,
    shutdown: Pin<Box<dyn Future<Output = ()> + Send>>,
}

impl Wakeups {
    /// Wakeups for changes under `prefix`.
    pub(crate) fn new(
        registry: Arc<Registry>,
        prefix: String,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Wakeups {
        Wakeups {
            registry,
            prefix,
            changes: None,
            shutdown: Box::pin(shutdown),
        }
    }

    /// (Re)starts the watch if it is not running; call before each pass so that no change
    /// made during the pass is missed.
    pub(crate) async fn arm(&mut self) {
        if self.changes.is_none() {
            if let Ok(rev) = self.registry.store().current_revision().await {
                self.changes = self
                    .registry
                    .store()
                    .watch(&self.prefix, rev, None)
                    .await
                    .ok();
            }
        }
    }

    /// Waits for the next reason to run; false once shutdown has begun.
    pub(crate) async fn wait(&mut self, pending: bool) -> bool {
        self.wait_at_most(Some(if pending {
            Duration::from_millis(500)
        } else {
            Duration::from_secs(30)
        }))
        .await
    }

    /// Waits for a change, or `longest` (None: only a change); false once shutdown has begun.
    pub(crate) async fn wait_at_most(&mut self, longest: Option<Duration>) -> bool {
        // Without a running watch, changes cannot wake the pass: tick anyway.
        let longest = match (&self.changes, longest) {
            (None, None) => Some(Duration::from_secs(30)),
            (_, l) => l,
        };
        let tick = async move {
            match longest {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        let changes = &mut self.changes;
        tokio::select! {
            _ = &mut self.shutdown => false,
            _ = tick => true,
            ev = async {
                match changes.as_mut() {
                    Some(s) => s.next().await,
                    None => std::future::pending().await,
                }
            } => {
                // One pass covers every change already delivered: take them all now, so that
                // a burst of writes (a cluster's first objects) wakes one pass, not one each.
                let mut ev = ev;
                while matches!(ev, Some(Ok(_))) {
                    match changes.as_mut().and_then(|s| s.next().now_or_never()) {
                        Some(next) => ev = next,
                        None => return true,
                    }
                }
                *changes = None;
                true
            }
        }
    }
}
