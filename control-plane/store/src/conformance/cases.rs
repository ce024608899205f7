//! The behaviour cases every backend must pass, generic over a [`Harness`]: write semantics,
//! compare-and-swap under concurrency, lists at revisions, watches, compaction, restarts and
//! keyspaces.
//!
//! Revisions: every case checks that revisions strictly increase and that a write's revision
//! is the keyspace's current revision right after it (each case is the only writer of its
//! backend). Exact values (first write at 2, one per write) are checked for dense backends.

use std::collections::HashSet;
use std::time::Duration;

use super::{next_event, next_item, val, Harness, TestResult};
use crate::{
    EventKind, ListOptions, Revision, StorageLimits, StorageUsage, Store, StoreError, WatchItem,
};

pub(crate) async fn create_get_update_delete<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
    let base = store.current_revision().await?;
    assert!(base >= 1, "no revision 0");
    if H::DENSE {
        assert_eq!(base, 1);
    }
    assert_eq!(store.get("/a").await?, None);

    let created = store.create("/a", val("1")).await?;
    assert_eq!(created.create_revision, created.mod_revision);
    assert!(created.mod_revision > base);
    if H::DENSE {
        assert_eq!(created.mod_revision, 2);
    }
    assert!(matches!(
        store.create("/a", val("x")).await,
        Err(StoreError::AlreadyExists { .. })
    ));
    assert_eq!(
        store.current_revision().await?,
        created.mod_revision,
        "failed write takes no revision"
    );
    assert_eq!(store.get("/a").await?, Some(created.clone()));

    let updated = store.update("/a", val("2"), None).await?;
    assert_eq!(updated.create_revision, created.create_revision);
    assert_eq!(updated.mod_revision, created.mod_revision + 1);
    assert_eq!(updated.value, val("2"));
    assert_eq!(store.get("/a").await?, Some(updated.clone()));
    assert!(matches!(
        store.update("/missing", val("2"), None).await,
        Err(StoreError::NotFound { .. })
    ));

    let deleted = store.delete("/a", None).await?;
    assert_eq!(deleted.create_revision, created.create_revision);
    assert_eq!(deleted.mod_revision, updated.mod_revision + 1);
    assert_eq!(deleted.value, val("2"));
    assert_eq!(store.get("/a").await?, None);
    assert!(matches!(
        store.delete("/a", None).await,
        Err(StoreError::NotFound { .. })
    ));

    let again = store.create("/a", val("3")).await?;
    assert_eq!(
        (again.create_revision, again.mod_revision),
        (deleted.mod_revision + 1, deleted.mod_revision + 1)
    );
    assert_eq!(store.current_revision().await?, again.mod_revision);
    Ok(())
}

pub(crate) async fn compare_and_swap<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
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
    assert!(matches!(
        store
            .update("/gone", val("1"), Some(first.mod_revision))
            .await,
        Err(StoreError::NotFound { .. })
    ));
    assert_eq!(store.get("/k").await?.map(|kv| kv.value), Some(val("2")));
    let deleted = store.delete("/k", Some(second.mod_revision)).await?;
    assert_eq!(deleted.value, val("2"));
    assert_eq!(store.get("/k").await?, None);
    Ok(())
}

pub(crate) async fn concurrent_cas_increments_lose_nothing<H: Harness>() -> TestResult {
    const WRITERS: u64 = 16;
    const INCREMENTS: u64 = 25;
    let h = H::open(10_000).await?;
    let store = h.keyspace("host").await?;
    let created = store.create("/counter", val("0")).await?;
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
            Ok::<_, super::BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let counter = store.get("/counter").await?.ok_or("counter missing")?;
    assert_eq!(counter.value, val(&(WRITERS * INCREMENTS).to_string()));
    assert_eq!(
        store.current_revision().await?,
        created.mod_revision + WRITERS * INCREMENTS,
        "one revision per successful write, none for a conflict"
    );
    Ok(())
}

/// A list larger than one gRPC message (etcd's client refuses responses over 4 MiB): every
/// item comes back, in order, at one revision, with a limit spanning several internal pages.
pub(crate) async fn large_lists_come_back_whole<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
    // 1,200 objects of 5 KiB: 6 MiB, more than two internal pages of keys.
    let body = "x".repeat(5 * 1024);
    for i in 0..1200 {
        store
            .create(&format!("/big/{i:05}"), val(&format!("{i}{body}")))
            .await?;
    }
    let all = store
        .list(ListOptions {
            prefix: "/big/".to_owned(),
            ..ListOptions::default()
        })
        .await?;
    assert_eq!(all.items.len(), 1200);
    assert_eq!(all.remaining, 0);
    assert!(all
        .items
        .iter()
        .enumerate()
        .all(|(i, kv)| kv.key == format!("/big/{i:05}")));
    assert_eq!(all.revision, store.current_revision().await?);
    let some = store
        .list(ListOptions {
            prefix: "/big/".to_owned(),
            start_after: Some("/big/00099".to_owned()),
            limit: Some(700),
            revision: None,
        })
        .await?;
    assert_eq!(some.items.len(), 700);
    assert_eq!(
        some.items.first().map(|kv| kv.key.as_str()),
        Some("/big/00100")
    );
    assert_eq!(some.remaining, 400);
    Ok(())
}

pub(crate) async fn list_prefix_pagination<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
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
    assert_eq!(
        first.items.first().map(|kv| kv.value.clone()),
        Some(val("/a/1"))
    );

    let second = store.list(page(Some("/a/2"), Some(2))).await?;
    let keys: Vec<_> = second.items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/a/3", "/a/4"]);
    assert_eq!(second.remaining, 1);

    let last = store.list(page(Some("/a/4"), Some(2))).await?;
    assert_eq!(last.items.len(), 1);
    assert_eq!(last.remaining, 0);

    let past_the_end = store.list(page(Some("/b/"), None)).await?;
    assert!(past_the_end.items.is_empty());
    assert_eq!(past_the_end.remaining, 0);

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

pub(crate) async fn list_at_older_revision_while_writing<H: Harness>() -> TestResult {
    let h = H::open(10_000).await?;
    let store = h.keyspace("host").await?;
    let a = store.create("/p/a", val("a1")).await?;
    let b = store.create("/p/b", val("b1")).await?;
    let at = store.current_revision().await?;
    assert_eq!(at, b.mod_revision);
    store.update("/p/a", val("a2"), None).await?;
    store.delete("/p/b", None).await?;
    store.create("/p/c", val("c1")).await?;

    let writer = {
        let store = store.clone();
        tokio::spawn(async move {
            for i in 0..100 {
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
        assert_eq!(
            got,
            [
                ("/p/a", val("a1"), a.mod_revision),
                ("/p/b", val("b1"), b.mod_revision)
            ]
        );
        assert_eq!(old.remaining, 0);
        rounds += 1;
        tokio::task::yield_now().await;
    }
    writer.await??;

    let now = store
        .list(ListOptions {
            prefix: "/p/".to_owned(),
            ..ListOptions::default()
        })
        .await?;
    assert_eq!(now.items.len(), 102, "a, c and 100 w keys");
    assert!(now.items.iter().all(|kv| kv.key != "/p/b"));

    let current = store.current_revision().await?;
    match store
        .list(ListOptions {
            revision: Some(current + 1),
            ..ListOptions::default()
        })
        .await
    {
        Err(StoreError::FutureRevision {
            requested,
            current: reported,
        }) => {
            assert_eq!((requested, reported), (current + 1, current));
        }
        other => return Err(format!("expected FutureRevision, got {other:?}").into()),
    }
    Ok(())
}

pub(crate) async fn watch_from_mid_stream_is_exactly_once_in_order<H: Harness>() -> TestResult {
    let h = H::open(10_000).await?;
    let store = h.keyspace("host").await?;
    let mut created: Vec<Revision> = Vec::new();
    for i in 0..20 {
        created.push(
            store
                .create(&format!("/w/{i}"), val("x"))
                .await?
                .mod_revision,
        );
    }
    // Start after the 10th create: the last 10 creates are history.
    let start = created[9];
    let last_create = created[19];
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
        if rev <= last_create {
            assert_eq!(event.kind, EventKind::Create);
            assert!(event.prev.is_none());
        } else if event.kind == EventKind::Update {
            assert_eq!(event.kv.value, val("y"));
            assert!(event.prev.is_some(), "updates carry the previous value");
        }
        last = rev;
        if rev == end {
            assert_eq!(event.kind, EventKind::Delete);
            assert_eq!(event.kv.key, "/w/0");
            assert_eq!(event.kv.mod_revision, end);
            assert_eq!(event.kv.value, val("y"), "a delete carries the last value");
            assert_eq!(event.prev.map(|p| p.value), Some(val("y")));
            break;
        }
    }
    // 10 replayed creates, 100 updates and the delete.
    assert_eq!(seen.len(), 10 + 100 + 1);
    Ok(())
}

pub(crate) async fn watch_follows_live_changes<H: Harness>() -> TestResult {
    let h = H::open(10_000).await?;
    let store = h.keyspace("host").await?;
    let start = store.current_revision().await?;
    let mut watchers = Vec::new();
    for _ in 0..4 {
        watchers.push(store.watch("/live/", start, None).await?);
    }
    let mut expected = Vec::new();
    for i in 0..30 {
        let kv = store.create(&format!("/live/{i:02}"), val("v")).await?;
        store.create(&format!("/dead/{i:02}"), val("v")).await?;
        expected.push((kv.key, kv.mod_revision));
    }
    for stream in &mut watchers {
        for (key, rev) in &expected {
            let event = next_event(stream).await?;
            assert_eq!((&event.kv.key, event.revision()), (key, *rev));
            assert_eq!(event.kind, EventKind::Create);
        }
    }
    Ok(())
}

pub(crate) async fn progress_reports_the_cursor<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
    let start = store.current_revision().await?;
    store.create("/a", val("1")).await?;
    store.create("/b", val("1")).await?;
    let current = store.current_revision().await?;
    let mut stream = store
        .watch("/a", start, Some(Duration::from_millis(20)))
        .await?;
    assert_eq!(next_event(&mut stream).await?.kv.key, "/a");
    match next_item(&mut stream).await? {
        WatchItem::Progress(rev) => assert_eq!(rev, current),
        WatchItem::Event(event) => return Err(format!("unexpected {event:?}").into()),
    }
    // Progress follows writes outside the prefix too.
    let later = store.create("/c", val("1")).await?;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match next_item(&mut stream).await? {
            WatchItem::Progress(rev) if rev >= later.mod_revision => break,
            WatchItem::Progress(_) => {}
            WatchItem::Event(event) => return Err(format!("unexpected {event:?}").into()),
        }
        if tokio::time::Instant::now() > deadline {
            return Err("progress never reached the latest revision".into());
        }
    }
    Ok(())
}

pub(crate) async fn compacted_revisions_are_refused<H: Harness>() -> TestResult {
    let h = H::open(5).await?;
    let store = h.keyspace("host").await?;
    let first = store.create("/c/0", val("v")).await?;
    for i in 1..20 {
        store.create(&format!("/c/{i}"), val("v")).await?;
    }
    let current = store.current_revision().await?;
    if H::DENSE {
        assert_eq!(current, 21);
    }
    h.compact_keep(&store, 5).await?;
    let compacted = store.compacted_revision().await?;
    assert_eq!(compacted, current - 5);
    match store.watch("/c/", first.mod_revision, None).await {
        Err(StoreError::Compacted {
            requested,
            compacted: oldest,
        }) => {
            assert_eq!(requested, first.mod_revision);
            assert_eq!(oldest, compacted);
        }
        Err(other) => return Err(other.into()),
        Ok(_) => return Err("watch from a compacted revision must fail".into()),
    }
    match store
        .list(ListOptions {
            revision: Some(compacted - 1),
            ..ListOptions::default()
        })
        .await
    {
        Err(StoreError::Compacted { requested, .. }) => assert_eq!(requested, compacted - 1),
        other => return Err(format!("expected Compacted, got {other:?}").into()),
    }
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

pub(crate) async fn restart_keeps_data_revision_and_history<H: Harness>() -> TestResult {
    let mut h = H::open(100).await?;
    let (before, mid) = {
        let store = h.keyspace("host").await?;
        store.create("/a", val("1")).await?;
        let mid = store.current_revision().await?;
        store.update("/a", val("2"), None).await?;
        store.create("/b", val("1")).await?;
        store.delete("/b", None).await?;
        (store.current_revision().await?, mid)
    };
    h.restart().await?;
    let store = h.keyspace("host").await?;
    let after_restart = store.current_revision().await?;
    assert!(after_restart >= before);
    if H::DENSE {
        assert_eq!(after_restart, before);
    }
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
    assert!(
        next.mod_revision > after_restart,
        "revisions are never reused"
    );
    if H::DENSE {
        assert_eq!(next.mod_revision, before + 1);
    }
    Ok(())
}

pub(crate) async fn keyspaces_are_isolated<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let a = h.keyspace("a").await?;
    let b = h.keyspace("b").await?;
    let b_start = b.current_revision().await?;
    let mut b_watch = b
        .watch("", b_start, Some(Duration::from_millis(20)))
        .await?;
    a.create("/k", val("from a")).await?;
    let a_last = a.create("/k2", val("from a")).await?;
    assert_eq!(b.get("/k").await?, None);
    assert!(b.list(ListOptions::default()).await?.items.is_empty());
    let b_now = b.current_revision().await?;
    if H::DENSE {
        assert_eq!(b_now, 1, "own revision counter");
    } else {
        assert_eq!(b_now, a_last.mod_revision, "one etcd revision counter");
    }
    match next_item(&mut b_watch).await? {
        WatchItem::Progress(rev) => assert!(rev >= b_start),
        WatchItem::Event(event) => return Err(format!("b saw a's write: {event:?}").into()),
    }
    let in_b = b.create("/k", val("from b")).await?;
    assert!(in_b.mod_revision > b_now);
    if H::DENSE {
        assert_eq!(in_b.mod_revision, 2, "own revision counter");
    }
    assert_eq!(next_event(&mut b_watch).await?.kv.key, "/k");
    assert_eq!(a.get("/k").await?.map(|kv| kv.value), Some(val("from a")));
    // A second handle for the same name sees the same data and revisions.
    let a_again = h.keyspace("a").await?;
    let k3 = a_again.create("/k3", val("v")).await?;
    assert_eq!(a.get("/k3").await?, Some(k3.clone()));
    assert_eq!(a.current_revision().await?, k3.mod_revision);
    if H::DENSE {
        assert_eq!(k3.mod_revision, 4);
    }
    Ok(())
}

pub(crate) async fn drop_keyspace_removes_everything<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let doomed = h.keyspace("tenant-1").await?;
    let kept = h.keyspace("tenant-2").await?;
    let written = doomed.create("/k", val("v")).await?;
    kept.create("/k", val("v")).await?;
    let mut stream = doomed.watch("", written.mod_revision, None).await?;
    assert_eq!(h.keyspace_names().await?, ["tenant-1", "tenant-2"]);

    h.drop_keyspace("tenant-1").await?;
    assert!(matches!(
        doomed.get("/k").await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    assert!(matches!(
        doomed.create("/x", val("v")).await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    let ended = tokio::time::timeout(
        Duration::from_secs(10),
        futures::StreamExt::next(&mut stream),
    )
    .await?;
    assert!(
        matches!(ended, Some(Err(StoreError::KeyspaceDropped { .. }))),
        "got {ended:?}"
    );
    assert_eq!(h.keyspace_names().await?, ["tenant-2"]);

    let fresh = h.keyspace("tenant-1").await?;
    assert_eq!(fresh.get("/k").await?, None);
    assert!(fresh.list(ListOptions::default()).await?.items.is_empty());
    if H::DENSE {
        assert_eq!(fresh.current_revision().await?, 1);
    }
    assert_eq!(kept.get("/k").await?.map(|kv| kv.value), Some(val("v")));
    h.drop_keyspace("never-existed").await?;
    Ok(())
}

pub(crate) async fn future_watch_is_refused<H: Harness>() -> TestResult {
    let h = H::open(100).await?;
    let store = h.keyspace("host").await?;
    let current = store.current_revision().await?;
    match store.watch("", current + 4, None).await {
        Err(StoreError::FutureRevision {
            requested,
            current: reported,
        }) => assert_eq!((requested, reported), (current + 4, current)),
        Err(other) => return Err(other.into()),
        Ok(_) => return Err("watch from the future must fail".into()),
    }
    Ok(())
}

/// The storage quota: creates and growing updates beyond a limit fail with QuotaExceeded
/// naming the limit and change nothing (no revision, no object); deletes and shrinking updates
/// always pass, also over a lowered limit; usage survives a restart.
pub(crate) async fn quota_limits_bytes_and_objects<H: Harness>() -> TestResult {
    let mut h = H::open(100).await?;
    let store = h.keyspace("tenant").await?;
    // 5 objects or 10,000 bytes of keys and values.
    store
        .set_limits(StorageLimits {
            bytes: Some(10_000),
            objects: Some(5),
        })
        .await?;
    let kib = "x".repeat(1000 - 3);
    for i in 0..5 {
        store.create(&format!("/o{i}"), val(&kib)).await?;
    }
    assert_eq!(
        store.usage().await?,
        StorageUsage {
            bytes: 5000,
            objects: 5
        }
    );
    let before = store.current_revision().await?;
    match store.create("/o5", val("small")).await {
        Err(StoreError::QuotaExceeded {
            resource,
            used,
            limit,
            ..
        }) => assert_eq!((resource, used, limit), ("objects", 5, 5)),
        other => return Err(format!("expected the objects quota, got {other:?}").into()),
    }
    assert_eq!(
        store.get("/o5").await?,
        None,
        "a refused create stores nothing"
    );
    assert_eq!(
        store.current_revision().await?,
        before,
        "and takes no revision"
    );

    // Bytes: an update may go over the limit only within the grace that lets a full
    // keyspace still mark objects for deletion; beyond it, it is refused.
    let limit = 10_000u64;
    let grace = crate::update_grace(limit);
    let beyond = "y".repeat(usize::try_from(limit + grace)? - 4000 + 1 - 3);
    match store.update("/o0", val(&beyond), None).await {
        Err(StoreError::QuotaExceeded {
            resource,
            limit: reported,
            used,
            ..
        }) => assert_eq!((resource, reported, used), ("storage", limit, 5000)),
        other => return Err(format!("expected the storage quota, got {other:?}").into()),
    }
    assert_eq!(store.get("/o0").await?.map(|kv| kv.value), Some(val(&kib)));
    store
        .update("/o0", val(&"y".repeat(5000 - 3)), None)
        .await?;
    assert_eq!(store.usage().await?.bytes, 9000);
    // Creates get no grace: with 2,000 bytes left, 2,001 do not fit.
    store.delete("/o4", None).await?;
    assert!(matches!(
        store.create("/o4", val(&"z".repeat(2001 - 3))).await,
        Err(StoreError::QuotaExceeded {
            resource: "storage",
            ..
        })
    ));
    store.create("/o4", val(&kib)).await?;

    // Lowered below the usage: growth is refused, deletes and shrinking updates pass.
    store
        .set_limits(StorageLimits {
            bytes: Some(1000),
            objects: Some(1),
        })
        .await?;
    store.update("/o1", val("tiny"), None).await?;
    store.delete("/o2", None).await?;
    assert!(matches!(
        store.update("/o1", val(&"z".repeat(70_000)), None).await,
        Err(StoreError::QuotaExceeded { .. })
    ));
    assert!(matches!(
        store.create("/o9", val("v")).await,
        Err(StoreError::QuotaExceeded {
            resource: "objects",
            ..
        })
    ));
    let expected = StorageUsage {
        bytes: 5000 + (3 + 4) + 2 * 1000,
        objects: 4,
    };
    assert_eq!(store.usage().await?, expected);

    // Unlimited again: everything fits.
    store.set_limits(StorageLimits::UNLIMITED).await?;
    store.create("/o9", val(&beyond)).await?;
    store.delete("/o9", None).await?;

    // The usage is kept across a restart (and the keyspace's limits on etcd).
    drop(store);
    h.restart().await?;
    let store = h.keyspace("tenant").await?;
    assert_eq!(store.usage().await?, expected);
    Ok(())
}

/// Concurrent writers never take a keyspace over its limits, and the usage always equals what
/// the keyspace holds.
pub(crate) async fn quota_holds_under_concurrent_writers<H: Harness>() -> TestResult {
    let h = H::open(10_000).await?;
    let store = h.keyspace("tenant").await?;
    store
        .set_limits(StorageLimits {
            bytes: Some(40_000),
            objects: Some(1000),
        })
        .await?;
    let value = "v".repeat(1000 - 6);
    let mut tasks = Vec::new();
    for writer in 0..16 {
        let store = store.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let mut stored = 0u64;
            for i in 0..10 {
                match store
                    .create(&format!("/c/{writer:02}{i}"), val(&value))
                    .await
                {
                    Ok(_) => stored += 1,
                    Err(StoreError::QuotaExceeded { .. }) => {}
                    Err(other) => return Err(other.into()),
                }
            }
            Ok::<_, super::BoxError>(stored)
        }));
    }
    let mut stored = 0;
    for task in tasks {
        stored += task.await??;
    }
    assert_eq!(stored, 40, "exactly the 40 objects of 1,000 bytes that fit");
    let all = store.list(ListOptions::default()).await?;
    let held: u64 = all
        .items
        .iter()
        .map(|kv| (kv.key.len() + kv.value.len()) as u64)
        .sum();
    assert_eq!(
        store.usage().await?,
        StorageUsage {
            bytes: held,
            objects: all.items.len() as u64
        }
    );
    assert!(held <= 40_000);
    // A full keyspace can always clean up, concurrently too.
    let mut deletes = Vec::new();
    for kv in all.items {
        let store = store.clone();
        deletes.push(tokio::spawn(
            async move { store.delete(&kv.key, None).await },
        ));
    }
    for delete in deletes {
        delete.await??;
    }
    assert_eq!(store.usage().await?, StorageUsage::default());
    Ok(())
}
