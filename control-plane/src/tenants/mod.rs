//! Tenants: the manager that runs them inside the control plane, the host's admission check of
//! Tenant objects, their usage reporting, and the `fabrik tenant` CLI.

pub mod admission;
pub mod cli;
pub mod manager;
pub mod usage;
