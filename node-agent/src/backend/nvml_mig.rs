//! MIG GPU-instance and compute-instance create / list / destroy through NVML's raw functions.
//!
//! Why this module allows `unsafe`: nvml-wrapper 0.13 has safe wrappers for MIG mode and MIG
//! device handles but none for creating, listing or destroying GPU instances and compute
//! instances. Those exist only as raw C functions in `nvml-wrapper-sys`. Calling them needs
//! `unsafe` (FFI with out-pointers and opaque handles). Everything unsafe in the crate is here,
//! each call behind a function that takes and returns plain Rust values; the rest of the crate
//! denies `unsafe`.
//!
//! Guarantees: a symbol missing from the loaded library is an error, never a panic (the
//! generated wrapper methods `expect` on missing symbols, so the function pointers are taken
//! from the library struct directly); a compute instance that cannot be created destroys the GPU
//! instance just made, so no half-built MIG device is left behind.
#![allow(unsafe_code)]

use fabrik_gpu::profiles::{NvmlGiProfile, Placement};
use nvml_wrapper::Device;
use nvml_wrapper_sys::bindings::{
    nvmlComputeInstanceProfileInfo_t, nvmlComputeInstance_t, nvmlDevice_t, nvmlGpuInstanceInfo_t,
    nvmlGpuInstancePlacement_t, nvmlGpuInstanceProfileInfo_t, nvmlGpuInstance_t, NvmlLib,
    NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED, NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE, NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    NVML_COMPUTE_INSTANCE_PROFILE_COUNT, NVML_GPU_INSTANCE_PROFILE_1_SLICE,
    NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1, NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
    NVML_GPU_INSTANCE_PROFILE_2_SLICE, NVML_GPU_INSTANCE_PROFILE_3_SLICE,
    NVML_GPU_INSTANCE_PROFILE_4_SLICE, NVML_GPU_INSTANCE_PROFILE_7_SLICE,
};
use thiserror::Error;

/// Errors of raw MIG calls.
#[derive(Debug, Error)]
#[non_exhaustive]
pub enum Error {
    /// The loaded NVML library lacks a function (driver too old for MIG).
    #[error("the NVML library has no {0} (driver too old for MIG management?)")]
    Missing(&'static str),
    /// An NVML function returned an error code.
    #[error("{function} returned NVML error {code}")]
    Call {
        /// The function.
        function: &'static str,
        /// `nvmlReturn_t`.
        code: u32,
    },
}

type Result<T, E = Error> = std::result::Result<T, E>;

/// A GPU instance found on a device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GpuInstance {
    /// NVML's GPU-instance id (unique per device).
    pub id: u32,
    /// Which profile it is.
    pub profile: NvmlGiProfile,
    /// Where it sits.
    pub placement: Placement,
}

const ALL_PROFILES: [NvmlGiProfile; 7] = [
    NvmlGiProfile::OneSlice,
    NvmlGiProfile::OneSliceMediaExtensions,
    NvmlGiProfile::OneSliceDoubleMemory,
    NvmlGiProfile::TwoSlice,
    NvmlGiProfile::ThreeSlice,
    NvmlGiProfile::FourSlice,
    NvmlGiProfile::SevenSlice,
];

fn gi_enum(p: NvmlGiProfile) -> u32 {
    match p {
        NvmlGiProfile::OneSlice => NVML_GPU_INSTANCE_PROFILE_1_SLICE,
        NvmlGiProfile::OneSliceMediaExtensions => NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1,
        NvmlGiProfile::OneSliceDoubleMemory => NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2,
        NvmlGiProfile::TwoSlice => NVML_GPU_INSTANCE_PROFILE_2_SLICE,
        NvmlGiProfile::ThreeSlice => NVML_GPU_INSTANCE_PROFILE_3_SLICE,
        NvmlGiProfile::FourSlice => NVML_GPU_INSTANCE_PROFILE_4_SLICE,
        NvmlGiProfile::SevenSlice => NVML_GPU_INSTANCE_PROFILE_7_SLICE,
    }
}

/// The compute-instance profile spanning a whole GPU instance of this profile.
fn ci_enum(p: NvmlGiProfile) -> u32 {
    match p {
        NvmlGiProfile::OneSlice
        | NvmlGiProfile::OneSliceMediaExtensions
        | NvmlGiProfile::OneSliceDoubleMemory => NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
        NvmlGiProfile::TwoSlice => NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
        NvmlGiProfile::ThreeSlice => NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE,
        NvmlGiProfile::FourSlice => NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
        NvmlGiProfile::SevenSlice => NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
    }
}

/// The raw handle of a device.
fn raw(device: &Device<'_>) -> nvmlDevice_t {
    // SAFETY: the handle stays valid while `device` (and the `Nvml` it borrows) lives, and every
    // caller uses it only within its own call, while `device` is borrowed.
    unsafe { device.handle() }
}

fn check(function: &'static str, code: u32) -> Result<()> {
    if code == 0 {
        Ok(())
    } else {
        Err(Error::Call { function, code })
    }
}

/// Takes a function pointer out of the library, or says which is missing.
macro_rules! sym {
    ($lib:expr, $name:ident) => {
        $lib.$name
            .as_ref()
            .map_err(|_| Error::Missing(stringify!($name)))?
    };
}

/// The profile info (including NVML's numeric profile id) of a GPU-instance profile, or `None`
/// when the device does not offer it.
fn gi_profile_info(
    lib: &NvmlLib,
    device: nvmlDevice_t,
    profile: NvmlGiProfile,
) -> Result<Option<nvmlGpuInstanceProfileInfo_t>> {
    let f = sym!(lib, nvmlDeviceGetGpuInstanceProfileInfo);
    // SAFETY: `device` is a live handle from nvml-wrapper; `info` is a plain C struct that NVML
    // fills; zeroed is a valid bit pattern for it.
    let mut info: nvmlGpuInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
    let code = unsafe { f(device, gi_enum(profile), &mut info) };
    // NVML_ERROR_NOT_SUPPORTED (3) / INVALID_ARGUMENT (2): the profile is not offered here.
    if code == 2 || code == 3 {
        return Ok(None);
    }
    check("nvmlDeviceGetGpuInstanceProfileInfo", code)?;
    Ok(Some(info))
}

/// Every GPU instance on `device`.
pub fn list(lib: &NvmlLib, device: &Device<'_>) -> Result<Vec<GpuInstance>> {
    let device = raw(device);
    let get = sym!(lib, nvmlDeviceGetGpuInstances);
    let info_of = sym!(lib, nvmlGpuInstanceGetInfo);
    let mut out = Vec::new();
    for profile in ALL_PROFILES {
        let Some(info) = gi_profile_info(lib, device, profile)? else {
            continue;
        };
        let capacity = info.instanceCount.max(1);
        let mut handles: Vec<nvmlGpuInstance_t> =
            vec![std::ptr::null_mut(); usize::try_from(capacity).unwrap_or(8)];
        let mut count = capacity;
        // SAFETY: `handles` has room for `count` handles, as NVML requires.
        let code = unsafe { get(device, info.id, handles.as_mut_ptr(), &mut count) };
        check("nvmlDeviceGetGpuInstances", code)?;
        for gi in handles.iter().take(usize::try_from(count).unwrap_or(0)) {
            // SAFETY: `gi` was just returned by NVML; the info struct is plain C data.
            let mut gi_info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
            let code = unsafe { info_of(*gi, &mut gi_info) };
            check("nvmlGpuInstanceGetInfo", code)?;
            out.push(GpuInstance {
                id: gi_info.id,
                profile,
                placement: Placement {
                    start: u8::try_from(gi_info.placement.start).unwrap_or(u8::MAX),
                    size: u8::try_from(gi_info.placement.size).unwrap_or(u8::MAX),
                },
            });
        }
    }
    Ok(out)
}

/// Creates a GPU instance of `profile` at `placement` and a compute instance spanning it;
/// returns the GPU-instance id. On a compute-instance failure the GPU instance is destroyed.
pub fn create(
    lib: &NvmlLib,
    device: &Device<'_>,
    profile: NvmlGiProfile,
    placement: Placement,
) -> Result<u32> {
    let device = raw(device);
    let create_gi = sym!(lib, nvmlDeviceCreateGpuInstanceWithPlacement);
    let ci_info_of = sym!(lib, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    let create_ci = sym!(lib, nvmlGpuInstanceCreateComputeInstance);
    let destroy_gi = sym!(lib, nvmlGpuInstanceDestroy);
    let info_of = sym!(lib, nvmlGpuInstanceGetInfo);
    let info = gi_profile_info(lib, device, profile)?.ok_or(Error::Call {
        function: "nvmlDeviceGetGpuInstanceProfileInfo",
        code: 3,
    })?;
    let place = nvmlGpuInstancePlacement_t {
        start: u32::from(placement.start),
        size: u32::from(placement.size),
    };
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: live device handle, a valid placement struct, an out-pointer for the handle.
    check("nvmlDeviceCreateGpuInstanceWithPlacement", unsafe {
        create_gi(device, info.id, &place, &mut gi)
    })?;
    let made_ci = (|| -> Result<()> {
        // SAFETY: `gi` was just created; the info struct is plain C data.
        let mut ci_info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        check("nvmlGpuInstanceGetComputeInstanceProfileInfo", unsafe {
            ci_info_of(
                gi,
                ci_enum(profile),
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                &mut ci_info,
            )
        })?;
        let mut ci: nvmlComputeInstance_t = std::ptr::null_mut();
        // SAFETY: `gi` is live; `ci` is an out-pointer.
        check("nvmlGpuInstanceCreateComputeInstance", unsafe {
            create_ci(gi, ci_info.id, &mut ci)
        })
    })();
    if let Err(e) = made_ci {
        // SAFETY: `gi` is live and has no compute instance; destroying it undoes the create.
        let _ = unsafe { destroy_gi(gi) };
        return Err(e);
    }
    // SAFETY: `gi` is live; the info struct is plain C data.
    let mut gi_info: nvmlGpuInstanceInfo_t = unsafe { std::mem::zeroed() };
    check("nvmlGpuInstanceGetInfo", unsafe {
        info_of(gi, &mut gi_info)
    })?;
    Ok(gi_info.id)
}

/// Destroys GPU instance `id` on `device` with all its compute instances.
pub fn destroy(lib: &NvmlLib, device: &Device<'_>, id: u32) -> Result<()> {
    let device = raw(device);
    let by_id = sym!(lib, nvmlDeviceGetGpuInstanceById);
    let ci_info_of = sym!(lib, nvmlGpuInstanceGetComputeInstanceProfileInfo);
    let list_ci = sym!(lib, nvmlGpuInstanceGetComputeInstances);
    let destroy_ci = sym!(lib, nvmlComputeInstanceDestroy);
    let destroy_gi = sym!(lib, nvmlGpuInstanceDestroy);
    let mut gi: nvmlGpuInstance_t = std::ptr::null_mut();
    // SAFETY: live device handle; out-pointer for the GPU-instance handle.
    check("nvmlDeviceGetGpuInstanceById", unsafe {
        by_id(device, id, &mut gi)
    })?;
    for ci_profile in 0..NVML_COMPUTE_INSTANCE_PROFILE_COUNT {
        // SAFETY: `gi` is live; plain C out-struct.
        let mut ci_info: nvmlComputeInstanceProfileInfo_t = unsafe { std::mem::zeroed() };
        let code = unsafe {
            ci_info_of(
                gi,
                ci_profile,
                NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                &mut ci_info,
            )
        };
        if code != 0 {
            continue; // profile not offered on this GPU instance
        }
        let capacity = ci_info.instanceCount.max(1);
        let mut cis: Vec<nvmlComputeInstance_t> =
            vec![std::ptr::null_mut(); usize::try_from(capacity).unwrap_or(8)];
        let mut count = capacity;
        // SAFETY: `cis` has room for `count` handles.
        check("nvmlGpuInstanceGetComputeInstances", unsafe {
            list_ci(gi, ci_info.id, cis.as_mut_ptr(), &mut count)
        })?;
        for ci in cis.iter().take(usize::try_from(count).unwrap_or(0)) {
            // SAFETY: `ci` was just returned by NVML.
            check("nvmlComputeInstanceDestroy", unsafe { destroy_ci(*ci) })?;
        }
    }
    // SAFETY: `gi` is live and now has no compute instances.
    check("nvmlGpuInstanceDestroy", unsafe { destroy_gi(gi) })
}

/// The GPU-instance id a MIG device handle belongs to.
pub fn gpu_instance_id(lib: &NvmlLib, mig_device: &Device<'_>) -> Result<u32> {
    let mig_device = raw(mig_device);
    let f = sym!(lib, nvmlDeviceGetGpuInstanceId);
    let mut id = 0u32;
    // SAFETY: live MIG device handle; out-pointer for an integer.
    check("nvmlDeviceGetGpuInstanceId", unsafe {
        f(mig_device, &mut id)
    })?;
    Ok(id)
}
