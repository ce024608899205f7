//! Rough write-throughput check: N concurrent writers creating keys in one keyspace, every
//! create acknowledged only once durable (group commit).
//!
//! Run: `cargo run -p fabrik-store --release --example create_throughput [DIR] [WRITERS] [TOTAL]`
//! (DIR defaults to a fresh temporary directory; use a real disk to measure fsync cost).

use std::error::Error;
use std::time::Instant;

use bytes::Bytes;
use fabrik_store::{SledBackend, SledConfig, Store};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let mut args = std::env::args().skip(1);
    let temp = tempfile::tempdir()?;
    let dir = args
        .next()
        .map_or_else(|| temp.path().to_owned(), std::path::PathBuf::from);
    let writers: usize = args.next().map_or(Ok(16), |a| a.parse())?;
    let total: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;

    let store = SledBackend::open(SledConfig::new(&dir))?.keyspace("bench")?;
    let value = Bytes::from(vec![b'x'; 1024]);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..writers {
        let store = store.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            for i in (writer..total).step_by(writers) {
                store
                    .create(&format!("/bench/{i:08}"), value.clone())
                    .await?;
            }
            Ok::<_, fabrik_store::StoreError>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = started.elapsed();
    println!(
        "{total} durable creates with {writers} writers in {:.2?}: {:.0} creates/s (dir {})",
        elapsed,
        total as f64 / elapsed.as_secs_f64(),
        dir.display()
    );
    Ok(())
}
