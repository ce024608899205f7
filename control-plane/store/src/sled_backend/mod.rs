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

pub use backend::SledBackend;
pub use chunks::ChunkError;
pub use config::{SledConfig, DEFAULT_CACHE_BYTES, DEFAULT_HISTORY, DEFAULT_HISTORY_BYTES};
pub use disk::disk_use;
pub use keyspace::{SledStore, INITIAL_REVISION};
