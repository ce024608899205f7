//! sled-only behaviour tests: watchers lagging behind the live-event channel, a watcher
//! overtaken by compaction, history bounded in bytes, nothing visible before its flush, a woken
//! watcher reading at least its event's revision, and
//! crash safety under SIGKILL (acknowledged writes and watched revisions survive). The behaviour every backend shares
//! is tested once for all backends in `crate::conformance`.

use std::error::Error;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::{SledBackend, SledConfig};
use crate::{Store, StoreError, WatchItem, WatchStream};

type TestResult = Result<(), Box<dyn Error>>;

fn open(path: &Path, history: u64) -> Result<SledBackend, StoreError> {
    super::reopen(SledConfig {
        path: path.to_owned(),
        cache_capacity_bytes: super::DEFAULT_CACHE_BYTES,
        history,
        history_bytes: crate::DEFAULT_HISTORY_BYTES,
    })
}

fn val(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

/// The next stream item, failing the test after 10 s.
async fn next_item(stream: &mut WatchStream) -> Result<WatchItem, Box<dyn Error>> {
    let item = tokio::time::timeout(Duration::from_secs(10), stream.next()).await?;
    Ok(item.ok_or("watch stream ended")??)
}

/// The next event (skipping progress items).
async fn next_event(stream: &mut WatchStream) -> Result<crate::Event, Box<dyn Error>> {
    loop {
        if let WatchItem::Event(event) = next_item(stream).await? {
            return Ok(event);
        }
    }
}

#[tokio::test]
async fn lagging_watcher_gets_everything() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = SledBackend::open_with_watch_buffer(
        SledConfig {
            path: dir.path().to_owned(),
            cache_capacity_bytes: super::DEFAULT_CACHE_BYTES,
            history: 10_000,
            history_bytes: crate::DEFAULT_HISTORY_BYTES,
        },
        4,
    )?;
    let store = backend.keyspace("host")?;
    let start = store.current_revision().await?;
    let mut stream = store.watch("", start, None).await?;
    // Take one event so the watcher is in live mode, then let it fall far behind.
    store.create("/k/first", val("0")).await?;
    assert_eq!(next_event(&mut stream).await?.revision(), start + 1);
    for i in 0..100 {
        store.create(&format!("/k/{i:03}"), val("v")).await?;
    }
    for expected in start + 2..=start + 101 {
        let event = next_event(&mut stream).await?;
        assert_eq!(event.revision(), expected);
    }
    store.create("/k/after", val("v")).await?;
    assert_eq!(next_event(&mut stream).await?.kv.key, "/k/after");
    Ok(())
}

#[tokio::test]
async fn watcher_overtaken_by_compaction_gets_compacted() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = SledBackend::open_with_watch_buffer(
        SledConfig {
            path: dir.path().to_owned(),
            cache_capacity_bytes: super::DEFAULT_CACHE_BYTES,
            history: 5,
            history_bytes: crate::DEFAULT_HISTORY_BYTES,
        },
        2,
    )?;
    let store = backend.keyspace("host")?;
    let mut stream = store.watch("", 1, None).await?;
    store.create("/x/first", val("v")).await?;
    assert_eq!(next_event(&mut stream).await?.revision(), 2);
    for i in 0..30 {
        store.create(&format!("/x/{i}"), val("v")).await?;
    }
    let mut outcome = None;
    for _ in 0..10 {
        match tokio::time::timeout(Duration::from_secs(10), stream.next()).await? {
            Some(Ok(_)) => {}
            Some(Err(error)) => {
                outcome = Some(error);
                break;
            }
            None => break,
        }
    }
    assert!(
        matches!(outcome, Some(StoreError::Compacted { .. })),
        "got {outcome:?}"
    );
    assert!(
        stream.next().await.is_none(),
        "the stream ends after an error"
    );
    Ok(())
}

/// Environment variable that turns [`crash_child`] into the writer process of
/// [`acknowledged_writes_survive_sigkill`]; it names the database directory.
const CRASH_DIR_ENV: &str = "FABRIK_STORE_CRASH_CHILD_DIR";

/// Child half of [`acknowledged_writes_survive_sigkill`]: when started by it, creates keys
/// forever and prints `acked <i>` after each acknowledged create. Without the variable (a
/// normal test run) it has nothing to do.
#[tokio::test]
async fn crash_child() -> TestResult {
    let Some(dir) = std::env::var_os(CRASH_DIR_ENV) else {
        return Ok(());
    };
    let store = open(Path::new(&dir), 100)?.keyspace("host")?;
    for i in 0u64.. {
        store.create(&format!("/crash/{i:08}"), val("v")).await?;
        println!("acked {i}");
    }
    Ok(())
}

#[tokio::test]
async fn acknowledged_writes_survive_sigkill() -> TestResult {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir()?;
    let mut child = Command::new(std::env::current_exe()?)
        .args([
            "sled_backend::tests::crash_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CRASH_DIR_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()?;
    let stdout = child.stdout.take().ok_or("child stdout")?;
    let mut lines = BufReader::new(stdout).lines();
    let mut acked = None;
    while acked.is_none_or(|n: u64| n < 300) {
        let line = lines.next().ok_or("child exited early")??;
        if let Some(n) = line.strip_prefix("acked ") {
            acked = Some(n.parse()?);
        }
    }
    // Child::kill is SIGKILL on Unix: no destructors, no final flush.
    child.kill()?;
    for line in lines {
        if let Some(n) = line?.strip_prefix("acked ") {
            acked = Some(n.parse()?);
        }
    }
    child.wait()?;
    let acked = acked.ok_or("no acknowledged write")?;

    let store = open(dir.path(), 100)?.keyspace("host")?;
    for i in 0..=acked {
        let kv = store.get(&format!("/crash/{i:08}")).await?;
        assert_eq!(
            kv.map(|kv| kv.mod_revision),
            Some(i + 2),
            "acknowledged create {i} lost"
        );
    }
    let current = store.current_revision().await?;
    assert!(current > acked + 1);
    let next = store.create("/after-crash", val("v")).await?;
    assert_eq!(next.mod_revision, current + 1);
    Ok(())
}

/// A gate the flusher thread waits at before every flush (while closed).
#[derive(Default)]
struct FlushGate {
    closed: std::sync::Mutex<bool>,
    opened: std::sync::Condvar,
}

impl FlushGate {
    fn set_closed(&self, closed: bool) {
        *self
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = closed;
        self.opened.notify_all();
    }

    fn pass(&self) {
        let mut closed = self
            .closed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        while *closed {
            closed = self
                .opened
                .wait(closed)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }
}

/// Item 12 of the isolation work: no reader sees a write before the flush that makes it
/// durable. With flushes held back, a committed create is invisible to watchers, lists,
/// `current_revision` and gets; once the flush runs, everyone sees it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_reader_sees_a_write_before_its_flush() -> TestResult {
    let dir = tempfile::tempdir()?;
    let gate = std::sync::Arc::new(FlushGate::default());
    let hook_gate = std::sync::Arc::clone(&gate);
    let backend = SledBackend::open_with(
        SledConfig::new(dir.path()),
        super::config::DEFAULT_WATCH_BUFFER,
        Some(std::sync::Arc::new(move || hook_gate.pass())),
    )?;
    let store = backend.keyspace("host")?;
    let first = store.create("/k/first", val("1")).await?;
    let mut stream = store.watch("/k/", first.mod_revision, None).await?;

    gate.set_closed(true);
    let writer = {
        let store = store.clone();
        tokio::spawn(async move { store.create("/k/second", val("2")).await })
    };
    // Let the write commit; its flush is held at the gate.
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !writer.is_finished(),
        "a write is acknowledged only once durable"
    );
    let early = tokio::time::timeout(Duration::from_millis(300), stream.next()).await;
    assert!(
        early.is_err(),
        "the watcher saw a write before its flush: {early:?}"
    );
    assert_eq!(store.current_revision().await?, first.mod_revision);
    let listed = store.list(crate::ListOptions::default()).await?;
    assert_eq!(listed.revision, first.mod_revision);
    assert_eq!(
        listed.items.len(),
        1,
        "the list shows only the durable write"
    );
    let reader = {
        let store = store.clone();
        tokio::spawn(async move { store.get("/k/second").await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !reader.is_finished(),
        "a get of a non-durable value waits for its flush"
    );
    assert!(matches!(
        store.watch("", first.mod_revision + 1, None).await,
        Err(StoreError::FutureRevision { .. })
    ));

    gate.set_closed(false);
    let second = tokio::time::timeout(Duration::from_secs(10), writer).await???;
    let event = next_event(&mut stream).await?;
    assert_eq!(
        (event.kv.key.as_str(), event.revision()),
        ("/k/second", second.mod_revision)
    );
    let got = tokio::time::timeout(Duration::from_secs(10), reader).await???;
    assert_eq!(got, Some(second.clone()));
    assert_eq!(store.current_revision().await?, second.mod_revision);
    Ok(())
}

/// Item 11: the history is bounded in bytes as well as in revisions. A 600 KiB object
/// rewritten 40 times keeps at most the bound (plus the newest entry) of history, and a watch
/// from before the compacted part gets Compacted (410 Gone upstream).
#[tokio::test]
async fn history_is_bounded_in_bytes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let bound = 4 * 1024 * 1024;
    let backend = SledBackend::open(SledConfig {
        history_bytes: bound,
        ..SledConfig::new(dir.path())
    })?;
    let store = backend.keyspace("tenant")?;
    let first = store
        .create("/big", Bytes::from(vec![b'a'; 600 * 1024]))
        .await?;
    let mut entry_max = 0u64;
    for i in 0..40u8 {
        store
            .update("/big", Bytes::from(vec![b'b' + i % 20; 600 * 1024]), None)
            .await?;
        // An update's log entry holds the new and the previous value.
        entry_max = entry_max.max(2 * 600 * 1024 + 64);
        assert!(
            store.history_bytes() <= bound + entry_max,
            "history {} bytes after {} rewrites",
            store.history_bytes(),
            i + 1
        );
    }
    let compacted = store.compacted_revision().await?;
    assert!(compacted > first.mod_revision, "old revisions compacted");
    assert!(matches!(
        store.watch("", first.mod_revision, None).await,
        Err(StoreError::Compacted { .. })
    ));
    // What is kept still works.
    let mut stream = store.watch("", compacted, None).await?;
    assert_eq!(next_event(&mut stream).await?.revision(), compacted + 1);
    // The byte bound survives a restart (the usage record keeps the history's size).
    let before = store.history_bytes();
    drop((store, stream, backend));
    // As a restart does: the handle just dropped may hold sled's file lock a moment longer.
    let backend = super::reopen(SledConfig {
        history_bytes: bound,
        ..SledConfig::new(dir.path())
    })?;
    assert_eq!(backend.keyspace("tenant")?.history_bytes(), before);
    Ok(())
}

/// Environment variable that turns [`watched_crash_child`] into the writer process of
/// [`seen_revisions_survive_sigkill`]; it names the database directory.
const WATCHED_CRASH_DIR_ENV: &str = "FABRIK_STORE_WATCHED_CRASH_CHILD_DIR";

/// Child half of [`seen_revisions_survive_sigkill`]: writes (creates and deletes of 64 keys)
/// forever from 8 tasks while a watcher prints every event it sees as
/// `seen <rev> <kind> <key> <value>`. Without the variable it has nothing to do.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watched_crash_child() -> TestResult {
    let Some(dir) = std::env::var_os(WATCHED_CRASH_DIR_ENV) else {
        return Ok(());
    };
    let store = open(Path::new(&dir), 1_000_000)?.keyspace("tenant")?;
    let start = store.current_revision().await?;
    let mut stream = store.watch("", start, None).await?;
    for writer in 0..8u64 {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0u64.. {
                let key = format!("/c/{writer}/{:02}", i % 8);
                let value = val(&format!("{writer}-{i}"));
                if store.create(&key, value).await.is_err() {
                    let _ = store.delete(&key, None).await;
                }
            }
        });
    }
    while let Some(item) = stream.next().await {
        if let WatchItem::Event(event) = item? {
            println!(
                "seen {} {:?} {} {}",
                event.revision(),
                event.kind,
                event.kv.key,
                String::from_utf8_lossy(&event.kv.value)
            );
        }
    }
    Ok(())
}

/// Item 12: every revision a watcher has seen survives SIGKILL with the same change, so it is
/// never reused by another write after the restart. Three crash rounds on one database.
#[tokio::test]
async fn seen_revisions_survive_sigkill() -> TestResult {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let dir = tempfile::tempdir()?;
    for round in 0..3 {
        let mut child = Command::new(std::env::current_exe()?)
            .args([
                "sled_backend::tests::watched_crash_child",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(WATCHED_CRASH_DIR_ENV, dir.path())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("child stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let mut seen: Vec<String> = Vec::new();
        while seen.len() < 400 {
            let line = lines.next().ok_or("child exited early")??;
            if line.starts_with("seen ") {
                seen.push(line);
            }
        }
        child.kill()?;
        for line in lines {
            let line = line?;
            if line.starts_with("seen ") {
                seen.push(line);
            }
        }
        child.wait()?;

        let store = open(dir.path(), 1_000_000)?.keyspace("tenant")?;
        let parse = |line: &str| -> Result<u64, Box<dyn Error>> {
            Ok(line.split(' ').nth(1).ok_or("no revision")?.parse()?)
        };
        let first = parse(seen.first().ok_or("nothing seen")?)?;
        let last = parse(seen.last().ok_or("nothing seen")?)?;
        let current = store.current_revision().await?;
        assert!(
            current >= last,
            "round {round}: a watcher saw revision {last}, the store restarted at {current}"
        );
        // Replay the history the watcher saw and compare it change by change.
        let mut stream = store.watch("", first - 1, None).await?;
        for line in &seen {
            let event = next_event(&mut stream).await?;
            let stored = format!(
                "seen {} {:?} {} {}",
                event.revision(),
                event.kind,
                event.kv.key,
                String::from_utf8_lossy(&event.kv.value)
            );
            assert_eq!(
                &stored, line,
                "round {round}: a seen change was lost or replaced"
            );
        }
    }
    Ok(())
}

/// A watcher woken by an event already reads that event's revision: the revision readers see
/// moves before the event is published. (Published first, a controller woken by a deletion
/// could list the revision before it, find nothing to do and sleep until its next periodic
/// pass: the registry controllers' "lost wakeup" seen under load.) The waker records what a
/// reader would see at the moment it is woken, which is inside the flusher's publishing.
#[tokio::test]
async fn a_watcher_woken_by_an_event_reads_at_least_its_revision() -> TestResult {
    use std::sync::{Arc, Mutex};
    use std::task::{Context, Poll, Wake, Waker};

    struct SeenAtWake {
        store: super::SledStore,
        seen: Mutex<Vec<crate::Revision>>,
    }
    impl Wake for SeenAtWake {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            let current = self
                .store
                .inner
                .current
                .load(std::sync::atomic::Ordering::Acquire);
            self.seen
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(current);
        }
    }

    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    let mut stream = store
        .watch("", store.current_revision().await?, None)
        .await?;
    let probe = Arc::new(SeenAtWake {
        store: store.clone(),
        seen: Mutex::new(Vec::new()),
    });
    let waker = Waker::from(Arc::clone(&probe));
    let mut cx = Context::from_waker(&waker);
    for i in 0..20 {
        assert!(stream.poll_next_unpin(&mut cx).is_pending());
        let kv = store.create(&format!("/w/{i}"), val("v")).await?;
        // The write returned once published, so the watcher has been woken.
        let Poll::Ready(Some(Ok(WatchItem::Event(event)))) = stream.poll_next_unpin(&mut cx) else {
            return Err("the published event is not ready".into());
        };
        assert_eq!(event.revision(), kv.mod_revision);
        let seen = probe
            .seen
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .drain(..)
            .collect::<Vec<_>>();
        assert!(!seen.is_empty(), "write {i}: the watcher was not woken");
        assert!(
            seen.iter().all(|rev| *rev >= kv.mod_revision),
            "write {i} (revision {}): woken while readers saw {seen:?}",
            kv.mod_revision
        );
    }
    Ok(())
}
