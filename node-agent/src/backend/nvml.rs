//! The real backend: NVML through nvml-wrapper, which loads `libnvidia-ml.so.1` at run time.
//!
//! On a machine without the driver, [`Nvml::init`] fails with a clear error and nothing else
//! happens. Inventory, MIG mode and health use nvml-wrapper's safe API; MIG instance create /
//! list / destroy go through `super::nvml_mig` (the crate's only unsafe code).
//!
//! Health: uncorrectable volatile ECC counts that grew since the last poll, critical XID events
//! (from an NVML event set, polled without blocking) and temperatures at or above the GPU's
//! slowdown threshold; a GPU whose temperature falls back below it reports `Recovered`.

use std::collections::HashMap;

use fabrik_gpu::profiles::{self, MigProfile, Placement};
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{
    EccCounter, MemoryError, TemperatureSensor, TemperatureThreshold,
};
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, EventSet};
use thiserror::Error;

use super::{nvml_mig, GpuBackend, GpuInfo, HealthEvent, HealthSignal, MigInstance};

/// Errors of the NVML backend.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// NVML could not be loaded or initialised (no driver, no GPU).
    #[error("cannot initialise NVML (is the NVIDIA driver installed?): {0}")]
    Init(#[source] NvmlError),
    /// An NVML call failed.
    #[error("{op}: {source}")]
    Call {
        /// What was being done.
        op: String,
        /// The cause.
        #[source]
        source: NvmlError,
    },
    /// A raw MIG call failed.
    #[error("GPU {gpu}: {source}")]
    Mig {
        /// The GPU.
        gpu: u32,
        /// The cause.
        #[source]
        source: nvml_mig::Error,
    },
    /// The GPU is not a model in the built-in table.
    #[error("GPU {gpu}: {source}")]
    Model {
        /// The GPU.
        gpu: u32,
        /// The cause.
        #[source]
        source: profiles::Error,
    },
    /// No MIG device with this UUID on the GPU.
    #[error("GPU {gpu}: no MIG device {uuid}")]
    NoSuchMig {
        /// The GPU.
        gpu: u32,
        /// The UUID asked for.
        uuid: String,
    },
}

type Result<T, E = Error> = std::result::Result<T, E>;

fn call(op: impl Into<String>) -> impl FnOnce(NvmlError) -> Error {
    let op = op.into();
    move |source| Error::Call { op, source }
}

/// The NVML backend.
pub struct Nvml {
    nvml: &'static nvml_wrapper::Nvml,
    events: Option<EventSet<'static>>,
    ecc_seen: HashMap<u32, u64>,
    hot: HashMap<u32, bool>,
}

impl Nvml {
    /// Loads NVML and registers for critical XID events on every GPU.
    pub fn init() -> Result<Nvml> {
        let nvml = nvml_wrapper::Nvml::init().map_err(Error::Init)?;
        // NVML is initialised once for the life of the process; leaking it gives the device and
        // event-set handles the `'static` lifetime they borrow from.
        let nvml: &'static nvml_wrapper::Nvml = Box::leak(Box::new(nvml));
        let mut events = nvml.create_event_set().ok();
        let count = nvml.device_count().map_err(call("device count"))?;
        for i in 0..count {
            let (Ok(d), Some(set)) = (nvml.device_by_index(i), events.take()) else {
                continue;
            };
            // A GPU that cannot deliver XID events is still used; its XIDs go unseen.
            events = d
                .register_events(EventTypes::CRITICAL_XID_ERROR, set)
                .ok()
                .or_else(|| nvml.create_event_set().ok());
        }
        Ok(Nvml {
            nvml,
            events,
            ecc_seen: HashMap::new(),
            hot: HashMap::new(),
        })
    }

    fn device(&self, gpu: u32) -> Result<Device<'static>> {
        self.nvml
            .device_by_index(gpu)
            .map_err(call(format!("GPU {gpu}")))
    }

    /// MIG devices of a GPU: (UUID, GPU-instance id).
    fn mig_devices(&self, device: &Device<'static>, gpu: u32) -> Result<Vec<(String, u32)>> {
        let mut out = Vec::new();
        let max = device.mig_device_count().unwrap_or(0);
        for i in 0..max {
            let Ok(mig) = device.mig_device_by_index(i) else {
                continue;
            };
            let uuid = mig
                .uuid()
                .map_err(call(format!("GPU {gpu} MIG {i} uuid")))?;
            let id = nvml_mig::gpu_instance_id(self.nvml.lib(), &mig)
                .map_err(|source| Error::Mig { gpu, source })?;
            out.push((uuid, id));
        }
        Ok(out)
    }

    fn gpu_info(&self, gpu: u32, by_bus: &HashMap<String, u32>) -> Result<GpuInfo> {
        let d = self.device(gpu)?;
        let name = d.name().map_err(call(format!("GPU {gpu} name")))?;
        let memory_mib = d
            .memory_info()
            .map_err(call(format!("GPU {gpu} memory")))?
            .total
            / (1024 * 1024);
        let model = profiles::model_from_product(&name, memory_mib)
            .map_err(|source| Error::Model { gpu, source })?;
        let pci = d.pci_info().map_err(call(format!("GPU {gpu} PCI info")))?;
        let mut peers = Vec::new();
        for link in 0..18 {
            let l = d.link_wrapper_for(link);
            if l.is_active().unwrap_or(false) {
                if let Ok(remote) = l.remote_pci_info() {
                    if let Some(peer) = by_bus.get(&remote.bus_id.to_ascii_lowercase()) {
                        if !peers.contains(peer) {
                            peers.push(*peer);
                        }
                    }
                }
            }
        }
        peers.sort_unstable();
        let mig_enabled = d.mig_mode().map(|m| m.current == 1).unwrap_or(false);
        let mut mig = Vec::new();
        if mig_enabled {
            let instances =
                nvml_mig::list(self.nvml.lib(), &d).map_err(|source| Error::Mig { gpu, source })?;
            for (uuid, id) in self.mig_devices(&d, gpu)? {
                let Some(gi) = instances.iter().find(|g| g.id == id) else {
                    continue;
                };
                let profile = model
                    .mig
                    .iter()
                    .find(|p| p.nvml == gi.profile)
                    .map(|p| p.name.to_string())
                    .unwrap_or_else(|| format!("{:?}", gi.profile));
                mig.push(MigInstance {
                    uuid,
                    profile,
                    placement: gi.placement,
                });
            }
        }
        Ok(GpuInfo {
            index: gpu,
            uuid: d.uuid().map_err(call(format!("GPU {gpu} uuid")))?,
            model,
            memory_mib,
            pcie_root: pcie_root(&pci.bus_id),
            pci_bus_id: pci.bus_id,
            numa_node: d.numa_node_id().ok(),
            nvlink_peers: peers,
            mig_enabled,
            mig,
        })
    }
}

/// The PCIe root complex of a device, from sysfs (`/sys/bus/pci/devices/<id>` links to
/// `/sys/devices/pci0000:00/...`). NVML writes an 8-digit domain; sysfs uses 4.
fn pcie_root(bus_id: &str) -> Option<String> {
    let lower = bus_id.to_ascii_lowercase();
    let short = lower
        .get(4..)
        .filter(|_| lower.len() > 12)
        .unwrap_or(&lower);
    let path = std::fs::canonicalize(format!("/sys/bus/pci/devices/{short}")).ok()?;
    path.components()
        .filter_map(|c| c.as_os_str().to_str())
        .find(|c| c.starts_with("pci"))
        .map(str::to_string)
}

impl GpuBackend for Nvml {
    fn name(&self) -> &'static str {
        "nvml"
    }

    fn inventory(&mut self) -> super::Result<Vec<GpuInfo>> {
        let count = self.nvml.device_count().map_err(call("device count"))?;
        let mut by_bus = HashMap::new();
        for i in 0..count {
            let bus = self.device(i)?.pci_info().map_err(call("PCI info"))?.bus_id;
            by_bus.insert(bus.to_ascii_lowercase(), i);
        }
        let mut out = Vec::new();
        for i in 0..count {
            out.push(self.gpu_info(i, &by_bus)?);
        }
        Ok(out)
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> super::Result<()> {
        let d = self.device(gpu)?;
        d.set_mig_mode(enabled)
            .map_err(call(format!("GPU {gpu} set MIG mode {enabled}")))?;
        Ok(())
    }

    fn create_mig(
        &mut self,
        gpu: u32,
        profile: &MigProfile,
        placement: Placement,
    ) -> super::Result<MigInstance> {
        let d = self.device(gpu)?;
        let id = nvml_mig::create(self.nvml.lib(), &d, profile.nvml, placement)
            .map_err(|source| Error::Mig { gpu, source })?;
        let uuid = self
            .mig_devices(&d, gpu)?
            .into_iter()
            .find(|(_, gi)| *gi == id)
            .map(|(uuid, _)| uuid)
            .unwrap_or_default();
        Ok(MigInstance {
            uuid,
            profile: profile.name.to_string(),
            placement,
        })
    }

    fn destroy_mig(&mut self, gpu: u32, uuid: &str) -> super::Result<()> {
        let d = self.device(gpu)?;
        let id = self
            .mig_devices(&d, gpu)?
            .into_iter()
            .find(|(u, _)| u == uuid)
            .map(|(_, id)| id)
            .ok_or_else(|| Error::NoSuchMig {
                gpu,
                uuid: uuid.to_string(),
            })?;
        nvml_mig::destroy(self.nvml.lib(), &d, id).map_err(|source| Error::Mig { gpu, source })?;
        Ok(())
    }

    fn utilization(&mut self) -> std::collections::BTreeMap<u32, f64> {
        let count = self.nvml.device_count().unwrap_or(0);
        (0..count)
            .filter_map(|i| {
                let rates = self.device(i).ok()?.utilization_rates().ok()?;
                Some((i, f64::from(rates.gpu.min(100)) / 100.0))
            })
            .collect()
    }

    fn poll_health(&mut self) -> super::Result<Vec<HealthEvent>> {
        let mut out = Vec::new();
        let count = self.nvml.device_count().map_err(call("device count"))?;
        let uuids: HashMap<String, u32> = (0..count)
            .filter_map(|i| Some((self.device(i).ok()?.uuid().ok()?, i)))
            .collect();
        if let Some(set) = &self.events {
            // Drain without blocking: a timeout error ends the loop.
            while let Ok(e) = set.wait(0) {
                let gpu = e.device.uuid().ok().and_then(|u| uuids.get(&u).copied());
                if let (Some(gpu), Some(XidError::Value(code))) = (gpu, e.event_data) {
                    let code = u32::try_from(code).unwrap_or(u32::MAX);
                    out.push(HealthEvent {
                        gpu,
                        signal: HealthSignal::Xid { code },
                    });
                }
            }
        }
        for gpu in 0..count {
            let d = self.device(gpu)?;
            if let Ok(n) = d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile) {
                let seen = self.ecc_seen.insert(gpu, n).unwrap_or(n);
                if n > seen {
                    out.push(HealthEvent {
                        gpu,
                        signal: HealthSignal::Ecc {
                            uncorrectable: n - seen,
                        },
                    });
                }
            }
            let (Ok(t), Ok(limit)) = (
                d.temperature(TemperatureSensor::Gpu),
                d.temperature_threshold(TemperatureThreshold::Slowdown),
            ) else {
                continue;
            };
            let was_hot = self.hot.insert(gpu, t >= limit).unwrap_or(false);
            if t >= limit && !was_hot {
                out.push(HealthEvent {
                    gpu,
                    signal: HealthSignal::Thermal { celsius: t },
                });
            } else if t < limit && was_hot {
                out.push(HealthEvent {
                    gpu,
                    signal: HealthSignal::Recovered,
                });
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_without_a_driver_is_a_clear_error() {
        // This machine has no NVIDIA driver; on one that has, init succeeds and the test only
        // checks that inventory works.
        match Nvml::init() {
            Err(e) => assert!(e.to_string().contains("cannot initialise NVML"), "{e}"),
            Ok(mut n) => {
                n.inventory().expect("inventory on a GPU machine");
            }
        }
    }
}
