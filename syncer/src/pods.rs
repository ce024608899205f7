//! Tenant pod → host pod, built field by field from an allow-list.
//!
//! Nothing of the tenant's spec reaches the host unless it is named here. References to
//! ConfigMaps, Secrets, PVCs and image pull Secrets are rewritten to host names; the downward
//! API's `metadata.name` / `namespace` / `uid` and `spec.serviceAccountName` are pointed at the
//! host pod's origin annotations (so the container still sees its tenant identity); the pool's
//! node selector, tolerations and runtimeClass are injected; GPU requests are mapped by sharing
//! mode; privileged settings pass only where the policy allows them. ResourceClaims are named
//! by their host copies' names ([`crate::claims`]).
//!
//! A projected `serviceAccountToken` source becomes a `secret` source naming one key of the host
//! pod's token Secret ([`naming::token_secret_name`]), which the syncer fills with a token the
//! tenant API issues for the tenant pod (see [`crate::tokens`]); the source is `optional`, so a
//! pod whose token could not be had yet starts without it and gets it when it comes. When the
//! policy names an [`ApiAddress`], every container gets the `kubernetes` Service's environment
//! pointing there, before its own entries (which win, as upstream's container env wins over
//! service env).
//!
//! Pod affinity, anti-affinity and topology spread constraints are carried over confined to the
//! tenant's own pods ([`host_pod_affinity`], [`host_spread_constraints`]). Not carried over
//! (documented limits): node affinity — except a pin to one node by name, which is how a
//! DaemonSet places its pods — `nodeName`, `schedulerName`, `priority`,
//! `hostAliases`, `readinessGates`, inline CSI / image / other volume sources
//! (replaced by `emptyDir` so that mounts still resolve), `mountPropagation`, probe `host`s.

use std::collections::BTreeMap;

use fabrik_api::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, ANNOTATION_VIRTUAL_SERVICE_ACCOUNT,
    ANNOTATION_VIRTUAL_UID,
};
use serde_json::{json, Map, Value};

use crate::admission::BASELINE_CAPABILITIES;
use crate::gpu;
use crate::naming;
use crate::policy::{ApiAddress, Policy};

/// Errors building a host pod.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The tenant pod has no name or namespace.
    #[error("tenant pod has no name or namespace")]
    Unnamed,
    /// A volume path of the tenant pod could escape its volume (see [`crate::paths`]); the
    /// tenant's admission refuses such pods, so this one predates it or bypassed it.
    #[error("tenant pod names unsafe volume paths: {}", .0.join("; "))]
    UnsafePath(Vec<String>),
    /// A claim of the pod is not made yet (the pod waits for it, as upstream's do).
    #[error(transparent)]
    ClaimPending(#[from] crate::claims::ClaimPending),
}

/// What the pod builder needs to know besides the pod.
#[derive(Clone, Debug)]
pub struct PodContext<'a> {
    /// The tenant.
    pub tenant: &'a str,
    /// The tenant's policy.
    pub policy: &'a Policy,
    /// The tenant's Services (those of the pod's namespace become its service links).
    pub services: &'a [std::sync::Arc<Value>],
    /// The gang the pod asks for (name within its namespace, size), as
    /// [`crate::gangs::asked`] found it.
    pub gang: Option<(String, usize)>,
}

/// Tokens are valid this long unless a source asks otherwise (upstream's default).
pub const DEFAULT_TOKEN_SECONDS: i64 = 3600;
/// The shortest token lifetime (upstream refuses shorter sources; here they are raised).
pub const MIN_TOKEN_SECONDS: i64 = 600;
/// The longest token lifetime a TokenRequest may ask for (upstream: 2^32 seconds).
pub const MAX_TOKEN_SECONDS: i64 = 1 << 32;

/// One projected `serviceAccountToken` source of a tenant pod: what to ask the tenant for and
/// where the token goes.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TokenSource {
    /// Key of the token in the host pod's token Secret: `token-<volume>-<source>` (indices, so
    /// always a valid key whatever the tenant named its volume).
    pub key: String,
    /// Path of the token file in the volume.
    pub path: String,
    /// The audience asked for; `None`: the tenant API's own.
    pub audience: Option<String>,
    /// Lifetime asked for, in seconds, within [`MIN_TOKEN_SECONDS`] and [`MAX_TOKEN_SECONDS`].
    pub expiration_seconds: i64,
}

/// The projected `serviceAccountToken` sources of a tenant pod, in volume order.
pub fn token_sources(pod: &Value) -> Vec<TokenSource> {
    let mut out = Vec::new();
    let volumes = pod["spec"]["volumes"].as_array().into_iter().flatten();
    for (vi, v) in volumes.enumerate() {
        let sources = v["projected"]["sources"].as_array().into_iter().flatten();
        for (si, s) in sources.enumerate() {
            if let Some(t) = token_source(vi, si, s) {
                out.push(t);
            }
        }
    }
    out
}

/// The token source at volume `vi`, source `si`, if `s` is a `serviceAccountToken` source.
fn token_source(vi: usize, si: usize, s: &Value) -> Option<TokenSource> {
    let t = s["serviceAccountToken"].as_object()?;
    let path = t
        .get("path")
        .and_then(Value::as_str)
        .filter(|p| !p.is_empty())
        .unwrap_or("token");
    let audience = t
        .get("audience")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
        .map(str::to_string);
    let expiration_seconds = t
        .get("expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_TOKEN_SECONDS)
        .clamp(MIN_TOKEN_SECONDS, MAX_TOKEN_SECONDS);
    Some(TokenSource {
        key: format!("token-{vi}-{si}"),
        path: path.to_string(),
        audience,
        expiration_seconds,
    })
}

/// Upstream's service environment of the `kubernetes` Service (port name `https`), pointing at
/// `addr`: what a pod's containers get from the kubelet in a real cluster.
pub fn api_service_env(addr: &ApiAddress) -> Vec<Value> {
    let port = ServiceEnvPort {
        name: Some("https"),
        port: i64::from(addr.port),
        protocol: "TCP",
    };
    service_env("kubernetes", &addr.host, &[port])
}

/// One port of a Service, for its environment.
struct ServiceEnvPort<'a> {
    name: Option<&'a str>,
    port: i64,
    protocol: &'a str,
}

/// The kubelet's environment of one Service (`<NAME>_SERVICE_HOST`, `<NAME>_SERVICE_PORT`,
/// `<NAME>_SERVICE_PORT_<PORT NAME>`, and the Docker link variables `<NAME>_PORT`,
/// `<NAME>_PORT_<port>_<PROTO>[_PROTO|_PORT|_ADDR]`), in the kubelet's order.
fn service_env(service: &str, ip: &str, ports: &[ServiceEnvPort<'_>]) -> Vec<Value> {
    let var = |s: &str| s.to_ascii_uppercase().replace('-', "_");
    let name = var(service);
    let mut out = vec![(format!("{name}_SERVICE_HOST"), ip.to_string())];
    if let Some(first) = ports.first() {
        out.push((format!("{name}_SERVICE_PORT"), first.port.to_string()));
        for p in ports {
            if let Some(pname) = p.name.filter(|n| !n.is_empty()) {
                out.push((
                    format!("{name}_SERVICE_PORT_{}", var(pname)),
                    p.port.to_string(),
                ));
            }
        }
        // As upstream's net.JoinHostPort: brackets around an IPv6 address.
        let url = |proto: &str, port: i64| {
            if ip.contains(':') {
                format!("{proto}://[{ip}]:{port}")
            } else {
                format!("{proto}://{ip}:{port}")
            }
        };
        for (i, p) in ports.iter().enumerate() {
            let proto = p.protocol.to_ascii_lowercase();
            if i == 0 {
                out.push((format!("{name}_PORT"), url(&proto, p.port)));
            }
            let prefix = format!("{name}_PORT_{}_{}", p.port, p.protocol.to_ascii_uppercase());
            out.push((prefix.clone(), url(&proto, p.port)));
            out.push((format!("{prefix}_PROTO"), proto));
            out.push((format!("{prefix}_PORT"), p.port.to_string()));
            out.push((format!("{prefix}_ADDR"), ip.to_string()));
        }
    }
    out.into_iter()
        .map(|(name, value)| json!({"name": name, "value": value}))
        .collect()
}

/// The kubelet's service links of a pod in namespace `ns`: the environment of every Service of
/// `services` in that namespace that has a cluster IP, by name. The tenant's own `kubernetes`
/// Service is left out: [`api_service_env`] is its environment.
pub fn service_links_env(ns: &str, services: &[std::sync::Arc<Value>]) -> Vec<Value> {
    let mut mine: Vec<&Value> = services
        .iter()
        .map(|s| s.as_ref())
        .filter(|s| s["metadata"]["namespace"].as_str() == Some(ns))
        .filter(|s| {
            let name = s["metadata"]["name"].as_str().unwrap_or("");
            !crate::services::is_api_service(ns, name)
        })
        .filter(|s| {
            s["spec"]["clusterIP"]
                .as_str()
                .is_some_and(|ip| !ip.is_empty() && ip != "None")
        })
        .collect();
    mine.sort_by_key(|s| s["metadata"]["name"].as_str().unwrap_or(""));
    let mut out = Vec::new();
    for s in mine {
        let ports: Vec<ServiceEnvPort<'_>> = s["spec"]["ports"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|p| {
                Some(ServiceEnvPort {
                    name: p["name"].as_str(),
                    port: p["port"].as_i64()?,
                    protocol: p["protocol"].as_str().unwrap_or("TCP"),
                })
            })
            .collect();
        out.extend(service_env(
            s["metadata"]["name"].as_str().unwrap_or(""),
            s["spec"]["clusterIP"].as_str().unwrap_or(""),
            &ports,
        ));
    }
    out
}

/// Builds the host pod for a tenant pod.
pub fn host_pod(pod: &Value, ctx: &PodContext<'_>) -> Result<Value, Error> {
    let meta = &pod["metadata"];
    let name = meta["name"].as_str().ok_or(Error::Unnamed)?;
    let ns = meta["namespace"].as_str().ok_or(Error::Unnamed)?;
    let spec = &pod["spec"];
    // Never copy a path that was not checked: the same check as the tenant's admission.
    let unsafe_paths = crate::paths::check_spec(spec);
    if !unsafe_paths.is_empty() {
        return Err(Error::UnsafePath(unsafe_paths));
    }
    let sa = spec["serviceAccountName"].as_str().unwrap_or("default");
    let mut extra = naming::tenant_annotations(pod);
    extra.insert(ANNOTATION_VIRTUAL_SERVICE_ACCOUNT.into(), sa.into());
    // A gang asked for with the standard labels: one per tenant namespace.
    if let Some((gang, size)) = &ctx.gang {
        extra.insert(fabrik_api::GANG.into(), format!("{ns}/{gang}"));
        extra.insert(fabrik_api::GANG_SIZE.into(), size.to_string());
    }
    let metadata = naming::host_metadata(pod, ctx.tenant, naming::tenant_labels(pod), extra);
    let host_name = metadata["name"].as_str().unwrap_or_default();
    let mut service_env = match &ctx.policy.api_address {
        Some(addr) => api_service_env(addr),
        None => Vec::new(),
    };
    // The host pod's own links are off (they would name the host namespace's Services).
    if spec["enableServiceLinks"].as_bool() != Some(false) {
        service_env.extend(service_links_env(ns, ctx.services));
    }
    let r = Rewriter {
        ns,
        tenant: ctx.tenant,
        policy: ctx.policy,
        token_secret: naming::token_secret_name(host_name),
        service_env,
    };

    let mut out = Map::new();
    for field in [
        "restartPolicy",
        "terminationGracePeriodSeconds",
        "activeDeadlineSeconds",
        "subdomain",
        "shareProcessNamespace",
        "os",
        "setHostnameAsFQDN",
    ] {
        copy(spec, &mut out, field);
    }
    out.insert("hostname".into(), json!(hostname(spec, name)));
    out.insert("enableServiceLinks".into(), json!(false));
    out.insert("automountServiceAccountToken".into(), json!(false));
    for (field, what) in [
        ("containers", "containers"),
        ("initContainers", "initContainers"),
    ] {
        if let Some(list) = spec[field].as_array() {
            let built: Vec<Value> = list.iter().map(|c| r.container(c)).collect();
            out.insert(what.into(), Value::Array(built));
        }
    }
    if let Some(vols) = spec["volumes"].as_array() {
        let built: Vec<Value> = vols
            .iter()
            .enumerate()
            .map(|(i, v)| r.volume(v, i, name))
            .collect();
        out.insert("volumes".into(), Value::Array(built));
    }
    if let Some(claims) = crate::claims::host_pod_claims(pod, ctx.tenant)? {
        out.insert("resourceClaims".into(), claims);
    }
    if let Some(secrets) = spec["imagePullSecrets"].as_array() {
        let built: Vec<Value> = secrets
            .iter()
            .filter_map(|s| s["name"].as_str())
            .map(|s| json!({"name": r.name(s)}))
            .collect();
        out.insert("imagePullSecrets".into(), Value::Array(built));
    }
    out.insert(
        "securityContext".into(),
        r.pod_security(&spec["securityContext"]),
    );
    // Scheduling: the pool's selector wins over the tenant's keys; only the pool's tolerations.
    let mut selector = naming::string_map(&spec["nodeSelector"]);
    selector.extend(ctx.policy.node_selector.clone());
    if !selector.is_empty() {
        out.insert("nodeSelector".into(), json!(selector));
    }
    if !ctx.policy.tolerations.is_empty() {
        out.insert("tolerations".into(), json!(ctx.policy.tolerations));
    }
    // A pod pinned to one node (a DaemonSet's: `metadata.name In [node]`) stays pinned; the
    // pool's selector and tolerations still decide whether the host places it there.
    let mut affinity = host_pod_affinity(&spec["affinity"], ns, ctx.tenant);
    if let Some(node) = pinned_node(spec) {
        affinity.insert(
            "nodeAffinity".into(),
            json!({"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}]}]}}),
        );
    }
    if !affinity.is_empty() {
        out.insert("affinity".into(), Value::Object(affinity));
    }
    let spread = host_spread_constraints(&spec["topologySpreadConstraints"], ns, ctx.tenant);
    if !spread.is_empty() {
        out.insert("topologySpreadConstraints".into(), Value::Array(spread));
    }
    if let Some(rc) = &ctx.policy.runtime_class {
        out.insert("runtimeClassName".into(), json!(rc));
    }
    if let Some(pc) = spec["priorityClassName"].as_str() {
        if ctx.policy.allowed_priority_classes.iter().any(|a| a == pc) {
            out.insert("priorityClassName".into(), json!(pc));
        }
    }
    if ctx.policy.allow_host_namespaces {
        for f in ["hostNetwork", "hostPID", "hostIPC"] {
            copy(spec, &mut out, f);
        }
    }
    r.dns(spec, &mut out);
    if ctx.policy.gpu_queue && (asks_for_gpus(&out) || uses_claims(&out)) {
        // Held until the GPU queue admits the pod's workload (any scheduler honours gates). A
        // pod with ResourceClaims too: the queue counts the GPUs they take, and lets one whose
        // claims take none go at once.
        out.insert(
            "schedulingGates".into(),
            json!([{"name": fabrik_api::QUEUE_GATE}]),
        );
    }
    Ok(json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": out}))
}

/// Whether a (host) pod spec asks for GPU devices: a GPU resource of any container.
pub fn asks_for_gpus(spec: &Map<String, Value>) -> bool {
    ["containers", "initContainers"].iter().any(|list| {
        spec.get(*list)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .any(|c| {
                ["requests", "limits"].iter().any(|k| {
                    c["resources"][k].as_object().is_some_and(|r| {
                        r.keys().any(|name| fabrik_api::is_host_gpu_resource(name))
                    })
                })
            })
    })
}

/// Whether a (host) pod spec names ResourceClaims (which may take GPU devices).
fn uses_claims(spec: &Map<String, Value>) -> bool {
    spec.get("resourceClaims")
        .and_then(Value::as_array)
        .is_some_and(|c| !c.is_empty())
}

/// The pod's hostname inside the container: the tenant's, or its name cut to a DNS label.
fn hostname(spec: &Value, name: &str) -> String {
    if let Some(h) = spec["hostname"].as_str().filter(|h| !h.is_empty()) {
        return h.to_string();
    }
    let first = name.split('.').next().unwrap_or(name);
    let mut h: String = first.chars().take(naming::MAX_NAME).collect();
    while h.ends_with('-') {
        h.pop();
    }
    h
}

fn copy(from: &Value, to: &mut Map<String, Value>, field: &str) {
    if let Some(v) = from.get(field).filter(|v| !v.is_null()) {
        to.insert(field.to_string(), v.clone());
    }
}

/// Rewrites the parts of one pod.
struct Rewriter<'a> {
    ns: &'a str,
    tenant: &'a str,
    policy: &'a Policy,
    /// The host pod's token Secret.
    token_secret: String,
    /// What every container's environment starts with: the `kubernetes` Service's and the
    /// service links (the kubelet's service environment, with the tenant's names).
    service_env: Vec<Value>,
}

impl Rewriter<'_> {
    /// Host name of a namespaced object the pod refers to.
    fn name(&self, name: &str) -> String {
        naming::host_name(name, self.ns, self.tenant)
    }

    fn container(&self, c: &Value) -> Value {
        let mut out = Map::new();
        for f in [
            "name",
            "image",
            "command",
            "args",
            "workingDir",
            "imagePullPolicy",
            "terminationMessagePath",
            "terminationMessagePolicy",
            "stdin",
            "stdinOnce",
            "tty",
            "restartPolicy",
        ] {
            copy(c, &mut out, f);
        }
        if let Some(ports) = c["ports"].as_array() {
            let ports: Vec<Value> = ports
                .iter()
                .map(|p| {
                    let mut o = Map::new();
                    for f in ["name", "containerPort", "protocol"] {
                        copy(p, &mut o, f);
                    }
                    if self.policy.allow_host_namespaces {
                        copy(p, &mut o, "hostPort");
                    }
                    Value::Object(o)
                })
                .collect();
            out.insert("ports".into(), Value::Array(ports));
        }
        // The service env first: an entry of the container's own of the same name comes later
        // and wins, as upstream's container env wins over service env.
        let mut env = self.service_env.clone();
        env.extend(
            c["env"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|e| self.env(e)),
        );
        if !env.is_empty() || c["env"].is_array() {
            out.insert("env".into(), Value::Array(env));
        }
        if let Some(from) = c["envFrom"].as_array() {
            let from: Vec<Value> = from.iter().filter_map(|e| self.env_from(e)).collect();
            out.insert("envFrom".into(), Value::Array(from));
        }
        let mut resources = Map::new();
        for kind in ["requests", "limits"] {
            let mapped = gpu::map_resource_list(&c["resources"][kind], self.policy);
            if !mapped.is_empty() {
                resources.insert(kind.into(), Value::Object(mapped));
            }
        }
        // The pod's claims a container uses: names within the pod, the same on the host.
        let claims: Vec<Value> = c["resources"]["claims"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|cl| {
                let mut o = Map::new();
                o.insert("name".into(), json!(cl["name"].as_str()?));
                if let Some(r) = cl["request"].as_str() {
                    o.insert("request".into(), json!(r));
                }
                Some(Value::Object(o))
            })
            .collect();
        if !claims.is_empty() {
            resources.insert("claims".into(), Value::Array(claims));
        }
        if !resources.is_empty() {
            out.insert("resources".into(), Value::Object(resources));
        }
        if let Some(mounts) = c["volumeMounts"].as_array() {
            let mounts: Vec<Value> = mounts
                .iter()
                .map(|m| {
                    let mut o = Map::new();
                    for f in ["name", "mountPath", "subPath", "subPathExpr", "readOnly"] {
                        copy(m, &mut o, f);
                    }
                    Value::Object(o)
                })
                .collect();
            out.insert("volumeMounts".into(), Value::Array(mounts));
        }
        for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
            if c[probe].is_object() {
                out.insert(probe.into(), self.probe(&c[probe]));
            }
        }
        if c["lifecycle"].is_object() {
            let mut o = Map::new();
            for hook in ["postStart", "preStop"] {
                if c["lifecycle"][hook].is_object() {
                    o.insert(hook.into(), handler(&c["lifecycle"][hook]));
                }
            }
            out.insert("lifecycle".into(), Value::Object(o));
        }
        if c["securityContext"].is_object() {
            out.insert(
                "securityContext".into(),
                self.container_security(&c["securityContext"]),
            );
        }
        Value::Object(out)
    }

    fn env(&self, e: &Value) -> Value {
        let mut o = Map::new();
        copy(e, &mut o, "name");
        copy(e, &mut o, "value");
        let from = &e["valueFrom"];
        if from.is_object() {
            let mut f = Map::new();
            for (kind, key) in [("configMapKeyRef", "name"), ("secretKeyRef", "name")] {
                if from[kind].is_object() {
                    let r = &from[kind];
                    f.insert(
                        kind.into(),
                        json!({"name": self.name(r[key].as_str().unwrap_or("")),
                               "key": r["key"], "optional": r["optional"]}),
                    );
                }
            }
            if from["fieldRef"].is_object() {
                f.insert("fieldRef".into(), field_ref(&from["fieldRef"]));
            }
            if from["resourceFieldRef"].is_object() {
                f.insert("resourceFieldRef".into(), from["resourceFieldRef"].clone());
            }
            strip_nulls(&mut f);
            o.insert("valueFrom".into(), Value::Object(f));
        }
        Value::Object(o)
    }

    fn env_from(&self, e: &Value) -> Option<Value> {
        let mut o = Map::new();
        copy(e, &mut o, "prefix");
        for kind in ["configMapRef", "secretRef"] {
            if e[kind].is_object() {
                let name = e[kind]["name"].as_str()?;
                let mut r = Map::new();
                r.insert("name".into(), json!(self.name(name)));
                copy(&e[kind], &mut r, "optional");
                o.insert(kind.into(), Value::Object(r));
            }
        }
        Some(Value::Object(o))
    }

    fn probe(&self, p: &Value) -> Value {
        let mut o = match handler(p) {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        for f in [
            "initialDelaySeconds",
            "timeoutSeconds",
            "periodSeconds",
            "successThreshold",
            "failureThreshold",
            "terminationGracePeriodSeconds",
        ] {
            copy(p, &mut o, f);
        }
        if p["grpc"].is_object() {
            o.insert("grpc".into(), p["grpc"].clone());
        }
        Value::Object(o)
    }

    fn container_security(&self, sc: &Value) -> Value {
        let mut o = Map::new();
        for f in [
            "runAsUser",
            "runAsGroup",
            "runAsNonRoot",
            "readOnlyRootFilesystem",
            "allowPrivilegeEscalation",
        ] {
            copy(sc, &mut o, f);
        }
        let privileged = self.policy.allow_privileged;
        if privileged {
            for f in ["privileged", "procMount", "seLinuxOptions"] {
                copy(sc, &mut o, f);
            }
        }
        if sc["capabilities"].is_object() {
            let mut caps = Map::new();
            copy(&sc["capabilities"], &mut caps, "drop");
            if let Some(add) = sc["capabilities"]["add"].as_array() {
                let add: Vec<Value> = add
                    .iter()
                    .filter(|c| {
                        let n = c.as_str().unwrap_or("");
                        privileged
                            || BASELINE_CAPABILITIES.contains(&n.strip_prefix("CAP_").unwrap_or(n))
                    })
                    .cloned()
                    .collect();
                caps.insert("add".into(), Value::Array(add));
            }
            o.insert("capabilities".into(), Value::Object(caps));
        }
        self.confinement(sc, &mut o);
        Value::Object(o)
    }

    /// seccomp and AppArmor profiles: `Unconfined` only for privileged tenants.
    fn confinement(&self, sc: &Value, o: &mut Map<String, Value>) {
        for f in ["seccompProfile", "appArmorProfile"] {
            let t = sc[f]["type"].as_str();
            if t.is_some() && (t != Some("Unconfined") || self.policy.allow_privileged) {
                o.insert(f.into(), sc[f].clone());
            }
        }
    }

    fn pod_security(&self, sc: &Value) -> Value {
        let mut o = Map::new();
        for f in [
            "runAsUser",
            "runAsGroup",
            "runAsNonRoot",
            "fsGroup",
            "fsGroupChangePolicy",
            "supplementalGroups",
        ] {
            copy(sc, &mut o, f);
        }
        if self.policy.allow_privileged {
            copy(sc, &mut o, "sysctls");
            copy(sc, &mut o, "seLinuxOptions");
        }
        self.confinement(sc, &mut o);
        Value::Object(o)
    }

    fn volume(&self, v: &Value, index: usize, pod: &str) -> Value {
        let name = v["name"].clone();
        if v["emptyDir"].is_object() {
            return json!({"name": name, "emptyDir": v["emptyDir"]});
        }
        if v["configMap"].is_object() {
            let mut cm = v["configMap"].clone();
            cm["name"] = json!(self.name(cm["name"].as_str().unwrap_or("")));
            return json!({"name": name, "configMap": cm});
        }
        if v["secret"].is_object() {
            let mut s = v["secret"].clone();
            s["secretName"] = json!(self.name(s["secretName"].as_str().unwrap_or("")));
            return json!({"name": name, "secret": s});
        }
        if v["persistentVolumeClaim"].is_object() {
            let c = &v["persistentVolumeClaim"];
            return json!({"name": name, "persistentVolumeClaim": {
                "claimName": self.name(c["claimName"].as_str().unwrap_or("")),
                "readOnly": c["readOnly"].as_bool().unwrap_or(false)}});
        }
        if v["downwardAPI"].is_object() {
            let mut d = v["downwardAPI"].clone();
            rewrite_downward_items(&mut d["items"]);
            return json!({"name": name, "downwardAPI": d});
        }
        if v["projected"].is_object() {
            return json!({"name": name, "projected": self.projected(&v["projected"], index)});
        }
        if v["ephemeral"].is_object() {
            let t = &v["ephemeral"]["volumeClaimTemplate"];
            return json!({"name": name, "ephemeral": {"volumeClaimTemplate": {
                "spec": crate::objects::pvc_spec(&t["spec"], self.ns, self.tenant)}}});
        }
        if v["hostPath"].is_object() && self.policy.allow_host_path {
            return json!({"name": name, "hostPath": v["hostPath"]});
        }
        tracing::warn!(tenant = self.tenant, namespace = self.ns, pod, volume = %name,
            "volume source not allowed on the host; replaced by an empty directory");
        json!({"name": name, "emptyDir": {}})
    }

    fn projected(&self, p: &Value, volume: usize) -> Value {
        let mut sources = Vec::new();
        for (i, s) in p["sources"].as_array().into_iter().flatten().enumerate() {
            if s["configMap"].is_object() {
                let mut cm = s["configMap"].clone();
                cm["name"] = json!(self.name(cm["name"].as_str().unwrap_or("")));
                sources.push(json!({"configMap": cm}));
            } else if s["secret"].is_object() {
                let mut sec = s["secret"].clone();
                sec["name"] = json!(self.name(sec["name"].as_str().unwrap_or("")));
                sources.push(json!({"secret": sec}));
            } else if s["downwardAPI"].is_object() {
                let mut d = s["downwardAPI"].clone();
                rewrite_downward_items(&mut d["items"]);
                sources.push(json!({"downwardAPI": d}));
            } else if let Some(t) = token_source(volume, i, s) {
                // Optional: the pod starts without a token the tenant has not (yet) issued, and
                // the kubelet puts it in place when the syncer writes it.
                sources.push(json!({"secret": {
                    "name": self.token_secret,
                    "items": [{"key": t.key, "path": t.path}],
                    "optional": true}}));
            }
        }
        let mut out = json!({"sources": sources});
        if let Some(mode) = p.get("defaultMode").filter(|m| !m.is_null()) {
            out["defaultMode"] = mode.clone();
        }
        out
    }

    fn dns(&self, spec: &Value, out: &mut Map<String, Value>) {
        match &self.policy.dns_nameserver {
            Some(server) if spec["dnsPolicy"].as_str() != Some("Default") => {
                let mut searches = vec![
                    format!("{}.svc.cluster.local", self.ns),
                    "svc.cluster.local".to_string(),
                    "cluster.local".to_string(),
                ];
                let mut options = vec![json!({"name": "ndots", "value": "5"})];
                let mut nameservers = vec![server.clone()];
                if spec["dnsPolicy"].as_str() == Some("None") {
                    // The tenant's own configuration, used as given.
                    nameservers = strings(&spec["dnsConfig"]["nameservers"]);
                    searches = strings(&spec["dnsConfig"]["searches"]);
                    options = Vec::new();
                }
                if let Some(extra) = spec["dnsConfig"]["options"].as_array() {
                    options.extend(extra.iter().cloned());
                }
                out.insert("dnsPolicy".into(), json!("None"));
                out.insert(
                    "dnsConfig".into(),
                    json!({"nameservers": nameservers, "searches": searches, "options": options}),
                );
            }
            _ => {
                copy(spec, out, "dnsPolicy");
                copy(spec, out, "dnsConfig");
            }
        }
    }
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

/// An exec / httpGet / tcpSocket / sleep handler, with any `host` (which would aim the node's
/// kubelet at an arbitrary address) removed.
fn handler(h: &Value) -> Value {
    let mut o = Map::new();
    if h["exec"].is_object() {
        o.insert("exec".into(), json!({"command": h["exec"]["command"]}));
    }
    for f in ["httpGet", "tcpSocket"] {
        if let Some(m) = h[f].as_object() {
            let mut m = m.clone();
            m.remove("host");
            o.insert(f.into(), Value::Object(m));
        }
    }
    if h["sleep"].is_object() {
        o.insert("sleep".into(), h["sleep"].clone());
    }
    Value::Object(o)
}

/// Downward API field paths that would read the host pod's identity point at its origin
/// annotations instead.
fn field_ref(f: &Value) -> Value {
    let path = f["fieldPath"].as_str().unwrap_or("");
    let annotation = match path {
        "metadata.name" => Some(ANNOTATION_VIRTUAL_NAME),
        "metadata.namespace" => Some(ANNOTATION_VIRTUAL_NAMESPACE),
        "metadata.uid" => Some(ANNOTATION_VIRTUAL_UID),
        "spec.serviceAccountName" => Some(ANNOTATION_VIRTUAL_SERVICE_ACCOUNT),
        _ => None,
    };
    match annotation {
        Some(a) => json!({"fieldPath": format!("metadata.annotations['{a}']")}),
        None => json!({"fieldPath": path}),
    }
}

fn rewrite_downward_items(items: &mut Value) {
    if let Some(items) = items.as_array_mut() {
        for item in items {
            if item["fieldRef"].is_object() {
                item["fieldRef"] = field_ref(&item["fieldRef"]);
            }
        }
    }
}

fn strip_nulls(m: &mut Map<String, Value>) {
    for v in m.values_mut() {
        if let Some(o) = v.as_object_mut() {
            o.retain(|_, v| !v.is_null());
        }
    }
}

/// The status fields copied from a host pod to its tenant pod.
pub const STATUS_FIELDS: &[&str] = &[
    "phase",
    "conditions",
    "message",
    "reason",
    "hostIP",
    "hostIPs",
    "podIP",
    "podIPs",
    "startTime",
    "containerStatuses",
    "initContainerStatuses",
    "ephemeralContainerStatuses",
];

/// The tenant pod status for a host pod's status (only [`STATUS_FIELDS`]); its messages name
/// the tenant's objects as the tenant knows them, not by their host names (`hashed`: see
/// [`naming::tenant_messages`]).
pub fn tenant_status(host: &Value, hashed: naming::Hashed<'_>) -> Map<String, Value> {
    let mut out = Map::new();
    for f in STATUS_FIELDS {
        copy(&host["status"], &mut out, f);
    }
    if let Some(o) = naming::origin(host) {
        naming::tenant_messages(&mut out, &o.tenant, hashed);
    }
    out
}

/// The tenant pod's pod affinity and anti-affinity (required and preferred), confined to its
/// tenant: each term selects, among the host copies of the tenant's pods, those of the namespaces
/// it names (its own by default) whose labels match — the tenant's and namespace labels are
/// added to its selector, and it looks in the tenant's host namespace only. Topology keys are
/// kept. A term with a `namespaceSelector`, `matchLabelKeys` or `mismatchLabelKeys` is left
/// out (it could not be confined this way).
pub fn host_pod_affinity(affinity: &Value, namespace: &str, tenant: &str) -> Map<String, Value> {
    let host_ns = naming::host_namespace(tenant);
    let confine = |term: &Value| -> Option<Value> {
        let confinable = term["namespaceSelector"].is_null()
            && term["matchLabelKeys"].as_array().is_none_or(Vec::is_empty)
            && term["mismatchLabelKeys"]
                .as_array()
                .is_none_or(Vec::is_empty);
        let key = term["topologyKey"].as_str().filter(|k| !k.is_empty())?;
        if !confinable || term["labelSelector"].is_null() {
            return None;
        }
        let namespaces: Vec<String> = term["namespaces"]
            .as_array()
            .filter(|a| !a.is_empty())
            .map(|a| {
                a.iter()
                    .filter_map(|n| n.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_else(|| vec![namespace.to_string()]);
        Some(
            json!({"labelSelector": confined_selector(&term["labelSelector"], &namespaces, tenant),
            "namespaces": [host_ns], "topologyKey": key}),
        )
    };
    let mut out = Map::new();
    for kind in ["podAffinity", "podAntiAffinity"] {
        let mut built = Map::new();
        let required: Vec<Value> = affinity[kind]["requiredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(confine)
            .collect();
        if !required.is_empty() {
            built.insert(
                "requiredDuringSchedulingIgnoredDuringExecution".into(),
                Value::Array(required),
            );
        }
        let preferred: Vec<Value> = affinity[kind]
            ["preferredDuringSchedulingIgnoredDuringExecution"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|w| {
                let term = confine(&w["podAffinityTerm"])?;
                Some(json!({"weight": w["weight"].as_i64().unwrap_or(1), "podAffinityTerm": term}))
            })
            .collect();
        if !preferred.is_empty() {
            built.insert(
                "preferredDuringSchedulingIgnoredDuringExecution".into(),
                Value::Array(preferred),
            );
        }
        if !built.is_empty() {
            out.insert(kind.into(), Value::Object(built));
        }
    }
    out
}

/// The tenant pod's topology spread constraints, confined to its namespace's pods: the selector
/// gets the tenant's and namespace labels. Constraints with `matchLabelKeys` are left out.
pub fn host_spread_constraints(list: &Value, namespace: &str, tenant: &str) -> Vec<Value> {
    list.as_array()
        .into_iter()
        .flatten()
        .filter(|c| c["matchLabelKeys"].as_array().is_none_or(Vec::is_empty))
        .filter_map(|c| {
            let key = c["topologyKey"].as_str().filter(|k| !k.is_empty())?;
            let mut out = Map::new();
            for f in [
                "maxSkew",
                "whenUnsatisfiable",
                "minDomains",
                "nodeAffinityPolicy",
                "nodeTaintsPolicy",
            ] {
                copy(c, &mut out, f);
            }
            out.insert("topologyKey".into(), json!(key));
            out.insert(
                "labelSelector".into(),
                confined_selector(&c["labelSelector"], &[namespace.to_string()], tenant),
            );
            Some(Value::Object(out))
        })
        .collect()
}

/// A tenant label selector (`matchLabels`, `matchExpressions`) confined to the host copies of
/// the tenant's pods in `namespaces`: requirements on Fabrik's own keys dropped, the tenant's
/// label and its namespace label (`In` the namespaces) added.
pub fn confined_selector(selector: &Value, namespaces: &[String], tenant: &str) -> Value {
    let mut labels: BTreeMap<String, String> = naming::string_map(&selector["matchLabels"])
        .into_iter()
        .filter(|(k, _)| !k.starts_with(fabrik_api::RESERVED_PREFIX))
        .collect();
    labels.insert(fabrik_api::LABEL_TENANT.into(), tenant.into());
    let mut expressions: Vec<Value> = selector["matchExpressions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|e| {
            !e["key"]
                .as_str()
                .unwrap_or("")
                .starts_with(fabrik_api::RESERVED_PREFIX)
        })
        .cloned()
        .collect();
    match namespaces {
        [one] => {
            labels.insert(fabrik_api::LABEL_NAMESPACE.into(), one.clone());
        }
        many => expressions
            .push(json!({"key": fabrik_api::LABEL_NAMESPACE, "operator": "In", "values": many})),
    }
    let mut out = json!({"matchLabels": labels});
    if !expressions.is_empty() {
        out["matchExpressions"] = Value::Array(expressions);
    }
    out
}

/// Labels of host pods that a tenant Service selector `selector` in `namespace` must match.
pub fn host_selector(
    selector: &BTreeMap<String, String>,
    namespace: &str,
    tenant: &str,
) -> BTreeMap<String, String> {
    let mut s = selector.clone();
    s.retain(|k, _| !k.starts_with(fabrik_api::RESERVED_PREFIX));
    s.insert(fabrik_api::LABEL_TENANT.into(), tenant.into());
    s.insert(fabrik_api::LABEL_NAMESPACE.into(), namespace.into());
    s
}

/// The node a pod's required node affinity pins it to: exactly one term with exactly one
/// field requirement `metadata.name In [node]` (how a DaemonSet places its pods). Anything else
/// in the tenant's affinity is not carried to the host (its label terms would select among
/// nodes of other tenants' pools).
pub fn pinned_node(spec: &Value) -> Option<&str> {
    let terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        ["nodeSelectorTerms"]
        .as_array()?;
    let [term] = terms.as_slice() else {
        return None;
    };
    if term["matchExpressions"]
        .as_array()
        .is_some_and(|e| !e.is_empty())
    {
        return None;
    }
    let [field] = term["matchFields"].as_array()?.as_slice() else {
        return None;
    };
    if field["key"] != "metadata.name" || field["operator"] != "In" {
        return None;
    }
    match field["values"].as_array()?.as_slice() {
        [node] => node.as_str().filter(|n| !n.is_empty()),
        _ => None,
    }
}

#[cfg(test)]
mod affinity_tests {
    use super::*;

    #[test]
    fn pod_affinity_is_confined_to_the_tenant() {
        let aff = json!({"podAntiAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web", "fabrik.dev/tenant": "x"}},
                 "topologyKey": "kubernetes.io/hostname"},
                {"labelSelector": {}, "topologyKey": "zone", "namespaceSelector": {}}],
            "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 10, "podAffinityTerm":
                {"labelSelector": {"matchExpressions": [{"key": "tier", "operator": "Exists"}]},
                 "namespaces": ["a", "b"], "topologyKey": "zone"}}]}});
        let h = host_pod_affinity(&aff, "ml", "t1");
        let req = &h["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
        assert_eq!(
            req.as_array().map(Vec::len),
            Some(1),
            "namespaceSelector terms dropped"
        );
        // The tenant's own label dropped; its tenant and (one) namespace required.
        assert_eq!(
            req[0]["labelSelector"]["matchLabels"],
            json!({"app": "web", "fabrik.dev/tenant": "t1", "fabrik.dev/namespace": "ml"})
        );
        assert!(req[0]["labelSelector"]["matchExpressions"].is_null());
        assert_eq!(req[0]["namespaces"], json!(["fabrik-t1"]));
        let pref = &h["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0];
        assert_eq!(pref["weight"], 10);
        assert_eq!(
            pref["podAffinityTerm"]["labelSelector"]["matchExpressions"][1]["values"],
            json!(["a", "b"])
        );
        assert!(host_pod_affinity(&Value::Null, "ml", "t1").is_empty());
        let spread = host_spread_constraints(
            &json!([{"maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule",
                "labelSelector": {"matchLabels": {"app": "web"}}},
                {"maxSkew": 1, "topologyKey": "zone", "labelSelector": {},
                 "matchLabelKeys": ["pod-template-hash"]}]),
            "ml",
            "t1",
        );
        assert_eq!(spread.len(), 1);
        assert_eq!(
            spread[0]["labelSelector"]["matchLabels"],
            json!({"app": "web", "fabrik.dev/tenant": "t1", "fabrik.dev/namespace": "ml"})
        );
        assert_eq!(spread[0]["whenUnsatisfiable"], "DoNotSchedule");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::GpuSharing;
    use k8s_openapi::api::core::v1::Toleration;

    fn policy() -> Policy {
        Policy {
            node_selector: [("pool".to_string(), "a".to_string())].into(),
            tolerations: vec![Toleration {
                key: Some("pool".into()),
                operator: Some("Equal".into()),
                value: Some("a".into()),
                effect: Some("NoSchedule".into()),
                ..Default::default()
            }],
            runtime_class: Some("kata".into()),
            gpu_sharing: GpuSharing::Mig("1g.18gb".into()),
            ..Default::default()
        }
    }

    fn build(pod: &Value) -> Value {
        let p = policy();
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &[],
            gang: None,
        };
        host_pod(pod, &ctx).expect("build")
    }

    fn hostile() -> Value {
        json!({"metadata": {"name": "web-1", "namespace": "prod", "uid": "u-1",
                "labels": {"app": "web", "fabrik.dev/tenant": "b"},
                "annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined", "team": "x"},
                "ownerReferences": [{"kind": "ReplicaSet", "name": "web"}]},
            "spec": {
                "nodeName": "victim", "hostNetwork": true, "hostPID": true, "hostIPC": true,
                "schedulerName": "evil", "priority": 1000000000, "priorityClassName": "system-node-critical",
                "serviceAccountName": "builder", "runtimeClassName": "runc",
                "nodeSelector": {"pool": "b", "disk": "ssd"},
                "tolerations": [{"operator": "Exists"}],
                "affinity": {"nodeAffinity": {}}, "hostAliases": [{"ip": "1.2.3.4"}],
                "securityContext": {"sysctls": [{"name": "kernel.shm_rmid_forced", "value": "0"}],
                    "seccompProfile": {"type": "Unconfined"}, "runAsUser": 1000},
                "imagePullSecrets": [{"name": "regcred"}],
                "unknownField": {"x": 1},
                "containers": [{"name": "c", "image": "nginx", "unknown": true,
                    "ports": [{"containerPort": 80, "hostPort": 80, "hostIP": "0.0.0.0"}],
                    "env": [
                        {"name": "A", "value": "1"},
                        {"name": "CM", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
                        {"name": "S", "valueFrom": {"secretKeyRef": {"name": "sec", "key": "k"}}},
                        {"name": "ME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                    "envFrom": [{"configMapRef": {"name": "cfg"}}, {"secretRef": {"name": "sec"}, "prefix": "S_"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1", "cpu": "2", "example.com/x": "1"}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "mountPropagation": "Bidirectional"}],
                    "livenessProbe": {"httpGet": {"host": "10.0.0.1", "path": "/", "port": 80}, "periodSeconds": 5},
                    "securityContext": {"privileged": true, "capabilities": {"add": ["SYS_ADMIN", "CHOWN"], "drop": ["ALL"]},
                        "procMount": "Unmasked", "runAsNonRoot": true}}],
                "volumes": [
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
                    {"name": "cfg", "configMap": {"name": "cfg"}},
                    {"name": "sec", "secret": {"secretName": "sec"}},
                    {"name": "root", "hostPath": {"path": "/"}},
                    {"name": "csi", "csi": {"driver": "x"}},
                    {"name": "token", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3600}},
                        {"configMap": {"name": "kube-root-ca.crt"}},
                        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}}]}})
    }

    #[test]
    fn names_labels_and_annotations() {
        let h = build(&hostile());
        let m = &h["metadata"];
        assert_eq!(m["name"], "web-1-x-prod-x-a");
        assert_eq!(m["namespace"], "fabrik-a");
        assert_eq!(m["labels"]["fabrik.dev/tenant"], "a");
        assert_eq!(m["labels"]["fabrik.dev/namespace"], "prod");
        assert_eq!(m["labels"]["app"], "web");
        assert_eq!(m["annotations"]["fabrik.dev/virtual-name"], "web-1");
        assert_eq!(m["annotations"]["fabrik.dev/virtual-uid"], "u-1");
        assert_eq!(
            m["annotations"]["fabrik.dev/virtual-service-account"],
            "builder"
        );
        assert_eq!(m["annotations"]["team"], "x");
        assert!(m["annotations"]
            .get("container.apparmor.security.beta.kubernetes.io/c")
            .is_none());
        assert!(m.get("ownerReferences").is_none());
        assert_eq!(h["spec"]["hostname"], "web-1");
    }

    #[test]
    fn hostile_fields_never_reach_the_host() {
        let h = build(&hostile());
        let s = &h["spec"];
        for f in [
            "nodeName",
            "hostNetwork",
            "hostPID",
            "hostIPC",
            "schedulerName",
            "priority",
            "priorityClassName",
            "serviceAccountName",
            "affinity",
            "hostAliases",
            "unknownField",
        ] {
            assert!(s.get(f).is_none(), "{f} reached the host: {}", s[f]);
        }
        assert_eq!(s["runtimeClassName"], "kata");
        assert_eq!(s["nodeSelector"], json!({"pool": "a", "disk": "ssd"}));
        assert_eq!(
            s["tolerations"],
            json!([{"key": "pool", "operator": "Equal", "value": "a", "effect": "NoSchedule"}])
        );
        assert_eq!(s["automountServiceAccountToken"], false);
        assert_eq!(s["enableServiceLinks"], false);
        assert_eq!(s["securityContext"], json!({"runAsUser": 1000}));
        let c = &s["containers"][0];
        assert!(c.get("unknown").is_none());
        assert_eq!(c["ports"], json!([{"containerPort": 80}]));
        assert_eq!(
            c["securityContext"],
            json!({"runAsNonRoot": true, "capabilities": {"drop": ["ALL"], "add": ["CHOWN"]}})
        );
        assert_eq!(
            c["volumeMounts"],
            json!([{"name": "data", "mountPath": "/data"}])
        );
        assert_eq!(
            c["livenessProbe"],
            json!({"httpGet": {"path": "/", "port": 80}, "periodSeconds": 5})
        );
        assert_eq!(s["volumes"][3], json!({"name": "root", "emptyDir": {}}));
        assert_eq!(s["volumes"][4], json!({"name": "csi", "emptyDir": {}}));
    }

    #[test]
    fn references_are_rewritten() {
        let h = build(&hostile());
        let s = &h["spec"];
        let c = &s["containers"][0];
        assert_eq!(c["env"][0], json!({"name": "A", "value": "1"}));
        assert_eq!(
            c["env"][1]["valueFrom"]["configMapKeyRef"],
            json!({"name": "cfg-x-prod-x-a", "key": "k"})
        );
        assert_eq!(
            c["env"][2]["valueFrom"]["secretKeyRef"]["name"],
            "sec-x-prod-x-a"
        );
        assert_eq!(
            c["env"][3]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.annotations['fabrik.dev/virtual-name']"
        );
        assert_eq!(c["envFrom"][0]["configMapRef"]["name"], "cfg-x-prod-x-a");
        assert_eq!(c["envFrom"][1]["secretRef"]["name"], "sec-x-prod-x-a");
        assert_eq!(c["envFrom"][1]["prefix"], "S_");
        assert_eq!(
            c["resources"]["limits"],
            json!({"nvidia.com/mig-1g.18gb": "1", "cpu": "2"})
        );
        assert_eq!(
            s["volumes"][0]["persistentVolumeClaim"]["claimName"],
            "data-x-prod-x-a"
        );
        assert_eq!(s["volumes"][1]["configMap"]["name"], "cfg-x-prod-x-a");
        assert_eq!(s["volumes"][2]["secret"]["secretName"], "sec-x-prod-x-a");
        assert_eq!(
            s["imagePullSecrets"],
            json!([{"name": "regcred-x-prod-x-a"}])
        );
        let sources = &s["volumes"][5]["projected"]["sources"];
        assert_eq!(
            sources[0],
            json!({"secret": {"name": "web-1-x-prod-x-a-token", "optional": true,
                "items": [{"key": "token-5-0", "path": "token"}]}})
        );
        assert_eq!(
            sources[1]["configMap"]["name"],
            "kube-root-ca.crt-x-prod-x-a"
        );
        assert_eq!(
            sources[2]["downwardAPI"]["items"][0]["fieldRef"]["fieldPath"],
            "metadata.annotations['fabrik.dev/virtual-namespace']"
        );
    }

    /// A pod with two token volumes, each with its own audience, path and lifetime.
    fn two_tokens() -> Value {
        json!({"metadata": {"name": "p", "namespace": "ns", "uid": "u"},
            "spec": {"containers": [{"name": "c", "image": "x"}],
                "volumes": [
                    {"name": "plain", "emptyDir": {}},
                    {"name": "kube-api-access-abcde", "projected": {"defaultMode": 420, "sources": [
                        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
                        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]}},
                    {"name": "vault", "projected": {"sources": [
                        {"downwardAPI": {"items": [{"path": "ns", "fieldRef": {"fieldPath": "metadata.namespace"}}]}},
                        {"serviceAccountToken": {"path": "vault/token", "audience": "vault",
                            "expirationSeconds": 60}}]}}]}})
    }

    #[test]
    fn token_sources_become_keys_of_the_pods_token_secret() {
        let h = build(&two_tokens());
        assert_eq!(h["metadata"]["name"], "p-x-ns-x-a");
        let vols = &h["spec"]["volumes"];
        assert_eq!(
            vols[1]["projected"],
            json!({"defaultMode": 420, "sources": [
                {"secret": {"name": "p-x-ns-x-a-token", "optional": true,
                    "items": [{"key": "token-1-0", "path": "token"}]}},
                {"configMap": {"name": "kube-root-ca.crt-x-ns-x-a", "items": [{"key": "ca.crt", "path": "ca.crt"}]}}]})
        );
        assert_eq!(
            vols[2]["projected"]["sources"][1],
            json!({"secret": {"name": "p-x-ns-x-a-token", "optional": true,
                "items": [{"key": "token-2-1", "path": "vault/token"}]}})
        );
        assert!(!h.to_string().contains("serviceAccountToken"));
        // What the syncer asks the tenant for: the same keys, the audience, at least 600 s.
        assert_eq!(
            token_sources(&two_tokens()),
            vec![
                TokenSource {
                    key: "token-1-0".into(),
                    path: "token".into(),
                    audience: None,
                    expiration_seconds: 3607,
                },
                TokenSource {
                    key: "token-2-1".into(),
                    path: "vault/token".into(),
                    audience: Some("vault".into()),
                    expiration_seconds: MIN_TOKEN_SECONDS,
                },
            ]
        );
        let mut bare = two_tokens();
        bare["spec"]["volumes"][1]["projected"]["sources"][0] = json!({"serviceAccountToken": {}});
        let t = &token_sources(&bare)[0];
        assert_eq!((t.path.as_str(), t.expiration_seconds), ("token", 3600));
        // A hostile lifetime stays within upstream's bounds.
        bare["spec"]["volumes"][1]["projected"]["sources"][0] =
            json!({"serviceAccountToken": {"expirationSeconds": i64::MAX}});
        assert_eq!(
            token_sources(&bare)[0].expiration_seconds,
            MAX_TOKEN_SECONDS
        );
    }

    #[test]
    fn service_env_comes_first_and_the_containers_own_wins() {
        let p = Policy {
            api_address: Some(ApiAddress {
                host: "10.96.0.10".into(),
                port: 6443,
            }),
            ..policy()
        };
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &[],
            gang: None,
        };
        let mut pod = two_tokens();
        pod["spec"]["initContainers"] = json!([{"name": "init", "image": "x"}]);
        pod["spec"]["containers"][0]["env"] = json!([
            {"name": "A", "value": "1"},
            {"name": "KUBERNETES_SERVICE_HOST", "value": "mine"}]);
        let h = host_pod(&pod, &ctx).expect("build");
        let want_service = json!([
            {"name": "KUBERNETES_SERVICE_HOST", "value": "10.96.0.10"},
            {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
            {"name": "KUBERNETES_SERVICE_PORT_HTTPS", "value": "6443"},
            {"name": "KUBERNETES_PORT", "value": "tcp://10.96.0.10:6443"},
            {"name": "KUBERNETES_PORT_6443_TCP", "value": "tcp://10.96.0.10:6443"},
            {"name": "KUBERNETES_PORT_6443_TCP_PROTO", "value": "tcp"},
            {"name": "KUBERNETES_PORT_6443_TCP_PORT", "value": "6443"},
            {"name": "KUBERNETES_PORT_6443_TCP_ADDR", "value": "10.96.0.10"}]);
        let env = h["spec"]["containers"][0]["env"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        assert_eq!(env.len(), 10, "{env:?}");
        assert_eq!(Value::Array(env[..8].to_vec()), want_service);
        assert_eq!(
            env[8..],
            [
                json!({"name": "A", "value": "1"}),
                json!({"name": "KUBERNETES_SERVICE_HOST", "value": "mine"})
            ]
        );
        // Last one of a name wins (the kubelet's rule): the container's own.
        let last = env
            .iter()
            .rev()
            .find(|e| e["name"] == "KUBERNETES_SERVICE_HOST");
        assert_eq!(last.map(|e| &e["value"]), Some(&json!("mine")));
        assert_eq!(h["spec"]["initContainers"][0]["env"], want_service);
        assert_eq!(h["spec"]["enableServiceLinks"], false);
        // IPv6 addresses in brackets, as upstream.
        let v6 = api_service_env(&ApiAddress {
            host: "fd00::1".into(),
            port: 443,
        });
        assert_eq!(
            v6[3],
            json!({"name": "KUBERNETES_PORT", "value": "tcp://[fd00::1]:443"})
        );
        assert_eq!(
            v6[7],
            json!({"name": "KUBERNETES_PORT_443_TCP_ADDR", "value": "fd00::1"})
        );
    }

    #[test]
    fn no_service_env_without_an_api_address() {
        let mut pod = two_tokens();
        pod["spec"]["containers"][0]["env"] = json!([{"name": "A", "value": "1"}]);
        let h = build(&pod);
        assert_eq!(
            h["spec"]["containers"][0]["env"],
            json!([{"name": "A", "value": "1"}])
        );
        let h = build(&two_tokens());
        assert!(h["spec"]["containers"][0].get("env").is_none());
    }

    #[test]
    fn service_links_name_the_namespaces_services_as_the_kubelet_does() {
        let svc = |ns: &str, name: &str, spec: Value| {
            std::sync::Arc::new(json!({"metadata": {"namespace": ns, "name": name}, "spec": spec}))
        };
        let services = vec![
            svc(
                "web",
                "redis-primary",
                json!({"clusterIP": "10.96.7.1",
                "ports": [{"name": "redis", "port": 6379, "protocol": "TCP"},
                          {"name": "metrics-udp", "port": 9121, "protocol": "UDP"}]}),
            ),
            svc(
                "web",
                "db",
                json!({"clusterIP": "fd00::5", "ports": [{"port": 5432}]}),
            ),
            svc(
                "web",
                "headless",
                json!({"clusterIP": "None", "ports": [{"port": 80}]}),
            ),
            svc(
                "web",
                "ext",
                json!({"type": "ExternalName", "externalName": "example.com"}),
            ),
            svc(
                "other",
                "elsewhere",
                json!({"clusterIP": "10.96.7.9", "ports": [{"port": 80}]}),
            ),
            svc(
                "default",
                "kubernetes",
                json!({"clusterIP": "10.96.0.1", "ports": [{"port": 443}]}),
            ),
        ];
        let env = service_links_env("web", &services);
        let pairs: Vec<(String, String)> = env
            .iter()
            .map(|e| {
                let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
                (s("name"), s("value"))
            })
            .collect();
        let want: Vec<(String, String)> = [
            ("DB_SERVICE_HOST", "fd00::5"),
            ("DB_SERVICE_PORT", "5432"),
            ("DB_PORT", "tcp://[fd00::5]:5432"),
            ("DB_PORT_5432_TCP", "tcp://[fd00::5]:5432"),
            ("DB_PORT_5432_TCP_PROTO", "tcp"),
            ("DB_PORT_5432_TCP_PORT", "5432"),
            ("DB_PORT_5432_TCP_ADDR", "fd00::5"),
            ("REDIS_PRIMARY_SERVICE_HOST", "10.96.7.1"),
            ("REDIS_PRIMARY_SERVICE_PORT", "6379"),
            ("REDIS_PRIMARY_SERVICE_PORT_REDIS", "6379"),
            ("REDIS_PRIMARY_SERVICE_PORT_METRICS_UDP", "9121"),
            ("REDIS_PRIMARY_PORT", "tcp://10.96.7.1:6379"),
            ("REDIS_PRIMARY_PORT_6379_TCP", "tcp://10.96.7.1:6379"),
            ("REDIS_PRIMARY_PORT_6379_TCP_PROTO", "tcp"),
            ("REDIS_PRIMARY_PORT_6379_TCP_PORT", "6379"),
            ("REDIS_PRIMARY_PORT_6379_TCP_ADDR", "10.96.7.1"),
            ("REDIS_PRIMARY_PORT_9121_UDP", "udp://10.96.7.1:9121"),
            ("REDIS_PRIMARY_PORT_9121_UDP_PROTO", "udp"),
            ("REDIS_PRIMARY_PORT_9121_UDP_PORT", "9121"),
            ("REDIS_PRIMARY_PORT_9121_UDP_ADDR", "10.96.7.1"),
        ]
        .into_iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
        assert_eq!(pairs, want);

        // In the pod: after the `kubernetes` Service's, before the container's own; none when
        // the pod turns its links off.
        let p = Policy {
            api_address: Some(ApiAddress {
                host: "10.96.0.10".into(),
                port: 443,
            }),
            ..policy()
        };
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &services,
            gang: None,
        };
        let mut pod = two_tokens();
        pod["metadata"]["namespace"] = json!("web");
        pod["spec"]["containers"][0]["env"] = json!([{"name": "DB_SERVICE_HOST", "value": "x"}]);
        let h = host_pod(&pod, &ctx).expect("build");
        let names: Vec<&str> = h["spec"]["containers"][0]["env"]
            .as_array()
            .expect("env")
            .iter()
            .filter_map(|e| e["name"].as_str())
            .collect();
        assert_eq!(names.first(), Some(&"KUBERNETES_SERVICE_HOST"));
        assert_eq!(names.get(8), Some(&"DB_SERVICE_HOST"));
        assert_eq!(names.last(), Some(&"DB_SERVICE_HOST"));
        assert_eq!(names.len(), 8 + want.len() + 1);
        assert_eq!(h["spec"]["enableServiceLinks"], false);
        pod["spec"]["enableServiceLinks"] = json!(false);
        let h = host_pod(&pod, &ctx).expect("build");
        let n = h["spec"]["containers"][0]["env"].as_array().map(Vec::len);
        assert_eq!(n, Some(8 + 1));
    }

    #[test]
    fn permissive_policy_passes_what_it_allows() {
        let p = Policy {
            allow_privileged: true,
            allow_host_namespaces: true,
            allow_host_path: true,
            allowed_priority_classes: vec!["system-node-critical".into()],
            ..policy()
        };
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &[],
            gang: None,
        };
        let h = host_pod(&hostile(), &ctx).expect("build");
        let s = &h["spec"];
        assert_eq!(s["hostNetwork"], true);
        assert_eq!(s["priorityClassName"], "system-node-critical");
        assert_eq!(s["containers"][0]["securityContext"]["privileged"], true);
        assert_eq!(s["containers"][0]["ports"][0]["hostPort"], 80);
        assert_eq!(s["volumes"][3]["hostPath"]["path"], "/");
        assert!(s.get("nodeName").is_none());
    }

    #[test]
    fn dns_points_at_the_tenant_server() {
        let p = Policy {
            dns_nameserver: Some("10.96.0.53".into()),
            ..policy()
        };
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &[],
            gang: None,
        };
        let pod = json!({"metadata": {"name": "p", "namespace": "ns"},
            "spec": {"containers": [{"name": "c", "image": "x"}]}});
        let h = host_pod(&pod, &ctx).expect("build");
        assert_eq!(h["spec"]["dnsPolicy"], "None");
        assert_eq!(h["spec"]["dnsConfig"]["nameservers"], json!(["10.96.0.53"]));
        assert_eq!(
            h["spec"]["dnsConfig"]["searches"][0],
            "ns.svc.cluster.local"
        );
    }

    #[test]
    fn unsafe_volume_paths_are_never_built() {
        let p = policy();
        let ctx = PodContext {
            tenant: "a",
            policy: &p,
            services: &[],
            gang: None,
        };
        // (pointer into the hostile pod, value)
        let table: &[(&str, Value)] = &[
            (
                "/spec/containers/0/volumeMounts/0/subPath",
                json!("../../../../etc"),
            ),
            (
                "/spec/containers/0/volumeMounts/0/subPath",
                json!("/var/run"),
            ),
            (
                "/spec/containers/0/volumeMounts/0/subPathExpr",
                json!("$(UP)/x"),
            ),
            (
                "/spec/volumes/1/configMap/items",
                json!([{"key": "k", "path": "../../x"}]),
            ),
            (
                "/spec/volumes/2/secret/items",
                json!([{"key": "k", "path": "/etc/passwd"}]),
            ),
            (
                "/spec/volumes/5/projected/sources/0/serviceAccountToken/path",
                json!("../token"),
            ),
            (
                "/spec/volumes/5/projected/sources/2/downwardAPI/items/0/path",
                json!("..data/x"),
            ),
        ];
        for (pointer, value) in table {
            let mut pod = hostile();
            pod["spec"]["containers"][0]["env"] = json!([{"name": "UP", "value": ".."}]);
            let (parent, field) = pointer.rsplit_once('/').expect("a field");
            pod.pointer_mut(parent).expect(parent)[field] = value.clone();
            match host_pod(&pod, &ctx) {
                Err(Error::UnsafePath(errs)) => assert_eq!(errs.len(), 1, "{pointer}: {errs:?}"),
                other => panic!("{pointer}: built {other:?}"),
            }
        }
        let mut ok = hostile();
        ok["spec"]["containers"][0]["volumeMounts"][0]["subPath"] = json!("data/sub");
        assert!(host_pod(&ok, &ctx).is_ok());
    }

    #[test]
    fn status_fields_are_picked() {
        let host = json!({"status": {"phase": "Running", "podIP": "10.0.0.2", "qosClass": "x",
            "nominatedNodeName": "n"}});
        let s = tenant_status(&host, &|_| None);
        assert_eq!(s.len(), 2);
        assert_eq!(s["phase"], "Running");
    }

    #[test]
    fn status_messages_name_the_tenant_s_objects_as_it_knows_them() {
        let host = json!({"metadata": {"labels": {fabrik_api::LABEL_TENANT: "a"},
            "annotations": {fabrik_api::ANNOTATION_VIRTUAL_NAMESPACE: "prod",
                fabrik_api::ANNOTATION_VIRTUAL_NAME: "web"}},
            "status": {"phase": "Pending", "message": "waiting for fabrik-a/db-x-prod-x-a",
            "conditions": [{"type": "PodScheduled", "status": "False",
                "message": "cannot allocate resource claim gpu-x-prod-x-a; other-x-prod-x-b"}],
            "containerStatuses": [{"name": "c", "state": {"waiting": {"reason": "CreateContainerConfigError",
                "message": "secret \"creds-x-prod-x-a\" not found"}}}]}});
        let s = Value::Object(tenant_status(&host, &|_| None));
        assert_eq!(s["message"], "waiting for prod/db");
        assert_eq!(
            s["conditions"][0]["message"],
            "cannot allocate resource claim prod/gpu; other-x-prod-x-b"
        );
        assert_eq!(
            s["containerStatuses"][0]["state"]["waiting"]["message"],
            "secret \"prod/creds\" not found"
        );
        assert_eq!(s["conditions"][0]["type"], "PodScheduled");
    }

    #[test]
    fn only_a_one_node_pin_is_carried_to_the_host() {
        let pin = |terms: Value| {
            json!({"affinity": {"nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}}}})
        };
        let one = json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["gpu-1"]}]}]);
        assert_eq!(pinned_node(&pin(one)), Some("gpu-1"));
        for other in [
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a", "b"]}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["a"]}]}]),
            json!([{"matchExpressions": [{"key": "pool", "operator": "In", "values": ["x"]}],
                "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]}]),
            json!([{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a"]}]},
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["b"]}]}]),
        ] {
            assert_eq!(pinned_node(&pin(other.clone())), None, "{other}");
        }
        assert_eq!(pinned_node(&json!({})), None);
    }
}
