//! Shared-slice and time-slicing enforcement: the device assignment and environment a
//! container receives for a slice. Pure; whoever starts the container (device plugin, DRA
//! driver, the kubelet stand-in) applies it.
//!
//! Caveat: these are software limits enforced by the CUDA driver and MPS inside the container.
//! A process that ignores them (its own CUDA build, direct driver calls) is not stopped; memory
//! and faults are not isolated the way MIG isolates them. Low-trust tenants get whole GPUs or
//! MIG devices.

use std::collections::BTreeMap;

use crate::layout::SharedSlice;

/// What a container gets for one slice.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// Environment variables.
    pub env: BTreeMap<String, String>,
    /// Device UUIDs made visible (`NVIDIA_VISIBLE_DEVICES`).
    pub devices: Vec<String>,
}

/// The assignment for a shared slice of GPU `gpu_uuid`.
pub fn shared(gpu_uuid: &str, slice: &SharedSlice) -> Assignment {
    let mut env = BTreeMap::new();
    env.insert("NVIDIA_VISIBLE_DEVICES".into(), gpu_uuid.to_string());
    env.insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
    // MPS: memory cap per device and the share of SMs a client may use.
    env.insert(
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT".into(),
        format!("0={}M", slice.memory_mib),
    );
    env.insert(
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE".into(),
        slice.compute_percent.to_string(),
    );
    env.insert("FABRIK_GPU_SHARING".into(), "shared".into());
    Assignment {
        env,
        devices: vec![gpu_uuid.to_string()],
    }
}

/// The assignment for a time-sliced replica of GPU `gpu_uuid`: the whole GPU, no limits.
pub fn time_sliced(gpu_uuid: &str) -> Assignment {
    let mut env = BTreeMap::new();
    env.insert("NVIDIA_VISIBLE_DEVICES".into(), gpu_uuid.to_string());
    env.insert("FABRIK_GPU_SHARING".into(), "time-slicing".into());
    Assignment {
        env,
        devices: vec![gpu_uuid.to_string()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_slices_carry_memory_and_compute_limits() {
        let a = shared(
            "GPU-1",
            &SharedSlice {
                memory_mib: 20480,
                compute_percent: 25,
                count: 4,
            },
        );
        assert_eq!(a.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"], "0=20480M");
        assert_eq!(a.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"], "25");
        assert_eq!(a.devices, vec!["GPU-1".to_string()]);
        assert_eq!(
            time_sliced("GPU-2").env["FABRIK_GPU_SHARING"],
            "time-slicing"
        );
    }
}
