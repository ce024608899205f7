//! Watch streams of a keyspace: history replay from the change log, then live events, with
//! no gap and no duplicate.
//!
//! How: the watcher subscribes to the keyspace's broadcast channel *under the writer lock* and
//! notes the durable revision S at that moment (events are broadcast under that lock, once
//! durable, in revision order). Every event with revision <= S is then in the
//! log, and every later one will arrive on the channel. The stream keeps a cursor: every
//! revision <= cursor has been processed (yielded if under the prefix). It replays the log
//! from the cursor to S in bounded chunks, then takes live events: one at or below the cursor
//! is skipped, the next one is yielded, and a jump past cursor + 1 (the watcher lagged and the
//! channel dropped events) sends it back to the log to fill the gap. The log is the source of
//! truth, so a slow watcher loses nothing unless the gap has been compacted meanwhile, in
//! which case it ends with [`StoreError::Compacted`].
//!
//! Live events reach watchers only once flushed to disk (the group-commit flusher broadcasts
//! them after the flush), so an event a watcher has seen survives a crash, and its revision is
//! never reused by another write. Replays read the log only up to durable revisions.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::history;
use super::keyspace::Keyspace;
use crate::error::{Result, StoreError};
use crate::types::{Event, Revision, WatchItem, WatchStream};

/// How many log entries one replay step reads.
const REPLAY_CHUNK: usize = 256;

/// Start a watch on `ks` (see [`Store::watch`](crate::Store::watch)).
pub(crate) fn start(
    ks: Arc<Keyspace>,
    prefix: &str,
    after: Revision,
    progress_interval: Option<Duration>,
) -> Result<WatchStream> {
    let (events, subscribed_at) = {
        let writer = ks.lock_writer();
        ks.check_live()?;
        if after < writer.compacted {
            return Err(StoreError::Compacted {
                requested: after,
                compacted: writer.compacted,
            });
        }
        if after > writer.durable {
            return Err(StoreError::FutureRevision {
                requested: after,
                current: writer.durable,
            });
        }
        let Some(sender) = &writer.events else {
            return Err(StoreError::KeyspaceDropped {
                name: ks.name.clone(),
            });
        };
        (sender.subscribe(), writer.durable)
    };
    let ticker = progress_interval.filter(|p| !p.is_zero()).map(|period| {
        let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
        ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
        ticker
    });
    let watcher = Watcher {
        ks,
        prefix: prefix.to_owned(),
        cursor: after,
        replay_to: subscribed_at,
        pending: VecDeque::new(),
        events,
        ticker,
        finished: false,
    };
    let stream = futures::stream::unfold(watcher, |mut watcher| async move {
        let item = watcher.next_item().await?;
        Some((item, watcher))
    });
    Ok(stream.boxed())
}

/// What woke a waiting watcher.
enum Wake {
    Live(Result<Arc<Event>, RecvError>),
    Tick,
}

/// The state of one watch stream.
struct Watcher {
    ks: Arc<Keyspace>,
    prefix: String,
    /// Every revision <= cursor has been processed.
    cursor: Revision,
    /// The log must be replayed up to this revision before live events are taken.
    replay_to: Revision,
    /// Replayed events under the prefix not yet yielded.
    pending: VecDeque<Event>,
    events: broadcast::Receiver<Arc<Event>>,
    ticker: Option<Interval>,
    /// Set after an error: the stream ends.
    finished: bool,
}

impl Watcher {
    /// The next stream item; None once the stream has ended.
    async fn next_item(&mut self) -> Option<Result<WatchItem>> {
        if self.finished {
            return None;
        }
        let item = self.step().await;
        if item.is_err() {
            self.finished = true;
        }
        Some(item)
    }

    async fn step(&mut self) -> Result<WatchItem> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(WatchItem::Event(event));
            }
            if self.cursor < self.replay_to {
                self.replay_chunk()?;
                continue;
            }
            match self.wait().await {
                Wake::Tick => return Ok(WatchItem::Progress(self.cursor)),
                Wake::Live(Ok(event)) => {
                    let rev = event.revision();
                    if rev <= self.cursor {
                        continue;
                    }
                    if rev > self.cursor + 1 {
                        // Events were dropped before this one: the log has them all.
                        self.replay_to = rev;
                        continue;
                    }
                    self.cursor = rev;
                    if event.kv.key.starts_with(&self.prefix) {
                        return Ok(WatchItem::Event(Event::clone(&event)));
                    }
                }
                Wake::Live(Err(RecvError::Lagged(_))) => {
                    self.replay_to = self.ks.current.load(Ordering::Acquire);
                }
                Wake::Live(Err(RecvError::Closed)) => {
                    return Err(StoreError::KeyspaceDropped {
                        name: self.ks.name.clone(),
                    });
                }
            }
        }
    }

    /// Wait for a live event or a progress tick.
    async fn wait(&mut self) -> Wake {
        let events = &mut self.events;
        match &mut self.ticker {
            Some(ticker) => tokio::select! {
                biased;
                _ = ticker.tick() => Wake::Tick,
                live = events.recv() => Wake::Live(live),
            },
            None => Wake::Live(events.recv().await),
        }
    }

    /// Move up to [`REPLAY_CHUNK`] log entries after the cursor into `pending`.
    fn replay_chunk(&mut self) -> Result<()> {
        let from = self.cursor + 1;
        let events = history::read_log(&self.ks, from, self.replay_to, REPLAY_CHUNK)?;
        if events.is_empty() {
            return Err(history::missing(&self.ks, from));
        }
        for event in events {
            self.cursor = event.revision();
            if event.kv.key.starts_with(&self.prefix) {
                self.pending.push_back(event);
            }
        }
        Ok(())
    }
}
