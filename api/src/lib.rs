//! Shared types of Fabrik: the label and annotation keys every component agrees on.
//!
//! The host-side CRDs (`tenants.fabrik.dev` and friends) land here with the tenants work.

/// The label and annotation prefix reserved for Fabrik itself; tenants may not set keys under it.
pub const RESERVED_PREFIX: &str = "fabrik.dev/";
