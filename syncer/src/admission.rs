//! Pod admission for tenant API servers: the fields a tenant pod may not set unless its policy
//! allows them. The syncer's allow-list would drop them anyway; refusing them at admission gives
//! the user a clear error instead of a pod that silently runs differently.
//!
//! Messages follow the API server's field error style, `<path>: Forbidden: <why>`, one per
//! offending field, so the caller can return them as the causes of a 403/422 Status.
//!
//! Besides pods ([`check_pod`]; volume paths in [`crate::paths`]), the network objects the
//! syncer copies: Services ([`check_service`]: no `externalIPs`, `ExternalName` only to names
//! on the Tenant's list), Endpoints and EndpointSlices ([`check_endpoints`],
//! [`check_endpoint_slice`]: no address that can never be a pod's, no `FQDN` slices) and, when
//! the tenant's Ingresses are synced, Ingresses ([`crate::ingresses::check_ingress`]).
//! [`check`] dispatches by resource.

use std::collections::BTreeSet;
use std::net::IpAddr;

use fabrik_api::RESERVED_PREFIX;
pub use fabrik_machinery::pod_security::BASELINE_CAPABILITIES;
use serde_json::Value;

use crate::addresses;
use crate::gpu;
use crate::policy::Policy;
use crate::services::{allowed_external_name, is_dns_label};

/// A resource the tenant admission checks: `(API group, plural)`.
pub fn checks(group: &str, plural: &str, policy: &Policy) -> bool {
    matches!(
        (group, plural),
        ("", "pods" | "services" | "endpoints") | ("discovery.k8s.io", "endpointslices")
    ) || template_path(group, plural).is_some()
        || (group == "networking.k8s.io" && plural == "ingresses" && policy.sync_ingresses)
        || (group == crate::routes::GROUP
            && policy
                .synced_routes
                .iter()
                .any(|k| k.api_resource().plural == plural))
}

/// Where a workload kind keeps the pod template its controller creates pods from.
fn template_path(group: &str, plural: &str) -> Option<&'static [&'static str]> {
    match (group, plural) {
        ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs")
        | ("", "replicationcontrollers") => Some(&["spec", "template"]),
        ("batch", "cronjobs") => Some(&["spec", "jobTemplate", "spec", "template"]),
        _ => None,
    }
}

/// Checks a workload's pod template as its pods will be checked, so that a chart asking for
/// what the tenant may not have (host networking, `hostPath`, privileged containers) is refused
/// at `helm install` with the field named — not admitted and left with pods that never come.
/// An update is checked only when it changes the template (scaling an old workload is not).
fn check_template(
    path: &[&str],
    obj: &Value,
    old: Option<&Value>,
    policy: &Policy,
) -> Result<(), Vec<String>> {
    let at = |v: &'_ Value| path.iter().fold(v.clone(), |cur, k| cur[*k].clone());
    let template = at(obj);
    if template.is_null() || old.is_some_and(|o| at(o) == template) {
        return Ok(());
    }
    let prefix = path.join(".");
    check_pod(&template, policy)
        .map_err(|errs| errs.into_iter().map(|e| format!("{prefix}.{e}")).collect())
}

/// Checks a create (`old` is `None`) or update of an object of resource `(group, plural)` in a
/// tenant cluster; resources not checked here are admitted. `Err` lists every refused field.
pub fn check(
    group: &str,
    plural: &str,
    obj: &Value,
    old: Option<&Value>,
    policy: &Policy,
) -> Result<(), Vec<String>> {
    check_with_pods(group, plural, obj, old, policy, &BTreeSet::new())
}

/// [`check`], where `pod_ips` are addresses the host gave the tenant's pods: an Endpoints or
/// EndpointSlice address among them is a pod's whatever its range (simulated nodes may give
/// pods loopback addresses, say). The caller looks them up only when [`check`] refused an
/// address: a refusal is rare, a lookup per endpoints write is not.
pub fn check_with_pods(
    group: &str,
    plural: &str,
    obj: &Value,
    old: Option<&Value>,
    policy: &Policy,
    pod_ips: &BTreeSet<IpAddr>,
) -> Result<(), Vec<String>> {
    if !checks(group, plural, policy) {
        return Ok(());
    }
    let meta = &obj["metadata"];
    let ns = meta["namespace"].as_str().unwrap_or("");
    let service = match (group, plural) {
        ("", "endpoints") => meta["name"].as_str(),
        ("discovery.k8s.io", "endpointslices") => crate::services::slice_service(obj),
        _ => None,
    };
    // The tenant's `kubernetes` Service names its control plane; it is never synced.
    if service.is_some_and(|svc| crate::services::is_api_service(ns, svc)) {
        return Ok(());
    }
    match (group, plural) {
        ("", "pods") => match old {
            Some(old) => check_pod_update(old, obj, policy),
            None => check_pod(obj, policy),
        },
        ("", "services") => check_service(obj, old, policy),
        ("", "endpoints") => check_endpoints(obj, pod_ips),
        ("discovery.k8s.io", "endpointslices") => check_endpoint_slice(obj, pod_ips),
        ("networking.k8s.io", "ingresses") => crate::ingresses::check_ingress(obj, policy),
        (crate::routes::GROUP, "httproutes" | "grpcroutes") => {
            crate::routes::check_route(obj, policy)
        }
        _ => match template_path(group, plural) {
            Some(path) => check_template(path, obj, old, policy),
            None => Ok(()),
        },
    }
}

fn result(errs: Vec<String>) -> Result<(), Vec<String>> {
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Checks a tenant Service: `externalIPs` claim addresses on the host's nodes and are refused;
/// an `ExternalName` must be a DNS name on the Tenant's `externalNames` list. (Cluster IPs,
/// node ports and load balancer settings the tenant chooses stay in the tenant: the host copy
/// never carries them.)
pub fn check_service(svc: &Value, old: Option<&Value>, policy: &Policy) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let spec = &svc["spec"];
    // The address is the host copy's (see `crate::service_ips`): a tenant does not choose
    // addresses of the host's Service range. Headless (`None`) is no address; keeping the one
    // given is no choice; the tenant's `kubernetes` Service names its control plane.
    let meta = &svc["metadata"];
    let api = crate::services::is_api_service(
        meta["namespace"].as_str().unwrap_or(""),
        meta["name"].as_str().unwrap_or(""),
    );
    let asked = spec["clusterIP"]
        .as_str()
        .filter(|ip| !ip.is_empty() && *ip != "None");
    let kept = old.and_then(|o| o["spec"]["clusterIP"].as_str());
    if let Some(ip) = asked.filter(|ip| !api && Some(*ip) != kept) {
        errs.push(forbidden(
            "spec.clusterIP",
            &format!(
                "{ip:?}: a tenant Service's address is given by the host; leave spec.clusterIP \
                 empty (or None for a headless Service)"
            ),
        ));
    }
    if spec["externalIPs"]
        .as_array()
        .is_some_and(|a| !a.is_empty())
    {
        errs.push(forbidden(
            "spec.externalIPs",
            "external IPs would claim addresses on the host's nodes; not allowed in tenant clusters",
        ));
    }
    if spec["type"].as_str() == Some("ExternalName") && allowed_external_name(svc, policy).is_none()
    {
        let name = spec["externalName"].as_str().unwrap_or("");
        errs.push(forbidden(
            "spec.externalName",
            &format!(
                "{name:?} is not one of the DNS names this tenant's ExternalName Services may \
                 point at ({})",
                if policy.external_names.is_empty() {
                    "none".to_string()
                } else {
                    policy.external_names.join(", ")
                }
            ),
        ));
    }
    result(errs)
}

fn check_ip(
    text: &str,
    path: &str,
    family: Option<&str>,
    pod_ips: &BTreeSet<IpAddr>,
    errs: &mut Vec<String>,
) {
    match addresses::parse_ip(text) {
        None => errs.push(format!(
            "{path}: Invalid value: {text:?}: must be a valid IP address"
        )),
        Some(ip) => {
            if let Some(why) = addresses::special(ip).filter(|_| !pod_ips.contains(&ip)) {
                errs.push(format!(
                    "{path}: Invalid value: {text:?}: {why}; not a pod address"
                ));
            } else if family.is_some_and(|f| (f == "IPv4") != ip.is_ipv4()) {
                errs.push(format!(
                    "{path}: Invalid value: {text:?}: must be an {} address",
                    family.unwrap_or("")
                ));
            }
        }
    }
}

fn check_hostname(v: &Value, path: &str, errs: &mut Vec<String>) {
    if let Some(h) = v.as_str() {
        if !is_dns_label(h) {
            errs.push(format!(
                "{path}: Invalid value: {h:?}: must be a lowercase RFC 1123 label"
            ));
        }
    }
}

/// Checks a tenant Endpoints: every address an IP that could be a pod's (not loopback,
/// link-local, unspecified, multicast), every hostname a DNS label. Which pods the addresses
/// are is checked by the syncer, which copies only the tenant's own.
pub fn check_endpoints(ep: &Value, pod_ips: &BTreeSet<IpAddr>) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    for (i, s) in ep["subsets"].as_array().into_iter().flatten().enumerate() {
        for list in ["addresses", "notReadyAddresses"] {
            for (j, a) in s[list].as_array().into_iter().flatten().enumerate() {
                let path = format!("subsets[{i}].{list}[{j}]");
                check_ip(
                    a["ip"].as_str().unwrap_or(""),
                    &format!("{path}.ip"),
                    None,
                    pod_ips,
                    &mut errs,
                );
                check_hostname(&a["hostname"], &format!("{path}.hostname"), &mut errs);
            }
        }
    }
    result(errs)
}

/// Checks a tenant EndpointSlice: `IPv4` or `IPv6` addresses that could be a pod's, of the
/// slice's family. `FQDN` slices (names, which the host would resolve) are refused.
pub fn check_endpoint_slice(slice: &Value, pod_ips: &BTreeSet<IpAddr>) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    let family = slice["addressType"].as_str().unwrap_or("");
    match family {
        "IPv4" | "IPv6" => {}
        "FQDN" => errs.push(forbidden(
            "addressType",
            "FQDN EndpointSlices name hosts the host cluster would resolve; not allowed in \
             tenant clusters (use IPv4 or IPv6 with the addresses of your pods)",
        )),
        other => errs.push(format!(
            "addressType: Unsupported value: {other:?}: supported values: \"IPv4\", \"IPv6\""
        )),
    }
    let family = matches!(family, "IPv4" | "IPv6").then_some(family);
    for (i, e) in slice["endpoints"]
        .as_array()
        .into_iter()
        .flatten()
        .enumerate()
    {
        if family.is_some() {
            for (j, a) in e["addresses"].as_array().into_iter().flatten().enumerate() {
                check_ip(
                    a.as_str().unwrap_or(""),
                    &format!("endpoints[{i}].addresses[{j}]"),
                    family,
                    pod_ips,
                    &mut errs,
                );
            }
        }
        check_hostname(
            &e["hostname"],
            &format!("endpoints[{i}].hostname"),
            &mut errs,
        );
    }
    result(errs)
}

/// Checks a pod being created in a tenant cluster. `Err` lists every refused field.
pub fn check_pod(pod: &Value, policy: &Policy) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    check_metadata(pod, &mut errs);
    check_spec(&pod["spec"], policy, &mut errs);
    if pod["spec"]["nodeName"]
        .as_str()
        .is_some_and(|n| !n.is_empty())
    {
        errs.push(forbidden(
            "spec.nodeName",
            "pods are placed by the host scheduler; nodeName may not be set",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

/// Checks an update of a tenant pod: as [`check_pod`], except that a `spec.nodeName` equal to
/// the old one (set by the syncer's binding) is accepted.
pub fn check_pod_update(old: &Value, new: &Value, policy: &Policy) -> Result<(), Vec<String>> {
    let mut errs = Vec::new();
    check_metadata(new, &mut errs);
    check_spec(&new["spec"], policy, &mut errs);
    let node = new["spec"]["nodeName"].as_str().unwrap_or("");
    if !node.is_empty() && old["spec"]["nodeName"].as_str() != Some(node) {
        errs.push(forbidden(
            "spec.nodeName",
            "pods are placed by the host scheduler; nodeName may not be set",
        ));
    }
    if errs.is_empty() {
        Ok(())
    } else {
        Err(errs)
    }
}

fn forbidden(path: &str, why: &str) -> String {
    format!("{path}: Forbidden: {why}")
}

fn check_metadata(pod: &Value, errs: &mut Vec<String>) {
    for field in ["labels", "annotations"] {
        if let Some(map) = pod["metadata"][field].as_object() {
            for key in map.keys().filter(|k| k.starts_with(RESERVED_PREFIX)) {
                errs.push(forbidden(
                    &format!("metadata.{field}[{key}]"),
                    &format!("keys under {RESERVED_PREFIX} are reserved for Fabrik"),
                ));
            }
        }
    }
}

fn check_spec(spec: &Value, policy: &Policy, errs: &mut Vec<String>) {
    errs.extend(crate::paths::check_spec(spec));
    if !policy.allow_host_namespaces {
        for (field, what) in [
            ("hostNetwork", "host networking"),
            ("hostPID", "the host PID namespace"),
            ("hostIPC", "the host IPC namespace"),
        ] {
            if spec[field].as_bool() == Some(true) {
                errs.push(forbidden(
                    &format!("spec.{field}"),
                    &format!("{what} is not allowed in tenant clusters"),
                ));
            }
        }
    }
    if let Some(volumes) = spec["volumes"].as_array() {
        for (i, v) in volumes.iter().enumerate() {
            if !policy.allow_host_path && !v["hostPath"].is_null() {
                errs.push(forbidden(
                    &format!("spec.volumes[{i}].hostPath"),
                    "hostPath volumes are not allowed in tenant clusters",
                ));
            }
        }
    }
    // Tolerations are the tenant's own (its Nodes carry no taints): they are admitted and stay
    // in the tenant; the host pod tolerates only the tenant's node pool (see `pods`). So are
    // priority classes: the tenant's API server resolves them from its own PriorityClasses;
    // only those the policy allows reach the host pod.
    if !policy.allow_privileged {
        check_seccomp(&spec["securityContext"], "spec.securityContext", errs);
    }
    for list in ["initContainers", "containers", "ephemeralContainers"] {
        if let Some(containers) = spec[list].as_array() {
            for (i, c) in containers.iter().enumerate() {
                check_container(c, &format!("spec.{list}[{i}]"), policy, errs);
            }
        }
    }
}

fn check_seccomp(sc: &Value, path: &str, errs: &mut Vec<String>) {
    if sc["seccompProfile"]["type"].as_str() == Some("Unconfined") {
        errs.push(forbidden(
            &format!("{path}.seccompProfile.type"),
            "unconfined seccomp is not allowed in tenant clusters",
        ));
    }
    if sc["appArmorProfile"]["type"].as_str() == Some("Unconfined") {
        errs.push(forbidden(
            &format!("{path}.appArmorProfile.type"),
            "unconfined AppArmor is not allowed in tenant clusters",
        ));
    }
}

fn check_container(c: &Value, path: &str, policy: &Policy, errs: &mut Vec<String>) {
    let sc = &c["securityContext"];
    if !policy.allow_privileged {
        if sc["privileged"].as_bool() == Some(true) {
            errs.push(forbidden(
                &format!("{path}.securityContext.privileged"),
                "privileged containers are not allowed in tenant clusters",
            ));
        }
        if let Some(add) = sc["capabilities"]["add"].as_array() {
            for (j, cap) in add.iter().enumerate() {
                let name = cap.as_str().unwrap_or("");
                let bare = name.strip_prefix("CAP_").unwrap_or(name);
                if !BASELINE_CAPABILITIES.contains(&bare) {
                    errs.push(forbidden(
                        &format!("{path}.securityContext.capabilities.add[{j}]"),
                        &format!("capability {name:?} is beyond the baseline set allowed in tenant clusters"),
                    ));
                }
            }
        }
        if sc["procMount"].as_str() == Some("Unmasked") {
            errs.push(forbidden(
                &format!("{path}.securityContext.procMount"),
                "an unmasked /proc is not allowed in tenant clusters",
            ));
        }
        check_seccomp(sc, &format!("{path}.securityContext"), errs);
    }
    if !policy.allow_host_namespaces {
        if let Some(ports) = c["ports"].as_array() {
            for (j, p) in ports.iter().enumerate() {
                if p["hostPort"].as_i64().is_some_and(|h| h != 0) {
                    errs.push(forbidden(
                        &format!("{path}.ports[{j}].hostPort"),
                        "host ports are not allowed in tenant clusters",
                    ));
                }
            }
        }
    }
    for kind in ["requests", "limits"] {
        if let Some(list) = c["resources"][kind].as_object() {
            for name in list.keys() {
                if gpu::is_accelerator(name) && gpu::host_for(name, policy).is_none() {
                    errs.push(forbidden(
                        &format!("{path}.resources.{kind}[{name}]"),
                        &format!(
                            "this tenant's GPUs are requested as {} (its Tenant's gpuSharing \
                             and gpuTypes)",
                            gpu::tenant_names(policy).join(", ")
                        ),
                    ));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Toleration;
    use serde_json::json;

    fn base() -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "default", "labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "busybox",
                "securityContext": {"capabilities": {"add": ["NET_BIND_SERVICE", "CAP_CHOWN"]}},
                "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    }

    fn pool_policy() -> Policy {
        Policy {
            tolerations: vec![Toleration {
                key: Some("pool".into()),
                operator: Some("Equal".into()),
                value: Some("gpu".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            allowed_priority_classes: vec!["tenant-high".into()],
            ..Default::default()
        }
    }

    /// Sets a JSON pointer path (creating objects on the way) to a value.
    fn set(v: &mut Value, pointer: &str, to: Value) {
        let mut cur = v;
        for part in pointer.trim_start_matches('/').split('/') {
            if let Ok(i) = part.parse::<usize>() {
                cur = &mut cur[i];
            } else {
                if cur.is_null() {
                    *cur = json!({});
                }
                cur = &mut cur[part];
            }
        }
        *cur = to;
    }

    #[test]
    fn a_plain_pod_is_admitted() {
        assert_eq!(check_pod(&base(), &pool_policy()), Ok(()));
        let mut p = base();
        set(
            &mut p,
            "/spec/tolerations",
            json!([{"key": "pool", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]),
        );
        set(&mut p, "/spec/priorityClassName", json!("tenant-high"));
        assert_eq!(check_pod(&p, &pool_policy()), Ok(()));
        // The tenant's own classes (its API server resolves them; they stay in the tenant).
        set(
            &mut p,
            "/spec/priorityClassName",
            json!("system-node-critical"),
        );
        assert_eq!(check_pod(&p, &Policy::default()), Ok(()));
        // What DaemonSet charts carry: admitted, kept in the tenant, never on the host pod.
        set(
            &mut p,
            "/spec/tolerations",
            json!([{"operator": "Exists"},
                {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]),
        );
        assert_eq!(check_pod(&p, &pool_policy()), Ok(()));
    }

    #[test]
    fn every_hostile_field_is_refused() {
        // (what is set, value, expected message start)
        let table: &[(&str, Value, &str)] = &[
            ("/spec/hostNetwork", json!(true), "spec.hostNetwork: Forbidden: host networking is not allowed"),
            ("/spec/hostPID", json!(true), "spec.hostPID: Forbidden: the host PID namespace"),
            ("/spec/hostIPC", json!(true), "spec.hostIPC: Forbidden: the host IPC namespace"),
            ("/spec/containers/0/securityContext/privileged", json!(true),
                "spec.containers[0].securityContext.privileged: Forbidden: privileged containers"),
            ("/spec/initContainers", json!([{"name": "i", "image": "x", "securityContext": {"privileged": true}}]),
                "spec.initContainers[0].securityContext.privileged: Forbidden"),
            ("/spec/ephemeralContainers", json!([{"name": "e", "image": "x", "securityContext": {"capabilities": {"add": ["SYS_PTRACE"]}}}]),
                "spec.ephemeralContainers[0].securityContext.capabilities.add[0]: Forbidden: capability \"SYS_PTRACE\""),
            ("/spec/containers/0/securityContext/capabilities/add", json!(["NET_ADMIN"]),
                "spec.containers[0].securityContext.capabilities.add[0]: Forbidden: capability \"NET_ADMIN\" is beyond the baseline"),
            ("/spec/containers/0/securityContext/capabilities/add", json!(["CAP_SYS_ADMIN"]),
                "spec.containers[0].securityContext.capabilities.add[0]: Forbidden"),
            ("/spec/containers/0/securityContext/procMount", json!("Unmasked"),
                "spec.containers[0].securityContext.procMount: Forbidden"),
            ("/spec/containers/0/securityContext/seccompProfile", json!({"type": "Unconfined"}),
                "spec.containers[0].securityContext.seccompProfile.type: Forbidden"),
            ("/spec/securityContext/seccompProfile", json!({"type": "Unconfined"}),
                "spec.securityContext.seccompProfile.type: Forbidden"),
            ("/spec/securityContext/appArmorProfile", json!({"type": "Unconfined"}),
                "spec.securityContext.appArmorProfile.type: Forbidden"),
            ("/spec/containers/0/ports", json!([{"containerPort": 80, "hostPort": 80}]),
                "spec.containers[0].ports[0].hostPort: Forbidden"),
            ("/spec/volumes", json!([{"name": "root", "hostPath": {"path": "/"}}]),
                "spec.volumes[0].hostPath: Forbidden: hostPath volumes are not allowed"),
            ("/spec/nodeName", json!("gpu-node-7"), "spec.nodeName: Forbidden"),
            ("/metadata/labels/fabrik.dev~1tenant", json!("b"),
                "metadata.labels[fabrik.dev/tenant]: Forbidden: keys under fabrik.dev/ are reserved"),
            ("/metadata/annotations", json!({"fabrik.dev/virtual-uid": "x"}),
                "metadata.annotations[fabrik.dev/virtual-uid]: Forbidden"),
            ("/spec/containers/0/resources/limits/nvidia.com~1mig-7g.141gb", json!("1"),
                "spec.containers[0].resources.limits[nvidia.com/mig-7g.141gb]: Forbidden"),
        ];
        for (pointer, value, want) in table {
            let mut pod = base();
            // `~1` in the table's paths stands for `/` inside a key.
            let pointer = pointer.replace("~1", "\u{1}");
            let mut cur = &mut pod;
            let parts: Vec<String> = pointer
                .trim_start_matches('/')
                .split('/')
                .map(|p| p.replace('\u{1}', "/"))
                .collect();
            for part in &parts[..parts.len() - 1] {
                cur = match part.parse::<usize>() {
                    Ok(i) => &mut cur[i],
                    Err(_) => {
                        if cur.is_null() {
                            *cur = json!({});
                        }
                        &mut cur[part.as_str()]
                    }
                };
            }
            if cur.is_null() {
                *cur = json!({});
            }
            cur[parts[parts.len() - 1].as_str()] = value.clone();
            let errs = check_pod(&pod, &pool_policy()).expect_err(pointer.as_str());
            assert!(
                errs.iter().any(|e| e.starts_with(want)),
                "{pointer}: want {want:?}, got {errs:?}"
            );
            assert_eq!(errs.len(), 1, "{pointer}: {errs:?}");
        }
    }

    #[test]
    fn a_permissive_policy_allows_them() {
        let policy = Policy {
            allow_privileged: true,
            allow_host_namespaces: true,
            allow_host_path: true,
            ..pool_policy()
        };
        let mut pod = base();
        set(&mut pod, "/spec/hostNetwork", json!(true));
        set(&mut pod, "/spec/hostPID", json!(true));
        set(
            &mut pod,
            "/spec/containers/0/securityContext/privileged",
            json!(true),
        );
        set(
            &mut pod,
            "/spec/containers/0/securityContext/capabilities/add",
            json!(["SYS_ADMIN"]),
        );
        set(
            &mut pod,
            "/spec/volumes",
            json!([{"name": "h", "hostPath": {"path": "/data"}}]),
        );
        assert_eq!(check_pod(&pod, &policy), Ok(()));
    }

    #[test]
    fn every_error_is_reported_at_once() {
        let mut pod = base();
        set(&mut pod, "/spec/hostNetwork", json!(true));
        set(&mut pod, "/spec/hostIPC", json!(true));
        set(&mut pod, "/spec/nodeName", json!("n"));
        assert_eq!(
            check_pod(&pod, &Policy::default()).map_err(|e| e.len()),
            Err(3)
        );
    }

    #[test]
    fn hostile_network_objects_are_refused() {
        let policy = Policy {
            external_names: vec!["db.example.com".into()],
            ingress_classes: vec!["tenant".into()],
            sync_ingresses: true,
            ..Default::default()
        };
        let svc = |spec: Value| json!({"metadata": {"name": "s", "namespace": "n"}, "spec": spec});
        let ep = |ip: &str| {
            json!({"metadata": {"name": "s", "namespace": "n"},
                "subsets": [{"addresses": [{"ip": ip}], "ports": [{"port": 80}]}]})
        };
        let slice = |family: &str, address: &str| {
            json!({"metadata": {"name": "s-1", "namespace": "n",
                    "labels": {"kubernetes.io/service-name": "s"}},
                "addressType": family, "endpoints": [{"addresses": [address]}]})
        };
        // (group, plural, object, expected message start)
        let table: Vec<(&str, &str, Value, &str)> = vec![
            ("", "services", svc(json!({"ports": [{"port": 80}], "externalIPs": ["10.0.0.1"]})),
                "spec.externalIPs: Forbidden"),
            ("", "services", svc(json!({"type": "ExternalName", "externalName": "metadata.google.internal"})),
                "spec.externalName: Forbidden: \"metadata.google.internal\" is not one of"),
            ("", "services", svc(json!({"type": "ExternalName", "externalName": "kubernetes.default.svc.cluster.local"})),
                "spec.externalName: Forbidden"),
            ("", "services", svc(json!({"type": "ExternalName", "externalName": "169.254.169.254"})),
                "spec.externalName: Forbidden"),
            ("", "services", svc(json!({"clusterIP": "10.96.0.10", "ports": [{"port": 53}]})),
                "spec.clusterIP: Forbidden: \"10.96.0.10\": a tenant Service's address is given by the host"),
            ("", "endpoints", ep("127.0.0.1"), "subsets[0].addresses[0].ip: Invalid value: \"127.0.0.1\": may not be in the loopback range"),
            ("", "endpoints", ep("169.254.169.254"), "subsets[0].addresses[0].ip: Invalid value: \"169.254.169.254\": may not be in the link-local range"),
            ("", "endpoints", ep("0.0.0.0"), "subsets[0].addresses[0].ip: Invalid value: \"0.0.0.0\""),
            ("", "endpoints", ep("224.0.0.251"), "subsets[0].addresses[0].ip: Invalid value"),
            ("", "endpoints", ep("fe80::1"), "subsets[0].addresses[0].ip: Invalid value: \"fe80::1\""),
            ("", "endpoints", ep("::ffff:127.0.0.1"), "subsets[0].addresses[0].ip: Invalid value"),
            ("", "endpoints", ep("metadata.google.internal"), "subsets[0].addresses[0].ip: Invalid value: \"metadata.google.internal\": must be a valid IP"),
            ("", "endpoints", ep("0177.0.0.1"), "subsets[0].addresses[0].ip: Invalid value"),
            ("discovery.k8s.io", "endpointslices", slice("IPv4", "127.0.0.1"), "endpoints[0].addresses[0]: Invalid value: \"127.0.0.1\""),
            ("discovery.k8s.io", "endpointslices", slice("IPv4", "169.254.169.254"), "endpoints[0].addresses[0]: Invalid value"),
            ("discovery.k8s.io", "endpointslices", slice("IPv6", "::1"), "endpoints[0].addresses[0]: Invalid value"),
            ("discovery.k8s.io", "endpointslices", slice("IPv4", "fd00::1"), "endpoints[0].addresses[0]: Invalid value: \"fd00::1\": must be an IPv4"),
            ("discovery.k8s.io", "endpointslices", slice("FQDN", "metadata.google.internal"), "addressType: Forbidden"),
            ("networking.k8s.io", "ingresses",
                json!({"metadata": {"name": "i", "namespace": "n"}, "spec": {"ingressClassName": "platform"}}),
                "spec.ingressClassName: Forbidden: IngressClass \"platform\""),
        ];
        for (group, plural, obj, want) in &table {
            let errs = check(group, plural, obj, None, &policy).expect_err(want);
            assert!(
                errs.len() == 1 && errs[0].starts_with(want),
                "{obj}: want {want:?}, got {errs:?}"
            );
        }
        // What the tenant's own controllers and ordinary users write passes.
        let admitted: Vec<(&str, &str, Value)> = vec![
            (
                "",
                "services",
                svc(json!({"type": "ExternalName", "externalName": "db.example.com"})),
            ),
            (
                "",
                "services",
                svc(
                    json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 30080}],
                "clusterIP": "None", "loadBalancerSourceRanges": ["10.0.0.0/8"]}),
                ),
            ),
            ("", "endpoints", ep("10.244.0.10")),
            (
                "",
                "endpoints",
                json!({"metadata": {"name": "s"}, "subsets": [{"addresses": [
                {"ip": "10.244.0.10", "hostname": "web-0", "nodeName": "gpu-1",
                 "targetRef": {"kind": "Pod", "name": "web-0"}}]}]}),
            ),
            (
                "discovery.k8s.io",
                "endpointslices",
                slice("IPv4", "10.244.0.10"),
            ),
            (
                "discovery.k8s.io",
                "endpointslices",
                slice("IPv6", "fd00::10"),
            ),
            (
                "networking.k8s.io",
                "ingresses",
                json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "tenant"}}),
            ),
            (
                "",
                "configmaps",
                json!({"metadata": {"name": "c"}, "data": {"a": "127.0.0.1"}}),
            ),
        ];
        for (group, plural, obj) in &admitted {
            assert_eq!(check(group, plural, obj, None, &policy), Ok(()), "{obj}");
        }
        // An update keeping the address the host gave; the tenant's `kubernetes` Service,
        // which names its control plane.
        let given = svc(json!({"clusterIP": "10.100.3.4", "ports": [{"port": 80}]}));
        assert_eq!(check("", "services", &given, Some(&given), &policy), Ok(()));
        let api = json!({"metadata": {"name": "kubernetes", "namespace": "default"},
            "spec": {"clusterIP": "10.100.0.9", "ports": [{"port": 443}]}});
        assert_eq!(check("", "services", &api, None, &policy), Ok(()));
        // Ingresses are checked only when they are synced.
        let unsynced = Policy {
            sync_ingresses: false,
            ..policy.clone()
        };
        let ing = json!({"metadata": {"name": "i"}, "spec": {"ingressClassName": "platform"}});
        assert_eq!(
            check("networking.k8s.io", "ingresses", &ing, None, &unsynced),
            Ok(())
        );
    }

    #[test]
    fn pod_volume_paths_are_checked_at_admission() {
        let mut pod = base();
        set(
            &mut pod,
            "/spec/containers/0/volumeMounts",
            json!([{"name": "v", "mountPath": "/m", "subPath": "../../etc"}]),
        );
        let errs = check_pod(&pod, &pool_policy()).expect_err("refused");
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spec.containers[0].volumeMounts[0].subPath: Invalid value"));
    }

    #[test]
    fn the_bound_node_may_stay_on_update() {
        let mut old = base();
        set(&mut old, "/spec/nodeName", json!("n1"));
        let mut new = old.clone();
        assert_eq!(check_pod_update(&old, &new, &pool_policy()), Ok(()));
        set(&mut new, "/spec/nodeName", json!("n2"));
        assert!(check_pod_update(&old, &new, &pool_policy()).is_err());
    }

    #[test]
    fn workload_templates_are_checked_as_their_pods_will_be() {
        let deployment = |pod_spec: Value| {
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                "metadata": {"name": "d", "namespace": "default"},
                "spec": {"template": {"metadata": {"labels": {"app": "d"}}, "spec": pod_spec}}})
        };
        let plain = json!({"containers": [{"name": "c", "image": "busybox"}]});
        let hostile = json!({"hostNetwork": true,
            "containers": [{"name": "c", "image": "busybox"}],
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}]});
        let policy = Policy::default();
        assert_eq!(
            check(
                "apps",
                "deployments",
                &deployment(plain.clone()),
                None,
                &policy
            ),
            Ok(())
        );
        let errs = check(
            "apps",
            "deployments",
            &deployment(hostile.clone()),
            None,
            &policy,
        )
        .expect_err("host networking and hostPath");
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.template.spec.hostNetwork: Forbidden")),
            "{errs:?}"
        );
        assert!(
            errs.iter()
                .any(|e| e.starts_with("spec.template.spec.volumes[0].hostPath: Forbidden")),
            "{errs:?}"
        );
        // A CronJob's template is deeper.
        let cron = json!({"apiVersion": "batch/v1", "kind": "CronJob", "metadata": {"name": "c"},
            "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": {"spec": hostile}}}}});
        let errs = check("batch", "cronjobs", &cron, None, &policy).expect_err("cron");
        assert!(
            errs[0].starts_with("spec.jobTemplate.spec.template.spec."),
            "{errs:?}"
        );
        // Scaling a stored workload leaves its template alone: not checked again.
        let stored =
            deployment(json!({"hostNetwork": true, "containers": [{"name": "c", "image": "x"}]}));
        let mut scaled = stored.clone();
        scaled["spec"]["replicas"] = json!(3);
        assert_eq!(
            check("apps", "deployments", &scaled, Some(&stored), &policy),
            Ok(())
        );
        assert!(checks("apps", "daemonsets", &policy) && checks("batch", "jobs", &policy));
    }
}
