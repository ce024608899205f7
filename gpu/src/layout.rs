//! The desired GPU layout of a node: its format (YAML or JSON in the node annotation
//! `fabrik.dev/gpu-layout`), and its resolution against the node's GPUs into a per-GPU target.
//!
//! Resolution is pure and all-or-nothing: either every GPU gets a target that the profile table
//! says is possible, or an error names the first problem and nothing is planned.
//!
//! ```yaml
//! mode: whole                      # every GPU whole
//! ---
//! mode: mig
//! strategy: mixed                  # NVIDIA's MIG strategy: mixed (nvidia.com/mig-<profile>,
//!                                  # the default) or single (one profile on every GPU,
//!                                  # published as nvidia.com/gpu)
//! geometry: all-1g.18gb            # default for every GPU (or all-balanced)
//! perGpu:                          # optional overrides, by GPU index
//!   "3": [3g.71gb, 4g.71gb]        # a list of profiles …
//!   "4": all-balanced              # … or a named geometry
//! ---
//! mode: time-slicing
//! replicas: 4
//! ---
//! mode: shared
//! slices:
//!   - { memoryMiB: 20480, computePercent: 25, count: 4 }
//! ---
//! mode: mixed                      # each GPU its own way
//! default: { mode: whole }         # GPUs not in perGpu (whole when absent)
//! perGpu:
//!   "0": { mode: mig, geometry: all-1g.18gb }
//!   "1": { mode: mig, profiles: [3g.71gb, 4g.71gb] }
//!   "2": { mode: time-slicing, replicas: 4 }
//!   "3": { mode: shared, slices: [{ memoryMiB: 20480, computePercent: 25, count: 4 }] }
//! ```

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::device::GpuInfo;
use crate::profiles::{self, Placement};

/// Errors of this module.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The layout is not valid YAML/JSON of the expected shape.
    #[error("invalid layout: {0}")]
    Parse(#[source] serde_yaml_ng::Error),
    /// The layout parses but cannot be applied to this node.
    #[error("invalid layout: {0}")]
    Invalid(String),
    /// A MIG geometry is impossible on a GPU.
    #[error("invalid layout for GPU {gpu}: {source}")]
    Mig {
        /// The GPU.
        gpu: u32,
        /// Why.
        #[source]
        source: profiles::Error,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The desired layout as the platform writes it.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Layout {
    /// Every GPU whole. (A struct variant, so that unknown fields are refused.)
    Whole {},
    /// MIG on every GPU (`geometry`) or on some (`perGpu`); GPUs with neither stay whole.
    Mig {
        /// Geometry for every GPU not in `perGpu`.
        #[serde(default)]
        geometry: Option<String>,
        /// Per-GPU geometry (name) or list of profiles, keyed by GPU index.
        #[serde(default, rename = "perGpu")]
        per_gpu: BTreeMap<String, GpuMig>,
        /// How the MIG devices are named, as NVIDIA's device plugin's MIG strategy.
        #[serde(default)]
        strategy: MigStrategy,
    },
    /// Every GPU advertised `replicas` times (CUDA time-slicing; no isolation).
    TimeSlicing {
        /// How many pods may share one GPU.
        replicas: u32,
    },
    /// Every GPU cut into memory/compute-capped software slices.
    Shared {
        /// The slice classes, each repeated `count` times per GPU.
        slices: Vec<SharedSlice>,
    },
    /// Each GPU its own way (MIG devices named by NVIDIA's mixed strategy).
    Mixed {
        /// The layout of every GPU not in `perGpu` (whole when absent).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        default: Option<GpuLayout>,
        /// Per GPU index.
        #[serde(default, rename = "perGpu")]
        per_gpu: BTreeMap<String, GpuLayout>,
    },
}

/// The layout of one GPU, in a [`Layout::Mixed`].
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(tag = "mode", rename_all = "kebab-case", deny_unknown_fields)]
pub enum GpuLayout {
    /// Whole, MIG off.
    Whole {},
    /// MIG instances: a named geometry or a list of profiles (one of the two).
    Mig {
        /// A named geometry (`all-1g.18gb`, `all-balanced`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        geometry: Option<String>,
        /// Explicit profiles.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        profiles: Option<Vec<String>>,
    },
    /// Advertised `replicas` times (CUDA time-slicing).
    TimeSlicing {
        /// How many pods may share the GPU.
        replicas: u32,
    },
    /// Cut into memory/compute-capped software slices.
    Shared {
        /// The slice classes.
        slices: Vec<SharedSlice>,
    },
}

impl Layout {
    /// The layout of each of the GPUs `indexes`, as a [`Layout::Mixed`] would say it: a
    /// node-wide layout rewritten GPU by GPU (to change some GPUs and keep the rest). `None`
    /// for NVIDIA's single MIG strategy, whose devices are named for the whole node.
    pub fn per_gpu(&self, indexes: &[u32]) -> Option<BTreeMap<u32, GpuLayout>> {
        let each = |f: &dyn Fn(u32) -> GpuLayout| indexes.iter().map(|&i| (i, f(i))).collect();
        Some(match self {
            Layout::Whole {} => each(&|_| GpuLayout::Whole {}),
            Layout::Mig {
                strategy: MigStrategy::Single,
                ..
            } => return None,
            Layout::Mig {
                geometry, per_gpu, ..
            } => each(&|i| match per_gpu.get(&i.to_string()).cloned() {
                Some(GpuMig::Geometry(g)) => GpuLayout::Mig {
                    geometry: Some(g),
                    profiles: None,
                },
                Some(GpuMig::Profiles(p)) => GpuLayout::Mig {
                    geometry: None,
                    profiles: Some(p),
                },
                None => match geometry {
                    Some(g) => GpuLayout::Mig {
                        geometry: Some(g.clone()),
                        profiles: None,
                    },
                    None => GpuLayout::Whole {},
                },
            }),
            Layout::TimeSlicing { replicas } => each(&|_| GpuLayout::TimeSlicing {
                replicas: *replicas,
            }),
            Layout::Shared { slices } => each(&|_| GpuLayout::Shared {
                slices: slices.clone(),
            }),
            Layout::Mixed { default, per_gpu } => each(&|i| {
                per_gpu
                    .get(&i.to_string())
                    .or(default.as_ref())
                    .cloned()
                    .unwrap_or(GpuLayout::Whole {})
            }),
        })
    }
}

/// NVIDIA's MIG strategies: how a node's MIG devices are published.
#[derive(Clone, Copy, Debug, Default, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum MigStrategy {
    /// Each profile as its own resource, `nvidia.com/mig-<profile>`.
    #[default]
    Mixed,
    /// One profile on every GPU, published as `nvidia.com/gpu`.
    Single,
}

/// The layout mode name of a node whose MIG devices follow the single strategy.
pub const MODE_MIG_SINGLE: &str = "mig-single";

/// The MIG layout of one GPU.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(untagged)]
pub enum GpuMig {
    /// A named geometry (`all-1g.18gb`, `all-balanced`).
    Geometry(String),
    /// Explicit profiles.
    Profiles(Vec<String>),
}

/// A shared-slice class.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SharedSlice {
    /// Memory limit in MiB.
    #[serde(rename = "memoryMiB")]
    pub memory_mib: u64,
    /// Compute limit in percent of the GPU's SMs.
    pub compute_percent: u32,
    /// Slices of this class per GPU.
    pub count: u32,
}

impl SharedSlice {
    /// The extended resource a pod requests for one slice of this class.
    pub fn resource_name(&self) -> String {
        format!(
            "fabrik.dev/shared-gpu-{}mib-{}pct",
            self.memory_mib, self.compute_percent
        )
    }
}

/// A MIG instance to have.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct PlannedMig {
    /// Profile name.
    pub profile: String,
    /// Where.
    pub placement: Placement,
}

/// What one GPU should be.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", tag = "mode")]
pub enum GpuTarget {
    /// Whole, MIG off.
    Whole,
    /// MIG on with exactly these instances.
    Mig {
        /// The instances, sorted by placement.
        instances: Vec<PlannedMig>,
    },
    /// MIG off, advertised `replicas` times.
    TimeSliced {
        /// Replicas.
        replicas: u32,
    },
    /// MIG off, cut into software slices.
    Shared {
        /// Slice classes.
        slices: Vec<SharedSlice>,
    },
}

impl GpuTarget {
    /// Whether MIG mode must be on.
    pub fn wants_mig(&self) -> bool {
        matches!(self, GpuTarget::Mig { .. })
    }

    /// The extended resources the GPU offers so laid out, and how many of each (MIG devices
    /// by NVIDIA's mixed strategy; a time-sliced GPU as `nvidia.com/gpu.shared`).
    pub fn resources(&self) -> BTreeMap<String, i64> {
        let mut out = BTreeMap::new();
        let mut add = |r: String, n: i64| *out.entry(r).or_insert(0) += n;
        match self {
            GpuTarget::Whole => add(fabrik_api::RESOURCE_GPU.into(), 1),
            GpuTarget::Mig { instances } => {
                for i in instances {
                    add(format!("nvidia.com/mig-{}", i.profile), 1);
                }
            }
            GpuTarget::TimeSliced { replicas } => {
                add(fabrik_api::RESOURCE_GPU_SHARED.into(), i64::from(*replicas));
            }
            GpuTarget::Shared { slices } => {
                for sl in slices {
                    add(sl.resource_name(), i64::from(sl.count));
                }
            }
        }
        out
    }
}

/// The resolved layout: a target per GPU index, and the mode name for labels.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq, Eq)]
pub struct Target {
    /// `whole`, `mig`, `mig-single`, `time-slicing`, `shared` or `mixed`.
    pub mode: String,
    /// Per GPU index.
    pub gpus: BTreeMap<u32, GpuTarget>,
}

/// Parses a layout document (YAML or JSON).
pub fn parse(text: &str) -> Result<Layout> {
    serde_yaml_ng::from_str(text).map_err(Error::Parse)
}

/// Resolves `layout` for the GPUs of this node.
pub fn resolve(layout: &Layout, gpus: &[GpuInfo]) -> Result<Target> {
    let mut out = BTreeMap::new();
    let mode = match layout {
        Layout::Whole {} => {
            for g in gpus {
                out.insert(g.index, GpuTarget::Whole);
            }
            "whole"
        }
        Layout::Mig {
            geometry,
            per_gpu,
            strategy,
        } => {
            let overrides = gpu_keys(per_gpu, gpus)?;
            if geometry.is_none() && overrides.is_empty() {
                return Err(Error::Invalid(
                    "mode mig needs a geometry or perGpu entries".into(),
                ));
            }
            for g in gpus {
                let wanted = match (overrides.get(&g.index), geometry) {
                    (Some(m), _) => Some((*m).clone()),
                    (None, Some(name)) => Some(GpuMig::Geometry(name.clone())),
                    (None, None) => None,
                };
                let target = match wanted {
                    None => GpuTarget::Whole,
                    Some(m) => mig_target(g, &m)?,
                };
                out.insert(g.index, target);
            }
            match strategy {
                MigStrategy::Mixed => "mig",
                MigStrategy::Single => {
                    single_profile(&out)?;
                    MODE_MIG_SINGLE
                }
            }
        }
        Layout::TimeSlicing { replicas } => {
            for g in gpus {
                out.insert(g.index, time_sliced(*replicas)?);
            }
            "time-slicing"
        }
        Layout::Shared { slices } => {
            for g in gpus {
                check_slices(slices, g)?;
                out.insert(
                    g.index,
                    GpuTarget::Shared {
                        slices: slices.clone(),
                    },
                );
            }
            "shared"
        }
        Layout::Mixed { default, per_gpu } => {
            let overrides = gpu_keys(per_gpu, gpus)?;
            for g in gpus {
                let target = match overrides.get(&g.index).copied().or(default.as_ref()) {
                    None => GpuTarget::Whole,
                    Some(l) => gpu_target(g, l)?,
                };
                out.insert(g.index, target);
            }
            "mixed"
        }
    };
    Ok(Target {
        mode: mode.to_string(),
        gpus: out,
    })
}

/// `perGpu` by GPU index: every key a GPU of this node.
fn gpu_keys<'a, T>(
    per_gpu: &'a BTreeMap<String, T>,
    gpus: &[GpuInfo],
) -> Result<BTreeMap<u32, &'a T>> {
    let mut out = BTreeMap::new();
    for (key, value) in per_gpu {
        let index: u32 = key
            .parse()
            .map_err(|_| Error::Invalid(format!("perGpu key {key:?} is not a GPU index")))?;
        if !gpus.iter().any(|g| g.index == index) {
            return Err(Error::Invalid(format!(
                "perGpu names GPU {index}, but the node has {} GPUs",
                gpus.len()
            )));
        }
        out.insert(index, value);
    }
    Ok(out)
}

fn time_sliced(replicas: u32) -> Result<GpuTarget> {
    if !(1..=64).contains(&replicas) {
        return Err(Error::Invalid(format!(
            "time-slicing replicas must be 1..=64, got {replicas}"
        )));
    }
    Ok(GpuTarget::TimeSliced { replicas })
}

/// The target of one GPU laid out as `layout` (one GPU of a [`Layout::Mixed`]).
pub fn gpu_target(gpu: &GpuInfo, layout: &GpuLayout) -> Result<GpuTarget> {
    match layout {
        GpuLayout::Whole {} => Ok(GpuTarget::Whole),
        GpuLayout::Mig { geometry, profiles } => match (geometry, profiles) {
            (Some(g), None) => mig_target(gpu, &GpuMig::Geometry(g.clone())),
            (None, Some(p)) => mig_target(gpu, &GpuMig::Profiles(p.clone())),
            _ => Err(Error::Invalid(format!(
                "GPU {}: mode mig needs a geometry or profiles (one of the two)",
                gpu.index
            ))),
        },
        GpuLayout::TimeSlicing { replicas } => time_sliced(*replicas),
        GpuLayout::Shared { slices } => {
            check_slices(slices, gpu)?;
            Ok(GpuTarget::Shared {
                slices: slices.clone(),
            })
        }
    }
}

/// The one profile of a single-strategy layout: every GPU MIG, every instance alike.
fn single_profile(targets: &BTreeMap<u32, GpuTarget>) -> Result<String> {
    let mut profiles = std::collections::BTreeSet::new();
    for t in targets.values() {
        match t {
            GpuTarget::Mig { instances } => {
                profiles.extend(instances.iter().map(|i| i.profile.clone()));
            }
            _ => {
                return Err(Error::Invalid(
                    "strategy single needs MIG on every GPU (NVIDIA's single strategy)".into(),
                ))
            }
        }
    }
    match profiles.len() {
        1 => Ok(profiles.into_iter().next().unwrap_or_default()),
        _ => Err(Error::Invalid(format!(
            "strategy single needs one MIG profile on every GPU, not {}",
            profiles.into_iter().collect::<Vec<_>>().join(", ")
        ))),
    }
}

fn mig_target(gpu: &GpuInfo, mig: &GpuMig) -> Result<GpuTarget> {
    let err = |source| Error::Mig {
        gpu: gpu.index,
        source,
    };
    let model = gpu.model;
    let profiles = match mig {
        GpuMig::Geometry(name) => model.geometry(name).map_err(err)?,
        GpuMig::Profiles(names) => names
            .iter()
            .map(|n| model.profile(n))
            .collect::<profiles::Result<Vec<_>>>()
            .map_err(err)?,
    };
    if profiles.is_empty() {
        return Err(Error::Invalid(format!(
            "GPU {}: an empty MIG profile list (use mode whole)",
            gpu.index
        )));
    }
    let placements = profiles::place(model, &profiles).map_err(err)?;
    let mut instances: Vec<PlannedMig> = profiles
        .iter()
        .zip(placements)
        .map(|(p, placement)| PlannedMig {
            profile: p.name.to_string(),
            placement,
        })
        .collect();
    instances.sort_by_key(|i| i.placement);
    Ok(GpuTarget::Mig { instances })
}

fn check_slices(slices: &[SharedSlice], gpu: &GpuInfo) -> Result<()> {
    if slices.is_empty() {
        return Err(Error::Invalid(
            "mode shared needs at least one slice".into(),
        ));
    }
    let mut memory = 0u64;
    let mut compute = 0u64;
    for s in slices {
        if s.memory_mib == 0 || s.count == 0 || !(1..=100).contains(&s.compute_percent) {
            return Err(Error::Invalid(format!(
                "shared slice {s:?}: memoryMiB and count must be positive, computePercent 1..=100"
            )));
        }
        memory = memory.saturating_add(s.memory_mib.saturating_mul(u64::from(s.count)));
        compute = compute.saturating_add(u64::from(s.compute_percent) * u64::from(s.count));
    }
    if memory > gpu.memory_mib {
        return Err(Error::Invalid(format!(
            "GPU {}: shared slices need {memory} MiB, the GPU has {} MiB",
            gpu.index, gpu.memory_mib
        )));
    }
    if compute > 100 {
        return Err(Error::Invalid(format!(
            "GPU {}: shared slices need {compute}% compute, more than 100%",
            gpu.index
        )));
    }
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn gpus(model: &str, n: u32) -> Vec<GpuInfo> {
        let model = profiles::model(model).expect("model");
        (0..n).map(|index| GpuInfo::plain(index, model)).collect()
    }

    fn resolve_text(text: &str, model: &str) -> Result<Target> {
        resolve(&parse(text)?, &gpus(model, 2))
    }

    #[test]
    fn every_mode_resolves() {
        let t = resolve_text("mode: whole", "H200-141GB").expect("whole");
        assert_eq!(t.gpus[&1], GpuTarget::Whole);
        let t = resolve_text("mode: mig\ngeometry: all-1g.18gb", "H200-141GB").expect("mig");
        let GpuTarget::Mig { instances } = &t.gpus[&0] else {
            panic!("not mig: {t:?}")
        };
        assert_eq!(instances.len(), 7);
        let t = resolve_text(
            r#"{"mode": "mig", "perGpu": {"1": ["3g.40gb", "4g.40gb"]}}"#,
            "H100-80GB",
        )
        .expect("per gpu, JSON");
        assert_eq!(t.gpus[&0], GpuTarget::Whole);
        assert!(t.gpus[&1].wants_mig());
        let t = resolve_text("mode: time-slicing\nreplicas: 4", "A100-40GB").expect("ts");
        assert_eq!(t.gpus[&0], GpuTarget::TimeSliced { replicas: 4 });
        let t = resolve_text(
            "mode: shared\nslices: [{memoryMiB: 10240, computePercent: 25, count: 4}]",
            "A100-80GB",
        )
        .expect("shared");
        assert_eq!(t.mode, "shared");
    }

    #[test]
    fn the_single_mig_strategy_wants_one_profile_everywhere() {
        let t = resolve_text(
            "mode: mig\nstrategy: single\ngeometry: all-1g.18gb",
            "H200-141GB",
        )
        .expect("single");
        assert_eq!(t.mode, MODE_MIG_SINGLE);
        let t = resolve_text(
            "mode: mig\nstrategy: mixed\ngeometry: all-1g.18gb",
            "H200-141GB",
        )
        .expect("mixed");
        assert_eq!(t.mode, "mig");
        for (layout, why) in [
            (
                r#"{"mode": "mig", "strategy": "single", "perGpu": {"1": "all-1g.18gb"}}"#,
                "MIG on every GPU",
            ),
            (
                r#"{"mode": "mig", "strategy": "single", "geometry": "all-balanced"}"#,
                "one MIG profile",
            ),
        ] {
            let e = resolve_text(layout, "H200-141GB").expect_err(layout);
            assert!(e.to_string().contains(why), "{layout}: {e}");
        }
        assert!(parse("mode: mig\nstrategy: both\ngeometry: all-1g.18gb").is_err());
    }

    #[test]
    fn invalid_layouts_are_refused_with_a_reason() {
        let cases = [
            ("mode: partial", "unknown variant"),
            ("mode: whole\nextra: 1", "unknown field"),
            ("mode: mig", "needs a geometry"),
            ("mode: mig\ngeometry: all-1g.10gb", "has no MIG profile"),
            ("mode: mig\ngeometry: most", "unknown MIG geometry"),
            (
                "mode: mig\nperGpu: {\"7\": all-balanced}",
                "the node has 2 GPUs",
            ),
            ("mode: mig\nperGpu: {x: all-balanced}", "not a GPU index"),
            (
                "mode: mig\nperGpu: {\"0\": [4g.71gb, 4g.71gb]}",
                "do not fit",
            ),
            ("mode: time-slicing\nreplicas: 0", "replicas"),
            (
                "mode: shared\nslices: [{memoryMiB: 80000, computePercent: 25, count: 2}]",
                "MiB",
            ),
            (
                "mode: shared\nslices: [{memoryMiB: 100, computePercent: 60, count: 2}]",
                "more than 100%",
            ),
            ("mode: [", "invalid layout"),
        ];
        for (text, expect) in cases {
            let err = resolve_text(text, "H200-141GB")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(expect), "{text:?}: {err:?} lacks {expect:?}");
        }
    }

    #[test]
    fn a_mixed_layout_lays_each_gpu_out_its_own_way() {
        let text = r#"
mode: mixed
default: {mode: time-slicing, replicas: 2}
perGpu:
  "0": {mode: mig, geometry: all-1g.18gb}
  "1": {mode: mig, profiles: [3g.71gb, 4g.71gb]}
  "2": {mode: whole}
  "3": {mode: shared, slices: [{memoryMiB: 20480, computePercent: 25, count: 4}]}
"#;
        let t = resolve(&parse(text).expect("parses"), &gpus("H200-141GB", 5)).expect("resolves");
        assert_eq!(t.mode, "mixed");
        assert_eq!(t.gpus[&0].resources()["nvidia.com/mig-1g.18gb"], 7);
        assert_eq!(t.gpus[&1].resources().len(), 2);
        assert_eq!(t.gpus[&2], GpuTarget::Whole);
        assert_eq!(
            t.gpus[&3].resources()["fabrik.dev/shared-gpu-20480mib-25pct"],
            4
        );
        assert_eq!(t.gpus[&4], GpuTarget::TimeSliced { replicas: 2 });
        for (text, why) in [
            (
                r#"mode: mixed
perGpu: {"0": {mode: mig}}"#,
                "one of the two",
            ),
            (
                r#"mode: mixed
perGpu: {"9": {mode: whole}}"#,
                "the node has 2 GPUs",
            ),
            (
                r#"mode: mixed
perGpu: {"0": {mode: time-slicing, replicas: 99}}"#,
                "1..=64",
            ),
            (
                r#"mode: mixed
perGpu: {"0": {mode: whole, x: 1}}"#,
                "unknown field",
            ),
            (
                r#"mode: mixed
perGpu: {"0": {mode: mig, geometry: all-1g.10gb}}"#,
                "GPU 0",
            ),
        ] {
            let err = resolve_text(text, "H200-141GB")
                .err()
                .map(|e| e.to_string())
                .unwrap_or_default();
            assert!(err.contains(why), "{text:?}: {err:?} lacks {why:?}");
        }
    }

    #[test]
    fn any_layout_is_said_gpu_by_gpu_and_means_the_same() {
        let g = gpus("H200-141GB", 3);
        for text in [
            "mode: whole",
            "mode: mig\ngeometry: all-balanced\nperGpu: {\"1\": [3g.71gb]}",
            "mode: mig\nperGpu: {\"2\": all-1g.18gb}",
            "mode: time-slicing\nreplicas: 4",
            "mode: shared\nslices: [{memoryMiB: 10240, computePercent: 10, count: 3}]",
            "mode: mixed\nperGpu: {\"1\": {mode: time-slicing, replicas: 3}}",
        ] {
            let layout = parse(text).expect("parses");
            let per_gpu = layout.per_gpu(&[0, 1, 2]).expect("per GPU");
            let mixed = Layout::Mixed {
                default: None,
                per_gpu: per_gpu
                    .into_iter()
                    .map(|(i, l)| (i.to_string(), l))
                    .collect(),
            };
            // Written out and read back, it lays every GPU out as the original does.
            let again = parse(&serde_yaml_ng::to_string(&mixed).expect("yaml")).expect("parses");
            assert_eq!(
                resolve(&again, &g).expect("mixed").gpus,
                resolve(&layout, &g).expect("original").gpus,
                "{text}"
            );
        }
        let single = parse("mode: mig\nstrategy: single\ngeometry: all-1g.18gb").expect("ok");
        assert_eq!(single.per_gpu(&[0]), None);
    }

    #[test]
    fn whole_only_models_refuse_mig() {
        let mut g = gpus("H200-141GB", 1);
        let not_mig = profiles::GpuModel {
            mig: &[],
            ..*g[0].model
        };
        g[0].model = Box::leak(Box::new(not_mig));
        let err = resolve(&parse("mode: mig\ngeometry: all-balanced").expect("ok"), &g)
            .expect_err("no MIG");
        assert!(err.to_string().contains("GPU 0"), "{err}");
    }
}
