//! sled-only behaviour tests: watchers lagging behind the live-event channel, a watcher
//! overtaken by compaction, and crash safety under SIGKILL. The behaviour every backend shares
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
    SledBackend::open(SledConfig {
        path: path.to_owned(),
        cache_capacity_bytes: super::DEFAULT_CACHE_BYTES,
        history,
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
