//! Group commit: many writers share one `fsync`.
//!
//! A writer commits its sled transaction (in memory), then calls [`GroupCommit::wait_durable`].
//! One dedicated flusher thread per database loops: it takes every write registered so far,
//! flushes the database once, and then releases all of them together. While a flush runs, new
//! writers queue up for the next one, so with N concurrent writers one flush covers about N
//! writes.
//!
//! Guarantee: `wait_durable` returns Ok only after a flush that *started after* the caller's
//! registration has completed, so the caller's committed write is on disk. The flusher is a
//! plain thread (not a tokio task) so the blocking `fsync` never occupies a runtime worker and
//! the backend can be opened outside a runtime. Dropping the [`GroupCommit`] stops the thread
//! after a final flush and joins it, which releases the database files.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;

use tokio::sync::watch;

use crate::error::StoreError;

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

#[derive(Debug, Default)]
struct Shared {
    requests: Mutex<Requests>,
    wake: Condvar,
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
    pub(crate) fn start(db: sled::Db) -> Result<Self, StoreError> {
        let shared = Arc::new(Shared::default());
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
        let result = db.flush();
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
        let db = sled::open(dir.path())?;
        assert_eq!(db.get(b"k")?.as_deref(), Some(&b"v"[..]));
        Ok(())
    }
}
