//! The GPU backend trait: what the agent needs from the GPUs of its node, with two
//! implementations — [`nvml`] for real GPUs and [`simulated`] for machines without them.
//!
//! Reconcilers only ever see this trait; simulation is a backend, never a branch in the real
//! path. Calls are synchronous (NVML is) and cheap; the agent calls them from a blocking-safe
//! place once per tick.

pub mod nvml;
mod nvml_mig;
pub mod simulated;

pub use fabrik_gpu::device::{GpuInfo, MigInstance};
use fabrik_gpu::profiles::{MigProfile, Placement};
use thiserror::Error;

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

    /// The node's pods now (`uuids`: device UUID → GPU index), before
    /// [`utilization`](Self::utilization) is read. Real GPUs measure how busy they are and
    /// ignore it; a simulated GPU is as busy as the pods holding it say.
    fn observe_pods(
        &mut self,
        _pods: &[k8s_openapi::api::core::v1::Pod],
        _uuids: &std::collections::BTreeMap<String, u32>,
    ) {
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// `n` whole GPUs of `model`, indexes 0.., on NUMA node 0, without links or MIG.
    pub(crate) fn gpus(model: &str, n: u32) -> Vec<GpuInfo> {
        let model = fabrik_gpu::profiles::model(model).expect("model");
        (0..n).map(|index| GpuInfo::plain(index, model)).collect()
    }
}
