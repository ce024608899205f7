//! Built-in GPU models and their MIG profile tables, and the placement check that says whether a
//! set of MIG instances fits on one GPU (and where).
//!
//! Source: NVIDIA Multi-Instance GPU User Guide, "Supported MIG Profiles"
//! (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-mig-profiles.html>) and
//! "Supported GPUs" (<https://docs.nvidia.com/datacenter/tesla/mig-user-guide/supported-gpus.html>).
//! The tables there give, per product, each profile's fraction of memory and SMs and the number
//! of instances available; the placement diagram gives the memory-slice positions a profile may
//! start at. A100, H100 and H200 all have 7 compute slices and 8 memory slices:
//!
//! | profile kind        | compute | memory slices | start positions | max |
//! |---------------------|---------|---------------|-----------------|-----|
//! | 1g (1/8 memory)     | 1       | 1             | 0–6             | 7   |
//! | 1g+me               | 1       | 1             | 0–6             | 1   |
//! | 1g (2/8 memory)     | 1       | 2             | 0, 2, 4, 6      | 4   |
//! | 2g                  | 2       | 2             | 0, 2, 4         | 3   |
//! | 3g                  | 3       | 4             | 0, 4            | 2   |
//! | 4g                  | 4       | 4             | 0               | 1   |
//! | 7g                  | 7       | 8             | 0               | 1   |
//!
//! Memory figures are the nominal sizes in the profile names (GB × 1024 MiB); the driver reports
//! slightly less usable memory.

use thiserror::Error;

/// Errors of this module.
#[derive(Debug, Error, PartialEq, Eq)]
#[non_exhaustive]
pub enum Error {
    /// The GPU model is not in the built-in table.
    #[error("unknown GPU model {0:?} (known: A100-40GB, A100-80GB, H100-80GB, H200-141GB)")]
    UnknownModel(String),
    /// The model has no MIG profile of this name.
    #[error("GPU model {model} has no MIG profile {profile:?} (it has: {known})")]
    UnknownProfile {
        /// The model.
        model: String,
        /// The profile asked for.
        profile: String,
        /// The profiles the model has, comma-separated.
        known: String,
    },
    /// The geometry name is not `all-<profile>` or `all-balanced`.
    #[error("unknown MIG geometry {0:?}: expected all-<profile> or all-balanced")]
    UnknownGeometry(String),
    /// The profiles cannot all be placed on one GPU.
    #[error("MIG profiles [{profiles}] do not fit on one {model}: {why}")]
    DoesNotFit {
        /// The model.
        model: String,
        /// The profiles asked for, comma-separated.
        profiles: String,
        /// Which constraint is violated.
        why: String,
    },
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Compute slices on every MIG-capable GPU in the table.
pub const COMPUTE_SLICES: u8 = 7;
/// Memory slices on every MIG-capable GPU in the table.
pub const MEMORY_SLICES: u8 = 8;

/// How NVML names a GPU-instance profile (the `NVML_GPU_INSTANCE_PROFILE_*` constants).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NvmlGiProfile {
    /// One compute slice, one memory slice.
    OneSlice,
    /// One compute slice with media extensions (`REV1`).
    OneSliceMediaExtensions,
    /// One compute slice with two memory slices (`REV2`).
    OneSliceDoubleMemory,
    /// Two slices.
    TwoSlice,
    /// Three slices.
    ThreeSlice,
    /// Four slices.
    FourSlice,
    /// Seven slices (the whole GPU).
    SevenSlice,
}

/// One MIG profile of one GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// Name as NVIDIA writes it, e.g. `1g.18gb`.
    pub name: &'static str,
    /// Compute slices (of 7).
    pub compute_slices: u8,
    /// Memory slices (of 8).
    pub memory_slices: u8,
    /// Nominal memory in MiB.
    pub memory_mib: u64,
    /// How many instances of this profile fit on one GPU at most.
    pub max_count: u8,
    /// Memory-slice positions an instance may start at.
    pub starts: &'static [u8],
    /// NVML's GPU-instance profile.
    pub nvml: NvmlGiProfile,
}

impl MigProfile {
    /// Name as used in resource names: `nvidia.com/mig-<name>`.
    pub fn resource_name(&self) -> String {
        format!("nvidia.com/mig-{}", self.name)
    }
}

/// One GPU model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuModel {
    /// Canonical name, e.g. `H200-141GB`.
    pub name: &'static str,
    /// Architecture, lower case.
    pub architecture: &'static str,
    /// The product name NVIDIA's driver reports (`NVIDIA H200`, `NVIDIA A100-SXM4-80GB`).
    pub product: &'static str,
    /// CUDA compute capability, major and minor.
    pub compute_capability: (u32, u32),
    /// Nominal memory in MiB.
    pub memory_mib: u64,
    /// Its MIG profiles, smallest first; empty when MIG is unsupported.
    pub mig: &'static [MigProfile],
}

impl GpuModel {
    /// Whether the model supports MIG.
    pub fn supports_mig(&self) -> bool {
        !self.mig.is_empty()
    }

    /// The profile of this name.
    pub fn profile(&self, name: &str) -> Result<&'static MigProfile> {
        self.mig
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| Error::UnknownProfile {
                model: self.name.to_string(),
                profile: name.to_string(),
                known: self
                    .mig
                    .iter()
                    .map(|p| p.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// The base (no media extensions, one memory slice per compute slice) profile of `compute`
    /// compute slices.
    fn base_profile(&self, compute: u8) -> Option<&'static MigProfile> {
        self.mig.iter().find(|p| {
            p.compute_slices == compute
                && p.nvml != NvmlGiProfile::OneSliceMediaExtensions
                && p.nvml != NvmlGiProfile::OneSliceDoubleMemory
        })
    }

    /// Expands a named geometry into the profiles it consists of.
    ///
    /// `all-<profile>` fills the GPU with that profile (its maximum count); `all-balanced` is one
    /// 3g, one 2g and two 1g instances, as NVIDIA's MIG manager defines it.
    pub fn geometry(&self, name: &str) -> Result<Vec<&'static MigProfile>> {
        if name == "all-balanced" {
            return [3u8, 2, 1, 1]
                .iter()
                .map(|c| {
                    self.base_profile(*c)
                        .ok_or_else(|| Error::UnknownGeometry(name.to_string()))
                })
                .collect();
        }
        let Some(profile) = name.strip_prefix("all-") else {
            return Err(Error::UnknownGeometry(name.to_string()));
        };
        let p = self.profile(profile)?;
        Ok(vec![p; usize::from(p.max_count)])
    }
}

const fn gib(n: u64) -> u64 {
    n * 1024
}

const ONE: &[u8] = &[0, 1, 2, 3, 4, 5, 6];
const EVEN4: &[u8] = &[0, 2, 4, 6];
const EVEN3: &[u8] = &[0, 2, 4];
const HALVES: &[u8] = &[0, 4];
const FIRST: &[u8] = &[0];

/// Builds the seven-profile table shared by A100, H100 and H200 from (name, GB) pairs in the
/// order: 1g, 1g+me, 1g with double memory, 2g, 3g, 4g, 7g.
const fn table(p: [(&'static str, u64); 7]) -> [MigProfile; 7] {
    let kinds: [(u8, u8, u8, &'static [u8], NvmlGiProfile); 7] = [
        (1, 1, 7, ONE, NvmlGiProfile::OneSlice),
        (1, 1, 1, ONE, NvmlGiProfile::OneSliceMediaExtensions),
        (1, 2, 4, EVEN4, NvmlGiProfile::OneSliceDoubleMemory),
        (2, 2, 3, EVEN3, NvmlGiProfile::TwoSlice),
        (3, 4, 2, HALVES, NvmlGiProfile::ThreeSlice),
        (4, 4, 1, FIRST, NvmlGiProfile::FourSlice),
        (7, 8, 1, FIRST, NvmlGiProfile::SevenSlice),
    ];
    let mut out = [MigProfile {
        name: "",
        compute_slices: 0,
        memory_slices: 0,
        memory_mib: 0,
        max_count: 0,
        starts: FIRST,
        nvml: NvmlGiProfile::OneSlice,
    }; 7];
    let mut i = 0;
    while i < 7 {
        let (compute, memory, max, starts, nvml) = kinds[i];
        out[i] = MigProfile {
            name: p[i].0,
            compute_slices: compute,
            memory_slices: memory,
            memory_mib: gib(p[i].1),
            max_count: max,
            starts,
            nvml,
        };
        i += 1;
    }
    out
}

#[rustfmt::skip]
const A100_40: &[MigProfile] = &table([
    ("1g.5gb", 5), ("1g.5gb+me", 5), ("1g.10gb", 10), ("2g.10gb", 10), ("3g.20gb", 20),
    ("4g.20gb", 20), ("7g.40gb", 40)
]);
#[rustfmt::skip]
const A100_80: &[MigProfile] = &table([
    ("1g.10gb", 10), ("1g.10gb+me", 10), ("1g.20gb", 20), ("2g.20gb", 20), ("3g.40gb", 40),
    ("4g.40gb", 40), ("7g.80gb", 80)
]);
#[rustfmt::skip]
const H100_80: &[MigProfile] = &table([
    ("1g.10gb", 10), ("1g.10gb+me", 10), ("1g.20gb", 20), ("2g.20gb", 20), ("3g.40gb", 40),
    ("4g.40gb", 40), ("7g.80gb", 80)
]);
#[rustfmt::skip]
const H200_141: &[MigProfile] = &table([
    ("1g.18gb", 18), ("1g.18gb+me", 18), ("1g.35gb", 35), ("2g.35gb", 35), ("3g.71gb", 71),
    ("4g.71gb", 71), ("7g.141gb", 141)
]);

/// Every built-in model.
pub const MODELS: &[GpuModel] = &[
    GpuModel {
        name: "A100-40GB",
        architecture: "ampere",
        product: "NVIDIA A100-SXM4-40GB",
        compute_capability: (8, 0),
        memory_mib: gib(40),
        mig: A100_40,
    },
    GpuModel {
        name: "A100-80GB",
        architecture: "ampere",
        product: "NVIDIA A100-SXM4-80GB",
        compute_capability: (8, 0),
        memory_mib: gib(80),
        mig: A100_80,
    },
    GpuModel {
        name: "H100-80GB",
        architecture: "hopper",
        product: "NVIDIA H100 80GB HBM3",
        compute_capability: (9, 0),
        memory_mib: gib(80),
        mig: H100_80,
    },
    GpuModel {
        name: "H200-141GB",
        architecture: "hopper",
        product: "NVIDIA H200",
        compute_capability: (9, 0),
        memory_mib: gib(141),
        mig: H200_141,
    },
];

/// Looks a model up by its canonical name (case-insensitive) or by a product name as NVML
/// reports it (`NVIDIA H200`, `NVIDIA A100-SXM4-80GB`, …) together with its memory.
pub fn model(name: &str) -> Result<&'static GpuModel> {
    MODELS
        .iter()
        .find(|m| m.name.eq_ignore_ascii_case(name))
        .ok_or_else(|| Error::UnknownModel(name.to_string()))
}

/// Maps an NVML product name and total memory to a built-in model.
pub fn model_from_product(product: &str, memory_mib: u64) -> Result<&'static GpuModel> {
    let p = product.to_ascii_uppercase();
    let family = if p.contains("H200") {
        "H200"
    } else if p.contains("H100") {
        "H100"
    } else if p.contains("A100") {
        "A100"
    } else {
        return Err(Error::UnknownModel(product.to_string()));
    };
    // The closest nominal memory size within the family.
    MODELS
        .iter()
        .filter(|m| m.name.starts_with(family))
        .min_by_key(|m| m.memory_mib.abs_diff(memory_mib))
        .ok_or_else(|| Error::UnknownModel(product.to_string()))
}

/// A MIG instance placed at a memory-slice position.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub struct Placement {
    /// First memory slice.
    pub start: u8,
    /// Memory slices it covers.
    pub size: u8,
}

/// Places `profiles` on one GPU of `model`: returns one placement per profile, in the order
/// given, or says which constraint fails. Deterministic: the same input gives the same
/// placements (largest instances first, lowest start first).
pub fn place(model: &GpuModel, profiles: &[&MigProfile]) -> Result<Vec<Placement>> {
    let names = || {
        profiles
            .iter()
            .map(|p| p.name)
            .collect::<Vec<_>>()
            .join(", ")
    };
    let fail = |why: String| Error::DoesNotFit {
        model: model.name.to_string(),
        profiles: names(),
        why,
    };
    if !model.supports_mig() {
        return Err(fail("the model does not support MIG".to_string()));
    }
    let compute: u32 = profiles.iter().map(|p| u32::from(p.compute_slices)).sum();
    if compute > u32::from(COMPUTE_SLICES) {
        return Err(fail(format!(
            "they need {compute} compute slices, the GPU has {COMPUTE_SLICES}"
        )));
    }
    for p in model.mig {
        let n = profiles.iter().filter(|q| q.name == p.name).count();
        if n > usize::from(p.max_count) {
            return Err(fail(format!(
                "{n} × {} asked, at most {} fit",
                p.name, p.max_count
            )));
        }
    }
    let mut order: Vec<usize> = (0..profiles.len()).collect();
    order.sort_by_key(|i| {
        profiles
            .get(*i)
            .map(|p| (std::cmp::Reverse(p.memory_slices), p.starts.len()))
    });
    let mut chosen = vec![Placement { start: 0, size: 0 }; profiles.len()];
    if search(profiles, &order, 0, 0, &mut chosen) {
        Ok(chosen)
    } else {
        Err(fail(
            "no placement of their memory slices exists (see the MIG placement rules)".to_string(),
        ))
    }
}

/// Backtracking over start positions; `used` is a bit mask of occupied memory slices.
fn search(
    profiles: &[&MigProfile],
    order: &[usize],
    depth: usize,
    used: u16,
    chosen: &mut [Placement],
) -> bool {
    let Some(&index) = order.get(depth) else {
        return true;
    };
    let Some(profile) = profiles.get(index) else {
        return false;
    };
    for &start in profile.starts {
        let mask = ((1u16 << profile.memory_slices) - 1) << start;
        if start + profile.memory_slices > MEMORY_SLICES || used & mask != 0 {
            continue;
        }
        if let Some(slot) = chosen.get_mut(index) {
            *slot = Placement {
                start,
                size: profile.memory_slices,
            };
        }
        if search(profiles, order, depth + 1, used | mask, chosen) {
            return true;
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h200() -> &'static GpuModel {
        model("H200-141GB").expect("built in")
    }

    #[test]
    fn every_model_has_seven_profiles_and_a_full_instance() {
        for m in MODELS {
            assert_eq!(m.mig.len(), 7, "{}", m.name);
            let full = m.mig.last().expect("profiles");
            assert_eq!(full.compute_slices, 7);
            assert_eq!(full.memory_mib, m.memory_mib);
        }
    }

    #[test]
    fn all_geometries_fit_for_every_profile() {
        for m in MODELS {
            for p in m.mig {
                let geo = m.geometry(&format!("all-{}", p.name)).expect("known");
                assert_eq!(geo.len(), usize::from(p.max_count));
                if p.nvml != NvmlGiProfile::OneSliceMediaExtensions {
                    place(m, &geo).expect("max count of a profile fits");
                }
            }
            let balanced = m.geometry("all-balanced").expect("balanced");
            assert_eq!(place(m, &balanced).expect("fits").len(), 4);
        }
    }

    #[test]
    fn placements_do_not_overlap() {
        let m = h200();
        let geo = m.geometry("all-1g.18gb").expect("known");
        let placed = place(m, &geo).expect("fits");
        let mut starts: Vec<u8> = placed.iter().map(|p| p.start).collect();
        starts.sort_unstable();
        assert_eq!(starts, vec![0, 1, 2, 3, 4, 5, 6]);
    }

    #[test]
    fn mixed_geometry_needs_a_search() {
        // 3g at 4 leaves 0..4 for a 2g and two 1g: only found if the 3g is not put at 0 first
        // when the 4g is there too. 4g(0..4) + 3g(4..8) is the classic pair.
        let m = h200();
        let four = m.profile("4g.71gb").expect("p");
        let three = m.profile("3g.71gb").expect("p");
        let placed = place(m, &[three, four]).expect("fits");
        assert_eq!(placed[0], Placement { start: 4, size: 4 });
        assert_eq!(placed[1], Placement { start: 0, size: 4 });
    }

    #[test]
    fn impossible_geometries_say_why() {
        let m = h200();
        let four = m.profile("4g.71gb").expect("p");
        let err = place(m, &[four, four]).expect_err("two 4g");
        assert!(err.to_string().contains("compute slices"), "{err}");
        let three = m.profile("3g.71gb").expect("p");
        let err = place(m, &[three, three, three]).expect_err("three 3g");
        assert!(err.to_string().contains("compute slices"), "{err}");
        let two = m.profile("2g.35gb").expect("p");
        let one = m.profile("1g.18gb").expect("p");
        // 3g + 2g + 2g = 7 compute, but 3g needs 4 memory slices at 0 or 4 and the two 2g
        // need 4 more: 3g@4, 2g@0, 2g@2 fits. Add a 1g: too much compute.
        place(m, &[three, two, two]).expect("fits");
        assert!(place(m, &[three, two, two, one]).is_err());
        // 4 × 1g.35gb fill all 8 memory slices: a further 1g.18gb has no room.
        let double = m.profile("1g.35gb").expect("p");
        let placed = place(m, &[double, double, double, one]).expect("three doubles and a 1g");
        assert_eq!(placed.len(), 4);
        let err = place(m, &[double, double, double, double, one]).expect_err("no room");
        assert!(err.to_string().contains("compute") || err.to_string().contains("placement"));
        // Three doubles at 0, 2, 6 leave 4..6 for a 2g: the search must find it.
        place(m, &[double, double, double, two]).expect("fits with the 2g at 4");
        let three_at_zero = place(m, &[three, two, double]).expect("fits");
        assert_eq!(three_at_zero.len(), 3);
    }

    #[test]
    fn unknown_names_are_clear_errors() {
        assert!(matches!(model("T4"), Err(Error::UnknownModel(_))));
        let err = h200().profile("1g.10gb").expect_err("not on H200");
        assert!(err.to_string().contains("1g.18gb"), "{err}");
        assert!(matches!(
            h200().geometry("mostly-small"),
            Err(Error::UnknownGeometry(_))
        ));
    }

    #[test]
    fn product_names_map_to_models() {
        let m = model_from_product("NVIDIA H100 80GB HBM3", 81559).expect("h100");
        assert_eq!(m.name, "H100-80GB");
        let m = model_from_product("NVIDIA A100-SXM4-40GB", 40536).expect("a100");
        assert_eq!(m.name, "A100-40GB");
        assert!(model_from_product("Tesla T4", 15360).is_err());
    }
}
