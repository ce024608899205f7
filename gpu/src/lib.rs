//! The GPU domain of Fabrik, as pure functions: the rules about GPUs that the node agent, the
//! control plane and the simulation share.
//!
//! * [`profiles`]: the built-in GPU models and their MIG profile tables, and where MIG instances
//!   fit on a GPU; [`device`]: a node's GPUs as a backend reports them.
//! * [`layout`]: the desired layout of a node's GPUs (the annotation `fabrik.dev/gpu-layout`)
//!   and its resolution against the GPUs; [`sharing`]: what a container gets for a shared slice.
//! * [`placement`]: GPU-aware placement of pods on nodes (devices, NUMA, NVLink, claims,
//!   affinity, gangs); [`queue`]: one decision of the control plane's GPU queue (fair shares,
//!   borrowing, reclaim), and [`queue::layouts`]: the GPU layouts that follow its demand.
//!   Product code: the queue controller runs both on real hosts.
//! * [`metering`]: the GPU-second metering model, its OpenCost export and the wire format of
//!   the counters nodes publish and the control plane sums.
//! * [`quantity`]: resource quantities as the placement counts them.
//!
//! What this crate must not do: any I/O. No API clients (`kube::Client`), no network, no files,
//! no tasks or timers; inputs are API objects and plain data, outputs are decisions and
//! documents. Whoever calls it (`node-agent`, `fabrik-sim`, `control-plane`) carries them out.

pub mod device;
pub mod layout;
pub mod metering;
pub mod placement;
pub mod profiles;
pub mod quantity;
pub mod queue;
pub mod sharing;
