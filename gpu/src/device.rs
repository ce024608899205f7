//! The GPUs of a node as a backend reports them: plain data, read by the layout resolution
//! ([`crate::layout`]) and produced by the node agent's backends (NVML, simulated).

use crate::profiles::{GpuModel, Placement};

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

impl GpuInfo {
    /// GPU `index` of `model` as a plain board reports it: whole (no MIG), no NVLink peers,
    /// NUMA node 0, no PCI details. For tests and tools that need GPUs, not a particular board.
    pub fn plain(index: u32, model: &'static GpuModel) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            model,
            memory_mib: model.memory_mib,
            pci_bus_id: String::new(),
            pcie_root: None,
            numa_node: Some(0),
            nvlink_peers: Vec::new(),
            mig_enabled: false,
            mig: Vec::new(),
        }
    }
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
