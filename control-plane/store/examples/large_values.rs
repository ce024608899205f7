//! Disk use and latency of large values on sled (issue isolation-2, item 11).
//!
//! sled 0.34 keeps the disk space of replaced values larger than about 128 KiB. The store now
//! splits large values into chunks below that size; this example measures what that buys and
//! costs. For a 1 MiB and a 3 MiB object, each in a fresh database with the default history
//! bounds (10,000 revisions, 64 MiB), it writes the object `WRITES` times (create + rewrites,
//! default 30) and prints the database directory's disk use (allocated blocks) after the
//! writes and after reopening the database, next to the store's logical figures: the object's
//! bytes and the history's bytes (which the history's byte bound caps). Then it times `ROUNDS`
//! (default 50) updates and gets of a 1 MiB value.
//!
//! Run: `cargo run -p fabrik-store --release --example large_values [WRITES] [ROUNDS]`

use std::error::Error;
use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use fabrik_store::{disk_use, SledBackend, SledConfig, Store};

const MIB: u64 = 1024 * 1024;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

/// A value of `len` bytes that differs from one write to the next.
fn value(len: u64, i: u64) -> Bytes {
    let mut bytes = vec![b'a' + (i % 26) as u8; len as usize];
    // Vary the content along the value too, so no two chunks of one write are identical.
    for (n, byte) in bytes.iter_mut().step_by(4096).enumerate() {
        *byte = (n as u64 ^ i) as u8;
    }
    Bytes::from(bytes)
}

/// Open the database at `dir` again. sled's I/O threads may still hold the previous handle's
/// file lock for a moment after it is dropped: retry for up to 5 s.
fn reopen(dir: &Path) -> Result<SledBackend, Box<dyn Error>> {
    for _ in 0..50 {
        match SledBackend::open(SledConfig::new(dir)) {
            Ok(backend) => return Ok(backend),
            Err(error) if error.to_string().contains("could not acquire lock") => {
                std::thread::sleep(Duration::from_millis(100));
            }
            Err(error) => return Err(error.into()),
        }
    }
    Ok(SledBackend::open(SledConfig::new(dir))?)
}

async fn growth(len: u64, writes: u64) -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let backend = SledBackend::open(SledConfig::new(dir.path()))?;
    let store = backend.keyspace("tenant")?;
    for i in 0..writes {
        if i == 0 {
            store.create("/crd/big", value(len, i)).await?;
        } else {
            store.update("/crd/big", value(len, i), None).await?;
        }
    }
    let after_writes = disk_use(dir.path())?;
    let blobs = dir.path().join("blobs");
    let blobs = if blobs.exists() { disk_use(&blobs)? } else { 0 };
    let history = store.history_bytes();
    drop((store, backend));
    let backend = reopen(dir.path())?;
    let store = backend.keyspace("tenant")?;
    let got = store.get("/crd/big").await?.ok_or("object lost")?;
    assert_eq!(got.value, value(len, writes - 1));
    println!(
        "{:>5} MiB object, {writes} writes: disk {:>10} after the writes, {:>10} after reopening \
         (blob files {}; object {}, history {})",
        len / MIB,
        mib(after_writes),
        mib(disk_use(dir.path())?),
        mib(blobs),
        mib(len),
        mib(history),
    );
    Ok(())
}

fn per_op(total: Duration, rounds: u64) -> String {
    format!("{:.2} ms", total.as_secs_f64() * 1000.0 / rounds as f64)
}

async fn latency(len: u64, rounds: u64) -> Result<(), Box<dyn Error>> {
    let dir = tempfile::tempdir()?;
    let backend = SledBackend::open(SledConfig::new(dir.path()))?;
    let store = backend.keyspace("tenant")?;
    store.create("/crd/big", value(len, 0)).await?;
    let (mut write, mut read) = (Duration::ZERO, Duration::ZERO);
    for i in 1..=rounds {
        let v = value(len, i);
        let start = Instant::now();
        store.update("/crd/big", v, None).await?;
        write += start.elapsed();
        let start = Instant::now();
        let got = store.get("/crd/big").await?;
        read += start.elapsed();
        assert_eq!(got.map(|kv| kv.value.len() as u64), Some(len));
    }
    println!(
        "{:>5} MiB value, {rounds} rounds: update {} (durable), get {}",
        len / MIB,
        per_op(write, rounds),
        per_op(read, rounds)
    );
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let writes: u64 = args.next().map_or(Ok(30), |a| a.parse())?;
    let rounds: u64 = args.next().map_or(Ok(50), |a| a.parse())?;
    for len in [MIB, 3 * MIB] {
        growth(len, writes.max(1)).await?;
    }
    latency(MIB, rounds.max(1)).await?;
    Ok(())
}
