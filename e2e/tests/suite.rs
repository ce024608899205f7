//! Every end-to-end test, in one test binary: each module is one area, driving the real
//! `fabrik` binaries with real clients. Run one area with `cargo nextest run -p e2e --test suite
//! queue::` (or `cargo test -p e2e --test suite queue::`).

mod aggregation;
mod apiservices;
mod apply;
mod auth;
mod autoscaling;
mod bad_input;
mod chart;
mod client;
mod crd;
mod day_one;
mod disruption;
mod dra;
mod extension_charts;
mod gangs;
mod gateway;
mod gpu_kinds;
mod ha;
mod helm;
mod isolation_limits;
mod isolation_naming;
mod isolation_quota;
mod isolation_sync;
mod kubectl;
mod login;
mod oidc_auth;
mod placement;
mod pod_logs;
mod queue;
mod real_host;
mod serve;
mod sim_lifecycle;
mod tenant_dns;
mod tenant_ingress;
mod tenant_quota;
mod tenant_usage;
mod tenant_workloads;
mod tenants;
mod webhooks;
mod workload_chart;
