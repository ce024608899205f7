//! The etcd backend of [`Store`](crate::Store): keyspaces under one key prefix of an etcd
//! cluster, for control planes with several replicas (the sled backend is one process's).
//!
//! Mapping: a store key `k` of keyspace `ks` is the etcd key `P/data/ks/k`; store revisions
//! are etcd revisions (one counter per etcd cluster, so a keyspace's revisions increase
//! strictly but with gaps); compare-and-swap is an etcd transaction comparing `mod_revision`;
//! lists are etcd ranges at a revision; watches are etcd watches from `after + 1`; a revision
//! etcd has compacted away is [`StoreError::Compacted`](crate::StoreError::Compacted).
//!
//! Modules: [`config`] (settings and defaults), [`client`] (connection, TLS, retries),
//! [`layout`] (keys and conversions), [`backend`] (keyspace lifecycle, compaction),
//! [`keyspace`] (the `Store` impl and reads), [`write`] (transactions), [`usage`] (storage
//! quota), [`watch`] (watch streams).

mod backend;
mod client;
mod config;
mod keyspace;
mod layout;
mod usage;
mod watch;
mod write;

pub use backend::EtcdBackend;
pub use config::{
    EtcdConfig, EtcdTls, DEFAULT_COMPACTION_INTERVAL, DEFAULT_ETCD_PREFIX, DEFAULT_RETRY_TIMEOUT,
};
pub use keyspace::EtcdStore;
