//! PodSecurity: the Pod Security Standards (`privileged`, `baseline`, `restricted`) chosen per
//! namespace by the `pod-security.kubernetes.io/enforce|warn|audit` labels. `enforce` refuses
//! pods that violate the level; `warn` returns `Warning` headers (for pods and for the pod
//! templates of workloads); `audit` logs. An unknown level counts as `restricted`, as upstream.

use fabrik_machinery::pod_security::BASELINE_CAPABILITIES as BASELINE_CAPS;
use serde_json::Value;

use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;

/// The plugin.
pub struct PodSecurity;

const LABEL: &str = "pod-security.kubernetes.io/";

/// A Pod Security Standards level.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    /// Anything goes.
    Privileged,
    /// Known privilege escalations refused.
    Baseline,
    /// Hardened.
    Restricted,
}

impl Level {
    fn parse(s: &str) -> Level {
        match s {
            "privileged" => Level::Privileged,
            "baseline" => Level::Baseline,
            _ => Level::Restricted,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }
}

const SAFE_SYSCTLS: &[&str] = &[
    "kernel.shm_rmid_forced",
    "net.ipv4.ip_local_port_range",
    "net.ipv4.ip_unprivileged_port_start",
    "net.ipv4.tcp_syncookies",
    "net.ipv4.ping_group_range",
    "net.ipv4.ip_local_reserved_ports",
    "net.ipv4.tcp_keepalive_time",
    "net.ipv4.tcp_fin_timeout",
    "net.ipv4.tcp_keepalive_intvl",
    "net.ipv4.tcp_keepalive_probes",
];

const RESTRICTED_VOLUMES: &[&str] = &[
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
];

fn containers(spec: &Value) -> Vec<&Value> {
    ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| spec[*k].as_array().into_iter().flatten())
        .collect()
}

fn cname(c: &Value) -> &str {
    c["name"].as_str().unwrap_or("")
}

fn quoted(names: &[String]) -> String {
    names
        .iter()
        .map(|n| format!("{n:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn plural(n: usize, one: &str, many: &str) -> String {
    if n == 1 {
        one.to_string()
    } else {
        many.to_string()
    }
}

/// The violations of `level` by a pod spec, in upstream's wording.
pub fn violations(spec: &Value, level: Level) -> Vec<String> {
    let mut out = Vec::new();
    if level == Level::Privileged {
        return out;
    }
    let cs = containers(spec);
    // Baseline.
    let host: Vec<String> = ["hostNetwork", "hostPID", "hostIPC"]
        .iter()
        .filter(|k| spec[**k] == Value::Bool(true))
        .map(|k| format!("{k}=true"))
        .collect();
    if !host.is_empty() {
        out.push(format!("host namespaces ({})", host.join(", ")));
    }
    let privileged: Vec<String> = cs
        .iter()
        .filter(|c| c["securityContext"]["privileged"] == Value::Bool(true))
        .map(|c| cname(c).to_string())
        .collect();
    if !privileged.is_empty() {
        out.push(format!(
            "privileged ({} {} must not set securityContext.privileged=true)",
            plural(privileged.len(), "container", "containers"),
            quoted(&privileged)
        ));
    }
    let mut caps = Vec::new();
    let mut cap_containers = Vec::new();
    for c in &cs {
        for cap in c["securityContext"]["capabilities"]["add"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(Value::as_str)
        {
            if !BASELINE_CAPS.contains(&cap) {
                caps.push(format!("{cap:?}"));
                cap_containers.push(cname(c).to_string());
            }
        }
    }
    if !caps.is_empty() {
        cap_containers.dedup();
        out.push(format!(
            "non-default capabilities ({} {} must not include {} in securityContext.capabilities.add)",
            plural(cap_containers.len(), "container", "containers"),
            quoted(&cap_containers),
            caps.join(", ")
        ));
    }
    let host_paths: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["hostPath"].is_object())
        .map(|v| v["name"].as_str().unwrap_or("").to_string())
        .collect();
    if !host_paths.is_empty() {
        out.push(format!(
            "hostPath volumes ({} {})",
            plural(host_paths.len(), "volume", "volumes"),
            quoted(&host_paths)
        ));
    }
    let mut ports = Vec::new();
    for c in &cs {
        for p in c["ports"].as_array().into_iter().flatten() {
            if let Some(hp) = p["hostPort"].as_i64().filter(|p| *p != 0) {
                ports.push(format!("{} uses hostPort {hp}", cname(c)));
            }
        }
    }
    if !ports.is_empty() {
        out.push(format!("hostPort ({})", ports.join(", ")));
    }
    let unconfined = |sc: &Value| {
        sc["seccompProfile"]["type"].as_str() == Some("Unconfined")
            || sc["appArmorProfile"]["type"].as_str() == Some("Unconfined")
    };
    if unconfined(&spec["securityContext"]) || cs.iter().any(|c| unconfined(&c["securityContext"]))
    {
        out.push("unconfined seccomp or AppArmor profile".into());
    }
    let selinux_bad = |sc: &Value| {
        let o = &sc["seLinuxOptions"];
        !o["user"].is_null()
            || !o["role"].is_null()
            || o["type"].as_str().is_some_and(|t| {
                !t.is_empty()
                    && ![
                        "container_t",
                        "container_init_t",
                        "container_kvm_t",
                        "container_engine_t",
                    ]
                    .contains(&t)
            })
    };
    if selinux_bad(&spec["securityContext"])
        || cs.iter().any(|c| selinux_bad(&c["securityContext"]))
    {
        out.push("seLinuxOptions (only the container types may be set)".into());
    }
    let proc_mount: Vec<String> = cs
        .iter()
        .filter(|c| {
            c["securityContext"]["procMount"]
                .as_str()
                .is_some_and(|m| m != "Default")
        })
        .map(|c| cname(c).to_string())
        .collect();
    if !proc_mount.is_empty() {
        out.push(format!(
            "procMount ({} {} must not set securityContext.procMount)",
            plural(proc_mount.len(), "container", "containers"),
            quoted(&proc_mount)
        ));
    }
    let sysctls: Vec<String> = spec["securityContext"]["sysctls"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s["name"].as_str())
        .filter(|n| !SAFE_SYSCTLS.contains(n))
        .map(str::to_string)
        .collect();
    if !sysctls.is_empty() {
        out.push(format!("forbidden sysctls ({})", sysctls.join(", ")));
    }
    if level == Level::Baseline {
        return out;
    }
    // Restricted.
    let bad_volumes: Vec<String> = spec["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| {
            v.as_object().is_some_and(|o| {
                o.keys()
                    .filter(|k| *k != "name")
                    .any(|k| !RESTRICTED_VOLUMES.contains(&k.as_str()))
            })
        })
        .map(|v| v["name"].as_str().unwrap_or("").to_string())
        .collect();
    if !bad_volumes.is_empty() {
        out.push(format!(
            "restricted volume types ({} {} must use an allowed volume type)",
            plural(bad_volumes.len(), "volume", "volumes"),
            quoted(&bad_volumes)
        ));
    }
    let ape: Vec<String> = cs
        .iter()
        .filter(|c| c["securityContext"]["allowPrivilegeEscalation"] != Value::Bool(false))
        .map(|c| cname(c).to_string())
        .collect();
    if !ape.is_empty() {
        out.push(format!(
            "allowPrivilegeEscalation != false ({} {} must set securityContext.allowPrivilegeEscalation=false)",
            plural(ape.len(), "container", "containers"),
            quoted(&ape)
        ));
    }
    let caps_bad: Vec<String> = cs
        .iter()
        .filter(|c| {
            let caps = &c["securityContext"]["capabilities"];
            let drops_all = caps["drop"]
                .as_array()
                .is_some_and(|d| d.iter().any(|x| x == "ALL"));
            let adds_ok = caps["add"]
                .as_array()
                .into_iter()
                .flatten()
                .all(|a| a == "NET_BIND_SERVICE");
            !(drops_all && adds_ok)
        })
        .map(|c| cname(c).to_string())
        .collect();
    if !caps_bad.is_empty() {
        out.push(format!(
            "unrestricted capabilities ({} {} must set securityContext.capabilities.drop=[\"ALL\"])",
            plural(caps_bad.len(), "container", "containers"),
            quoted(&caps_bad)
        ));
    }
    let pod_non_root = spec["securityContext"]["runAsNonRoot"] == Value::Bool(true);
    let non_root_bad: Vec<String> = cs
        .iter()
        .filter(|c| match &c["securityContext"]["runAsNonRoot"] {
            Value::Bool(b) => !b,
            _ => !pod_non_root,
        })
        .map(|c| cname(c).to_string())
        .collect();
    if !non_root_bad.is_empty() {
        out.push(format!(
            "runAsNonRoot != true (pod or {} {} must set securityContext.runAsNonRoot=true)",
            plural(non_root_bad.len(), "container", "containers"),
            quoted(&non_root_bad)
        ));
    }
    let root_user = spec["securityContext"]["runAsUser"] == 0
        || cs.iter().any(|c| c["securityContext"]["runAsUser"] == 0);
    if root_user {
        out.push("runAsUser=0 (pod and containers must not set runAsUser=0)".into());
    }
    let ok_profile = |sc: &Value| {
        matches!(
            sc["seccompProfile"]["type"].as_str(),
            Some("RuntimeDefault" | "Localhost")
        )
    };
    let pod_profile = ok_profile(&spec["securityContext"]);
    let seccomp_bad: Vec<String> = cs
        .iter()
        .filter(|c| !pod_profile && !ok_profile(&c["securityContext"]))
        .map(|c| cname(c).to_string())
        .collect();
    if !seccomp_bad.is_empty() {
        out.push(format!(
            "seccompProfile (pod or {} {} must set securityContext.seccompProfile.type to \"RuntimeDefault\" or \"Localhost\")",
            plural(seccomp_bad.len(), "container", "containers"),
            quoted(&seccomp_bad)
        ));
    }
    out
}

/// The pod spec inside a workload (its template), if the kind has one.
fn template_spec<'a>(req: &Request<'_>, obj: &'a Value) -> Option<&'a Value> {
    let g = req.def.group.as_str();
    let p = req.def.plural.as_str();
    match (g, p) {
        ("", "pods") => Some(&obj["spec"]),
        ("", "podtemplates") => Some(&obj["template"]["spec"]),
        ("", "replicationcontrollers")
        | ("apps", "deployments" | "replicasets" | "statefulsets" | "daemonsets")
        | ("batch", "jobs") => Some(&obj["spec"]["template"]["spec"]),
        ("batch", "cronjobs") => Some(&obj["spec"]["jobTemplate"]["spec"]["template"]["spec"]),
        _ => None,
    }
}

#[async_trait::async_trait]
impl Admission for PodSecurity {
    fn name(&self) -> &'static str {
        "PodSecurity"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let (Some(ns), None) = (req.namespace, req.subresource) else {
            return Ok(Verdict::ok());
        };
        let Some(spec) = template_spec(req, obj) else {
            return Ok(Verdict::ok());
        };
        // Updates are checked only when the pod spec changes (upstream exempts metadata-only
        // updates so that existing pods can always be labelled or finalized).
        if req.op == Operation::Update && old.and_then(|o| template_spec(req, o)) == Some(spec) {
            return Ok(Verdict::ok());
        }
        let Some(ns_def) = req.objects.resource("", "v1", "namespaces") else {
            return Ok(Verdict::ok());
        };
        let Ok(namespace) = req.objects.get(&ns_def, None, ns).await else {
            return Ok(Verdict::ok());
        };
        let labels = &namespace["metadata"]["labels"];
        let level_of = |mode: &str| labels[format!("{LABEL}{mode}")].as_str().map(Level::parse);
        let is_pod = req.is_core("pods");
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let mut verdict = Verdict::ok();
        if let (Some(level), true) = (level_of("enforce"), is_pod) {
            let v = violations(spec, level);
            if !v.is_empty() {
                return Err(ApiError::Forbidden(format!(
                    "pods \"{name}\" is forbidden: violates PodSecurity \"{}:latest\": {}",
                    level.name(),
                    v.join(", ")
                )));
            }
        }
        if let Some(level) = level_of("warn") {
            let v = violations(spec, level);
            if !v.is_empty() {
                verdict.warnings.push(format!(
                    "would violate PodSecurity \"{}:latest\": {}",
                    level.name(),
                    v.join(", ")
                ));
            }
        }
        if let Some(level) = level_of("audit") {
            let v = violations(spec, level);
            if !v.is_empty() {
                tracing::info!(
                    namespace = ns,
                    resource = %req.def.group_resource(),
                    name,
                    user = req.user.map(|u| u.name.as_str()).unwrap_or(""),
                    "audit: would violate PodSecurity \"{}:latest\": {}",
                    level.name(),
                    v.join(", ")
                );
            }
        }
        Ok(verdict)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn levels_refuse_what_upstream_refuses() {
        let plain = json!({"containers": [{"name": "app", "image": "nginx"}]});
        assert!(violations(&plain, Level::Baseline).is_empty());
        let r = violations(&plain, Level::Restricted);
        assert!(
            r.iter()
                .any(|v| v.starts_with("allowPrivilegeEscalation != false")),
            "{r:?}"
        );
        assert!(
            r.iter().any(|v| v.starts_with("runAsNonRoot != true")),
            "{r:?}"
        );
        let hardened = json!({
            "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{"name": "app", "securityContext": {
                "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}}}]
        });
        assert!(violations(&hardened, Level::Restricted).is_empty());
        let hostile = json!({
            "hostNetwork": true,
            "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
            "containers": [{"name": "x", "securityContext": {"privileged": true,
                "capabilities": {"add": ["SYS_ADMIN"]}}, "ports": [{"containerPort": 80, "hostPort": 80}]}]
        });
        let b = violations(&hostile, Level::Baseline);
        assert_eq!(b.len(), 5, "{b:?}");
        assert_eq!(Level::parse("bogus"), Level::Restricted);
    }
}
