//! GPU-second metering on a node: the model (the [`Meter`], its units and guarantees, the
//! OpenCost export and the published document) is [`fabrik_gpu::metering`]'s, re-exported here;
//! this module adds its I/O — serving `/metrics` ([`http`]) and publishing each node's counters
//! to the host as a ConfigMap ([`publish`]).

pub mod http;
pub mod publish;

pub use fabrik_gpu::metering::*;
