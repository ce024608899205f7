//! The Fabrik GPU node agent.
//!
//! One agent runs per GPU node. Each pass it:
//!
//! 1. reads its Node from the host API server (registering it if absent) and the GPUs through a
//!    [`backend::GpuBackend`] — [`backend::nvml`] on real nodes, [`backend::simulated`] for
//!    `fabrik up` and tests;
//! 2. folds health signals into per-GPU verdicts ([`health`]);
//! 3. reconciles the desired layout from the Node annotation `fabrik.dev/gpu-layout`
//!    ([`fabrik_gpu::layout`], [`partition`]), changing only GPUs no pod uses, persisting its
//!    progress ([`state`]);
//! 4. publishes inventory and topology — extended resources, labels, a DRA ResourceSlice
//!    ([`inventory`], [`host`]);
//! 5. remediates: taint, cordon, evict pods on bad GPUs, return the node ([`remediation`]).
//!
//! Decisions are pure functions (plan = f(desired, observed)) unit-tested without a server;
//! [`host`] and [`agent`] only carry them out. The GPU domain they decide over — MIG profile
//! tables, the layout grammar, the per-container limits of shared slices, the metering model —
//! is the pure crate `fabrik_gpu` ([`fabrik_gpu::profiles`], [`fabrik_gpu::layout`],
//! [`fabrik_gpu::sharing`], [`fabrik_gpu::metering`]); [`metering`] adds its I/O here: `/metrics`
//! and publishing each node's GPU-second counters to the host.
//!
//! The simulation `fabrik up` and `fabrik nodes` run is the crate `fabrik_sim`: the agent over
//! [`backend::simulated`] plus a kubelet stand-in per node, and a GPU-aware scheduler for the
//! embedded host. This crate stays what runs on a node; the simulated backend is here because it
//! is a [`backend::GpuBackend`] like NVML, used by `fabrik-node-agent --backend simulated` and
//! the tests.
//!
//! Tenant networks ([`network`]): per-tenant VXLAN segments through netlink, SR-IOV VFs
//! through sysfs, and the NetworkAttachmentDefinition and NetworkPolicy objects of a tenant.
//! With a segment backend ([`agent::Agent::with_network`]: [`network::NetlinkSegments`] on real
//! nodes, [`network::SimNetwork`] on simulated ones) each pass also builds the segments of the
//! tenants whose pods are bound to the node and removes the others ([`network::reconcile`]).

pub mod agent;
pub mod backend;
pub mod health;
pub mod host;
pub mod inventory;
pub mod metering;
pub mod network;
pub mod partition;
pub mod remediation;
pub mod state;
