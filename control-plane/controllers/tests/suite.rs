//! The integration tests of this crate, in one test binary (a module per area): one link of
//! the dependencies instead of one per file.

mod common;

mod cluster_objects;
mod gateway;
mod workloads;
