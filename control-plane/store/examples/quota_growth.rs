//! Store growth under large rewrites, without and with the history's byte bound and the
//! keyspace quota (issue 12, item 11: "a 3 MiB custom object rewritten 5 times grew the store
//! by 57 MiB; 21 writes took it from 10 to 316 MiB").
//!
//! Two sled databases side by side, each with one keyspace:
//! * `unbounded`: what the store did before — history bounded only in revisions (10,000), no
//!   quota;
//! * `bounded`: the defaults now — history also bounded in bytes (64 MiB), the default tenant
//!   quota (1 GiB, 100,000 objects).
//!
//! Each gets a 3 MiB object rewritten `WRITES` times (default 100); the disk use of the
//! database directory (allocated blocks) is printed after 1, 5, 21, 50 and 100 writes. Then a
//! keyspace with a 64 MiB quota is filled with 3 MiB objects until the store refuses one.
//!
//! Run: `cargo run -p fabrik-store --release --example quota_growth [WRITES]`

use std::error::Error;

use bytes::Bytes;
use fabrik_store::{
    disk_use, SledBackend, SledConfig, SledStore, StorageLimits, Store, StoreError,
};

const MIB: u64 = 1024 * 1024;

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / MIB as f64)
}

struct Db {
    name: &'static str,
    dir: tempfile::TempDir,
    _backend: SledBackend,
    store: SledStore,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    let writes: u64 = std::env::args().nth(1).map_or(Ok(100), |a| a.parse())?;
    let mut dbs = Vec::new();
    for (name, bounded) in [("unbounded", false), ("bounded", true)] {
        let dir = tempfile::tempdir()?;
        let mut config = SledConfig::new(dir.path());
        if !bounded {
            config.history_bytes = u64::MAX;
        }
        let backend = SledBackend::open(config)?;
        let store = backend.keyspace("tenant-a")?;
        if bounded {
            store
                .set_limits(StorageLimits {
                    bytes: Some(1 << 30),
                    objects: Some(100_000),
                })
                .await?;
        }
        dbs.push(Db {
            name,
            dir,
            _backend: backend,
            store,
        });
    }
    println!("a 3 MiB object written {writes} times (create + rewrites); disk use of the store:");
    println!("{:>7} {:>22} {:>22}", "writes", dbs[0].name, dbs[1].name);
    for i in 1..=writes {
        for db in &dbs {
            let value = Bytes::from(vec![b'a' + (i % 26) as u8; 3 * MIB as usize]);
            if i == 1 {
                db.store.create("/crd/big", value).await?;
            } else {
                db.store.update("/crd/big", value, None).await?;
            }
        }
        if [1, 5, 21, 50, 100].contains(&i) || i == writes {
            let mut row = format!("{i:>7}");
            for db in &dbs {
                row += &format!(
                    " {:>10} (hist {:>7})",
                    mib(disk_use(db.dir.path())?),
                    mib(db.store.history_bytes())
                );
            }
            println!("{row}");
        }
    }

    // Quota: 3 MiB objects into a keyspace limited to 64 MiB.
    let dir = tempfile::tempdir()?;
    let backend = SledBackend::open(SledConfig::new(dir.path()))?;
    let store = backend.keyspace("tenant-b")?;
    store
        .set_limits(StorageLimits {
            bytes: Some(64 * MIB),
            objects: Some(100_000),
        })
        .await?;
    let mut stored = 0;
    let refusal = loop {
        let value = Bytes::from(vec![b'q'; 3 * MIB as usize]);
        match store.create(&format!("/crd/q{stored:03}"), value).await {
            Ok(_) => stored += 1,
            Err(error @ StoreError::QuotaExceeded { .. }) => break error,
            Err(other) => return Err(other.into()),
        }
    };
    println!(
        "64 MiB quota: {stored} objects of 3 MiB stored, then refused: {refusal}; usage {}, disk {}",
        mib(store.usage().await?.bytes),
        mib(disk_use(dir.path())?)
    );
    // A full keyspace can clean up.
    store.delete("/crd/q000", None).await?;
    println!(
        "after one delete: usage {}",
        mib(store.usage().await?.bytes)
    );
    Ok(())
}
