//! Services: defaulting, validation, and the cluster-wide allocation of cluster IPs (from
//! 10.96.0.0/12) and node ports (30000–32767). Allocation reads the cluster's services under a
//! lock, so two concurrent creates in this process never receive the same IP or port.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use async_trait::async_trait;
use fabrik_machinery::validation::FieldError;
use fabrik_store::{ListOptions, Store};
use rand::Rng;
use serde_json::{json, Value};
use tokio::sync::Mutex;

use super::{
    age, default_field, immutable, invalid, name_of, not_supported, or_none, required, Column,
    Strategy, StrategyContext,
};
use crate::error::ApiError;

const TYPES: [&str; 4] = ["ClusterIP", "NodePort", "LoadBalancer", "ExternalName"];
/// First address of the service range; `.1` is reserved for the `kubernetes` service.
const RANGE_BASE: u32 = u32::from_be_bytes([10, 96, 0, 0]);
/// Size of 10.96.0.0/12.
const RANGE_SIZE: u32 = 1 << 20;
const NODE_PORTS: std::ops::RangeInclusive<i64> = 30000..=32767;

#[derive(Default)]
pub(super) struct ServiceStrategy {
    /// Serialises allocations within this process.
    lock: Mutex<()>,
}

fn svc_type(obj: &Value) -> &str {
    obj["spec"]["type"].as_str().unwrap_or("ClusterIP")
}

fn needs_node_ports(obj: &Value) -> bool {
    matches!(svc_type(obj), "NodePort" | "LoadBalancer")
}

async fn used(store: &dyn Store) -> Result<(HashSet<String>, HashSet<i64>), ApiError> {
    let list = store
        .list(ListOptions {
            prefix: "/core/services/".into(),
            ..Default::default()
        })
        .await?;
    let mut ips = HashSet::new();
    let mut ports = HashSet::new();
    for kv in list.items {
        let Ok(v) = serde_json::from_slice::<Value>(&kv.value) else {
            continue;
        };
        if let Some(ip) = v["spec"]["clusterIP"].as_str() {
            ips.insert(ip.to_string());
        }
        for p in v["spec"]["ports"].as_array().into_iter().flatten() {
            if let Some(n) = p["nodePort"].as_i64() {
                ports.insert(n);
            }
        }
    }
    Ok((ips, ports))
}

fn in_range(ip: &str) -> bool {
    ip.parse::<Ipv4Addr>()
        .map(|a| u32::from(a).wrapping_sub(RANGE_BASE) < RANGE_SIZE)
        .unwrap_or(false)
}

fn alloc_error(field: &str, value: &str, msg: &str) -> ApiError {
    ApiError::Invalid {
        kind: "Service".into(),
        group: String::new(),
        name: String::new(),
        causes: vec![invalid(field, value, msg)],
    }
}

#[async_trait]
impl Strategy for ServiceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
        if let Some(o) = obj.as_object_mut() {
            o.insert("status".into(), json!({"loadBalancer": {}}));
        }
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        default_field(obj, &["spec", "type"], json!("ClusterIP"));
        let ty = svc_type(obj).to_string();
        if ty != "ExternalName" {
            default_field(obj, &["spec", "sessionAffinity"], json!("None"));
            default_field(obj, &["spec", "ipFamilies"], json!(["IPv4"]));
            default_field(obj, &["spec", "ipFamilyPolicy"], json!("SingleStack"));
            default_field(obj, &["spec", "internalTrafficPolicy"], json!("Cluster"));
        }
        if matches!(ty.as_str(), "NodePort" | "LoadBalancer") {
            default_field(obj, &["spec", "externalTrafficPolicy"], json!("Cluster"));
        }
        if let Some(ports) = obj["spec"].get_mut("ports").and_then(Value::as_array_mut) {
            for p in ports {
                default_field(p, &["protocol"], json!("TCP"));
                let port = p["port"].clone();
                default_field(p, &["targetPort"], port);
            }
        }
    }

    async fn allocate(
        &self,
        ctx: &StrategyContext<'_>,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let _guard = self.lock.lock().await;
        let ty = svc_type(obj).to_string();
        if let Some(old) = old {
            // Keep what was allocated; a change of clusterIP is refused by validate_update.
            if obj["spec"]["clusterIP"].is_null()
                && !old["spec"]["clusterIP"].is_null()
                && ty != "ExternalName"
            {
                obj["spec"]["clusterIP"] = old["spec"]["clusterIP"].clone();
                obj["spec"]["clusterIPs"] = old["spec"]["clusterIPs"].clone();
            }
        }
        let (mut ips, mut ports) = used(ctx.store).await?;
        if let Some(old) = old {
            if let Some(ip) = old["spec"]["clusterIP"].as_str() {
                ips.remove(ip);
            }
            for p in old["spec"]["ports"].as_array().into_iter().flatten() {
                if let Some(n) = p["nodePort"].as_i64() {
                    ports.remove(&n);
                }
            }
        }
        // With a source of addresses the address is reserved once the write is admitted
        // (`reserve`); a dry run reserves nothing, and shows none.
        let source = ctx.service_ips;
        if source.is_none() && ty != "ExternalName" {
            match obj["spec"]["clusterIP"].as_str() {
                Some("None") => {}
                Some(ip) if !ip.is_empty() => {
                    if !in_range(ip) {
                        return Err(alloc_error("spec.clusterIPs", ip, "failed to allocate IP: the provided IP is not in the valid range. The range of valid IPs is 10.96.0.0/12"));
                    }
                    if ips.contains(ip) {
                        return Err(alloc_error(
                            "spec.clusterIPs",
                            ip,
                            "failed to allocate IP: provided IP is already allocated",
                        ));
                    }
                }
                _ => {
                    let mut rng = rand::rng();
                    let ip = (0..64)
                        .map(|_| {
                            Ipv4Addr::from(RANGE_BASE + rng.random_range(2..RANGE_SIZE - 1))
                                .to_string()
                        })
                        .find(|ip| !ips.contains(ip))
                        .ok_or_else(|| ApiError::Internal("no free cluster IP".into()))?;
                    obj["spec"]["clusterIP"] = json!(ip);
                }
            }
            let ip = obj["spec"]["clusterIP"].clone();
            obj["spec"]["clusterIPs"] = json!([ip]);
        }
        if needs_node_ports(obj) {
            let mut rng = rand::rng();
            if let Some(list) = obj["spec"].get_mut("ports").and_then(Value::as_array_mut) {
                for p in list {
                    match p["nodePort"].as_i64() {
                        Some(n) => {
                            if !NODE_PORTS.contains(&n) {
                                return Err(alloc_error("spec.ports[0].nodePort", &n.to_string(), "provided port is not in the valid range. The range of valid ports is 30000-32767"));
                            }
                            if !ports.insert(n) {
                                return Err(alloc_error(
                                    "spec.ports[0].nodePort",
                                    &n.to_string(),
                                    "provided port is already allocated",
                                ));
                            }
                        }
                        None => {
                            let n = (0..256)
                                .map(|_| rng.random_range(NODE_PORTS))
                                .find(|n| !ports.contains(n))
                                .ok_or_else(|| ApiError::Internal("no free node port".into()))?;
                            ports.insert(n);
                            p["nodePort"] = json!(n);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn reserve(
        &self,
        ctx: &StrategyContext<'_>,
        obj: &mut Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        let Some(source) = ctx.service_ips.filter(|_| !ctx.dry_run) else {
            return Ok(());
        };
        let ty = svc_type(obj).to_string();
        if ty == "ExternalName" || obj["spec"]["clusterIP"] == "None" {
            return Ok(());
        }
        let kept = old.is_some_and(|o| {
            o["spec"]["clusterIP"].is_string() && o["spec"]["clusterIP"] == obj["spec"]["clusterIP"]
        });
        if !kept {
            // The source allocates uniquely: no lock is held across it.
            if let Some(ip) = source.allocate(obj).await? {
                obj["spec"]["clusterIP"] = json!(ip);
            }
        }
        if let Some(ip) = obj["spec"]["clusterIP"].as_str().map(str::to_string) {
            obj["spec"]["clusterIPs"] = json!([ip]);
        }
        Ok(())
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        let ty = svc_type(obj);
        if !TYPES.contains(&ty) {
            errs.push(not_supported("spec.type", ty, &TYPES));
        }
        let ports = obj["spec"]["ports"].as_array();
        if ty == "ExternalName" {
            if obj["spec"]["externalName"]
                .as_str()
                .is_none_or(str::is_empty)
            {
                errs.push(required("spec.externalName"));
            }
        } else if ports.is_none_or(|p| p.is_empty()) && obj["spec"]["clusterIP"] != "None" {
            errs.push(required("spec.ports"));
        }
        let multiple = ports.is_some_and(|p| p.len() > 1);
        for (i, p) in ports.into_iter().flatten().enumerate() {
            let n = p["port"].as_i64().unwrap_or(0);
            if !(1..=65535).contains(&n) {
                errs.push(invalid(
                    format!("spec.ports[{i}].port"),
                    &n.to_string(),
                    "must be between 1 and 65535, inclusive",
                ));
            }
            if multiple && p["name"].as_str().is_none_or(str::is_empty) {
                errs.push(required(format!("spec.ports[{i}].name")));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let to_or_from_external =
            svc_type(new) == "ExternalName" || svc_type(old) == "ExternalName";
        if to_or_from_external {
            return Vec::new();
        }
        immutable(new, old, &["spec", "clusterIP"], "spec.clusterIPs[0]")
            .into_iter()
            .collect()
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Type", "string", "type determines how the Service is exposed."),
            Column::new("Cluster-IP", "string", "clusterIP is the IP address of the service."),
            Column::new("External-IP", "string", "externalIPs is a list of IP addresses for which nodes in the cluster will also accept traffic for this service."),
            Column::new("Port(s)", "string", "The list of ports that are exposed by this service."),
            Column::AGE,
            Column::wide("Selector", "string", "Route service traffic to pods with label keys and values matching this selector."),
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let spec = &obj["spec"];
        let ports: Vec<String> = spec["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .map(|p| {
                let proto = p["protocol"].as_str().unwrap_or("TCP");
                match p["nodePort"].as_i64() {
                    Some(np) => format!("{}:{np}/{proto}", p["port"]),
                    None => format!("{}/{proto}", p["port"]),
                }
            })
            .collect();
        let external: Vec<String> = obj["status"]["loadBalancer"]["ingress"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|i| {
                i["ip"]
                    .as_str()
                    .or(i["hostname"].as_str())
                    .map(str::to_string)
            })
            .chain(
                spec["externalIPs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|v| v.as_str().map(str::to_string)),
            )
            .collect();
        let external = match (svc_type(obj), external.is_empty()) {
            ("ExternalName", _) => spec["externalName"].as_str().unwrap_or("").to_string(),
            ("LoadBalancer", true) => "<pending>".into(),
            (_, true) => "<none>".into(),
            (_, false) => external.join(","),
        };
        let selector: Vec<String> = spec["selector"]
            .as_object()
            .into_iter()
            .flatten()
            .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
            .collect();
        vec![
            json!(name_of(obj)),
            json!(svc_type(obj)),
            json!(or_none(spec["clusterIP"].as_str())),
            json!(external),
            json!(if ports.is_empty() {
                "<none>".to_string()
            } else {
                ports.join(",")
            }),
            json!(age(obj)),
            json!(if selector.is_empty() {
                "<none>".to_string()
            } else {
                selector.join(",")
            }),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_check() {
        assert!(in_range("10.96.0.10"));
        assert!(in_range("10.111.255.254"));
        assert!(!in_range("10.112.0.1"));
        assert!(!in_range("garbage"));
    }

    #[test]
    fn defaults_and_validation() {
        let mut s = json!({"metadata": {"name": "s"}, "spec": {"ports": [{"port": 80}]}});
        ServiceStrategy::default().prepare_for_create(&mut s);
        assert_eq!(s["spec"]["type"], "ClusterIP");
        assert_eq!(s["spec"]["ports"][0]["targetPort"], 80);
        assert!(ServiceStrategy::default().validate(&s).is_empty());
        let bad = json!({"spec": {"type": "Weird", "ports": [{"port": 0}, {"port": 1}]}});
        assert_eq!(ServiceStrategy::default().validate(&bad).len(), 4);
    }
}
