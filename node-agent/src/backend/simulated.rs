//! Simulated GPUs, declared in a YAML file: models, counts, MIG capability, NVLink pairs, NUMA
//! nodes, PCIe roots, and a fault script that injects ECC / XID / thermal events at given times
//! (seconds after start) or on demand (a YAML list of faults dropped into the inject file).
//!
//! The file is checked whole before anything is simulated: unknown fields, unknown models, GPU
//! indexes out of range and faults without exactly one signal are errors that name the problem.
//! MIG state is kept in an optional state file, so that it outlives an agent restart the way a
//! real GPU's MIG configuration does.
//!
//! ```yaml
//! gpus:
//!   - model: H200-141GB
//!     count: 8
//!     numaNodes: [0, 0, 0, 0, 1, 1, 1, 1]   # optional, per GPU of this group
//!     pcieRoots: [pci0000:00, ...]          # optional, per GPU of this group
//!     migCapable: true                      # optional, defaults to the model's
//! nvlink:
//!   all: true                               # or pairs: [[0, 1], [2, 3]]
//! faults:
//!   - { afterSeconds: 30, gpu: 3, xid: 79 }
//!   - { afterSeconds: 40, gpu: 5, ecc: 2 }
//!   - { afterSeconds: 50, gpu: 1, thermal: 95 }
//!   - { afterSeconds: 90, gpu: 3, recover: true }
//! failMigOperationsAfter: 3                 # optional: the 4th MIG operation fails
//! utilization: 0.6                          # optional: every GPU's utilization, for metering
//! ```

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use fabrik_gpu::profiles::{self, GpuModel, MigProfile, Placement};
use serde::{Deserialize, Serialize};
use thiserror::Error;

use super::{GpuBackend, GpuInfo, HealthEvent, HealthSignal, MigInstance};

/// Errors of the simulated backend.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// A file could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The simulation file is not valid YAML of the expected shape.
    #[error("{path}: {source}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// The cause (with line and column).
        #[source]
        source: serde_yaml_ng::Error,
    },
    /// The simulation file parses but says something impossible.
    #[error("{path}: {message}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The MIG state file is corrupt.
    #[error("{path}: corrupt simulated MIG state: {source}")]
    State {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: serde_json::Error,
    },
    /// No GPU has this index.
    #[error("no GPU with index {0}")]
    NoSuchGpu(u32),
    /// The GPU is not MIG capable, or MIG mode is off.
    #[error("GPU {gpu}: {message}")]
    Mig {
        /// The GPU.
        gpu: u32,
        /// What is wrong.
        message: String,
    },
    /// A failure injected by `failMigOperationsAfter`.
    #[error("GPU {0}: injected MIG operation failure")]
    Injected(u32),
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// The simulation file.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SimSpec {
    /// GPU groups, indexed in order.
    pub gpus: Vec<GpuGroup>,
    /// NVLink connectivity.
    #[serde(default)]
    pub nvlink: NvLinkSpec,
    /// Scripted faults.
    #[serde(default)]
    pub faults: Vec<Fault>,
    /// When set, MIG operations after this many succeed fail (to test partial application).
    #[serde(default)]
    pub fail_mig_operations_after: Option<u32>,
    /// Utilization every GPU reports (0..=1; absent: 0), for metering.
    #[serde(default)]
    pub utilization: Option<f64>,
}

/// A group of identical GPUs.
#[derive(Clone, Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct GpuGroup {
    /// Built-in model name.
    pub model: String,
    /// How many.
    pub count: u32,
    /// NUMA node per GPU of the group.
    #[serde(default)]
    pub numa_nodes: Option<Vec<u32>>,
    /// PCIe root per GPU of the group.
    #[serde(default)]
    pub pcie_roots: Option<Vec<String>>,
    /// Overrides whether MIG is available.
    #[serde(default)]
    pub mig_capable: Option<bool>,
}

/// NVLink connectivity.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NvLinkSpec {
    /// Every GPU is linked to every other (an NVSwitch system).
    #[serde(default)]
    pub all: bool,
    /// Linked pairs.
    #[serde(default)]
    pub pairs: Vec<[u32; 2]>,
}

/// One scripted or injected fault: exactly one of `ecc`, `xid`, `thermal`, `recover`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Fault {
    /// Seconds after start; absent means at once.
    #[serde(default)]
    pub after_seconds: Option<f64>,
    /// GPU index.
    pub gpu: u32,
    /// Uncorrectable ECC errors.
    #[serde(default)]
    pub ecc: Option<u64>,
    /// XID code.
    #[serde(default)]
    pub xid: Option<u32>,
    /// Temperature in °C.
    #[serde(default)]
    pub thermal: Option<u32>,
    /// The GPU is healthy again.
    #[serde(default)]
    pub recover: Option<bool>,
}

impl Fault {
    fn signal(&self) -> std::result::Result<HealthSignal, String> {
        let signals = [
            self.ecc.map(|n| HealthSignal::Ecc { uncorrectable: n }),
            self.xid.map(|code| HealthSignal::Xid { code }),
            self.thermal
                .map(|celsius| HealthSignal::Thermal { celsius }),
            self.recover.filter(|r| *r).map(|_| HealthSignal::Recovered),
        ];
        let mut set = signals.into_iter().flatten();
        match (set.next(), set.next()) {
            (Some(s), None) => Ok(s),
            _ => Err(format!(
                "fault for GPU {} must set exactly one of ecc, xid, thermal, recover: true",
                self.gpu
            )),
        }
    }
}

/// One simulated GPU's fixed properties.
#[derive(Clone, Debug)]
struct SimGpu {
    model: &'static GpuModel,
    mig_capable: bool,
    numa_node: u32,
    pcie_root: String,
    peers: Vec<u32>,
}

/// MIG state of one GPU; persisted.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq, Eq)]
struct SimMigState {
    enabled: bool,
    instances: Vec<(String, u8, u8)>,
}

/// Parses and checks a simulation document. `path` is only used in messages.
pub fn parse(path: &Path, text: &str) -> Result<SimSpec> {
    let spec: SimSpec = serde_yaml_ng::from_str(text).map_err(|source| Error::Parse {
        path: path.to_path_buf(),
        source,
    })?;
    let invalid = |message: String| Error::Invalid {
        path: path.to_path_buf(),
        message,
    };
    if spec.gpus.is_empty() {
        return Err(invalid("gpus: at least one GPU group is required".into()));
    }
    let mut total = 0u32;
    for (i, g) in spec.gpus.iter().enumerate() {
        let model = profiles::model(&g.model).map_err(|e| invalid(format!("gpus[{i}]: {e}")))?;
        if g.count == 0 || g.count > 64 {
            return Err(invalid(format!("gpus[{i}]: count must be 1..=64")));
        }
        if g.mig_capable == Some(true) && !model.supports_mig() {
            return Err(invalid(format!(
                "gpus[{i}]: {} does not support MIG",
                model.name
            )));
        }
        let n = usize::try_from(g.count).unwrap_or(usize::MAX);
        if g.numa_nodes.as_ref().is_some_and(|v| v.len() != n) {
            return Err(invalid(format!(
                "gpus[{i}]: numaNodes needs one entry per GPU ({n})"
            )));
        }
        if g.pcie_roots.as_ref().is_some_and(|v| v.len() != n) {
            return Err(invalid(format!(
                "gpus[{i}]: pcieRoots needs one entry per GPU ({n})"
            )));
        }
        total = total.saturating_add(g.count);
    }
    if spec
        .utilization
        .is_some_and(|u| !u.is_finite() || !(0.0..=1.0).contains(&u))
    {
        return Err(invalid("utilization must be between 0 and 1".into()));
    }
    for [a, b] in &spec.nvlink.pairs {
        if *a >= total || *b >= total || a == b {
            return Err(invalid(format!(
                "nvlink.pairs: [{a}, {b}] is not a pair of distinct GPUs below {total}"
            )));
        }
    }
    for (i, f) in spec.faults.iter().enumerate() {
        check_fault(f, total).map_err(|m| invalid(format!("faults[{i}]: {m}")))?;
    }
    Ok(spec)
}

fn check_fault(f: &Fault, total: u32) -> std::result::Result<(), String> {
    if f.gpu >= total {
        return Err(format!("GPU {} does not exist (there are {total})", f.gpu));
    }
    if f.after_seconds.is_some_and(|s| !s.is_finite() || s < 0.0) {
        return Err("afterSeconds must be a non-negative number".into());
    }
    f.signal().map(|_| ())
}

/// The simulated backend.
pub struct Simulated {
    node: String,
    gpus: Vec<SimGpu>,
    mig: Vec<SimMigState>,
    script: Vec<(Duration, HealthEvent)>,
    started: Instant,
    inject_path: Option<PathBuf>,
    state_path: Option<PathBuf>,
    mig_ops_left: Option<u32>,
    utilization: f64,
    /// Per GPU index, how busy the pods holding it say it is
    /// (`sim.fabrik.dev/gpu-utilization`), where one of them says.
    busy: std::collections::BTreeMap<u32, f64>,
}

impl Simulated {
    /// Loads `sim_file` for node `node`. `state_path` keeps MIG state across restarts;
    /// `inject_path` is polled for on-demand faults.
    pub fn load(
        sim_file: &Path,
        node: &str,
        state_path: Option<PathBuf>,
        inject_path: Option<PathBuf>,
    ) -> Result<Simulated> {
        let text = std::fs::read_to_string(sim_file).map_err(|source| Error::Io {
            path: sim_file.to_path_buf(),
            source,
        })?;
        let spec = parse(sim_file, &text)?;
        let mut sim = Simulated::from_spec(&spec, node)?;
        sim.inject_path = inject_path;
        if let Some(path) = &state_path {
            sim.restore(path)?;
        }
        sim.state_path = state_path;
        Ok(sim)
    }

    /// Builds the backend from a checked spec, without files.
    pub fn from_spec(spec: &SimSpec, node: &str) -> Result<Simulated> {
        let mut gpus = Vec::new();
        for g in &spec.gpus {
            let model = profiles::model(&g.model).map_err(|e| Error::Invalid {
                path: PathBuf::new(),
                message: e.to_string(),
            })?;
            for i in 0..usize::try_from(g.count).unwrap_or(0) {
                let index = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
                let default_numa = if index < 4 { 0 } else { 1 };
                gpus.push(SimGpu {
                    model,
                    mig_capable: g.mig_capable.unwrap_or(model.supports_mig()),
                    numa_node: g
                        .numa_nodes
                        .as_ref()
                        .and_then(|v| v.get(i).copied())
                        .unwrap_or(default_numa),
                    pcie_root: g
                        .pcie_roots
                        .as_ref()
                        .and_then(|v| v.get(i).cloned())
                        .unwrap_or_else(|| format!("pci0000:{:02x}", index / 2)),
                    peers: Vec::new(),
                });
            }
        }
        let n = u32::try_from(gpus.len()).unwrap_or(u32::MAX);
        let mut links: BTreeSet<(u32, u32)> = BTreeSet::new();
        if spec.nvlink.all {
            for a in 0..n {
                for b in 0..n {
                    if a != b {
                        links.insert((a, b));
                    }
                }
            }
        }
        for [a, b] in &spec.nvlink.pairs {
            links.insert((*a, *b));
            links.insert((*b, *a));
        }
        for (a, b) in links {
            if let Some(g) = usize::try_from(a).ok().and_then(|a| gpus.get_mut(a)) {
                g.peers.push(b);
            }
        }
        let mut script = Vec::new();
        for f in &spec.faults {
            if let Ok(signal) = f.signal() {
                let at = Duration::from_secs_f64(f.after_seconds.unwrap_or(0.0).max(0.0));
                script.push((at, HealthEvent { gpu: f.gpu, signal }));
            }
        }
        script.sort_by_key(|(at, _)| *at);
        Ok(Simulated {
            node: node.to_string(),
            mig: vec![SimMigState::default(); gpus.len()],
            gpus,
            script,
            started: Instant::now(),
            inject_path: None,
            state_path: None,
            mig_ops_left: spec.fail_mig_operations_after,
            utilization: spec.utilization.unwrap_or(0.0),
            busy: std::collections::BTreeMap::new(),
        })
    }

    fn restore(&mut self, path: &Path) -> Result<()> {
        let text = match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(source) => {
                return Err(Error::Io {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        let mig: Vec<SimMigState> = serde_json::from_str(&text).map_err(|source| Error::State {
            path: path.to_path_buf(),
            source,
        })?;
        if mig.len() == self.gpus.len() {
            self.mig = mig;
        }
        Ok(())
    }

    fn persist(&self) -> Result<()> {
        let Some(path) = &self.state_path else {
            return Ok(());
        };
        let text = serde_json::to_string(&self.mig).map_err(|source| Error::State {
            path: path.clone(),
            source,
        })?;
        crate::state::write_atomically(path, text.as_bytes()).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })
    }

    /// Scripted events due at `elapsed`, removed from the script.
    pub fn due(&mut self, elapsed: Duration) -> Vec<HealthEvent> {
        let split = self.script.partition_point(|(at, _)| *at <= elapsed);
        self.script.drain(..split).map(|(_, e)| e).collect()
    }

    /// Injects faults now.
    pub fn inject(&mut self, faults: &[Fault]) -> Result<Vec<HealthEvent>> {
        let total = u32::try_from(self.gpus.len()).unwrap_or(u32::MAX);
        let mut out = Vec::new();
        for (i, f) in faults.iter().enumerate() {
            check_fault(f, total).map_err(|message| Error::Invalid {
                path: self.inject_path.clone().unwrap_or_default(),
                message: format!("[{i}]: {message}"),
            })?;
            if let Ok(signal) = f.signal() {
                out.push(HealthEvent { gpu: f.gpu, signal });
            }
        }
        Ok(out)
    }

    fn read_injected(&mut self) -> Result<Vec<HealthEvent>> {
        let Some(path) = self.inject_path.clone() else {
            return Ok(Vec::new());
        };
        let text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(source) => return Err(Error::Io { path, source }),
        };
        // Consumed either way, so that a bad file is reported once, not on every poll.
        std::fs::remove_file(&path).map_err(|source| Error::Io {
            path: path.clone(),
            source,
        })?;
        let faults: Vec<Fault> =
            serde_yaml_ng::from_str(&text).map_err(|source| Error::Parse { path, source })?;
        self.inject(&faults)
    }

    fn gpu(&self, gpu: u32) -> Result<(&SimGpu, usize)> {
        let i = usize::try_from(gpu).map_err(|_| Error::NoSuchGpu(gpu))?;
        self.gpus
            .get(i)
            .map(|g| (g, i))
            .ok_or(Error::NoSuchGpu(gpu))
    }

    fn count_mig_op(&mut self, gpu: u32) -> Result<()> {
        match self.mig_ops_left {
            Some(0) => Err(Error::Injected(gpu)),
            Some(n) => {
                self.mig_ops_left = Some(n - 1);
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn mig_uuid(&self, gpu: u32, start: u8) -> String {
        format!("MIG-sim-{}-{gpu}-{start}", self.node)
    }
}

impl GpuBackend for Simulated {
    fn name(&self) -> &'static str {
        "simulated"
    }

    fn utilization(&mut self) -> std::collections::BTreeMap<u32, f64> {
        (0..self.gpus.len())
            .filter_map(|i| u32::try_from(i).ok())
            .map(|i| (i, self.busy.get(&i).copied().unwrap_or(self.utilization)))
            .collect()
    }

    /// A GPU held by running pods of which one says how busy it keeps its GPUs
    /// (`sim.fabrik.dev/gpu-utilization: "<percent>"`, as `kubectl top` reports them) is the
    /// mean of what they say, the others counting the node's utilization.
    fn observe_pods(
        &mut self,
        pods: &[k8s_openapi::api::core::v1::Pod],
        uuids: &std::collections::BTreeMap<String, u32>,
    ) {
        let mut holders: std::collections::BTreeMap<u32, Vec<Option<f64>>> = Default::default();
        for p in pods {
            if p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Running") {
                continue;
            }
            let annotations = p.metadata.annotations.as_ref();
            let said = fabrik_api::sim::gpu_utilization(annotations).map(|p| p as f64 / 100.0);
            let devices = annotations.and_then(|a| a.get(fabrik_api::ANNOTATION_GPU_DEVICES));
            let gpus: BTreeSet<u32> = devices
                .into_iter()
                .flat_map(|d| d.split(','))
                .filter_map(|u| uuids.get(u.trim()).copied())
                .collect();
            for g in gpus {
                holders.entry(g).or_default().push(said);
            }
        }
        self.busy = holders
            .into_iter()
            .filter(|(_, said)| said.iter().any(Option::is_some))
            .map(|(g, said)| {
                let n = said.len() as f64;
                let sum: f64 = said.iter().map(|s| s.unwrap_or(self.utilization)).sum();
                (g, sum / n)
            })
            .collect();
    }

    fn inventory(&mut self) -> super::Result<Vec<GpuInfo>> {
        let mut out = Vec::new();
        for (i, (g, m)) in self.gpus.iter().zip(&self.mig).enumerate() {
            let index = u32::try_from(i).unwrap_or(u32::MAX);
            out.push(GpuInfo {
                index,
                uuid: format!("GPU-sim-{}-{index}", self.node),
                model: g.model,
                memory_mib: g.model.memory_mib,
                pci_bus_id: format!("00000000:{:02x}:00.0", 0x10 + index),
                pcie_root: Some(g.pcie_root.clone()),
                numa_node: Some(g.numa_node),
                nvlink_peers: g.peers.clone(),
                mig_enabled: m.enabled,
                mig: m
                    .instances
                    .iter()
                    .map(|(profile, start, size)| MigInstance {
                        uuid: self.mig_uuid(index, *start),
                        profile: profile.clone(),
                        placement: Placement {
                            start: *start,
                            size: *size,
                        },
                    })
                    .collect(),
            });
        }
        Ok(out)
    }

    fn set_mig_mode(&mut self, gpu: u32, enabled: bool) -> super::Result<()> {
        let (g, i) = self.gpu(gpu)?;
        if enabled && !g.mig_capable {
            return Err(Error::Mig {
                gpu,
                message: format!("{} is not MIG capable", g.model.name),
            }
            .into());
        }
        let has_instances = self.mig.get(i).is_some_and(|m| !m.instances.is_empty());
        if !enabled && has_instances {
            return Err(Error::Mig {
                gpu,
                message: "MIG instances exist; destroy them first".into(),
            }
            .into());
        }
        self.count_mig_op(gpu)?;
        if let Some(m) = self.mig.get_mut(i) {
            m.enabled = enabled;
        }
        Ok(self.persist()?)
    }

    fn create_mig(
        &mut self,
        gpu: u32,
        profile: &MigProfile,
        placement: Placement,
    ) -> super::Result<MigInstance> {
        let (g, i) = self.gpu(gpu)?;
        g.model.profile(profile.name).map_err(|e| Error::Mig {
            gpu,
            message: e.to_string(),
        })?;
        let state = self.mig.get(i).cloned().unwrap_or_default();
        if !state.enabled {
            return Err(Error::Mig {
                gpu,
                message: "MIG mode is disabled".into(),
            }
            .into());
        }
        let overlaps = state.instances.iter().any(|(_, s, n)| {
            placement.start < s.saturating_add(*n) && *s < placement.start + placement.size
        });
        if overlaps || !profile.starts.contains(&placement.start) {
            return Err(Error::Mig {
                gpu,
                message: format!(
                    "{} cannot be placed at memory slice {}",
                    profile.name, placement.start
                ),
            }
            .into());
        }
        self.count_mig_op(gpu)?;
        if let Some(m) = self.mig.get_mut(i) {
            m.instances
                .push((profile.name.to_string(), placement.start, placement.size));
        }
        self.persist()?;
        Ok(MigInstance {
            uuid: self.mig_uuid(gpu, placement.start),
            profile: profile.name.to_string(),
            placement,
        })
    }

    fn destroy_mig(&mut self, gpu: u32, uuid: &str) -> super::Result<()> {
        let (_, i) = self.gpu(gpu)?;
        let prefix = format!("MIG-sim-{}-{gpu}-", self.node);
        let start = uuid
            .strip_prefix(prefix.as_str())
            .and_then(|s| s.parse::<u8>().ok())
            .ok_or_else(|| Error::Mig {
                gpu,
                message: format!("no MIG device {uuid}"),
            })?;
        self.count_mig_op(gpu)?;
        if let Some(m) = self.mig.get_mut(i) {
            m.instances.retain(|(_, s, _)| *s != start);
        }
        Ok(self.persist()?)
    }

    fn poll_health(&mut self) -> super::Result<Vec<HealthEvent>> {
        let mut events = self.due(self.started.elapsed());
        events.extend(self.read_injected()?);
        Ok(events)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GOOD: &str = "
gpus:
  - model: H200-141GB
    count: 4
    numaNodes: [0, 0, 1, 1]
  - model: a100-40gb
    count: 1
    migCapable: false
nvlink:
  pairs: [[0, 1], [2, 3]]
faults:
  - { afterSeconds: 5, gpu: 1, xid: 79 }
  - { afterSeconds: 1, gpu: 2, thermal: 97 }
  - { afterSeconds: 9, gpu: 1, recover: true }
";

    fn sim(text: &str) -> Result<Simulated> {
        let spec = parse(Path::new("sim.yaml"), text)?;
        Simulated::from_spec(&spec, "n1")
    }

    #[test]
    fn declared_gpus_and_topology() {
        let mut s = sim(GOOD).expect("valid");
        let inv = s.inventory().expect("inventory");
        assert_eq!(inv.len(), 5);
        assert_eq!(inv[0].model.name, "H200-141GB");
        assert_eq!(inv[0].nvlink_peers, vec![1]);
        assert_eq!(inv[3].nvlink_peers, vec![2]);
        assert_eq!(inv[2].numa_node, Some(1));
        assert_eq!(inv[4].model.name, "A100-40GB");
        assert!(s.set_mig_mode(4, true).is_err(), "declared not MIG capable");
    }

    #[test]
    fn a_gpu_is_as_busy_as_the_pods_holding_it_say() {
        let mut s = sim(&format!("{GOOD}utilization: 0.6\n")).expect("valid");
        let uuids: std::collections::BTreeMap<String, u32> =
            (0..5).map(|i| (format!("GPU-sim-n1-{i}"), i)).collect();
        let pod = |devices: &str, said: Option<&str>, phase: &str| {
            let mut a = std::collections::BTreeMap::from([(
                fabrik_api::ANNOTATION_GPU_DEVICES.to_string(),
                devices.to_string(),
            )]);
            if let Some(v) = said {
                a.insert(fabrik_api::sim::GPU_UTILIZATION.to_string(), v.to_string());
            }
            let mut p = k8s_openapi::api::core::v1::Pod::default();
            p.metadata.annotations = Some(a);
            p.status = Some(k8s_openapi::api::core::v1::PodStatus {
                phase: Some(phase.to_string()),
                ..Default::default()
            });
            p
        };
        let pods = [
            pod("GPU-sim-n1-0,GPU-sim-n1-1", Some("20"), "Running"),
            // Two holders of GPU 2 (shared): one says 100, the other counts the node's 0.6.
            pod("GPU-sim-n1-2", Some("100"), "Running"),
            pod("GPU-sim-n1-2", None, "Running"),
            pod("GPU-sim-n1-3", None, "Running"),
            // A finished pod says nothing any more.
            pod("GPU-sim-n1-4", Some("5"), "Succeeded"),
        ];
        s.observe_pods(&pods, &uuids);
        let u = s.utilization();
        assert_eq!(u[&0], 0.2);
        assert_eq!(u[&1], 0.2);
        assert!((u[&2] - 0.8).abs() < 1e-9, "{u:?}");
        assert_eq!(u[&3], 0.6);
        assert_eq!(u[&4], 0.6);
        // Once they are gone, the node's again.
        s.observe_pods(&[], &uuids);
        assert!(s.utilization().values().all(|v| *v == 0.6));
    }

    #[test]
    fn fault_script_fires_in_time_order() {
        let mut s = sim(GOOD).expect("valid");
        assert!(s.due(Duration::from_millis(500)).is_empty());
        let first = s.due(Duration::from_secs(6));
        assert_eq!(first.len(), 2);
        assert_eq!(first[0].signal, HealthSignal::Thermal { celsius: 97 });
        assert_eq!(first[1].signal, HealthSignal::Xid { code: 79 });
        assert_eq!(
            s.due(Duration::from_secs(60))[0].signal,
            HealthSignal::Recovered
        );
        assert!(s.due(Duration::from_secs(600)).is_empty());
    }

    #[test]
    fn malformed_files_are_clear_errors() {
        let cases = [
            ("gpus: [", "sim.yaml"),
            ("gpus: []", "at least one GPU group"),
            ("gpus: [{model: T4, count: 1}]", "unknown GPU model"),
            ("gpus: [{model: H200-141GB, count: 0}]", "count must be"),
            (
                "gpus: [{model: H200-141GB, count: 1, colour: red}]",
                "unknown field",
            ),
            (
                "gpus: [{model: H200-141GB, count: 2}]\nnvlink: {pairs: [[0, 2]]}",
                "nvlink.pairs",
            ),
            (
                "gpus: [{model: H200-141GB, count: 2}]\nfaults: [{gpu: 2, xid: 79}]",
                "does not exist",
            ),
            (
                "gpus: [{model: H200-141GB, count: 2}]\nfaults: [{gpu: 1, xid: 79, ecc: 1}]",
                "exactly one",
            ),
            (
                "gpus: [{model: H200-141GB, count: 2, numaNodes: [0]}]",
                "numaNodes",
            ),
        ];
        for (text, expect) in cases {
            let err = sim(text).err().map(|e| e.to_string()).unwrap_or_default();
            assert!(err.contains(expect), "{text:?}: {err:?} lacks {expect:?}");
        }
    }

    #[test]
    fn mig_operations_and_injected_failure() {
        let text = "gpus: [{model: H100-80GB, count: 1}]\nfailMigOperationsAfter: 2";
        let mut s = sim(text).expect("valid");
        let model = profiles::model("H100-80GB").expect("model");
        let p = model.profile("3g.40gb").expect("profile");
        assert!(s.create_mig(0, p, Placement { start: 0, size: 4 }).is_err());
        s.set_mig_mode(0, true).expect("enable");
        let m = s
            .create_mig(0, p, Placement { start: 4, size: 4 })
            .expect("create");
        assert_eq!(m.uuid, "MIG-sim-n1-0-4");
        let err = s
            .create_mig(0, p, Placement { start: 0, size: 4 })
            .expect_err("third op fails");
        assert!(err.to_string().contains("injected"), "{err}");
        assert_eq!(s.inventory().expect("inv")[0].mig.len(), 1);
    }

    #[test]
    fn mig_state_survives_a_restart() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("sim.yaml");
        std::fs::write(&file, "gpus: [{model: H200-141GB, count: 2}]").expect("write");
        let state = dir.path().join("mig.json");
        let model = profiles::model("H200-141GB").expect("model");
        let p = model.profile("7g.141gb").expect("profile");
        {
            let mut s = Simulated::load(&file, "n", Some(state.clone()), None).expect("load");
            s.set_mig_mode(1, true).expect("enable");
            s.create_mig(1, p, Placement { start: 0, size: 8 })
                .expect("create");
        }
        let mut s = Simulated::load(&file, "n", Some(state), None).expect("reload");
        let inv = s.inventory().expect("inv");
        assert!(inv[1].mig_enabled);
        assert_eq!(inv[1].mig[0].profile, "7g.141gb");
        s.destroy_mig(1, "MIG-sim-n-1-0").expect("destroy");
        assert!(s.inventory().expect("inv")[1].mig.is_empty());
    }

    #[test]
    fn on_demand_injection_reads_and_consumes_the_file() {
        let dir = tempfile::tempdir().expect("tmp");
        let file = dir.path().join("sim.yaml");
        std::fs::write(&file, "gpus: [{model: H200-141GB, count: 2}]").expect("write");
        let inject = dir.path().join("inject.yaml");
        let mut s = Simulated::load(&file, "n", None, Some(inject.clone())).expect("load");
        std::fs::write(&inject, "- {gpu: 1, ecc: 3}").expect("write");
        let events = s.poll_health().expect("poll");
        assert_eq!(
            events,
            vec![HealthEvent {
                gpu: 1,
                signal: HealthSignal::Ecc { uncorrectable: 3 }
            }]
        );
        assert!(!inject.exists());
        std::fs::write(&inject, "- {gpu: 9, ecc: 3}").expect("write");
        assert!(s.poll_health().is_err());
        assert!(s.poll_health().expect("consumed").is_empty());
    }
}
