//! The same workload on the sled and the etcd backend, side by side, with the etcd/sled ratio.
//!
//! Workload (one keyspace, 1 KiB values): `CREATES` creates by 16 concurrent writers, as many
//! gets by 16 concurrent readers, `LISTS` full lists in pages of 500, and a watch fan-out:
//! `WATCHERS` watchers on one prefix, `FANOUT_WRITES` updates, timed until every watcher has
//! seen every update. sled runs in a temporary directory; etcd is a one-member cluster on
//! loopback with its data in a temporary directory (started by the bench, so `etcd` must be
//! installed: scripts/install-test-deps.sh).
//!
//! Run: `cargo bench -p fabrik-store --bench store_compare` (optional arguments: CREATES
//! WATCHERS FANOUT_WRITES).

use std::error::Error;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fabrik_store::local_etcd::LocalEtcd;
use fabrik_store::{
    EtcdBackend, EtcdConfig, ListOptions, SledBackend, SledConfig, Store, WatchItem,
};
use futures::StreamExt;

type BoxError = Box<dyn Error + Send + Sync>;

const CONCURRENCY: usize = 16;
const LISTS: usize = 20;
const PAGE: usize = 500;

/// Workload size.
#[derive(Clone, Copy)]
struct Sizes {
    creates: usize,
    watchers: usize,
    fanout_writes: usize,
}

/// Seconds taken by each phase.
struct Timings {
    creates: Duration,
    gets: Duration,
    lists: Duration,
    fanout: Duration,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let mut args = std::env::args().skip(1).filter(|a| !a.starts_with("--"));
    let sizes = Sizes {
        creates: args.next().map_or(Ok(2000), |a| a.parse())?,
        watchers: args.next().map_or(Ok(50), |a| a.parse())?,
        fanout_writes: args.next().map_or(Ok(200), |a| a.parse())?,
    };

    let dir = tempfile::tempdir()?;
    let sled = SledBackend::open(SledConfig::new(dir.path()))?.keyspace("bench")?;
    let sled_times = run(Arc::new(sled), sizes).await?;

    let etcd = LocalEtcd::start(1).await?;
    let mut config = EtcdConfig::new(etcd.endpoints());
    config.compaction_interval = None;
    let etcd_store = EtcdBackend::connect(config)
        .await?
        .keyspace("bench")
        .await?;
    let etcd_times = run(Arc::new(etcd_store), sizes).await?;

    println!(
        "store_compare: {} creates/gets ({CONCURRENCY} concurrent), {LISTS} lists of {} keys \
         (pages of {PAGE}), {} watchers x {} updates; 1 KiB values",
        sizes.creates, sizes.creates, sizes.watchers, sizes.fanout_writes
    );
    println!(
        "{:<22} {:>14} {:>14} {:>12}",
        "phase", "sled", "etcd", "etcd/sled"
    );
    let rows = [
        (
            "creates",
            sled_times.creates,
            etcd_times.creates,
            sizes.creates,
            "op/s",
        ),
        (
            "gets",
            sled_times.gets,
            etcd_times.gets,
            sizes.creates,
            "op/s",
        ),
        ("lists", sled_times.lists, etcd_times.lists, LISTS, "list/s"),
        (
            "watch fan-out",
            sled_times.fanout,
            etcd_times.fanout,
            sizes.watchers * sizes.fanout_writes,
            "ev/s",
        ),
    ];
    for (name, sled, etcd, ops, unit) in rows {
        let rate = |d: Duration| ops as f64 / d.as_secs_f64();
        println!(
            "{:<22} {:>9.0} {unit:<4} {:>9.0} {unit:<4} {:>11.1}x",
            name,
            rate(sled),
            rate(etcd),
            etcd.as_secs_f64() / sled.as_secs_f64()
        );
    }
    println!("(etcd/sled = time on etcd / time on sled; above 1 means etcd is slower)");
    Ok(())
}

/// Run the workload on `store`.
async fn run(store: Arc<dyn Store>, sizes: Sizes) -> Result<Timings, BoxError> {
    let value = Bytes::from(vec![b'x'; 1024]);

    let started = Instant::now();
    parallel(&store, sizes.creates, {
        let value = value.clone();
        move |store, i| {
            let value = value.clone();
            async move {
                store.create(&format!("/bench/{i:08}"), value).await?;
                Ok(())
            }
        }
    })
    .await?;
    let creates = started.elapsed();

    let started = Instant::now();
    let total = sizes.creates;
    parallel(&store, total, move |store, i| async move {
        let key = format!("/bench/{:08}", (i * 7919) % total);
        store.get(&key).await?.ok_or("missing key")?;
        Ok(())
    })
    .await?;
    let gets = started.elapsed();

    let started = Instant::now();
    for _ in 0..LISTS {
        let mut start_after = None;
        let mut seen = 0;
        loop {
            let page = store
                .list(ListOptions {
                    prefix: "/bench/".to_owned(),
                    start_after: start_after.take(),
                    limit: Some(PAGE),
                    revision: None,
                })
                .await?;
            seen += page.items.len();
            start_after = page.items.last().map(|kv| kv.key.clone());
            if page.remaining == 0 {
                break;
            }
        }
        if seen != sizes.creates {
            return Err(format!("listed {seen} of {} keys", sizes.creates).into());
        }
    }
    let lists = started.elapsed();

    store.create("/fan/key", value.clone()).await?;
    let from = store.current_revision().await?;
    let mut watchers = Vec::new();
    for _ in 0..sizes.watchers {
        let mut stream = store.watch("/fan/", from, None).await?;
        let expected = sizes.fanout_writes;
        watchers.push(tokio::spawn(async move {
            let mut seen = 0;
            while seen < expected {
                match stream.next().await {
                    Some(Ok(WatchItem::Event(_))) => seen += 1,
                    Some(Ok(WatchItem::Progress(_))) => {}
                    Some(Err(error)) => return Err::<(), BoxError>(error.into()),
                    None => return Err("watch ended".into()),
                }
            }
            Ok(())
        }));
    }
    let started = Instant::now();
    for i in 0..sizes.fanout_writes {
        store
            .update("/fan/key", Bytes::from(format!("v{i}")), None)
            .await?;
    }
    for watcher in watchers {
        watcher.await??;
    }
    let fanout = started.elapsed();
    Ok(Timings {
        creates,
        gets,
        lists,
        fanout,
    })
}

/// Run `op(store, i)` for i in 0..n on CONCURRENCY tasks.
async fn parallel<F, Fut>(store: &Arc<dyn Store>, n: usize, op: F) -> Result<(), BoxError>
where
    F: Fn(Arc<dyn Store>, usize) -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = Result<(), BoxError>> + Send,
{
    let mut tasks = Vec::new();
    for worker in 0..CONCURRENCY {
        let store = Arc::clone(store);
        let op = op.clone();
        tasks.push(tokio::spawn(async move {
            for i in (worker..n).step_by(CONCURRENCY) {
                op(Arc::clone(&store), i).await?;
            }
            Ok::<_, BoxError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}
