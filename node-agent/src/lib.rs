//! The Fabrik GPU node agent.
//!
//! One agent runs per GPU node. Each pass it:
//!
//! 1. reads its Node from the host API server (registering it if absent) and the GPUs through a
//!    [`backend::GpuBackend`] — [`backend::nvml`] on real nodes, [`backend::simulated`] for
//!    `fabrik up` and tests;
//! 2. folds health signals into per-GPU verdicts ([`health`]);
//! 3. reconciles the desired layout from the Node annotation `fabrik.dev/gpu-layout`
//!    ([`layout`], [`partition`]), changing only GPUs no pod uses, persisting its progress
//!    ([`state`]);
//! 4. publishes inventory and topology — extended resources, labels, a DRA ResourceSlice
//!    ([`inventory`], [`host`]);
//! 5. remediates: taint, cordon, evict pods on bad GPUs, return the node ([`remediation`]).
//!
//! Decisions are pure functions (plan = f(desired, observed)) unit-tested without a server;
//! [`host`] and [`agent`] only carry them out. MIG profile tables are in [`profiles`]; the
//! per-container limits of shared slices in [`sharing`].
//!
//! For `fabrik up` (a library entry point, no GPUs needed): [`sim::start`] runs simulated GPU
//! nodes — the agent over the simulated backend plus a kubelet stand-in ([`kubelet`]) per node —
//! and the GPU-aware [`scheduler`] for the embedded host, over a `kube::Client` and until a
//! shutdown future completes. [`metering`] counts GPU-seconds per pod for `/metrics`.
//!
//! Tenant networks ([`network`]): per-tenant VXLAN segments through netlink, SR-IOV VFs
//! through sysfs, and the NetworkAttachmentDefinition and NetworkPolicy objects of a tenant.
//! With a segment backend ([`agent::Agent::with_network`]: [`network::NetlinkSegments`] on real
//! nodes, [`network::SimNetwork`] on simulated ones) each pass also builds the segments of the
//! tenants whose pods are bound to the node and removes the others ([`network::reconcile`]).
//!
//! Not here yet: serving `pods/log` and `exec` for simulated pods (see `docs/node-agent.md`).

pub mod agent;
pub mod backend;
pub mod health;
pub mod host;
pub mod inventory;
pub mod kubelet;
pub mod layout;
pub mod metering;
pub mod network;
pub mod partition;
pub mod profiles;
pub mod quantity;
pub mod remediation;
pub mod scheduler;
pub mod sharing;
pub mod sim;
pub mod state;
