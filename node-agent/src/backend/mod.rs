//! The GPU backend trait: what the agent needs from the GPUs of its node, with two
//! implementations — [`nvml`] for real GPUs and [`simulated`] for machines without them.
//!
//! Reconcilers only ever see this trait; simulation is a backend, never a branch in the real
//! path. Calls are synchronous (NVML is) and cheap; the agent calls them from a blocking-safe
//! place once per tick.

pub mod nvml;
mod nvml_mig;
pub mod simulated;

use thiserror::Error;

use crate::profiles::{GpuModel, MigProfile, Placement};

/// Errors of a backend.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The NVML backend failed.
    #[error("nvml: {0}")]
    Nvml(#[from] nvml::Error),
    /// The simulated backend failed.
    #[error("simulated GPUs: {0}")]
    Simulated(#[from] simulated::Error),
}

/// Result of a backend call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One physical GPU as the backend sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GpuInfo {
    /// Index on the node (NVML's index).
    pub index: u32,
    /// GPU UUID (`GPU-…`).
    pub uuid: String,
    /// The built-in model it maps to.
    pub model: &'static GpuModel,
    /// Memory in MiB.
    pub memory_mib: u64,
    /// PCI bus id, e.g. `00000000:17:00.0`.
    pub pci_bus_id: String,
    /// PCIe root complex, e.g. `pci0000:00`, when known.
    pub pcie_root: Option<String>,
    /// NUMA node, when known.
    pub numa_node: Option<u32>,
    /// Indexes of the GPUs this one has an active NVLink to.
    pub nvlink_peers: Vec<u32>,
    /// Whether MIG mode is enabled (current mode).
    pub mig_enabled: bool,
    /// MIG instances present (each a GPU instance with one full compute instance).
    pub mig: Vec<MigInstance>,
}

/// A MIG device: one GPU instance and the compute instance spanning it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigInstance {
    /// MIG device UUID (`MIG-…`).
    pub uuid: String,
    /// Profile name, e.g. `1g.18gb`.
    pub profile: String,
    /// Where it sits.
    pub placement: Placement,
}

/// A health signal from one GPU.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HealthSignal {
    /// Uncorrectable (double-bit) ECC errors were counted.
    Ecc {
        /// New uncorrectable errors since the last poll.
        uncorrectable: u64,
    },
    /// An XID error was reported by the driver.
    Xid {
        /// The XID code.
        code: u32,
    },
    /// The GPU reached its slowdown temperature.
    Thermal {
        /// Temperature in °C.
        celsius: u32,
    },
    /// The condition that made the GPU unhealthy is gone (GPU reset, cooled down, replaced).
    Recovered,
}

/// A health signal with the GPU it concerns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthEvent {
    /// GPU index.
    pub gpu: u32,
    /// What happened.
    pub signal: HealthSignal,
}

/// What the agent needs from the GPUs of its node.
pub trait GpuBackend: Send {
    /// Short name for logs (`nvml`, `simulated`).
    fn name(&self) -> &'static str;

    /// The GPUs now, with their MIG state.
    fn inventory(&mut self) -> Result<Vec<GpuInfo>>;

    /// Enables or disables MIG mode on a GPU. Disabling requires no MIG instances.
    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> Result<()>;

    /// Creates a GPU instance of `profile` at `placement` and one compute instance spanning it.
    fn create_mig(
        &mut self,
        gpu: u32,
        profile: &MigProfile,
        placement: Placement,
    ) -> Result<MigInstance>;

    /// Destroys the MIG device `uuid` (its compute instances, then its GPU instance).
    fn destroy_mig(&mut self, gpu: u32, uuid: &str) -> Result<()>;

    /// Health signals since the last call.
    fn poll_health(&mut self) -> Result<Vec<HealthEvent>>;

    /// GPU utilization now (0..=1) per GPU index, for metering; GPUs it cannot read are absent.
    fn utilization(&mut self) -> std::collections::BTreeMap<u32, f64> {
        std::collections::BTreeMap::new()
    }
}
