//! The pure part of the endpoints controller: a Service's selected pods become Endpoints
//! subsets and EndpointSlices, one per distinct set of resolved ports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EndpointAddress, EndpointPort, EndpointSubset, ObjectReference, Pod, Service,
};
use k8s_openapi::api::discovery::v1::{
    Endpoint, EndpointConditions, EndpointPort as SlicePort, EndpointSlice,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::deployment::hash::template_hash;
use crate::shared::{pod_is_ready, selector_matches};

/// The label naming a slice's Service.
pub const SERVICE_NAME_LABEL: &str = "kubernetes.io/service-name";
/// The label naming a slice's manager.
pub const MANAGED_BY_LABEL: &str = "endpointslice.kubernetes.io/managed-by";
/// This controller's value of [`MANAGED_BY_LABEL`].
pub const MANAGED_BY: &str = "endpointslice-controller.k8s.io";

/// A pod's place in a Service.
#[derive(Debug, Clone, PartialEq)]
pub struct Member {
    /// The pod's IP.
    pub ip: String,
    /// Ready (or the Service publishes not-ready addresses).
    pub ready: bool,
    /// Being deleted.
    pub terminating: bool,
    /// The pod's hostname when its subdomain is the Service's name.
    pub hostname: Option<String>,
    /// The pod's node.
    pub node: Option<String>,
    /// A reference to the pod.
    pub target: ObjectReference,
}

/// Whether the controller manages this Service's endpoints: it has a non-empty selector and
/// is not `ExternalName`.
pub fn managed(svc: &Service) -> bool {
    svc.spec.as_ref().is_some_and(|s| {
        s.selector.as_ref().is_some_and(|m| !m.is_empty())
            && s.type_.as_deref() != Some("ExternalName")
    })
}

/// The Service's ports resolved against `pod` (a named targetPort the pod does not declare
/// drops that port for this pod, as upstream).
pub fn resolve_ports(svc: &Service, pod: &Pod) -> Vec<EndpointPort> {
    let ports = svc
        .spec
        .as_ref()
        .and_then(|s| s.ports.clone())
        .unwrap_or_default();
    ports
        .iter()
        .filter_map(|p| {
            let number = match p.target_port.as_ref() {
                None => p.port,
                Some(IntOrString::Int(0)) => p.port,
                Some(IntOrString::Int(n)) => *n,
                Some(IntOrString::String(name)) => pod
                    .spec
                    .iter()
                    .flat_map(|s| s.containers.iter())
                    .flat_map(|c| c.ports.iter().flatten())
                    .find(|cp| {
                        cp.name.as_deref() == Some(name.as_str())
                            && cp.protocol.as_deref().unwrap_or("TCP")
                                == p.protocol.as_deref().unwrap_or("TCP")
                    })
                    .map(|cp| cp.container_port)?,
            };
            Some(EndpointPort {
                name: p.name.clone(),
                port: number,
                protocol: Some(p.protocol.clone().unwrap_or_else(|| "TCP".into())),
                app_protocol: p.app_protocol.clone(),
            })
        })
        .collect()
}

/// The pods of the Service, grouped by their resolved ports. Pods without an IP or finished
/// are left out.
pub fn members(
    svc: &Service,
    pods: &[Pod],
) -> BTreeMap<Vec<PortKey>, (Vec<EndpointPort>, Vec<Member>)> {
    let spec = svc.spec.clone().unwrap_or_default();
    let selector = k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
        match_labels: spec.selector.clone(),
        match_expressions: None,
    };
    let publish_not_ready = spec.publish_not_ready_addresses == Some(true);
    let svc_name = svc.metadata.name.clone().unwrap_or_default();
    let mut groups: BTreeMap<Vec<PortKey>, (Vec<EndpointPort>, Vec<Member>)> = BTreeMap::new();
    for pod in pods {
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        if !selector_matches(&selector, &labels) {
            continue;
        }
        let status = pod.status.clone().unwrap_or_default();
        let Some(ip) = status.pod_ip.clone().filter(|ip| !ip.is_empty()) else {
            continue;
        };
        if matches!(status.phase.as_deref(), Some("Succeeded" | "Failed")) {
            continue;
        }
        let pod_spec = pod.spec.clone().unwrap_or_default();
        let hostname = pod_spec
            .hostname
            .clone()
            .filter(|_| pod_spec.subdomain.as_deref() == Some(svc_name.as_str()));
        let member = Member {
            ip,
            ready: publish_not_ready || pod_is_ready(pod),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            hostname,
            node: pod_spec.node_name.clone(),
            target: ObjectReference {
                kind: Some("Pod".into()),
                name: pod.metadata.name.clone(),
                namespace: pod.metadata.namespace.clone(),
                uid: pod.metadata.uid.clone(),
                ..ObjectReference::default()
            },
        };
        let ports = resolve_ports(svc, pod);
        let key: Vec<PortKey> = ports.iter().map(PortKey::of).collect();
        let entry = groups.entry(key).or_insert_with(|| (ports, Vec::new()));
        entry.1.push(member);
    }
    for (_, members) in groups.values_mut() {
        members.sort_by(|a, b| a.ip.cmp(&b.ip).then(a.target.name.cmp(&b.target.name)));
    }
    groups
}

/// A port, comparable.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct PortKey(String, i32, String);

impl PortKey {
    fn of(p: &EndpointPort) -> PortKey {
        PortKey(
            p.name.clone().unwrap_or_default(),
            p.port,
            p.protocol.clone().unwrap_or_default(),
        )
    }
}

type Groups = BTreeMap<Vec<PortKey>, (Vec<EndpointPort>, Vec<Member>)>;

/// The Endpoints subsets: ready addresses and `notReadyAddresses`; terminating pods are left
/// out (unless the Service publishes not-ready addresses).
pub fn subsets(groups: &Groups, publish_not_ready: bool) -> Option<Vec<EndpointSubset>> {
    let out: Vec<EndpointSubset> = groups
        .values()
        .filter_map(|(ports, members)| {
            let address = |m: &Member| EndpointAddress {
                ip: m.ip.clone(),
                hostname: m.hostname.clone(),
                node_name: m.node.clone(),
                target_ref: Some(m.target.clone()),
            };
            let usable: Vec<&Member> = members
                .iter()
                .filter(|m| publish_not_ready || !m.terminating)
                .collect();
            let ready: Vec<EndpointAddress> = usable
                .iter()
                .filter(|m| m.ready)
                .map(|m| address(m))
                .collect();
            let not_ready: Vec<EndpointAddress> = usable
                .iter()
                .filter(|m| !m.ready)
                .map(|m| address(m))
                .collect();
            if ready.is_empty() && not_ready.is_empty() {
                return None;
            }
            Some(EndpointSubset {
                addresses: (!ready.is_empty()).then_some(ready),
                not_ready_addresses: (!not_ready.is_empty()).then_some(not_ready),
                ports: (!ports.is_empty()).then(|| ports.clone()),
            })
        })
        .collect();
    (!out.is_empty()).then_some(out)
}

/// The EndpointSlices of `svc`: one per port set (named `<service>-<hash of the ports>`),
/// or one empty slice when no pod is selected.
pub fn slices(svc: &Service, groups: &Groups, owner: OwnerReference) -> Vec<EndpointSlice> {
    let name = svc.metadata.name.clone().unwrap_or_default();
    let mut labels = svc.metadata.labels.clone().unwrap_or_default();
    labels.insert(SERVICE_NAME_LABEL.into(), name.clone());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY.into());
    let ipv6 = svc
        .spec
        .as_ref()
        .and_then(|s| s.ip_families.as_ref())
        .and_then(|f| f.first())
        .is_some_and(|f| f == "IPv6");
    let slice =
        |suffix: &str, ports: Option<Vec<SlicePort>>, endpoints: Vec<Endpoint>| EndpointSlice {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{suffix}")),
                namespace: svc.metadata.namespace.clone(),
                labels: Some(labels.clone()),
                owner_references: Some(vec![owner.clone()]),
                ..ObjectMeta::default()
            },
            address_type: if ipv6 { "IPv6".into() } else { "IPv4".into() },
            endpoints: Some(endpoints),
            ports,
        };
    if groups.is_empty() {
        return vec![slice("empty", None, vec![])];
    }
    groups
        .iter()
        .map(|(key, (ports, members))| {
            let suffix = port_suffix(key);
            let ports: Vec<SlicePort> = ports
                .iter()
                .map(|p| SlicePort {
                    name: Some(p.name.clone().unwrap_or_default()),
                    port: Some(p.port),
                    protocol: p.protocol.clone(),
                    app_protocol: p.app_protocol.clone(),
                })
                .collect();
            let endpoints = members
                .iter()
                .map(|m| Endpoint {
                    addresses: vec![m.ip.clone()],
                    conditions: Some(EndpointConditions {
                        ready: Some(m.ready && !m.terminating),
                        serving: Some(m.ready),
                        terminating: Some(m.terminating),
                    }),
                    hostname: m.hostname.clone(),
                    node_name: m.node.clone(),
                    target_ref: Some(m.target.clone()),
                    ..Endpoint::default()
                })
                .collect();
            slice(&suffix, Some(ports), endpoints)
        })
        .collect()
}

/// A short stable suffix for a port set.
fn port_suffix(key: &[PortKey]) -> String {
    let text: Vec<String> = key
        .iter()
        .map(|k| format!("{}/{}/{}", k.0, k.1, k.2))
        .collect();
    let template = k8s_openapi::api::core::v1::PodTemplateSpec {
        metadata: Some(ObjectMeta {
            name: Some(text.join(",")),
            ..ObjectMeta::default()
        }),
        spec: None,
    };
    template_hash(&template, None)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn svc(target: serde_json::Value) -> Service {
        serde_json::from_value(json!({
            "metadata": {"name": "web", "namespace": "ns"},
            "spec": {"selector": {"app": "web"},
                     "ports": [{"name": "http", "port": 80, "targetPort": target}]},
        }))
        .expect("service")
    }

    fn pod(name: &str, ip: &str, ready: bool, port_name: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "ports": [{"name": port_name, "containerPort": 8080}]}]},
            "status": {"phase": "Running", "podIP": ip,
                       "conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]},
        }))
        .expect("pod")
    }

    #[test]
    fn ready_and_not_ready_addresses() {
        let s = svc(json!("web"));
        let pods = vec![
            pod("a", "10.0.0.1", true, "web"),
            pod("b", "10.0.0.2", false, "web"),
            pod("c", "10.0.0.3", true, "other"),
        ];
        let groups = members(&s, &pods);
        let subs = subsets(&groups, false).expect("subsets");
        // c does not declare the named port: a subset without ports.
        assert_eq!(subs.len(), 2);
        let with_port = subs
            .iter()
            .find(|s| s.ports.is_some())
            .expect("subset with the port");
        assert_eq!(with_port.ports.as_ref().map(|p| p[0].port), Some(8080));
        assert_eq!(
            with_port.addresses.as_ref().map(|a| a[0].ip.as_str()),
            Some("10.0.0.1")
        );
        assert_eq!(
            with_port
                .not_ready_addresses
                .as_ref()
                .map(|a| a[0].ip.as_str()),
            Some("10.0.0.2")
        );
        let owner = OwnerReference::default();
        let sls = slices(&s, &groups, owner.clone());
        assert_eq!(sls.len(), 2);
        for sl in &sls {
            let labels = sl.metadata.labels.clone().unwrap_or_default();
            assert_eq!(
                labels.get(SERVICE_NAME_LABEL).map(String::as_str),
                Some("web")
            );
            assert_eq!(
                labels.get(MANAGED_BY_LABEL).map(String::as_str),
                Some(MANAGED_BY)
            );
        }
        // Numeric and missing target ports.
        assert_eq!(resolve_ports(&svc(json!(9090)), &pods[0])[0].port, 9090);
        assert_eq!(resolve_ports(&svc(json!(null)), &pods[0])[0].port, 80);
        // No pods: no subsets, one empty slice.
        let none = members(&s, &[]);
        assert_eq!(subsets(&none, false), None);
        assert_eq!(slices(&s, &none, owner).len(), 1);
    }
}
