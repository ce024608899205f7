//! Inventory and topology: from the GPUs as they are, the layout in force and the health
//! verdicts, compute what the node publishes — extended resources (capacity and allocatable),
//! node labels, and the devices of its DRA ResourceSlice. Pure.
//!
//! * Whole GPU: `nvidia.com/gpu` 1; time-sliced GPU: `nvidia.com/gpu.shared` × replicas (as
//!   NVIDIA's device plugin renames them, so that whole-GPU requests never land there); MIG device:
//!   `nvidia.com/mig-<profile>` 1; shared slice: `fabrik.dev/shared-gpu-<MiB>mib-<pct>pct` 1.
//! * An unhealthy GPU stays in capacity, leaves allocatable, and its devices leave the slice.
//! * DRA device names: `gpu-<i>`, `gpu-<i>-mig-<start>`, `gpu-<i>-shared-<k>`.

use std::collections::{BTreeMap, BTreeSet};

use fabrik_gpu::layout::GpuTarget;
use k8s_openapi::api::resource::v1::{Device, DeviceAttribute, DeviceCapacity};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::backend::GpuInfo;

/// Resource-name prefixes the agent owns on a Node (anything under them it did not compute is
/// stale and removed).
pub const OWNED_RESOURCE_PREFIXES: &[&str] = &["nvidia.com/", "fabrik.dev/"];

/// What the node publishes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Inventory {
    /// Extended resources, capacity.
    pub capacity: BTreeMap<String, i64>,
    /// Extended resources, allocatable.
    pub allocatable: BTreeMap<String, i64>,
    /// Node labels.
    pub labels: BTreeMap<String, String>,
    /// ResourceSlice devices.
    pub devices: Vec<Device>,
}

fn add(map: &mut BTreeMap<String, i64>, key: String, n: i64) {
    *map.entry(key).or_insert(0) += n;
}

fn string(s: impl Into<String>) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(s.into()),
        ..Default::default()
    }
}

fn int(n: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(n),
        ..Default::default()
    }
}

/// NVLink islands: connected components of the NVLink graph, as sorted GPU-index lists.
pub fn nvlink_islands(gpus: &[GpuInfo]) -> Vec<Vec<u32>> {
    let mut seen = BTreeSet::new();
    let mut islands = Vec::new();
    for g in gpus {
        if seen.contains(&g.index) {
            continue;
        }
        let mut island = Vec::new();
        let mut todo = vec![g.index];
        while let Some(i) = todo.pop() {
            if !seen.insert(i) {
                continue;
            }
            island.push(i);
            if let Some(peer) = gpus.iter().find(|x| x.index == i) {
                todo.extend(peer.nvlink_peers.iter().copied());
            }
        }
        island.sort_unstable();
        islands.push(island);
    }
    islands
}

/// The topology attributes every device of a GPU carries.
fn topology(g: &GpuInfo, island: Option<usize>) -> BTreeMap<String, DeviceAttribute> {
    let mut a = BTreeMap::new();
    a.insert("index".into(), int(i64::from(g.index)));
    a.insert("model".into(), string(g.model.name));
    a.insert("architecture".into(), string(g.model.architecture));
    a.insert("parentUUID".into(), string(&g.uuid));
    // NVIDIA's DRA driver's names, so that selectors written for it match.
    a.insert("productName".into(), string(g.model.product));
    a.insert("brand".into(), string("Nvidia"));
    let (major, minor) = g.model.compute_capability;
    a.insert(
        "cudaComputeCapability".into(),
        DeviceAttribute {
            version: Some(format!("{major}.{minor}.0")),
            ..Default::default()
        },
    );
    if !g.pci_bus_id.is_empty() {
        a.insert(
            "resource.kubernetes.io/pciBusID".into(),
            string(g.pci_bus_id.to_lowercase()),
        );
    }
    if let Some(root) = &g.pcie_root {
        a.insert("pcieRoot".into(), string(root));
        a.insert("resource.kubernetes.io/pcieRoot".into(), string(root));
    }
    if let Some(n) = g.numa_node {
        a.insert("numaNode".into(), int(i64::from(n)));
    }
    let peers = g
        .nvlink_peers
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    a.insert("nvlinkPeers".into(), string(peers));
    if let Some(i) = island.and_then(|i| i64::try_from(i).ok()) {
        a.insert("nvlinkIsland".into(), int(i));
    }
    a
}

fn memory(mib: u64) -> BTreeMap<String, DeviceCapacity> {
    BTreeMap::from([(
        "memory".to_string(),
        DeviceCapacity {
            value: Quantity(format!("{mib}Mi")),
            ..Default::default()
        },
    )])
}

/// The one MIG profile of a node under NVIDIA's single strategy (layout mode
/// [`fabrik_gpu::layout::MODE_MIG_SINGLE`]): there its `nvidia.com/gpu` are MIG devices of it.
pub fn single_mig_profile(gpus: &[GpuInfo], mode: &str) -> Option<String> {
    if mode != fabrik_gpu::layout::MODE_MIG_SINGLE {
        return None;
    }
    gpus.iter()
        .flat_map(|g| g.mig.iter())
        .next()
        .map(|m| m.profile.clone())
}

/// Computes the inventory. The GPUs `withheld` (unhealthy, or waiting for a layout change)
/// count in the capacity but not in what is allocatable, and their devices are not published.
pub fn compute(
    gpus: &[GpuInfo],
    applied: &BTreeMap<u32, GpuTarget>,
    withheld: &BTreeSet<u32>,
    mode: &str,
) -> Inventory {
    let mut inv = Inventory::default();
    let islands = nvlink_islands(gpus);
    // NVIDIA's single MIG strategy: the one profile's devices are `nvidia.com/gpu`.
    let single = single_mig_profile(gpus, mode);
    for g in gpus {
        let offered = !withheld.contains(&g.index);
        let island = islands.iter().position(|i| i.contains(&g.index));
        let publish = |inv: &mut Inventory, resource: String, n: i64, device: Device| {
            add(&mut inv.capacity, resource.clone(), n);
            if offered {
                add(&mut inv.allocatable, resource, n);
                inv.devices.push(device);
            }
        };
        if g.mig_enabled {
            for m in &g.mig {
                let mut attrs = topology(g, island);
                attrs.insert("type".into(), string("mig"));
                attrs.insert("uuid".into(), string(&m.uuid));
                attrs.insert("migProfile".into(), string(&m.profile));
                attrs.insert("profile".into(), string(&m.profile));
                attrs.insert("migStart".into(), int(i64::from(m.placement.start)));
                let mib = g
                    .model
                    .profile(&m.profile)
                    .map(|p| p.memory_mib)
                    .unwrap_or(0);
                let device = Device {
                    name: format!("gpu-{}-mig-{}", g.index, m.placement.start),
                    attributes: Some(attrs),
                    capacity: Some(memory(mib)),
                    ..Default::default()
                };
                let resource = if single.is_some() {
                    fabrik_api::RESOURCE_GPU.to_string()
                } else {
                    format!("nvidia.com/mig-{}", m.profile)
                };
                publish(&mut inv, resource, 1, device);
            }
            continue;
        }
        let mut attrs = topology(g, island);
        attrs.insert("uuid".into(), string(&g.uuid));
        match applied.get(&g.index) {
            Some(GpuTarget::Shared { slices }) => {
                let mut k = 0;
                for s in slices {
                    for _ in 0..s.count {
                        let mut a = attrs.clone();
                        a.insert("type".into(), string("shared"));
                        a.insert("computePercent".into(), int(i64::from(s.compute_percent)));
                        let device = Device {
                            name: format!("gpu-{}-shared-{k}", g.index),
                            attributes: Some(a),
                            capacity: Some(memory(s.memory_mib)),
                            ..Default::default()
                        };
                        publish(&mut inv, s.resource_name(), 1, device);
                        k += 1;
                    }
                }
            }
            Some(GpuTarget::TimeSliced { replicas }) => {
                // Its own type and resource (NVIDIA's renamed `nvidia.com/gpu.shared`): a
                // workload asking for a whole GPU never lands on a time-sliced one.
                attrs.insert("type".into(), string("timeslice"));
                attrs.insert("timeSlicingReplicas".into(), int(i64::from(*replicas)));
                let device = Device {
                    name: format!("gpu-{}", g.index),
                    attributes: Some(attrs),
                    capacity: Some(memory(g.memory_mib)),
                    ..Default::default()
                };
                publish(
                    &mut inv,
                    fabrik_api::RESOURCE_GPU_SHARED.into(),
                    i64::from(*replicas),
                    device,
                );
            }
            _ => {
                attrs.insert("type".into(), string("gpu"));
                let device = Device {
                    name: format!("gpu-{}", g.index),
                    attributes: Some(attrs),
                    capacity: Some(memory(g.memory_mib)),
                    ..Default::default()
                };
                publish(&mut inv, "nvidia.com/gpu".into(), 1, device);
            }
        }
    }
    for key in inv.capacity.keys() {
        inv.allocatable.entry(key.clone()).or_insert(0);
    }
    if let Some(first) = gpus.first() {
        let l = &mut inv.labels;
        l.insert(fabrik_api::LABEL_GPU_MODEL.into(), first.model.name.into());
        l.insert(
            fabrik_api::LABEL_GPU_ARCHITECTURE.into(),
            first.model.architecture.into(),
        );
        l.insert(
            fabrik_api::LABEL_GPU_MEMORY_MIB.into(),
            first.memory_mib.to_string(),
        );
        let numa: BTreeSet<u32> = gpus.iter().filter_map(|g| g.numa_node).collect();
        l.insert(
            fabrik_api::LABEL_GPU_NUMA_NODES.into(),
            numa.len().max(1).to_string(),
        );
        l.insert(
            fabrik_api::LABEL_GPU_NVLINK_ISLANDS.into(),
            islands.len().to_string(),
        );
    }
    inv.labels
        .insert(fabrik_api::LABEL_GPU_COUNT.into(), gpus.len().to_string());
    inv.labels
        .insert(fabrik_api::LABEL_GPU_LAYOUT_MODE.into(), mode.to_string());
    inv.labels
        .extend(feature_labels(gpus, applied, single.as_deref()));
    inv
}

/// The labels NVIDIA's GPU feature discovery puts on a GPU node (`nvidia.com/gpu.present`,
/// `gpu.product`, `gpu.count`, `gpu.memory`, `gpu.family`, `gpu.compute.major|minor`,
/// `mig.capable`, `mig.strategy`, `gpu.replicas`, `gpu.sharing-strategy`), so that workloads
/// and charts written for it select these nodes. The product is the first GPU's, with spaces
/// as dashes and `-SHARED` when its GPUs are time-sliced, as GFD renames them. MIG devices
/// follow the node's strategy: mixed (`nvidia.com/mig-<profile>`, `mig.strategy=mixed`) or,
/// with `single` naming the one profile, single (`nvidia.com/gpu`; the product
/// `<product>-MIG-<profile>`, the count and memory the MIG devices', as GFD labels them). No driver or CUDA version labels: nothing here knows them.
pub fn feature_labels(
    gpus: &[GpuInfo],
    applied: &BTreeMap<u32, GpuTarget>,
    single: Option<&str>,
) -> BTreeMap<String, String> {
    let mut l = BTreeMap::new();
    let Some(first) = gpus.first() else {
        return l;
    };
    let replicas = applied
        .values()
        .find_map(|t| match t {
            GpuTarget::TimeSliced { replicas } => Some(*replicas),
            _ => None,
        })
        .unwrap_or(1);
    let shared = applied
        .values()
        .any(|t| matches!(t, GpuTarget::Shared { .. }));
    let mut product = first.model.product.replace(' ', "-");
    if replicas > 1 {
        product.push_str("-SHARED");
    }
    let (major, minor) = first.model.compute_capability;
    let mut count = gpus.len();
    let mut memory = first.memory_mib;
    if let Some(profile) = single {
        product = format!("{product}-MIG-{profile}");
        count = gpus.iter().map(|g| g.mig.len()).sum();
        memory = first
            .model
            .profile(profile)
            .map(|p| p.memory_mib)
            .unwrap_or(memory);
    }
    let sharing = if replicas > 1 {
        "time-slicing"
    } else if shared {
        "mps"
    } else {
        "none"
    };
    for (k, v) in [
        ("nvidia.com/gpu.present", "true".to_string()),
        ("nvidia.com/gpu.product", product),
        ("nvidia.com/gpu.count", count.to_string()),
        ("nvidia.com/gpu.memory", memory.to_string()),
        (
            "nvidia.com/gpu.family",
            first.model.architecture.to_string(),
        ),
        ("nvidia.com/gpu.compute.major", major.to_string()),
        ("nvidia.com/gpu.compute.minor", minor.to_string()),
        (
            "nvidia.com/mig.capable",
            first.model.supports_mig().to_string(),
        ),
        (
            "nvidia.com/mig.strategy",
            if !gpus.iter().any(|g| g.mig_enabled) {
                "none"
            } else if single.is_some() {
                "single"
            } else {
                "mixed"
            }
            .to_string(),
        ),
        ("nvidia.com/gpu.replicas", replicas.to_string()),
        ("nvidia.com/gpu.sharing-strategy", sharing.to_string()),
    ] {
        l.insert(k.to_string(), v);
    }
    l
}

/// Every device UUID (GPU and MIG) per GPU index, to map pods' assigned devices to GPUs.
pub fn uuids_by_gpu(gpus: &[GpuInfo]) -> BTreeMap<String, u32> {
    let mut out = BTreeMap::new();
    for g in gpus {
        out.insert(g.uuid.clone(), g.index);
        for m in &g.mig {
            out.insert(m.uuid.clone(), g.index);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::MigInstance;
    use fabrik_gpu::layout::SharedSlice;
    use fabrik_gpu::profiles::Placement;

    fn gpus() -> Vec<GpuInfo> {
        let mut g = crate::backend::tests::gpus("H200-141GB", 4);
        g[0].nvlink_peers = vec![1];
        g[1].nvlink_peers = vec![0];
        g[2].numa_node = Some(1);
        g[1].mig_enabled = true;
        g[1].mig = vec![
            MigInstance {
                uuid: "MIG-1".into(),
                profile: "3g.71gb".into(),
                placement: Placement { start: 0, size: 4 },
            },
            MigInstance {
                uuid: "MIG-2".into(),
                profile: "3g.71gb".into(),
                placement: Placement { start: 4, size: 4 },
            },
        ];
        g
    }

    #[test]
    fn resources_devices_and_labels() {
        let applied = BTreeMap::from([
            (2, GpuTarget::TimeSliced { replicas: 4 }),
            (
                3,
                GpuTarget::Shared {
                    slices: vec![SharedSlice {
                        memory_mib: 20480,
                        compute_percent: 25,
                        count: 3,
                    }],
                },
            ),
        ]);
        let inv = compute(&gpus(), &applied, &BTreeSet::new(), "mig");
        // Time-sliced replicas are not whole GPUs.
        assert_eq!(inv.capacity["nvidia.com/gpu"], 1);
        assert_eq!(inv.capacity["nvidia.com/gpu.shared"], 4);
        assert_eq!(inv.capacity["nvidia.com/mig-3g.71gb"], 2);
        assert_eq!(inv.capacity["fabrik.dev/shared-gpu-20480mib-25pct"], 3);
        assert_eq!(inv.allocatable, inv.capacity);
        assert_eq!(inv.devices.len(), 1 + 2 + 1 + 3);
        let mig = inv
            .devices
            .iter()
            .find(|d| d.name == "gpu-1-mig-4")
            .expect("mig device");
        let attrs = mig.attributes.as_ref().expect("attrs");
        assert_eq!(attrs["migProfile"].string.as_deref(), Some("3g.71gb"));
        assert_eq!(attrs["parentUUID"].string.as_deref(), Some("GPU-1"));
        assert_eq!(attrs["nvlinkPeers"].string.as_deref(), Some("0"));
        assert_eq!(inv.labels[fabrik_api::LABEL_GPU_NUMA_NODES], "2");
        assert_eq!(inv.labels[fabrik_api::LABEL_GPU_NVLINK_ISLANDS], "3");
        assert_eq!(inv.labels[fabrik_api::LABEL_GPU_MODEL], "H200-141GB");
        // GPU feature discovery's labels and NVIDIA's DRA attribute names.
        assert_eq!(inv.labels["nvidia.com/gpu.present"], "true");
        assert_eq!(inv.labels["nvidia.com/gpu.product"], "NVIDIA-H200-SHARED");
        assert_eq!(inv.labels["nvidia.com/gpu.compute.major"], "9");
        assert_eq!(inv.labels["nvidia.com/gpu.replicas"], "4");
        assert_eq!(
            inv.labels["nvidia.com/gpu.sharing-strategy"],
            "time-slicing"
        );
        assert_eq!(inv.labels["nvidia.com/mig.strategy"], "mixed");
        let attrs = inv.devices[0].attributes.as_ref().expect("attrs");
        assert_eq!(attrs["productName"].string.as_deref(), Some("NVIDIA H200"));
        assert_eq!(
            attrs["cudaComputeCapability"].version.as_deref(),
            Some("9.0.0")
        );
    }

    #[test]
    fn the_single_mig_strategy_publishes_mig_devices_as_gpus() {
        let inv = compute(
            &gpus(),
            &BTreeMap::new(),
            &BTreeSet::new(),
            fabrik_gpu::layout::MODE_MIG_SINGLE,
        );
        let mixed = compute(&gpus(), &BTreeMap::new(), &BTreeSet::new(), "mig");
        let migs = mixed.capacity["nvidia.com/mig-3g.71gb"];
        assert_eq!(
            inv.capacity["nvidia.com/gpu"],
            mixed.capacity["nvidia.com/gpu"] + migs
        );
        assert!(!inv.capacity.contains_key("nvidia.com/mig-3g.71gb"));
        assert_eq!(inv.labels["nvidia.com/mig.strategy"], "single");
        assert_eq!(
            inv.labels["nvidia.com/gpu.product"],
            "NVIDIA-H200-MIG-3g.71gb"
        );
        assert_eq!(inv.labels["nvidia.com/gpu.count"], migs.to_string());
        assert_eq!(mixed.labels["nvidia.com/mig.strategy"], "mixed");
        // Metered as the MIG devices they are.
        assert_eq!(
            crate::metering::single_mig_profile(&inv.labels).as_deref(),
            Some("3g.71gb")
        );
        assert_eq!(crate::metering::single_mig_profile(&mixed.labels), None);
    }

    #[test]
    fn unhealthy_gpus_leave_allocatable_and_the_slice() {
        // Unhealthy, or waiting for a layout change: not offered.
        let bad = BTreeSet::from([1, 0]);
        let inv = compute(&gpus(), &BTreeMap::new(), &bad, "whole");
        assert_eq!(inv.capacity["nvidia.com/mig-3g.71gb"], 2);
        assert_eq!(inv.allocatable["nvidia.com/mig-3g.71gb"], 0);
        assert_eq!(inv.capacity["nvidia.com/gpu"], 3);
        assert_eq!(inv.allocatable["nvidia.com/gpu"], 2);
        assert!(inv.devices.iter().all(|d| !d.name.starts_with("gpu-1")));
        assert!(inv.devices.iter().all(|d| d.name != "gpu-0"));
    }
}
