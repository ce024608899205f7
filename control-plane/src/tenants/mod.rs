//! Tenants: the manager that runs them inside the control plane, their usage reporting, and the
//! `fabrik tenant` CLI.

pub mod cli;
pub mod manager;
pub mod usage;
