//! Shared types of Fabrik: the label and annotation keys every component agrees on.
//!
//! The host-side CRDs (`tenants.fabrik.dev` and friends) land here with the tenants work.

/// The label and annotation prefix reserved for Fabrik itself; tenants may not set keys under it.
pub const RESERVED_PREFIX: &str = "fabrik.dev/";

/// Node annotation holding the desired GPU layout of a node (YAML or JSON), set by the platform.
pub const ANNOTATION_GPU_LAYOUT: &str = "fabrik.dev/gpu-layout";

/// Node annotation where the node agent reports the layout's state (`pending` / `applied` /
/// `failed`) with a reason, as JSON.
pub const ANNOTATION_GPU_LAYOUT_STATUS: &str = "fabrik.dev/gpu-layout-status";

/// Pod annotation naming the GPU devices (GPU or MIG UUIDs, comma-separated) assigned to the
/// pod on its node; written by whoever binds the devices (device plugin, DRA driver, kubelet
/// stand-in) and read by the node agent to know which GPUs are in use.
pub const ANNOTATION_GPU_DEVICES: &str = "fabrik.dev/gpu-devices";

/// Node annotation set by the node agent when it cordoned the node itself, so that it only ever
/// uncordons nodes it cordoned.
pub const ANNOTATION_CORDONED_BY_AGENT: &str = "fabrik.dev/cordoned-by-node-agent";

/// Taint key the node agent puts on a node with an unhealthy GPU.
pub const TAINT_GPU_UNHEALTHY: &str = "fabrik.dev/gpu-unhealthy";

/// Node condition type reporting GPU health.
pub const CONDITION_GPU_HEALTHY: &str = "GPUHealthy";

/// Node condition type reporting whether the desired GPU layout is applied.
pub const CONDITION_GPU_LAYOUT: &str = "GPULayoutApplied";

/// Node label: GPU model (for example `H200-141GB`).
pub const LABEL_GPU_MODEL: &str = "fabrik.dev/gpu-model";

/// Node label: number of physical GPUs.
pub const LABEL_GPU_COUNT: &str = "fabrik.dev/gpu-count";

/// Node label: memory per physical GPU, in MiB.
pub const LABEL_GPU_MEMORY_MIB: &str = "fabrik.dev/gpu-memory-mib";

/// Node label: GPU architecture (for example `hopper`).
pub const LABEL_GPU_ARCHITECTURE: &str = "fabrik.dev/gpu-architecture";

/// Node label: the layout mode in force (`whole`, `mig`, `time-slicing`, `shared`).
pub const LABEL_GPU_LAYOUT_MODE: &str = "fabrik.dev/gpu-layout-mode";

/// Node label: number of NUMA nodes that hold GPUs.
pub const LABEL_GPU_NUMA_NODES: &str = "fabrik.dev/gpu-numa-nodes";

/// Node label: number of NVLink islands (groups of GPUs connected by NVLink).
pub const LABEL_GPU_NVLINK_ISLANDS: &str = "fabrik.dev/gpu-nvlink-islands";

/// DRA driver name under which the node agent publishes its ResourceSlices.
pub const DRA_DRIVER: &str = "gpu.fabrik.dev";
