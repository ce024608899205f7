//! The rules of a Tenant, written once: every part of Fabrik that takes a Tenant — the host's
//! admission on `fabrik up`, the tenant manager, `fabrik tenant create`, the Terraform provider
//! — asks [`validate_tenant`] (or [`validate_name`] / [`validate_spec`]) and gives its verdict,
//! naming the field as a JSON path (`spec.quota.gpuSharing`, `spec.owners[1]`). The Tenant
//! CRD's schema repeats what a schema can say (minimums, the patterns of
//! [`crate::tenant::QUANTITY_PATTERN`] and [`crate::tenant::GPU_SHARING_PATTERN`]) for hosts
//! where only the schema runs at write time.

use std::collections::BTreeMap;

use fabrik_machinery::quantity::Quantity;
use fabrik_machinery::validation::{dns1123_label, dns1123_subdomain, label_value, qualified_name};
use kube::ResourceExt;

use crate::naming::{host_namespace, RESERVED_TENANT_NAMES};
use crate::tenant::{check_owners, GpuSharingMode, Tenant, TenantSpec, MAX_TENANT_NAME};

/// Privileges a tenant may be allowed (`spec.isolation.allow`).
pub const PRIVILEGES: [&str; 3] = ["privileged", "hostNamespaces", "hostPath"];

/// The largest network segment (a 24-bit VXLAN VNI).
pub const MAX_SEGMENT: i64 = (1 << 24) - 1;

/// One thing wrong with a Tenant.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SpecError {
    /// The field, as a JSON path from the object's root (`metadata.name`,
    /// `spec.quota.cpu`, `spec.isolation.nodeSelector[gpu]`).
    pub field: String,
    /// What is wrong, naming the value where it helps.
    pub message: String,
}

impl SpecError {
    fn new(field: impl Into<String>, message: impl Into<String>) -> SpecError {
        SpecError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Checks a tenant name: a DNS label of at most [`MAX_TENANT_NAME`] characters (one limit,
/// stated once), not reserved.
pub fn validate_name(name: &str) -> Result<(), SpecError> {
    let field = "metadata.name";
    if name.len() > MAX_TENANT_NAME {
        return Err(SpecError::new(
            field,
            format!("must be no more than {MAX_TENANT_NAME} characters"),
        ));
    }
    let errs = dns1123_label(name);
    if !errs.is_empty() {
        return Err(SpecError::new(field, errs.join("; ")));
    }
    if RESERVED_TENANT_NAMES.contains(&name) {
        return Err(SpecError::new(
            field,
            format!(
                "is reserved: its host namespace {} is used by Fabrik itself",
                host_namespace(name)
            ),
        ));
    }
    Ok(())
}

/// A non-negative quantity (for `field`), its problem otherwise.
fn quantity(field: &str, text: &str, example: &str) -> Result<Quantity, SpecError> {
    let q = text.parse::<Quantity>().map_err(|_| {
        SpecError::new(
            field,
            format!("{text:?} is not a quantity (e.g. {example})"),
        )
    })?;
    if q.is_negative() {
        return Err(SpecError::new(
            field,
            format!("{text:?} must not be negative"),
        ));
    }
    Ok(q)
}

/// The bytes of `spec.quota.storage`, checked.
pub fn storage_bytes(text: &str) -> Result<u64, SpecError> {
    let field = "spec.quota.storage";
    let q = quantity(field, text, "512Mi, 2Gi")?;
    u64::try_from(q.value()).map_err(|_| {
        SpecError::new(
            field,
            format!("{text:?} must be a whole number of bytes that fits 64 bits"),
        )
    })
}

/// Every problem of a spec (empty when it is valid).
pub fn validate_spec(spec: &TenantSpec) -> Vec<SpecError> {
    let mut errs = Vec::new();
    for (i, owner) in spec.owners.iter().enumerate() {
        if let Err(why) = check_owners(std::slice::from_ref(owner)) {
            errs.push(SpecError::new(format!("spec.owners[{i}]"), why));
        }
    }
    if let Some(q) = &spec.quota {
        for (field, value) in [("cpu", &q.cpu), ("memory", &q.memory)] {
            if let Some(text) = value {
                if let Err(e) = quantity(&format!("spec.quota.{field}"), text, "16, 500m, 64Gi") {
                    errs.push(e);
                }
            }
        }
        if let Some(text) = &q.storage {
            if let Err(e) = storage_bytes(text) {
                errs.push(e);
            }
        }
        for (field, value) in [
            ("pods", q.pods),
            ("gpus", q.gpus),
            ("nodePorts", q.node_ports),
            ("loadBalancers", q.load_balancers),
            ("objects", q.objects),
        ] {
            if value.is_some_and(|v| v < 0) {
                errs.push(SpecError::new(
                    format!("spec.quota.{field}"),
                    "must not be negative",
                ));
            }
        }
        if let Some(mode) = &q.gpu_sharing {
            if let Err(why) = GpuSharingMode::parse(mode) {
                errs.push(SpecError::new("spec.quota.gpuSharing", why));
            }
        }
        // Every kind must be requestable by a name of its own.
        let default = q.gpu_sharing.as_deref().unwrap_or("whole");
        let mut named: BTreeMap<String, String> = BTreeMap::new();
        if let Ok(m) = GpuSharingMode::parse(default) {
            named.insert(m.tenant_resource(), default.to_string());
        }
        for (i, t) in q.gpu_types.iter().enumerate() {
            let field = format!("spec.quota.gpuTypes[{i}]");
            match GpuSharingMode::parse(t) {
                Err(why) => errs.push(SpecError::new(field, why)),
                Ok(m) => match named.get(&m.tenant_resource()) {
                    Some(other) if other != t => errs.push(SpecError::new(
                        field,
                        format!(
                            "{t:?} and {other:?} would both be requested as {}: give the tenant one of them",
                            m.tenant_resource()
                        ),
                    )),
                    Some(_) => {}
                    None => {
                        named.insert(m.tenant_resource(), t.clone());
                    }
                },
            }
        }
    }
    if let Some(iso) = &spec.isolation {
        for (i, p) in iso.allow.iter().enumerate() {
            if !PRIVILEGES.contains(&p.as_str()) {
                errs.push(SpecError::new(
                    format!("spec.isolation.allow[{i}]"),
                    format!("{p:?}: allowed are {}", PRIVILEGES.join(", ")),
                ));
            }
        }
        for (i, t) in iso.webhook_targets.iter().enumerate() {
            if let Err(why) = fabrik_machinery::net::Allowed::parse(t) {
                errs.push(SpecError::new(
                    format!("spec.isolation.webhookTargets[{i}]"),
                    why,
                ));
            }
        }
        for (i, g) in iso.gateways.iter().enumerate() {
            let valid = g.split_once('/').is_some_and(|(ns, name)| {
                dns1123_label(ns).is_empty() && dns1123_subdomain(name).is_empty()
            });
            if !valid {
                errs.push(SpecError::new(
                    format!("spec.isolation.gateways[{i}]"),
                    format!("{g:?}: a host Gateway is named <namespace>/<name>, e.g. gateways/inference"),
                ));
            }
        }
        for (i, h) in iso.route_hostnames.iter().enumerate() {
            let bare = h.strip_prefix("*.").unwrap_or(h);
            if !dns1123_subdomain(bare).is_empty() || bare.parse::<std::net::IpAddr>().is_ok() {
                errs.push(SpecError::new(
                    format!("spec.isolation.routeHostnames[{i}]"),
                    format!("{h:?}: a DNS name, or *.<DNS name> for every name under it"),
                ));
            }
        }
        for (k, v) in &iso.node_selector {
            let mut why = qualified_name(k);
            why.extend(label_value(v));
            if !why.is_empty() {
                errs.push(SpecError::new(
                    format!("spec.isolation.nodeSelector[{k}]"),
                    why.join("; "),
                ));
            }
        }
    }
    if let Some(segment) = spec.network.as_ref().and_then(|n| n.segment) {
        if !(1..=MAX_SEGMENT).contains(&segment) {
            errs.push(SpecError::new(
                "spec.network.segment",
                format!("{segment} is not a segment: use 1 to {MAX_SEGMENT} (a VXLAN VNI; 0 is reserved)"),
            ));
        }
    }
    for (i, kind) in spec.sync.iter().flat_map(|s| &s.extra_kinds).enumerate() {
        let valid = kind.split_once('.').is_some_and(|(resource, group)| {
            dns1123_label(resource).is_empty() && dns1123_subdomain(group).is_empty()
        });
        if !valid {
            errs.push(SpecError::new(
                format!("spec.sync.extraKinds[{i}]"),
                format!("{kind:?}: a kind is named <resource>.<group>, e.g. widgets.example.com"),
            ));
        }
    }
    if let Some(queue) = &spec.queue {
        for (field, value) in [
            ("borrowingLimit", queue.borrowing_limit),
            ("lendingLimit", queue.lending_limit),
        ] {
            if value.is_some_and(|v| v < 0) {
                errs.push(SpecError::new(
                    format!("spec.queue.{field}"),
                    "must not be negative",
                ));
            }
        }
        if queue.weight.is_some_and(|w| !(1..=1000).contains(&w)) {
            errs.push(SpecError::new(
                "spec.queue.weight",
                "must be between 1 and 1000",
            ));
        }
        if let Some(parent) = &queue.parent {
            for problem in fabrik_machinery::validation::dns1123_label(parent) {
                errs.push(SpecError::new(
                    "spec.queue.parent",
                    format!("{parent:?}: {problem}"),
                ));
            }
        }
        let guarantee = spec.quota.as_ref().and_then(|q| q.gpus);
        if let (Some(lend), Some(g)) = (queue.lending_limit, guarantee) {
            if lend > g {
                errs.push(SpecError::new(
                    "spec.queue.lendingLimit",
                    format!(
                        "must not exceed spec.quota.gpus ({g}): a tenant lends only its own GPUs"
                    ),
                ));
            }
        }
    }
    errs
}

/// Every problem of a Tenant: its name, then its spec.
pub fn validate_tenant(tenant: &Tenant) -> Vec<SpecError> {
    let mut errs: Vec<SpecError> = validate_name(&tenant.name_any())
        .err()
        .into_iter()
        .collect();
    errs.extend(validate_spec(&tenant.spec));
    errs
}

/// The problems as one line (`; ` between them).
pub fn describe(errs: &[SpecError]) -> String {
    errs.iter()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tenant::{TenantIsolation, TenantNetwork, TenantQueue, TenantQuota, TenantSync};

    fn fields(spec: &TenantSpec) -> Vec<String> {
        validate_spec(spec).into_iter().map(|e| e.field).collect()
    }

    #[test]
    fn a_valid_spec_has_no_problem() {
        let spec = TenantSpec {
            owners: vec!["alice".into(), "group:ml".into()],
            quota: Some(TenantQuota {
                cpu: Some("500m".into()),
                memory: Some("64Gi".into()),
                gpus: Some(2),
                gpu_sharing: Some("mig:1g.18gb".into()),
                gpu_types: vec!["whole".into(), "mig:3g.71gb".into(), "timeslice".into()],
                storage: Some("512Mi".into()),
                ..Default::default()
            }),
            isolation: Some(TenantIsolation {
                allow: vec!["hostPath".into()],
                node_selector: [("pool".to_string(), "a".to_string())].into(),
                webhook_targets: vec!["hooks.example.com".into(), "10.1.0.0/16".into()],
                gateways: vec!["gateways/inference".into()],
                route_hostnames: vec!["*.acme.example.com".into(), "api.example.com".into()],
                ..Default::default()
            }),
            network: Some(TenantNetwork { segment: Some(42) }),
            sync: Some(TenantSync {
                extra_kinds: vec!["widgets.example.com".into()],
            }),
            queue: Some(TenantQueue {
                borrowing_limit: Some(6),
                lending_limit: Some(2),
                weight: Some(3),
                parent: Some("research".into()),
            }),
        };
        assert_eq!(validate_spec(&spec), Vec::new());
    }

    #[test]
    fn every_problem_names_its_field() {
        let spec = TenantSpec {
            owners: vec!["alice".into(), "group:".into()],
            quota: Some(TenantQuota {
                cpu: Some("lots".into()),
                memory: Some("-5Gi".into()),
                pods: Some(-1),
                gpus: Some(2),
                gpu_sharing: Some("mig:0g.5gb".into()),
                gpu_types: vec!["timeslice".into(), "share:8192,25".into(), "fast".into()],
                storage: Some("-1".into()),
                ..Default::default()
            }),
            isolation: Some(TenantIsolation {
                allow: vec!["root".into()],
                node_selector: [("bad key!".to_string(), "a".to_string())].into(),
                webhook_targets: vec!["ok.example.com".into(), "10.0.0.0/40".into()],
                gateways: vec!["gateways/ok".into(), "no-namespace".into()],
                route_hostnames: vec!["*.ok.example.com".into(), "10.0.0.1".into(), "a..b".into()],
                ..Default::default()
            }),
            network: Some(TenantNetwork {
                segment: Some(1 << 24),
            }),
            sync: Some(TenantSync {
                extra_kinds: vec!["widgets".into()],
            }),
            queue: Some(TenantQueue {
                borrowing_limit: Some(-1),
                lending_limit: Some(3),
                weight: Some(0),
                parent: Some("Research Dept".into()),
            }),
        };
        assert_eq!(
            fields(&spec),
            [
                "spec.owners[1]",
                "spec.quota.cpu",
                "spec.quota.memory",
                "spec.quota.storage",
                "spec.quota.pods",
                "spec.quota.gpuSharing",
                "spec.quota.gpuTypes[1]",
                "spec.quota.gpuTypes[2]",
                "spec.isolation.allow[0]",
                "spec.isolation.webhookTargets[1]",
                "spec.isolation.gateways[1]",
                "spec.isolation.routeHostnames[1]",
                "spec.isolation.routeHostnames[2]",
                "spec.isolation.nodeSelector[bad key!]",
                "spec.network.segment",
                "spec.sync.extraKinds[0]",
                "spec.queue.borrowingLimit",
                "spec.queue.weight",
                "spec.queue.parent",
                "spec.queue.lendingLimit",
            ]
        );
        let memory = validate_spec(&spec)
            .into_iter()
            .find(|e| e.field == "spec.quota.memory")
            .map(|e| e.to_string());
        assert_eq!(
            memory.as_deref(),
            Some("spec.quota.memory: \"-5Gi\" must not be negative")
        );
    }

    #[test]
    fn segment_zero_is_reserved() {
        let spec = |segment| TenantSpec {
            network: Some(TenantNetwork {
                segment: Some(segment),
            }),
            ..Default::default()
        };
        assert_eq!(fields(&spec(0)), ["spec.network.segment"]);
        assert!(fields(&spec(1)).is_empty());
        assert!(fields(&spec(MAX_SEGMENT)).is_empty());
    }

    #[test]
    fn names_have_one_limit_and_reserved_names_are_refused() {
        assert!(validate_name("team-a").is_ok());
        for long in ["a".repeat(41), "a".repeat(70)] {
            let e = validate_name(&long).expect_err("too long");
            assert_eq!(e.message, "must be no more than 40 characters");
        }
        assert!(validate_name("Not_A_Label").is_err());
        assert!(validate_name("system")
            .expect_err("reserved")
            .message
            .contains("fabrik-system"));
        assert_eq!(storage_bytes("1Ki"), Ok(1024));
    }
}
