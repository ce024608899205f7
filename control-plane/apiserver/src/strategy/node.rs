//! Nodes: status written by their kubelet (kept on create), and the `kubectl get nodes` columns.

use serde_json::{json, Value};

use super::{age, name_of, or_none, Column, Strategy};

pub(super) struct NodeStrategy;

fn address(obj: &Value, ty: &str) -> String {
    let found = obj["status"]["addresses"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|a| a["type"] == ty)
        .and_then(|a| a["address"].as_str());
    or_none(found)
}

impl Strategy for NodeStrategy {
    fn reset_status_on_create(&self) -> bool {
        false
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["spec.unschedulable"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Status", "string", "The status of the node"),
            Column::new("Roles", "string", "The roles of the node"),
            Column::AGE,
            Column::new("Version", "string", "Kubelet Version reported by the node."),
            Column::wide("Internal-IP", "string", "List of addresses reachable to the node."),
            Column::wide("External-IP", "string", "List of addresses reachable to the node."),
            Column::wide("OS-Image", "string", "OS Image reported by the node from /etc/os-release (e.g. Debian GNU/Linux 7 (wheezy))."),
            Column::wide("Kernel-Version", "string", "Kernel Version reported by the node from 'uname -r' (e.g. 3.16.0-0.bpo.4-amd64)."),
            Column::wide("Container-Runtime", "string", "ContainerRuntime Version reported by the node through runtime remote API (e.g. containerd://1.4.2)."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let ready = obj["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "Ready")
            .map(|c| match c["status"].as_str() {
                Some("True") => "Ready",
                Some("False") => "NotReady",
                _ => "Unknown",
            })
            .unwrap_or("Unknown");
        let mut status = ready.to_string();
        if obj["spec"]["unschedulable"].as_bool() == Some(true) {
            status.push_str(",SchedulingDisabled");
        }
        let mut roles: Vec<&str> = obj["metadata"]["labels"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(k, _)| k.strip_prefix("node-role.kubernetes.io/"))
            .filter(|r| !r.is_empty())
            .collect();
        roles.sort_unstable();
        let info = &obj["status"]["nodeInfo"];
        vec![
            json!(name_of(obj)),
            json!(status),
            json!(if roles.is_empty() {
                "<none>".to_string()
            } else {
                roles.join(",")
            }),
            json!(age(obj)),
            json!(info["kubeletVersion"].as_str().unwrap_or("")),
            json!(address(obj, "InternalIP")),
            json!(address(obj, "ExternalIP")),
            json!(or_none(info["osImage"].as_str())),
            json!(or_none(info["kernelVersion"].as_str())),
            json!(or_none(info["containerRuntimeVersion"].as_str())),
        ]
    }
}
