//! The simulation that `fabrik up` and `fabrik nodes` run: simulated GPU nodes on a host API
//! server, with no GPUs and no real kubelet.
//!
//! [`start`] runs, as tasks over a `kube::Client` and until a shutdown future completes, per
//! node the real node agent ([`node_agent::agent`]) over its simulated GPU backend
//! ([`node_agent::backend::simulated`]) and a kubelet stand-in ([`kubelet`]), plus the GPU-aware
//! [`scheduler`] for a host without kube-scheduler and the publisher of the nodes' GPU-second
//! counters ([`nodes`]). Placement and metering are [`fabrik_gpu`]'s, the same code the control
//! plane uses on real hosts.
//!
//! Simulation only: nothing here runs on a real node. The kubelet stand-in executes nothing
//! (containers are simulated) and the scheduler stands in for kube-scheduler on the embedded
//! host only. Real nodes run `fabrik-node-agent` with the NVML backend beside a real kubelet.

pub mod kubelet;
pub mod nodes;
pub mod scheduler;

pub use nodes::{sim_file, start, Config, Error, Model, SimNodes};
