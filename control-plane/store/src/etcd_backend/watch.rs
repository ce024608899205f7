//! Watch streams of the etcd backend: one etcd watch stream per store watch, carrying two
//! etcd watchers that start at `after + 1`:
//! * the data watcher, over the watched prefix of the keyspace, with previous values;
//! * the marker watcher, over the keyspace marker: its deletion ends the stream with
//!   KeyspaceDropped (a drop by another process).
//!
//! etcd replays history from the start revision and then follows live changes, in revision
//! order, each revision once. The stream remembers the revision of the last event it took;
//! when the etcd stream breaks (a member died, the connection reset) it is opened again right
//! after it, with the retries of [`client`](super::client), so a member failure costs the
//! caller nothing. A start revision etcd has compacted away ends the stream with
//! Compacted.
//!
//! Progress: two sources, both yielded as [`WatchItem::Progress`].
//! * etcd's own progress notifications for the data watcher (requested with the watch). etcd
//!   sends them in order with the watcher's events and only once it has caught up, so they are
//!   exact, but at the server's period (`--experimental-watch-progress-notify-interval`, 10
//!   minutes by default).
//! * every `progress_interval`, a progress request on the stream. etcd 3.4 (before 3.4.25;
//!   3.5 before 3.5.8) answers it out of band with its current revision, possibly *ahead* of
//!   events still queued for the stream, and before a watcher replaying history has caught up
//!   (etcd issue 15220). The stream therefore asks only once the watcher has been open for
//!   [`CATCH_UP`] and is not in the middle of a large replay, and holds the answer back for
//!   [`PROGRESS_GRACE`], yielding any event that arrives meanwhile first. Events are never
//!   dropped because of a progress revision: in the unlikely case an event at or below an
//!   already reported progress revision still arrives, it is yielded.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use etcd_client::{EventType, TxnOp, WatchOptions, WatchResponse};
use futures::StreamExt;
use tokio::sync::watch as signal;
use tokio::time::{Instant, Interval, MissedTickBehavior};

use super::backend::missing_header;
use super::client::{self, etcd_error, retry};
use super::keyspace::Keyspace;
use super::layout;
use crate::error::{Result, StoreError};
use crate::types::{Event, EventKind, KeyValue, Revision, WatchItem, WatchStream};

/// Watch id of the data watcher on its etcd stream.
const DATA_WATCH: i64 = 1;
/// Watch id of the marker watcher.
const MARKER_WATCH: i64 = 2;
/// How long after (re)opening the stream before progress is requested: etcd moves a watcher
/// that replays history to its live set in rounds of 100 ms.
const CATCH_UP: Duration = Duration::from_millis(300);
/// How long an answer to a progress request is held back for events still in flight.
const PROGRESS_GRACE: Duration = Duration::from_millis(50);
/// etcd replays at most this many revisions per response; a full response means more follow.
const REPLAY_BATCH_REVISIONS: usize = 1000;

/// Start a watch on `ks` (see [`Store::watch`](crate::Store::watch)).
pub(crate) async fn start(
    ks: Arc<Keyspace>,
    prefix: &str,
    after: Revision,
    progress_interval: Option<Duration>,
) -> Result<WatchStream> {
    ks.check_live()?;
    let (current, compacted) = bounds(&ks).await?;
    if after < compacted {
        return Err(StoreError::Compacted {
            requested: after,
            compacted,
        });
    }
    if after > current {
        return Err(StoreError::FutureRevision {
            requested: after,
            current,
        });
    }
    let range_start = format!("{}{prefix}", ks.keys.data);
    let mut watcher = Watcher {
        range_end: layout::prefix_end(range_start.as_bytes()),
        range_start,
        stream: None,
        last_event: after,
        reported: after,
        pending: VecDeque::new(),
        opened_at: Instant::now(),
        replaying: false,
        held_progress: None,
        ticker: progress_interval.filter(|p| !p.is_zero()).map(|period| {
            let mut ticker = tokio::time::interval_at(Instant::now() + period, period);
            ticker.set_missed_tick_behavior(MissedTickBehavior::Delay);
            ticker
        }),
        progress_requested: false,
        dropped: ks.drop_signal(),
        ks,
        finished: false,
    };
    // Open the etcd stream now, so that a watch that cannot start fails here.
    watcher.open().await?;
    let stream = futures::stream::unfold(watcher, |mut watcher| async move {
        let item = watcher.next_item().await?;
        Some((item, watcher))
    });
    Ok(stream.boxed())
}

/// The cluster's current revision and the recorded compacted revision, in one read; fails
/// with KeyspaceDropped when the marker is not the handle's.
async fn bounds(ks: &Keyspace) -> Result<(Revision, Revision)> {
    let compacted_key = layout::compacted_key(&ks.shared.prefix);
    let response = retry(ks.shared.retry_timeout, "txn", |_| {
        let mut client = ks.shared.client();
        let txn = etcd_client::Txn::new().and_then([
            TxnOp::get(ks.keys.marker.clone(), None),
            TxnOp::get(compacted_key.clone(), None),
        ]);
        async move { client.txn(txn).await }
    })
    .await?;
    let current = response
        .header()
        .map(|h| layout::revision(h.revision()))
        .ok_or_else(|| missing_header("txn"))?;
    let reads: Vec<_> = response
        .op_responses()
        .into_iter()
        .filter_map(|op| match op {
            etcd_client::TxnOpResponse::Get(get) => Some(get),
            _ => None,
        })
        .collect();
    let [marker, record] = reads.as_slice() else {
        return Err(missing_header("txn"));
    };
    if !ks.is_own_marker(marker.kvs().first()) {
        return Err(ks.dropped_error());
    }
    let compacted = record
        .kvs()
        .first()
        .and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
        .unwrap_or(crate::sled_backend::INITIAL_REVISION);
    Ok((current, compacted))
}

/// What woke a waiting watcher.
enum Wake {
    Message(std::result::Result<Option<WatchResponse>, etcd_client::Error>),
    Tick,
    Dropped,
    /// A held-back progress revision is due.
    ProgressDue,
}

/// The state of one watch stream.
struct Watcher {
    ks: Arc<Keyspace>,
    range_start: String,
    range_end: Vec<u8>,
    /// The etcd stream; None after it broke, until reopened.
    stream: Option<etcd_client::WatchStream>,
    /// Revision of the last event taken from etcd (resume and duplicate check point).
    last_event: Revision,
    /// The highest progress revision yielded.
    reported: Revision,
    /// Converted events not yet yielded.
    pending: VecDeque<Event>,
    /// When the etcd stream was last opened.
    opened_at: Instant,
    /// The last event response was a full replay batch: more history follows.
    replaying: bool,
    /// An answer to a progress request, and when it may be yielded.
    held_progress: Option<(Revision, Instant)>,
    ticker: Option<Interval>,
    /// A progress request is outstanding.
    progress_requested: bool,
    dropped: signal::Receiver<bool>,
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
            self.stream = None;
        }
        Some(item)
    }

    /// Open (or reopen) the etcd stream after the last event taken.
    async fn open(&mut self) -> Result<()> {
        let start = layout::etcd_revision(self.last_event + 1);
        let data = WatchOptions::new()
            .with_range(self.range_end.clone())
            .with_start_revision(start)
            .with_prev_key()
            .with_progress_notify()
            .with_watch_id(DATA_WATCH);
        let marker = WatchOptions::new()
            .with_start_revision(start)
            .with_watch_id(MARKER_WATCH);
        let stream = retry(self.ks.shared.retry_timeout, "watch", |_| {
            let mut client = self.ks.shared.client();
            let (data, marker) = (data.clone(), marker.clone());
            let (range_start, marker_key) = (self.range_start.clone(), self.ks.keys.marker.clone());
            async move {
                let mut stream = client.watch(range_start, Some(data)).await?;
                stream.watch(marker_key, Some(marker)).await?;
                Ok(stream)
            }
        })
        .await?;
        self.stream = Some(stream);
        self.progress_requested = false;
        self.held_progress = None;
        self.opened_at = Instant::now();
        Ok(())
    }

    async fn step(&mut self) -> Result<WatchItem> {
        let deadline_reset = self.ks.shared.retry_timeout;
        let mut broken_since: Option<Instant> = None;
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(WatchItem::Event(event));
            }
            if self.stream.is_none() {
                self.open().await?;
            }
            match self.wait().await {
                Wake::Dropped => return Err(self.ks.dropped_error()),
                Wake::ProgressDue => {
                    if let Some((revision, _)) = self.held_progress.take() {
                        if let Some(progress) = self.progress(revision) {
                            return Ok(WatchItem::Progress(progress));
                        }
                    }
                }
                Wake::Tick => {
                    let caught_up = self.opened_at.elapsed() >= CATCH_UP && !self.replaying;
                    if self.progress_requested || self.held_progress.is_some() || !caught_up {
                        continue;
                    }
                    let sent = match &mut self.stream {
                        Some(stream) => stream.request_progress().await,
                        None => continue,
                    };
                    match sent {
                        Ok(()) => self.progress_requested = true,
                        Err(error) => self.broken(error, &mut broken_since, deadline_reset)?,
                    }
                }
                Wake::Message(Ok(Some(response))) => {
                    broken_since = None;
                    if let Some(progress) = self.handle(response)? {
                        return Ok(WatchItem::Progress(progress));
                    }
                }
                Wake::Message(Ok(None)) => {
                    let error = etcd_client::Error::WatchError("watch stream ended".to_owned());
                    self.broken(error, &mut broken_since, deadline_reset)?;
                }
                Wake::Message(Err(error)) => {
                    self.broken(error, &mut broken_since, deadline_reset)?
                }
            }
        }
    }

    /// The etcd stream failed: drop it (the loop reopens it after the last event taken) if the failure
    /// is transient and has not lasted longer than the retry timeout.
    fn broken(
        &mut self,
        error: etcd_client::Error,
        since: &mut Option<Instant>,
        limit: Duration,
    ) -> Result<()> {
        let first = *since.get_or_insert_with(Instant::now);
        if client::is_transient(&error) && first.elapsed() < limit {
            tracing::debug!(%error, last_event = self.last_event, "etcd watch broke, resuming");
            self.stream = None;
            return Ok(());
        }
        Err(etcd_error("watch", error))
    }

    /// Wait for a response, a progress tick, a held progress revision or the drop signal.
    async fn wait(&mut self) -> Wake {
        let Some(stream) = &mut self.stream else {
            return Wake::Tick;
        };
        let dropped = &mut self.dropped;
        let drop_signal = async {
            // An error means the keyspace state is gone, which also means dropped.
            let _ = dropped.wait_for(|dropped| *dropped).await;
        };
        let held = self.held_progress.map(|(_, due)| due);
        let progress_due = async move {
            match held {
                Some(due) => tokio::time::sleep_until(due).await,
                None => std::future::pending().await,
            }
        };
        let ticker = &mut self.ticker;
        let tick = async {
            match ticker {
                Some(ticker) => {
                    ticker.tick().await;
                }
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = drop_signal => Wake::Dropped,
            message = stream.message() => Wake::Message(message),
            () = progress_due => Wake::ProgressDue,
            () = tick => Wake::Tick,
        }
    }

    /// Record progress up to `revision`; the item to yield, if it moves progress forward.
    fn progress(&mut self, revision: Revision) -> Option<Revision> {
        let revision = revision.max(self.last_event);
        if revision <= self.reported {
            return None;
        }
        self.reported = revision;
        Some(revision)
    }

    /// Take one etcd response: queue its events, hold a progress answer back, or return an
    /// exact progress revision.
    fn handle(&mut self, response: WatchResponse) -> Result<Option<Revision>> {
        if response.canceled() {
            let compacted = layout::revision(response.compact_revision());
            if compacted > 0 {
                return Err(StoreError::Compacted {
                    requested: self.last_event,
                    compacted,
                });
            }
            return Err(StoreError::EtcdProtocol {
                op: "watch",
                detail: format!("watch canceled: {}", response.cancel_reason()),
            });
        }
        if response.created() {
            return Ok(None);
        }
        let revision = response
            .header()
            .map(|h| layout::revision(h.revision()))
            .ok_or_else(|| missing_header("watch"))?;
        if response.events().is_empty() {
            if response.watch_id() == DATA_WATCH {
                // etcd's own notification for the caught-up data watcher: exact.
                return Ok(self.progress(revision));
            }
            if self.progress_requested {
                // The answer to our request: hold it back for events still in flight.
                self.progress_requested = false;
                self.held_progress = Some((revision, Instant::now() + PROGRESS_GRACE));
            }
            return Ok(None);
        }
        if response.watch_id() == MARKER_WATCH {
            // A deletion before this handle's incarnation is an earlier life of the keyspace.
            let deleted = response.events().iter().any(|e| {
                e.event_type() == EventType::Delete
                    && e.kv()
                        .is_some_and(|kv| kv.mod_revision() > self.ks.incarnation)
            });
            if deleted {
                self.ks.mark_dropped();
                return Err(self.ks.dropped_error());
            }
            return Ok(None);
        }
        let mut revisions = 0;
        let mut previous = None;
        for event in response.events() {
            let event = self.convert(event)?;
            if previous != Some(event.revision()) {
                revisions += 1;
                previous = Some(event.revision());
            }
            // etcd sends each revision once per stream; after a resume it starts after the
            // last event taken, so this only guards against a misbehaving server.
            if event.revision() > self.last_event {
                self.pending.push_back(event);
            }
        }
        self.replaying = revisions >= REPLAY_BATCH_REVISIONS;
        if let Some(last) = self.pending.back() {
            self.last_event = self.last_event.max(last.revision());
        }
        Ok(None)
    }

    /// Convert one etcd event.
    fn convert(&self, event: &etcd_client::Event) -> Result<Event> {
        let kv = event.kv().ok_or_else(|| StoreError::EtcdProtocol {
            op: "watch",
            detail: "event without key".to_owned(),
        })?;
        let prev = event.prev_kv().map(|p| self.ks.key_value(p)).transpose()?;
        match event.event_type() {
            EventType::Put => {
                let kv = self.ks.key_value(kv)?;
                let kind = if kv.create_revision == kv.mod_revision {
                    EventKind::Create
                } else {
                    EventKind::Update
                };
                let prev = if kind == EventKind::Create {
                    None
                } else {
                    prev
                };
                Ok(Event { kind, kv, prev })
            }
            EventType::Delete => {
                let deleted = self.ks.key_value(kv)?;
                let kv = match &prev {
                    Some(prev) => KeyValue {
                        mod_revision: deleted.mod_revision,
                        ..prev.clone()
                    },
                    // The previous value was compacted away before etcd could attach it.
                    None => deleted,
                };
                Ok(Event {
                    kind: EventKind::Delete,
                    kv,
                    prev,
                })
            }
        }
    }
}
