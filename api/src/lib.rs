//! The domain core of Fabrik: the label and annotation keys every component agrees on, the
//! host-side CRD [`tenant::Tenant`] (`tenants.fabrik.dev`) with its rules
//! ([`validation`]: one verdict for the server, the CLI, the Terraform provider and the tenant
//! manager), and host naming ([`naming`]).

pub mod naming;
pub mod tenant;
pub mod validation;

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
pub const DRA_DRIVER: &str = "gpu.nvidia.com";

/// The label on the ResourceSlices Fabrik's node agents publish (whatever driver name they are
/// configured with), by which `fabrik up`'s scheduler knows the devices it hands out.
pub const LABEL_NODE_AGENT_SLICE: &str = "fabrik.dev/node-agent";

/// Pod annotation naming the GPU devices the scheduler chose, as DRA device names of the node's
/// ResourceSlice (`gpu-3`, `gpu-1-mig-4`, `gpu-2-shared-0`), comma-separated.
pub const ANNOTATION_GPU_IDS: &str = "fabrik.dev/gpu-ids";

/// Pod annotation naming the devices of the pod's ResourceClaims on its node (DRA device names,
/// comma-separated), written by the scheduler that allocated or reserved them.
pub const ANNOTATION_CLAIM_GPU_IDS: &str = "fabrik.dev/claim-gpu-ids";

/// Pod label or annotation declaring a gang: pods with the same value in one namespace are
/// placed all together or not at all.
pub const GANG: &str = "fabrik.dev/gang";

/// Pod label or annotation: how many pods the gang has (placement waits for all of them).
pub const GANG_SIZE: &str = "fabrik.dev/gang-size";

/// Prefix of the host resources of capped GPU shares the node agent publishes and enforces
/// (`fabrik.dev/shared-gpu-<MiB>mib-<pct>pct`).
pub const SHARED_GPU_PREFIX: &str = "fabrik.dev/shared-gpu-";

/// Whether a host resource name is a GPU device of some kind: a whole GPU, a MIG device, a
/// time-sliced replica or a capped share.
pub fn is_host_gpu_resource(name: &str) -> bool {
    fabrik_machinery::quota::is_gpu_resource(name) || name.starts_with(SHARED_GPU_PREFIX)
}

/// The scheduling gate the syncer puts on host pods that ask for GPUs: Fabrik's GPU queue
/// clears it when it admits the pod's workload (whatever scheduler then binds it).
pub const QUEUE_GATE: &str = "fabrik.dev/queue";

/// Host pod annotation the GPU queue writes when it admits a pod: the time (nanoseconds since
/// the epoch) and whether it was admitted within the guarantee (`guaranteed`), on borrowed GPUs
/// (`borrowed`) or as backfill on GPUs nothing else could use then (`backfill`: the first to be
/// preempted), e.g. `1764928800000000000 guaranteed`.
pub const ANNOTATION_QUEUE_ADMITTED: &str = "fabrik.dev/queue-admitted";

/// Host pod annotation the syncer writes on gated pods: when the tenant pod arrived
/// (nanoseconds since the epoch), the queue's arrival order finer than the one-second
/// `creationTimestamp`.
pub const ANNOTATION_QUEUE_ARRIVAL: &str = "fabrik.dev/queue-arrival";

/// Host pod annotation the syncer writes on gated pods: the tenant pod's `spec.priority` (from
/// the tenant's own PriorityClasses, which never reach the host). It orders the pod among its
/// own tenant's pods in the GPU queue, never among other tenants'.
pub const ANNOTATION_QUEUE_PRIORITY: &str = "fabrik.dev/queue-priority";

/// The `source.component` of the GPU queue's Events on the host.
pub const QUEUE_EVENT_SOURCE: &str = "fabrik-gpu-queue";

/// The reason of a pod condition (`DisruptionTarget`) and Event when the GPU queue reclaims
/// borrowed GPUs by preempting a pod.
pub const REASON_QUEUE_RECLAIM: &str = "PreemptedByFairShare";

/// Pod annotation read by the simulated kubelet: seconds the simulated containers take to stop
/// after SIGTERM (default 0; a value above the grace period means they are killed at its end).
pub const ANNOTATION_SIM_STOP_SECONDS: &str = "fabrik.dev/sim-stop-seconds";

/// Pod annotation read by the simulated kubelet: seconds after which the simulated containers
/// exit (the host's older name of [`sim::RUN_SECONDS`], which takes precedence).
pub const ANNOTATION_SIM_RUN_SECONDS: &str = "fabrik.dev/sim-run-seconds";

/// Pod annotations of the simulation that anyone may set, tenants included (the syncer keeps
/// them on a tenant pod's host copy; a real kubelet ignores them). Documented in the user
/// guide ("Simulated nodes").
pub mod sim {
    /// Seconds the containers run before they exit (absent: 1 s for pods that do not restart
    /// `Always`, forever for those that do).
    pub const RUN_SECONDS: &str = "sim.fabrik.dev/run-seconds";
    /// The code the containers exit with (default 0). Non-zero: `Failed` with `restartPolicy:
    /// Never`; restarted with back-off (`CrashLoopBackOff`) otherwise.
    pub const EXIT_CODE: &str = "sim.fabrik.dev/exit-code";
    /// `"false"`: the containers run but are not ready (a failing readiness probe).
    pub const READY: &str = "sim.fabrik.dev/ready";
    /// The CPU each container is reported to use (resource metrics).
    pub const CPU_USAGE: &str = "sim.fabrik.dev/cpu-usage";
    /// The memory each container is reported to use (resource metrics).
    pub const MEMORY_USAGE: &str = "sim.fabrik.dev/memory-usage";
    /// The share of its GPUs each container keeps busy, in percent (resource metrics and
    /// metering; [`gpu_utilization`]).
    pub const GPU_UTILIZATION: &str = "sim.fabrik.dev/gpu-utilization";
    /// Seconds each init container runs before it completes (default 0.5).
    pub const INIT_RUN_SECONDS: &str = "sim.fabrik.dev/init-run-seconds";
    /// How busy a pod with `annotations` says its GPUs are ([`GPU_UTILIZATION`]): a whole
    /// percent, at most 100; `None` where it says nothing readable. One reading for every
    /// place that reports it (`kubectl top`, metering).
    pub fn gpu_utilization(
        annotations: Option<&std::collections::BTreeMap<String, String>>,
    ) -> Option<u64> {
        annotations?
            .get(GPU_UTILIZATION)?
            .trim()
            .parse::<u64>()
            .ok()
            .map(|p| p.min(100))
    }

    /// All of them.
    pub const ALL: &[&str] = &[
        RUN_SECONDS,
        INIT_RUN_SECONDS,
        EXIT_CODE,
        READY,
        CPU_USAGE,
        MEMORY_USAGE,
        GPU_UTILIZATION,
    ];
}

/// Scheduler name of the GPU-aware scheduler of `fabrik up` (it also takes `default-scheduler`).
pub const SCHEDULER_NAME: &str = "fabrik-scheduler";

/// Label on every host object the syncer creates: the tenant it belongs to.
pub const LABEL_TENANT: &str = "fabrik.dev/tenant";

/// Label on every host object the syncer creates: the object's namespace inside the tenant.
pub const LABEL_NAMESPACE: &str = "fabrik.dev/namespace";

/// Annotation on host objects: the object's name inside the tenant.
pub const ANNOTATION_VIRTUAL_NAME: &str = "fabrik.dev/virtual-name";

/// Annotation on host objects: the object's namespace inside the tenant.
pub const ANNOTATION_VIRTUAL_NAMESPACE: &str = "fabrik.dev/virtual-namespace";

/// Annotation on host objects: the object's UID inside the tenant.
pub const ANNOTATION_VIRTUAL_UID: &str = "fabrik.dev/virtual-uid";

/// Annotation on host pods: the pod's service account inside the tenant (for the downward API).
pub const ANNOTATION_VIRTUAL_SERVICE_ACCOUNT: &str = "fabrik.dev/virtual-service-account";

/// Label the syncer puts on the Nodes it shows inside a tenant (copies of host nodes).
pub const LABEL_SYNCED_NODE: &str = "fabrik.dev/synced-node";

/// Prefix of the host namespace of a tenant: `fabrik-<tenant>`.
pub const HOST_NAMESPACE_PREFIX: &str = "fabrik-";

/// The extended resource tenants request GPUs with (and the one whole GPUs are on the host).
pub const RESOURCE_GPU: &str = "nvidia.com/gpu";

/// The extended resource of time-sliced (and shared) GPU replicas, as NVIDIA's device plugin
/// names them when it renames them (`renameByDefault`): never counted as a whole GPU.
pub const RESOURCE_GPU_SHARED: &str = "nvidia.com/gpu.shared";
