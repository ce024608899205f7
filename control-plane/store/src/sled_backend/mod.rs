//! The embedded sled backend of [`Store`](crate::Store): one sled database per process, one
//! independent keyspace per cluster.
//!
//! Modules: [`config`] (settings and defaults), [`backend`] (database and keyspace lifecycle),
//! [`keyspace`] (trees and the `Store` impl), [`write`] (the transactional write path),
//! [`history`] (change log and list at a revision), [`watch`] (watch streams), [`codec`]
//! (record encodings), [`chunks`] (large values split below sled's blob threshold),
//! [`group_commit`] (shared flushes).

mod backend;
mod chunks;
mod codec;
mod config;
mod disk;
mod group_commit;
mod history;
mod keyspace;
mod watch;
mod write;

#[cfg(test)]
mod large_value_tests;
#[cfg(test)]
mod tests;

/// Opens a database in tests, as a restart does: a handle just dropped may hold sled's file
/// lock until its background thread's next tick, which a loaded machine delays, so a lock
/// refusal is retried for up to 5 s.
#[cfg(test)]
fn reopen(config: SledConfig) -> crate::Result<SledBackend> {
    let mut tries = 0;
    loop {
        match SledBackend::open(config.clone()) {
            Err(e) if tries < 50 && e.to_string().contains("could not acquire lock") => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(100));
            }
            other => return other,
        }
    }
}

pub use backend::SledBackend;
pub use chunks::ChunkError;
pub use config::{SledConfig, DEFAULT_CACHE_BYTES, DEFAULT_HISTORY, DEFAULT_HISTORY_BYTES};
pub use disk::disk_use;
pub use keyspace::{SledStore, INITIAL_REVISION};
