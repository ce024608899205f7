//! Group commit: many writers share one `fsync`.
//!
//! A writer commits its sled transaction (in memory), then calls [`GroupCommit::wait_durable`].
//! One dedicated flusher thread per database loops: it takes every write registered so far,
//! flushes the database once, and then releases all of them together. While a flush runs, new
//! writers queue up for the next one, so with N concurrent writers one flush covers about N
//! writes.
//!
//! Guarantee: `wait_durable` returns Ok only after a flush that *started after* the caller's
//! registration has completed, so the caller's committed write is on disk.
//!
//! Publishing: keyspaces register as [`FlushListener`]s. Just before each flush the flusher
//! asks every keyspace with committed-but-not-durable writes for its latest committed
//! revision; once the flush has succeeded it tells each of them that everything up to that
//! revision is durable, and only then releases the waiting writers. A keyspace broadcasts a
//! write to watchers (and lets readers see it) only at that point, so nothing a client sees
//! can be lost in a crash, and publishing does not depend on the writer's future still being
//! polled. The flusher is a
//! plain thread (not a tokio task) so the blocking `fsync` never occupies a runtime worker and
//! the backend can be opened outside a runtime. Dropping the [`GroupCommit`] stops the thread
//! after a final flush and joins it, which releases the database files.

use std::sync::{Arc, Condvar, Mutex, PoisonError, Weak};
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::error::StoreError;
use crate::types::Revision;

/// A keyspace told about durability by the flusher thread.
pub(crate) trait FlushListener: Send + Sync + std::fmt::Debug {
    /// Called before a flush: the latest committed revision that is not known durable yet, or
    /// None when nothing is waiting. Must be cheap and must not wait on the flusher.
    fn before_flush(&self) -> Option<Revision>;
    /// Called after a successful flush with what `before_flush` returned.
    fn after_flush(&self, durable: Revision);
}

/// A test hook run on the flusher thread before every flush (to delay it).
pub(crate) type FlushHook = Arc<dyn Fn() + Send + Sync>;

/// Ticket numbers: the n-th registered write gets n.
type Ticket = u64;

/// What the flusher publishes after each flush.
#[derive(Clone, Debug, Default)]
struct Flushed {
    /// Every ticket <= this is durable.
    upto: Ticket,
    /// The error of the last failed flush, with the tickets it covered (`failed_upto`).
    failure: Option<(Ticket, Arc<sled::Error>)>,
}

/// Requests shared between writers and the flusher thread.
#[derive(Debug, Default)]
struct Requests {
    /// Last ticket handed out.
    issued: Ticket,
    /// Set when the owner is dropped.
    stop: bool,
}

#[derive(Default)]
struct Shared {
    requests: Mutex<Requests>,
    wake: Condvar,
    listeners: Mutex<Vec<Weak<dyn FlushListener>>>,
    hook: Option<FlushHook>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("requests", &self.requests)
            .finish_non_exhaustive()
    }
}

/// Batches flushes of one sled database. See the module docs.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    shared: Arc<Shared>,
    flushed: watch::Receiver<Flushed>,
    thread: Option<JoinHandle<()>>,
}

impl GroupCommit {
    /// Start the flusher thread for `db`.
    #[cfg(test)]
    pub(crate) fn start(db: sled::Db) -> Result<Self, StoreError> {
        Self::start_with_hook(db, None)
    }

    /// [`start`](Self::start) with a hook run before every flush (tests delay flushes).
    pub(crate) fn start_with_hook(
        db: sled::Db,
        hook: Option<FlushHook>,
    ) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared {
            hook,
            ..Shared::default()
        });
        let (tx, rx) = watch::channel(Flushed::default());
        let thread_shared = Arc::clone(&shared);
        let thread = std::thread::Builder::new()
            .name("fabrik-store-flush".to_owned())
            .spawn(move || flush_loop(&db, &thread_shared, &tx))
            .map_err(|e| StoreError::Backend(sled::Error::Io(e)))?;
        Ok(Self {
            shared,
            flushed: rx,
            thread: Some(thread),
        })
    }

    /// Tell `listener` about every flush from now on (until it is dropped).
    pub(crate) fn add_listener(&self, listener: Weak<dyn FlushListener>) {
        self.shared
            .listeners
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(listener);
    }

    /// Register a write that has been committed in memory; returns its ticket.
    fn register(&self) -> Ticket {
        let mut requests = self
            .shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        requests.issued += 1;
        let ticket = requests.issued;
        drop(requests);
        self.shared.wake.notify_one();
        ticket
    }

    /// Wait until every write committed before this call is on disk.
    pub(crate) async fn wait_durable(&self) -> Result<(), StoreError> {
        let ticket = self.register();
        let mut rx = self.flushed.clone();
        let state = rx
            .wait_for(|f| f.upto >= ticket || f.failure.as_ref().is_some_and(|(t, _)| *t >= ticket))
            .await
            .map_err(|_| StoreError::ShuttingDown)?;
        if state.upto >= ticket {
            return Ok(());
        }
        match &state.failure {
            Some((_, error)) => Err(StoreError::Flush(Arc::clone(error))),
            None => Err(StoreError::ShuttingDown),
        }
    }
}

impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.shared
            .requests
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .stop = true;
        self.shared.wake.notify_one();
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("store flusher thread panicked");
            }
        }
    }
}

/// The flusher thread body: flush whenever tickets are outstanding; exit on stop after a last
/// flush.
fn flush_loop(db: &sled::Db, shared: &Shared, tx: &watch::Sender<Flushed>) {
    let mut done: Ticket = 0;
    loop {
        let (target, stop) = {
            let mut requests = shared
                .requests
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            while requests.issued == done && !requests.stop {
                requests = shared
                    .wake
                    .wait(requests)
                    .unwrap_or_else(PoisonError::into_inner);
            }
            (requests.issued, requests.stop)
        };
        let marks = pending_marks(shared);
        if let Some(hook) = &shared.hook {
            hook();
        }
        let result = db.flush();
        if result.is_ok() {
            for (listener, mark) in marks {
                listener.after_flush(mark);
            }
        }
        tx.send_modify(|f| match result {
            Ok(_) => f.upto = target,
            Err(error) => {
                tracing::error!(%error, "store flush failed");
                f.failure = Some((target, Arc::new(error)));
            }
        });
        done = target;
        if stop {
            return;
        }
    }
}

/// Ask every live listener for its committed revision (dropping dead ones).
fn pending_marks(shared: &Shared) -> Vec<(Arc<dyn FlushListener>, Revision)> {
    let mut listeners = shared
        .listeners
        .lock()
        .unwrap_or_else(PoisonError::into_inner);
    let mut marks = Vec::new();
    listeners.retain(|weak| match weak.upgrade() {
        None => false,
        Some(listener) => {
            if let Some(mark) = listener.before_flush() {
                marks.push((listener, mark));
            }
            true
        }
    });
    marks
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn concurrent_waiters_all_complete() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        let db = sled::open(dir.path())?;
        let gc = Arc::new(GroupCommit::start(db.clone())?);
        let mut tasks = Vec::new();
        for i in 0..32u32 {
            let gc = Arc::clone(&gc);
            let db = db.clone();
            tasks.push(tokio::spawn(async move {
                db.insert(i.to_be_bytes(), &[1u8][..])?;
                gc.wait_durable().await?;
                Ok::<_, StoreError>(())
            }));
        }
        for task in tasks {
            task.await??;
        }
        let upto = gc.flushed.borrow().upto;
        assert_eq!(upto, 32, "every ticket must be flushed");
        Ok(())
    }

    #[tokio::test]
    async fn drop_releases_the_database() -> Result<(), Box<dyn std::error::Error>> {
        let dir = tempfile::tempdir()?;
        {
            let db = sled::open(dir.path())?;
            let gc = GroupCommit::start(db.clone())?;
            db.insert(b"k", b"v")?;
            gc.wait_durable().await?;
        }
        // The flusher is joined; sled's own background thread lets go of the file lock at its
        // next tick, which a loaded machine may delay: the lock is released within 5 s.
        let mut tries = 0;
        let db = loop {
            match sled::open(dir.path()) {
                Ok(db) => break db,
                Err(e) if tries < 50 && e.to_string().contains("could not acquire lock") => {
                    tries += 1;
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
        Ok(())
    }
}
