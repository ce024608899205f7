//! Behaviour tests of the sled backend through the [`Store`] trait: write semantics,
//! compare-and-swap under concurrency, lists at revisions, watches, restarts and keyspaces.

use std::collections::HashSet;
use std::error::Error;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::{SledBackend, SledConfig};
use crate::{EventKind, ListOptions, Store, StoreError, WatchItem, WatchStream};

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
async fn create_get_update_delete() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    assert_eq!(store.current_revision().await?, 1);
    assert_eq!(store.get("/a").await?, None);

    let created = store.create("/a", val("1")).await?;
    assert_eq!((created.create_revision, created.mod_revision), (2, 2));
    assert!(matches!(
        store.create("/a", val("x")).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(
        store.current_revision().await?,
        2,
        "failed write takes no revision"
    );
    assert_eq!(store.get("/a").await?, Some(created.clone()));

    let updated = store.update("/a", val("2"), None).await?;
    assert_eq!((updated.create_revision, updated.mod_revision), (2, 3));
    assert_eq!(updated.value, val("2"));
    assert!(matches!(
        store.update("/missing", val("2"), None).await,
        Err(StoreError::NotFound { .. })
    ));

    let deleted = store.delete("/a", None).await?;
    assert_eq!((deleted.create_revision, deleted.mod_revision), (2, 4));
    assert_eq!(deleted.value, val("2"));
    assert_eq!(store.get("/a").await?, None);
    assert!(matches!(
        store.delete("/a", None).await,
        Err(StoreError::NotFound { .. })
    ));

    let again = store.create("/a", val("3")).await?;
    assert_eq!((again.create_revision, again.mod_revision), (5, 5));
    assert_eq!(store.current_revision().await?, 5);
    Ok(())
}

#[tokio::test]
async fn compare_and_swap() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    let first = store.create("/k", val("1")).await?;
    let second = store
        .update("/k", val("2"), Some(first.mod_revision))
        .await?;
    match store.update("/k", val("3"), Some(first.mod_revision)).await {
        Err(StoreError::Conflict { key, current }) => {
            assert_eq!(key, "/k");
            assert_eq!(current, second.mod_revision);
        }
        other => return Err(format!("expected conflict, got {other:?}").into()),
    }
    assert!(matches!(
        store.delete("/k", Some(first.mod_revision)).await,
        Err(StoreError::Conflict { .. })
    ));
    assert_eq!(store.get("/k").await?.map(|kv| kv.value), Some(val("2")));
    store.delete("/k", Some(second.mod_revision)).await?;
    assert_eq!(store.get("/k").await?, None);
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_cas_increments_lose_nothing() -> TestResult {
    const WRITERS: u64 = 16;
    const INCREMENTS: u64 = 25;
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 10_000)?.keyspace("host")?;
    store.create("/counter", val("0")).await?;
    let mut tasks = Vec::new();
    for _ in 0..WRITERS {
        let store = store.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0;
            while done < INCREMENTS {
                let current = store.get("/counter").await?.ok_or("counter vanished")?;
                let n: u64 = std::str::from_utf8(&current.value)?.parse()?;
                match store
                    .update(
                        "/counter",
                        val(&(n + 1).to_string()),
                        Some(current.mod_revision),
                    )
                    .await
                {
                    Ok(_) => done += 1,
                    Err(StoreError::Conflict { .. }) => {}
                    Err(other) => return Err(other.into()),
                }
            }
            Ok::<_, Box<dyn Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await?.map_err(|e| e.to_string())?;
    }
    let counter = store.get("/counter").await?.ok_or("counter missing")?;
    assert_eq!(counter.value, val(&(WRITERS * INCREMENTS).to_string()));
    assert_eq!(
        store.current_revision().await?,
        2 + WRITERS * INCREMENTS,
        "one revision per successful write"
    );
    Ok(())
}

#[tokio::test]
async fn list_prefix_pagination() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    for key in ["/a/1", "/a/2", "/a/3", "/a/4", "/a/5", "/b/1", "/a"] {
        store.create(key, val(key)).await?;
    }
    let page = |start_after: Option<&str>, limit| ListOptions {
        prefix: "/a/".to_owned(),
        start_after: start_after.map(str::to_owned),
        limit,
        revision: None,
    };
    let first = store.list(page(None, Some(2))).await?;
    let keys: Vec<_> = first.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/a/1", "/a/2"]);
    assert_eq!(first.remaining, 3);
    assert_eq!(first.revision, store.current_revision().await?);

    let second = store.list(page(Some("/a/2"), Some(2))).await?;
    let keys: Vec<_> = second.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/a/3", "/a/4"]);
    assert_eq!(second.remaining, 1);

    let last = store.list(page(Some("/a/4"), Some(2))).await?;
    assert_eq!(last.items.len(), 1);
    assert_eq!(last.remaining, 0);

    let before_prefix = store.list(page(Some("/"), None)).await?;
    assert_eq!(before_prefix.items.len(), 5);
    let everything = store.list(ListOptions::default()).await?;
    assert_eq!(everything.items.len(), 7);
    assert_eq!(
        everything.items.first().map(|kv| kv.key.as_str()),
        Some("/a")
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_at_older_revision_while_writing() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 10_000)?.keyspace("host")?;
    store.create("/p/a", val("a1")).await?;
    store.create("/p/b", val("b1")).await?;
    let at = store.current_revision().await?;
    store.update("/p/a", val("a2"), None).await?;
    store.delete("/p/b", None).await?;
    store.create("/p/c", val("c1")).await?;

    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..200 {
                let key = format!("/p/w{i:03}");
                store.create(&key, val("w")).await?;
                store.update("/p/a", val(&format!("a{i}")), None).await?;
            }
            Ok::<_, StoreError>(())
        })
    };
    let opts = ListOptions {
        prefix: "/p/".to_owned(),
        revision: Some(at),
        ..ListOptions::default()
    };
    let mut rounds = 0;
    while !writer.is_finished() || rounds == 0 {
        let old = store.list(opts.clone()).await?;
        assert_eq!(old.revision, at);
        let got: Vec<_> = old
            .items
            .iter()
            .map(|kv| (kv.key.as_str(), kv.value.clone(), kv.mod_revision))
            .collect();
        assert_eq!(got, [("/p/a", val("a1"), 2), ("/p/b", val("b1"), 3)]);
        assert_eq!(old.remaining, 0);
        rounds += 1;
        tokio::task::yield_now().await;
    }
    writer.await??;

    let now = store.list(ListOptions {
        prefix: "/p/".to_owned(),
        ..ListOptions::default()
    });
    let now = now.await?;
    assert_eq!(now.items.len(), 202, "a, c and 200 w keys");
    assert!(now.items.iter().all(|kv| kv.key != "/p/b"));

    let current = store.current_revision().await?;
    assert!(matches!(
        store
            .list(ListOptions {
                revision: Some(current + 1),
                ..ListOptions::default()
            })
            .await,
        Err(StoreError::FutureRevision { .. })
    ));
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_from_mid_stream_is_exactly_once_in_order() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 10_000)?.keyspace("host")?;
    for i in 0..20 {
        store.create(&format!("/w/{i}"), val("x")).await?;
    }
    let start = store.current_revision().await? - 10;
    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..100 {
                store
                    .update(&format!("/w/{}", i % 20), val("y"), None)
                    .await?;
                store.create(&format!("/other/{i}"), val("z")).await?;
            }
            store.delete("/w/0", None).await?;
            Ok::<_, StoreError>(())
        })
    };
    // Start watching while the writer is running.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let mut stream = store.watch("/w/", start, None).await?;
    writer.await??;
    let end = store.current_revision().await?;

    let mut last = start;
    let mut seen = HashSet::new();
    loop {
        let event = next_event(&mut stream).await?;
        let rev = event.revision();
        assert!(
            rev > last,
            "revision {rev} after {last}: out of order or duplicate"
        );
        assert!(event.kv.key.starts_with("/w/"), "prefix filter");
        assert!(seen.insert(rev));
        if rev <= start + 10 {
            assert_eq!(event.kind, EventKind::Create);
            assert!(event.prev.is_none());
        }
        last = rev;
        if rev == end {
            assert_eq!(event.kind, EventKind::Delete);
            assert_eq!(event.kv.key, "/w/0");
            assert_eq!(event.prev.map(|p| p.value), Some(val("y")));
            break;
        }
    }
    // 10 replayed creates, 100 updates and the delete.
    assert_eq!(seen.len(), 10 + 100 + 1);
    Ok(())
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
async fn compacted_revisions_are_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 5)?.keyspace("host")?;
    for i in 0..20 {
        store.create(&format!("/c/{i}"), val("v")).await?;
    }
    let current = store.current_revision().await?;
    let compacted = store.compacted_revision().await?;
    assert_eq!(current, 21);
    assert_eq!(compacted, current - 5);
    match store.watch("/c/", 2, None).await {
        Err(StoreError::Compacted {
            requested,
            compacted: oldest,
        }) => {
            assert_eq!(requested, 2);
            assert_eq!(oldest, compacted);
        }
        Err(other) => return Err(other.into()),
        Ok(_) => return Err("watch from a compacted revision must fail".into()),
    }
    assert!(matches!(
        store
            .list(ListOptions {
                revision: Some(compacted - 1),
                ..ListOptions::default()
            })
            .await,
        Err(StoreError::Compacted { .. })
    ));
    // The oldest available revision still works for both.
    let old = store
        .list(ListOptions {
            revision: Some(compacted),
            ..ListOptions::default()
        })
        .await?;
    assert_eq!(old.items.len(), 15);
    let mut stream = store.watch("/c/", compacted, None).await?;
    assert_eq!(next_event(&mut stream).await?.revision(), compacted + 1);
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

#[tokio::test]
async fn progress_reports_the_cursor() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    store.create("/a", val("1")).await?;
    store.create("/b", val("1")).await?;
    let current = store.current_revision().await?;
    let mut stream = store
        .watch("/a", 1, Some(Duration::from_millis(20)))
        .await?;
    assert_eq!(next_event(&mut stream).await?.kv.key, "/a");
    match next_item(&mut stream).await? {
        WatchItem::Progress(rev) => assert_eq!(rev, current),
        WatchItem::Event(event) => return Err(format!("unexpected {event:?}").into()),
    }
    Ok(())
}

#[tokio::test]
async fn restart_keeps_data_revision_and_history() -> TestResult {
    let dir = tempfile::tempdir()?;
    let (before, mid) = {
        let backend = open(dir.path(), 100)?;
        let store = backend.keyspace("host")?;
        store.create("/a", val("1")).await?;
        let mid = store.current_revision().await?;
        store.update("/a", val("2"), None).await?;
        store.create("/b", val("1")).await?;
        store.delete("/b", None).await?;
        (store.current_revision().await?, mid)
    };
    let backend = open(dir.path(), 100)?;
    let store = backend.keyspace("host")?;
    assert_eq!(store.current_revision().await?, before);
    assert_eq!(store.get("/a").await?.map(|kv| kv.value), Some(val("2")));
    assert_eq!(store.get("/b").await?, None);
    let old = store
        .list(ListOptions {
            revision: Some(mid),
            ..ListOptions::default()
        })
        .await?;
    assert_eq!(old.items.len(), 1);
    assert_eq!(old.items.first().map(|kv| kv.value.clone()), Some(val("1")));

    let mut stream = store.watch("", mid, None).await?;
    let kinds = [EventKind::Update, EventKind::Create, EventKind::Delete];
    for (offset, kind) in (1..).zip(kinds) {
        let event = next_event(&mut stream).await?;
        assert_eq!((event.revision(), event.kind), (mid + offset, kind));
    }
    let next = store.create("/c", val("1")).await?;
    assert_eq!(next.mod_revision, before + 1, "revisions are never reused");
    Ok(())
}

#[tokio::test]
async fn keyspaces_are_isolated() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = open(dir.path(), 100)?;
    let a = backend.keyspace("a")?;
    let b = backend.keyspace("b")?;
    let mut b_watch = b.watch("", 1, Some(Duration::from_millis(20))).await?;
    a.create("/k", val("from a")).await?;
    a.create("/k2", val("from a")).await?;
    assert_eq!(b.get("/k").await?, None);
    assert!(b.list(ListOptions::default()).await?.items.is_empty());
    assert_eq!(b.current_revision().await?, 1);
    assert!(matches!(
        next_item(&mut b_watch).await?,
        WatchItem::Progress(1)
    ));
    let in_b = b.create("/k", val("from b")).await?;
    assert_eq!(in_b.mod_revision, 2, "own revision counter");
    assert_eq!(a.get("/k").await?.map(|kv| kv.value), Some(val("from a")));
    // A second handle for the same name shares the counter.
    let a_again = backend.keyspace("a")?;
    assert_eq!(a_again.create("/k3", val("v")).await?.mod_revision, 4);
    Ok(())
}

#[tokio::test]
async fn drop_keyspace_removes_everything() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = open(dir.path(), 100)?;
    let doomed = backend.keyspace("tenant-1")?;
    let kept = backend.keyspace("tenant-2")?;
    doomed.create("/k", val("v")).await?;
    kept.create("/k", val("v")).await?;
    let mut stream = doomed.watch("", 2, None).await?;
    let mut names = backend.keyspace_names();
    names.sort();
    assert_eq!(names, ["tenant-1", "tenant-2"]);

    backend.drop_keyspace("tenant-1")?;
    assert!(matches!(
        doomed.get("/k").await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    assert!(matches!(
        doomed.create("/x", val("v")).await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    let ended = tokio::time::timeout(Duration::from_secs(10), stream.next()).await?;
    assert!(matches!(
        ended,
        Some(Err(StoreError::KeyspaceDropped { .. }))
    ));
    assert_eq!(backend.keyspace_names(), ["tenant-2"]);

    let fresh = backend.keyspace("tenant-1")?;
    assert_eq!(fresh.get("/k").await?, None);
    assert_eq!(fresh.current_revision().await?, 1);
    assert_eq!(kept.get("/k").await?.map(|kv| kv.value), Some(val("v")));
    backend.drop_keyspace("never-existed")?;
    Ok(())
}

#[tokio::test]
async fn future_watch_is_refused() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100)?.keyspace("host")?;
    assert!(matches!(
        store.watch("", 5, None).await,
        Err(StoreError::FutureRevision {
            requested: 5,
            current: 1
        })
    ));
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
