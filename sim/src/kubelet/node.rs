//! The Node a simulated kubelet registers: labels, capacity and allocatable (cpu, memory,
//! pods, ephemeral storage — the GPU resources are the node agent's), the `Ready` and pressure
//! conditions, addresses and `nodeInfo`. Built here, written by the kubelet loop with merge
//! patches, so the agent's labels, GPU resources and conditions are left alone.

use serde_json::{json, Value};

/// What one simulated node is.
#[derive(Clone, Debug)]
pub struct NodeShape {
    /// Node name.
    pub name: String,
    /// Node index (pod range `10.244.<index>.0/24`, address `10.0.0.<index + 10>`).
    pub index: u8,
    /// CPU cores.
    pub cpus: u32,
    /// Memory in GiB.
    pub memory_gib: u64,
    /// Pods it accepts.
    pub max_pods: u32,
    /// Instance-type label value.
    pub instance_type: String,
}

impl NodeShape {
    /// The node's internal address.
    pub fn host_ip(&self) -> String {
        format!("10.0.0.{}", u16::from(self.index) + 10)
    }
}

/// Version the simulated kubelet reports.
pub const KUBELET_VERSION: &str = "v1.35.0-fabrik-sim";

/// The labels.
pub fn labels(shape: &NodeShape) -> Value {
    json!({
        "kubernetes.io/hostname": shape.name,
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": shape.instance_type,
        "topology.kubernetes.io/zone": "fabrik-sim",
        "fabrik.dev/simulated": "true",
    })
}

/// The status (capacity, allocatable, conditions, addresses, nodeInfo).
pub fn status(shape: &NodeShape, now: &Value) -> Value {
    let resources = json!({
        "cpu": shape.cpus.to_string(),
        "memory": format!("{}Gi", shape.memory_gib),
        "pods": shape.max_pods.to_string(),
        "ephemeral-storage": "3500Gi",
    });
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": now})
    };
    json!({"status": {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            cond("Ready", "True", "KubeletReady", "simulated kubelet is posting ready status"),
            cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "simulated"),
            cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "simulated"),
            cond("PIDPressure", "False", "KubeletHasSufficientPID", "simulated"),
        ],
        "addresses": [
            {"type": "InternalIP", "address": shape.host_ip()},
            {"type": "Hostname", "address": shape.name},
        ],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        "nodeInfo": {
            "machineID": format!("fabrik-sim-{}", shape.index),
            "systemUUID": format!("00000000-0000-0000-0000-{:012}", shape.index),
            "bootID": format!("fabrik-sim-boot-{}", shape.index),
            "kernelVersion": "simulated",
            "osImage": "Fabrik simulated node",
            "containerRuntimeVersion": "sim://fabrik",
            "kubeletVersion": KUBELET_VERSION,
            "kubeProxyVersion": KUBELET_VERSION,
            "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_becomes_labels_and_status() {
        let shape = NodeShape {
            name: "gpu-node-0".into(),
            index: 0,
            cpus: 224,
            memory_gib: 2048,
            max_pods: 110,
            instance_type: "sim-h200x8".into(),
        };
        let s = status(&shape, &json!("2026-01-01T00:00:00Z"));
        assert_eq!(s["status"]["capacity"]["cpu"], "224");
        assert_eq!(s["status"]["allocatable"]["memory"], "2048Gi");
        assert_eq!(s["status"]["conditions"][0]["type"], "Ready");
        assert_eq!(s["status"]["addresses"][0]["address"], "10.0.0.10");
        assert_eq!(labels(&shape)["kubernetes.io/hostname"], "gpu-node-0");
    }
}
