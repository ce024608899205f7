//! etcd-only behaviour: a three-member cluster losing a member under write and watch load,
//! a keyspace dropped by another process (another backend connection), and the usage of a
//! keyspace written before usage was recorded, counted once and shared by replicas.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{etcd_connect, next_event, start_etcd, val, BoxError, TestResult};
use crate::{EventKind, ListOptions, Store, StoreError};

/// Writers keep creating keys (each with a unique value) while the leader of a three-member
/// cluster is killed: every create must succeed (the store retries through the failure), be
/// readable afterwards with its value, and reach a watcher exactly once, in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_member_cluster_survives_losing_the_leader_under_load() -> TestResult {
    const WRITERS: usize = 8;
    let mut etcd = start_etcd(3).await?;
    let backend = etcd_connect(etcd.endpoints()).await?;
    let store = backend.keyspace("host").await?;
    let start = store.current_revision().await?;
    let mut watch = store.watch("/load/", start, None).await?;

    let stopping = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let store = store.clone();
        let stopping = Arc::clone(&stopping);
        writers.push(tokio::spawn(async move {
            let mut acked = Vec::new();
            let mut last_rev = 0;
            for i in 0u64.. {
                if stopping.load(std::sync::atomic::Ordering::Acquire) {
                    break;
                }
                let key = format!("/load/{w:02}/{i:06}");
                let kv = store.create(&key, val(&format!("{key}=value"))).await?;
                assert!(kv.mod_revision > last_rev, "a writer's revisions increase");
                last_rev = kv.mod_revision;
                acked.push((key, kv.mod_revision));
            }
            Ok::<_, BoxError>(acked)
        }));
    }

    tokio::time::sleep(Duration::from_millis(700)).await;
    let leader = etcd.leader().await.ok_or("no leader found")?;
    etcd.kill(leader)?;
    let killed_at = Instant::now();
    // Keep writing well past the election (500 ms timeout) and the client's reconnects.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stopping.store(true, std::sync::atomic::Ordering::Release);

    let mut acked = BTreeMap::new();
    for writer in writers {
        for (key, rev) in writer.await?? {
            acked.insert(rev, key);
        }
    }
    let after_kill = acked.len();
    assert!(after_kill > 50, "only {after_kill} creates in 3.7 s");
    let newest = *acked.keys().next_back().ok_or("no create")?;
    assert!(killed_at.elapsed() >= Duration::from_secs(3));

    // Every acknowledged create is stored with its value, exactly once.
    let listed = store
        .list(ListOptions {
            prefix: "/load/".to_owned(),
            ..ListOptions::default()
        })
        .await?;
    assert_eq!(listed.items.len(), acked.len(), "no lost or extra keys");
    for kv in &listed.items {
        assert_eq!(acked.get(&kv.mod_revision), Some(&kv.key));
        assert_eq!(kv.value, val(&format!("{}=value", kv.key)));
    }
    // Writes acknowledged after the kill exist (the cluster kept serving).
    let post_kill = store
        .create("/load/final", val("/load/final=value"))
        .await?;
    assert!(post_kill.mod_revision > newest);

    // The watcher saw every create once, in revision order, across the failure.
    for (rev, key) in &acked {
        let event = next_event(&mut watch).await?;
        assert_eq!((event.revision(), &event.kv.key), (*rev, key));
        assert_eq!(event.kind, EventKind::Create);
    }
    assert_eq!(next_event(&mut watch).await?.kv.key, "/load/final");
    Ok(())
}

/// A drop by one backend connection is seen by another's handles: writes, revision reads and
/// watches fail with KeyspaceDropped; a re-created keyspace does not revive old handles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drop_by_another_process_is_seen() -> TestResult {
    let etcd = start_etcd(1).await?;
    let dropper = etcd_connect(etcd.endpoints()).await?;
    let other = etcd_connect(etcd.endpoints()).await?;
    let mine = dropper.keyspace("tenant").await?;
    let theirs = other.keyspace("tenant").await?;
    let written = mine.create("/k", val("v")).await?;
    assert_eq!(theirs.get("/k").await?, Some(written.clone()));
    let mut watch = theirs.watch("/", written.mod_revision, None).await?;

    dropper.drop_keyspace("tenant").await?;
    // The marker and the data are deleted by two etcd writes, seen by two watchers of one
    // stream: the data's Delete events may come first; the stream then ends with the drop.
    let ended = loop {
        let item = tokio::time::timeout(
            Duration::from_secs(10),
            futures::StreamExt::next(&mut watch),
        )
        .await?;
        match item {
            Some(Ok(crate::WatchItem::Event(e))) if e.kind == crate::EventKind::Delete => continue,
            other => break other,
        }
    };
    assert!(
        matches!(ended, Some(Err(StoreError::KeyspaceDropped { .. }))),
        "got {ended:?}"
    );
    // Re-created by the dropper: the other process's old handle still refuses to write.
    let again = dropper.keyspace("tenant").await?;
    again.create("/new", val("v")).await?;
    assert!(matches!(
        theirs.create("/x", val("v")).await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    assert!(matches!(
        theirs.current_revision().await,
        Err(StoreError::KeyspaceDropped { .. })
    ));
    // A fresh handle works and sees only the new incarnation's data.
    let fresh = other.keyspace("tenant").await?;
    assert_eq!(fresh.get("/k").await?, None);
    assert!(fresh.get("/new").await?.is_some());
    Ok(())
}

/// Compaction by the backend: the record never moves back, and a compaction beyond the
/// current revision is refused.
#[tokio::test]
async fn compaction_is_monotonic() -> TestResult {
    let etcd = start_etcd(1).await?;
    let backend = etcd_connect(etcd.endpoints()).await?;
    let store = backend.keyspace("host").await?;
    for i in 0..10 {
        store.create(&format!("/k{i}"), val("v")).await?;
    }
    let current = store.current_revision().await?;
    assert_eq!(backend.compacted_revision().await?, 1);
    assert_eq!(backend.compact(current - 2).await?, current - 2);
    assert_eq!(
        backend.compact(current - 5).await?,
        current - 2,
        "never back"
    );
    assert_eq!(store.compacted_revision().await?, current - 2);
    let far = store.current_revision().await? + 100;
    assert!(matches!(
        backend.compact(far).await,
        Err(StoreError::FutureRevision { .. })
    ));
    Ok(())
}

/// A keyspace written before usage was recorded (no counters in etcd) is counted once when
/// opened, by every replica alike, and its quota is then enforced on that count; limits set by
/// one replica hold for another.
#[tokio::test]
async fn usage_of_an_existing_keyspace_is_counted_and_shared() -> TestResult {
    let etcd = start_etcd(1).await?;
    let mut raw = etcd_client::Client::connect(etcd.endpoints(), None).await?;
    // What an older Fabrik left: the marker and two objects, no usage records.
    raw.put("/fabrik/keyspaces/old", "", None).await?;
    raw.put("/fabrik/data/old//a", "12345", None).await?;
    raw.put("/fabrik/data/old//bb", "1", None).await?;
    let one = etcd_connect(etcd.endpoints()).await?;
    let store = one.keyspace("old").await?;
    let counted = crate::StorageUsage {
        bytes: (2 + 5) + (3 + 1),
        objects: 2,
    };
    assert_eq!(store.usage().await?, counted);
    store
        .set_limits(crate::StorageLimits {
            bytes: None,
            objects: Some(3),
        })
        .await?;
    // Another replica sees the same usage and limits.
    let two = etcd_connect(etcd.endpoints()).await?;
    let other = two.keyspace("old").await?;
    assert_eq!(other.usage().await?, counted);
    other.create("/c", val("v")).await?;
    assert!(matches!(
        store.create("/d", val("v")).await,
        Err(StoreError::QuotaExceeded {
            resource: "objects",
            used: 3,
            limit: 3,
            ..
        })
    ));
    assert_eq!(store.get("/d").await?, None);
    store.delete("/a", None).await?;
    assert_eq!(
        other.usage().await?,
        crate::StorageUsage {
            bytes: (3 + 1) + (2 + 1),
            objects: 2
        }
    );
    Ok(())
}
