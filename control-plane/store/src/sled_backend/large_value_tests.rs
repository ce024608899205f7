//! Large values on sled (issue isolation-2, item 11): values of any size round-trip through
//! every read path, rewriting a large object leaves the disk bounded, chunks live exactly as
//! long as something refers to them, and values written before chunking still read.

use std::collections::BTreeSet;
use std::error::Error;
use std::path::Path;
use std::time::Duration;

use bytes::Bytes;
use futures::StreamExt;

use super::chunks::{self, CHUNK_BYTES};
use super::codec::{self, StoredValue, ValueRef};
use super::{disk_use, SledBackend, SledConfig, SledStore};
use crate::{Event, EventKind, KeyValue, ListOptions, Revision, Store, WatchItem, WatchStream};

type TestResult = Result<(), Box<dyn Error>>;

const MIB: usize = 1024 * 1024;

/// A value of `len` bytes, distinct for each `seed` and along its length.
fn value(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i / 7 % 251) as u8 ^ seed.wrapping_mul(31))
        .collect::<Vec<u8>>()
        .into()
}

fn open(path: &Path, history: u64, history_bytes: u64) -> Result<SledBackend, crate::StoreError> {
    super::reopen(SledConfig {
        history,
        history_bytes,
        ..SledConfig::new(path)
    })
}

/// The next event, failing the test after 10 s.
async fn next_event(stream: &mut WatchStream) -> Result<Event, Box<dyn Error>> {
    loop {
        let item = tokio::time::timeout(Duration::from_secs(10), stream.next()).await?;
        if let WatchItem::Event(event) = item.ok_or("watch stream ended")?? {
            return Ok(event);
        }
    }
}

/// The chunk keys the keyspace's objects and log entries refer to must be exactly the keys of
/// its chunks tree: nothing dangling, nothing left behind.
fn assert_chunks_referenced(store: &SledStore) -> TestResult {
    let ks = &store.inner;
    let mut referenced = BTreeSet::new();
    let mut add = |value: &StoredValue| {
        if let StoredValue::Chunked { revision, len } = value {
            let count = u32::try_from(len.div_ceil(CHUNK_BYTES as u64)).unwrap_or(0);
            referenced.extend((0..count).map(|index| chunks::key(*revision, index).to_vec()));
        }
    };
    for entry in ks.objects.iter() {
        let (_, bytes) = entry?;
        add(&codec::decode_object(&bytes).ok_or("object record")?.value);
    }
    for entry in ks.log.iter() {
        let (key, bytes) = entry?;
        let rev = codec::decode_u64(&key).ok_or("log key")?;
        let record = codec::decode_log(rev, &bytes).ok_or("log entry")?;
        record.value.iter().for_each(&mut add);
        record.prev.iter().for_each(|(_, prev)| add(prev));
    }
    let stored = ks
        .chunks
        .iter()
        .keys()
        .map(|key| key.map(|key| key.to_vec()))
        .collect::<Result<BTreeSet<_>, _>>()?;
    assert_eq!(
        stored.len(),
        referenced.len(),
        "chunks stored vs referenced"
    );
    assert!(
        stored == referenced,
        "the chunks stored are not those referenced"
    );
    Ok(())
}

/// The sizes around which the storage form changes, and the large ones of the issue.
const SIZES: [usize; 9] = [
    0,
    1,
    CHUNK_BYTES - 1,
    CHUNK_BYTES,
    CHUNK_BYTES + 1,
    2 * CHUNK_BYTES,
    MIB,
    3 * MIB,
    3 * MIB + 17,
];

/// Every size round-trips through create, update (to every other kind of size), delete, get,
/// list (now and at past revisions), live watch and watch replay, before and after a restart.
#[tokio::test]
async fn values_of_every_size_round_trip() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = open(dir.path(), 10_000, u64::MAX)?;
    let store = backend.keyspace("tenant")?;
    let start = store.current_revision().await?;
    let live = store.watch("/v/", start, None).await?;
    // Every change made, in order, and the state after each.
    let mut changes: Vec<(EventKind, KeyValue)> = Vec::new();
    let mut states: Vec<(Revision, Vec<KeyValue>)> = Vec::new();
    for (i, &from) in SIZES.iter().enumerate() {
        let to = SIZES[(i * 5 + 3) % SIZES.len()];
        let key = format!("/v/{i:02}");
        let created = store.create(&key, value(from, i as u8)).await?;
        assert_eq!(created.value.len(), from);
        assert_eq!(store.get(&key).await?, Some(created.clone()));
        changes.push((EventKind::Create, created));
        let updated = store.update(&key, value(to, i as u8 + 100), None).await?;
        assert_eq!(updated.value, value(to, i as u8 + 100));
        assert_eq!(store.get(&key).await?, Some(updated.clone()));
        changes.push((EventKind::Update, updated));
        if i % 3 == 0 {
            let deleted = store.delete(&key, None).await?;
            assert_eq!(store.get(&key).await?, None);
            changes.push((EventKind::Delete, deleted));
        }
        let listed = store.list(ListOptions::default()).await?;
        states.push((listed.revision, listed.items));
        assert_chunks_referenced(&store)?;
    }

    let check = |store: SledStore, live: Option<WatchStream>| {
        let (changes, states) = (changes.clone(), states.clone());
        async move {
            let replay = store.watch("/v/", start, None).await?;
            let streams = live.into_iter().chain([replay]);
            for mut stream in streams {
                let mut prev_of = std::collections::HashMap::new();
                for (kind, kv) in &changes {
                    let event = next_event(&mut stream).await?;
                    assert_eq!((event.kind, &event.kv), (*kind, kv));
                    assert_eq!(event.prev.as_ref(), prev_of.get(&kv.key));
                    if *kind == EventKind::Delete {
                        prev_of.remove(&kv.key);
                    } else {
                        prev_of.insert(kv.key.clone(), kv.clone());
                    }
                }
            }
            for (revision, items) in &states {
                let opts = ListOptions {
                    revision: Some(*revision),
                    ..ListOptions::default()
                };
                assert_eq!(&store.list(opts).await?.items, items);
            }
            let paged = store
                .list(ListOptions {
                    limit: Some(2),
                    ..ListOptions::default()
                })
                .await?;
            assert_eq!(paged.items.len(), 2);
            Ok::<_, Box<dyn Error>>(())
        }
    };
    check(store.clone(), Some(live)).await?;
    let usage = store.usage().await?;
    let history = store.history_bytes();
    drop((store, backend));

    let backend = open(dir.path(), 10_000, u64::MAX)?;
    let store = backend.keyspace("tenant")?;
    assert_eq!(
        store.usage().await?,
        usage,
        "logical usage survives a restart"
    );
    assert_eq!(store.history_bytes(), history);
    check(store.clone(), None).await?;
    assert_chunks_referenced(&store)?;
    Ok(())
}

/// The quota counts a large value at its logical size, as before chunking.
#[tokio::test]
async fn usage_counts_logical_sizes() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100, u64::MAX)?.keyspace("tenant")?;
    store.create("/big", value(3 * MIB, 1)).await?;
    store.create("/small", value(10, 1)).await?;
    let usage = store.usage().await?;
    assert_eq!(usage.objects, 2);
    assert_eq!(
        usage.bytes,
        (3 * MIB + 10 + "/big".len() + "/small".len()) as u64
    );
    // History counts each entry as if its values were inline: a create holds its value.
    let entries =
        codec::entry_len(4, Some(3 * MIB as u64), None) + codec::entry_len(6, Some(10), None);
    assert_eq!(store.history_bytes(), entries);
    Ok(())
}

/// The disk-growth test. A 1 MiB object written 30 times with a 4 MiB history took 95 MiB of
/// disk before chunking (sled kept replaced values' blob files; 173 MiB with the default
/// 64 MiB history), 15 MiB with 8 KiB chunks; the bound is 24 MiB.
#[tokio::test]
async fn rewriting_a_large_object_keeps_the_disk_bounded() -> TestResult {
    let dir = tempfile::tempdir()?;
    let backend = open(dir.path(), 10_000, 4 * MIB as u64)?;
    let store = backend.keyspace("tenant")?;
    store.create("/crd/big", value(MIB, 0)).await?;
    for i in 1..30u8 {
        store.update("/crd/big", value(MIB, i), None).await?;
    }
    drop((store, backend));
    let used = disk_use(dir.path())?;
    println!(
        "disk use after 30 writes of 1 MiB: {:.1} MiB",
        used as f64 / MIB as f64
    );
    assert!(
        used < 24 * MIB as u64,
        "the store grew to {used} bytes for a 1 MiB object"
    );
    Ok(())
}

/// Chunks are removed with the last reference to their value: replacing a value keeps it for
/// the history, compacting (by revisions or by bytes) and deleting free it.
#[tokio::test]
async fn compaction_and_deletion_remove_chunks() -> TestResult {
    let dir = tempfile::tempdir()?;
    let per_mib = MIB.div_ceil(CHUNK_BYTES);
    let store = open(dir.path(), 3, u64::MAX)?.keyspace("tenant")?;
    let chunk_count = |store: &SledStore| store.inner.chunks.len();

    store.create("/big", value(MIB, 0)).await?;
    assert_eq!(
        chunk_count(&store),
        per_mib,
        "one copy for the object and its log entry"
    );
    store.update("/big", value(MIB, 1), None).await?;
    assert_eq!(
        chunk_count(&store),
        2 * per_mib,
        "the old value is still in the history"
    );
    for i in 2..10 {
        store.update("/big", value(MIB, i), None).await?;
        assert_chunks_referenced(&store)?;
    }
    // Three revisions of history: the current value and the three before it.
    assert_eq!(chunk_count(&store), 4 * per_mib);
    store.delete("/big", None).await?;
    assert_chunks_referenced(&store)?;
    for i in 0..4 {
        store.create(&format!("/small/{i}"), value(10, 0)).await?;
    }
    assert_eq!(chunk_count(&store), 0, "deleted and compacted away");
    assert_chunks_referenced(&store)?;

    // The byte bound: a 3 MiB history keeps one update of a 1 MiB object (2 MiB) at a time.
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 10_000, 3 * MIB as u64)?.keyspace("tenant")?;
    store.create("/big", value(MIB, 0)).await?;
    for i in 1..20 {
        store.update("/big", value(MIB, i), None).await?;
        assert_chunks_referenced(&store)?;
        assert!(
            chunk_count(&store) <= 3 * per_mib,
            "{}",
            chunk_count(&store)
        );
    }
    Ok(())
}

/// A large value written before chunking (inline in its object record and log entry) still
/// reads, updates and deletes, and the keyspace's usage is recounted from such records.
#[tokio::test]
async fn values_written_before_chunking_still_read() -> TestResult {
    let dir = tempfile::tempdir()?;
    let old = value(MIB, 7);
    {
        let backend = open(dir.path(), 100, u64::MAX)?;
        let store = backend.keyspace("tenant")?;
        let ks = &store.inner;
        // What the first format wrote for a create of "/old" at revision 2.
        let record = codec::encode_object(2, 2, ValueRef::Inline(&old));
        let entry = codec::encode_log(&codec::LogEntry {
            kind: EventKind::Create,
            create_revision: 2,
            key: "/old",
            value: Some(ValueRef::Inline(&old)),
            prev: None,
        })
        .ok_or("encode")?;
        assert_eq!(entry.first(), Some(&1), "first-format entry");
        ks.objects.insert("/old", record)?;
        ks.log.insert(codec::revision_key(2), entry)?;
        ks.meta.insert(codec::META_CURRENT, &2u64.to_be_bytes())?;
        ks.meta.remove(codec::META_USAGE)?;
        ks.meta.flush()?;
    }
    let backend = open(dir.path(), 100, u64::MAX)?;
    let store = backend.keyspace("tenant")?;
    assert_eq!(store.usage().await?.bytes, (MIB + 4) as u64, "recounted");
    let got = store.get("/old").await?.ok_or("old value lost")?;
    assert_eq!((got.value.clone(), got.mod_revision), (old.clone(), 2));
    assert_eq!(store.list(ListOptions::default()).await?.items, vec![got]);
    let mut stream = store.watch("", 1, None).await?;
    assert_eq!(next_event(&mut stream).await?.kv.value, old);

    let new = value(MIB, 8);
    store.update("/old", new.clone(), None).await?;
    let event = next_event(&mut stream).await?;
    assert_eq!(event.kv.value, new);
    assert_eq!(event.prev.map(|p| p.value), Some(old.clone()));
    let at_2 = ListOptions {
        revision: Some(2),
        ..ListOptions::default()
    };
    assert_eq!(store.list(at_2).await?.items[0].value, old);
    store.delete("/old", None).await?;
    assert_eq!(next_event(&mut stream).await?.kv.value, new);
    assert_chunks_referenced(&store)?;
    Ok(())
}

/// A missing chunk is a typed error, not a panic, for every read path.
#[tokio::test]
async fn a_missing_chunk_is_an_error() -> TestResult {
    let dir = tempfile::tempdir()?;
    let store = open(dir.path(), 100, u64::MAX)?.keyspace("tenant")?;
    let created = store.create("/big", value(MIB, 0)).await?;
    store
        .inner
        .chunks
        .remove(chunks::key(created.mod_revision, 3))?;
    let is_corrupt =
        |r: &Result<_, crate::StoreError>| matches!(r, Err(crate::StoreError::CorruptValue { .. }));
    assert!(is_corrupt(&store.get("/big").await.map(|_| ())));
    assert!(is_corrupt(
        &store.list(ListOptions::default()).await.map(|_| ())
    ));
    let mut stream = store.watch("", 1, None).await?;
    let item = stream.next().await.ok_or("stream ended")?;
    assert!(is_corrupt(&item.map(|_| ())));
    assert!(is_corrupt(
        &store.update("/big", value(10, 0), None).await.map(|_| ())
    ));
    Ok(())
}
