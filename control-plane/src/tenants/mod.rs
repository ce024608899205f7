//! Tenants: the manager that runs them inside the control plane, and the `fabrik tenant` CLI.

pub mod cli;
pub mod manager;
