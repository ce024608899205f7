//! `fabrik_tenant` values and Tenant objects: the configuration checked with the server's rules
//! (so that mistakes fail at `terraform validate`, pointing at the attribute), the spec a value
//! asks for, and the state a Tenant object reads as.

use std::collections::BTreeMap;

use fabrik_api::tenant::{
    Tenant, TenantIsolation, TenantNetwork, TenantQueue, TenantQuota, TenantSpec, TenantSync,
};
use kube::ResourceExt;

use crate::diag::{path, Diag, Path, Step};
use crate::value::{Number, Value};

/// The spec attributes of the resource (the rest are identity, status and settings).
pub const SPEC_ATTRS: [&str; 6] = ["owners", "quota", "isolation", "network", "sync", "queue"];

/// Checks a tenant name as every part of Fabrik does.
pub fn check_name(name: &str) -> Result<(), String> {
    fabrik_api::validation::validate_name(name).map_err(|e| e.message)
}

/// A whole number where the schema says number (Terraform numbers may have fractions); the
/// range is the rules' business, except where a Terraform-only setting gives one.
fn whole(v: &Value, p: Path, range: Option<(i64, i64)>, diags: &mut Vec<Diag>) {
    let Value::Number(n) = v else { return };
    let ok = match (n.as_i64(), range) {
        (Some(i), Some((min, max))) => (min..=max).contains(&i),
        (Some(_), None) => true,
        (None, _) => false,
    };
    if !ok {
        let wanted = match range {
            Some((min, max)) => format!("a whole number from {min} to {max}"),
            None => "a whole number".to_string(),
        };
        diags.push(Diag::attr(
            p,
            "Invalid number",
            format!("must be {wanted}, got {}", show(*n)),
        ));
    }
}

fn show(n: Number) -> String {
    match n {
        Number::Int(i) => i.to_string(),
        Number::Float(f) => f.to_string(),
    }
}

/// `gpuSharing` → `gpu_sharing`: the Tenant API's field names as the resource's attributes.
fn snake(field: &str) -> String {
    let mut out = String::with_capacity(field.len() + 4);
    for c in field.chars() {
        if c.is_ascii_uppercase() {
            out.push('_');
            out.push(c.to_ascii_lowercase());
        } else {
            out.push(c);
        }
    }
    out
}

/// The attribute path of a rule's field (`spec.quota.gpuSharing` → `quota.gpu_sharing`,
/// `spec.owners[1]` → `owners[1]`, `spec.isolation.nodeSelector[k]` → `…node_selector["k"]`).
fn attr_path(field: &str) -> Path {
    let field = field
        .strip_prefix("spec.")
        .or_else(|| field.strip_prefix("metadata."))
        .unwrap_or(field);
    let (attrs, element) = match field.split_once('[') {
        Some((attrs, rest)) => (attrs, rest.strip_suffix(']')),
        None => (field, None),
    };
    let mut p: Path = attrs.split('.').map(|a| Step::Attr(snake(a))).collect();
    if let Some(element) = element {
        let is_map = matches!(p.last(), Some(Step::Attr(a)) if a == "node_selector");
        match element.parse::<i64>() {
            Ok(i) if !is_map => p.push(Step::Index(i)),
            _ => p.push(Step::Key(element.to_string())),
        }
    }
    p
}

/// The summary of a rule's refusal, by the attribute it is about.
fn summary(p: &Path) -> &'static str {
    let last = p.iter().rev().find_map(|s| match s {
        Step::Attr(a) => Some(a.as_str()),
        _ => None,
    });
    match last {
        Some("name") => "Invalid tenant name",
        Some("owners") => "Invalid owner",
        Some("cpu" | "memory" | "storage") => "Invalid quantity",
        Some("gpu_sharing") => "Invalid GPU sharing mode",
        Some("allow") => "Invalid privilege",
        Some("node_selector") => "Invalid node label",
        Some("segment") => "Invalid network segment",
        Some("extra_kinds") => "Invalid kind",
        _ => "Invalid value",
    }
}

/// Checks a `fabrik_tenant` configuration (unknown values are checked later, at plan time):
/// Terraform's own types here, the Tenant's rules by [`fabrik_api::validation`] — one verdict
/// with the server, the CLI and the tenant manager.
pub fn validate(config: &Value) -> Vec<Diag> {
    let mut diags = Vec::new();
    if let Some(name) = config.get("name").as_str() {
        if let Err(why) = check_name(name) {
            diags.push(Diag::attr(
                path(&["name"]),
                "Invalid tenant name",
                format!("{name:?}: {why}"),
            ));
        }
    }
    let quota = config.get("quota");
    for field in ["pods", "gpus", "node_ports", "load_balancers", "objects"] {
        whole(quota.get(field), path(&["quota", field]), None, &mut diags);
    }
    for field in ["borrowing_limit", "lending_limit", "weight"] {
        whole(
            config.get("queue").get(field),
            path(&["queue", field]),
            None,
            &mut diags,
        );
    }
    whole(
        config.get("network").get("segment"),
        path(&["network", "segment"]),
        None,
        &mut diags,
    );
    if config.get("ready_timeout") != &Value::Null {
        whole(
            config.get("ready_timeout"),
            path(&["ready_timeout"]),
            Some((1, 86_400)),
            &mut diags,
        );
    }
    for problem in fabrik_api::validation::validate_spec(&spec_of(config)) {
        let p = attr_path(&problem.field);
        diags.push(Diag::attr(p.clone(), summary(&p), problem.message));
    }
    diags
}

fn opt_string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_string)
}

fn opt_int(v: &Value) -> Option<i64> {
    match v {
        Value::Number(n) => n.as_i64(),
        _ => None,
    }
}

fn string_list(v: &Value) -> Vec<String> {
    match v {
        Value::List(items) => items.iter().filter_map(opt_string).collect(),
        _ => Vec::new(),
    }
}

/// The spec a (validated, wholly known) resource value asks for.
pub fn spec_of(v: &Value) -> TenantSpec {
    let object = |name: &str| Some(v.get(name)).filter(|o| matches!(o, Value::Object(_)));
    TenantSpec {
        owners: string_list(v.get("owners")),
        quota: object("quota").map(|q| TenantQuota {
            cpu: opt_string(q.get("cpu")),
            memory: opt_string(q.get("memory")),
            pods: opt_int(q.get("pods")),
            gpus: opt_int(q.get("gpus")),
            gpu_sharing: opt_string(q.get("gpu_sharing")),
            gpu_types: string_list(q.get("gpu_types")),
            node_ports: opt_int(q.get("node_ports")),
            load_balancers: opt_int(q.get("load_balancers")),
            storage: opt_string(q.get("storage")),
            objects: opt_int(q.get("objects")),
        }),
        isolation: object("isolation").map(|i| TenantIsolation {
            node_selector: match i.get("node_selector") {
                Value::Map(m) => m
                    .iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect(),
                _ => BTreeMap::new(),
            },
            dedicated_nodes: matches!(i.get("dedicated_nodes"), Value::Bool(true)),
            runtime_class: opt_string(i.get("runtime_class")),
            allow: string_list(i.get("allow")),
            ingress_classes: string_list(i.get("ingress_classes")),
            external_names: string_list(i.get("external_names")),
            webhook_targets: string_list(i.get("webhook_targets")),
            gateways: string_list(i.get("gateways")),
            route_hostnames: string_list(i.get("route_hostnames")),
        }),
        network: object("network").map(|n| TenantNetwork {
            segment: opt_int(n.get("segment")),
        }),
        sync: object("sync").map(|s| TenantSync {
            extra_kinds: string_list(s.get("extra_kinds")),
        }),
        queue: object("queue").map(|q| TenantQueue {
            borrowing_limit: opt_int(q.get("borrowing_limit")),
            lending_limit: opt_int(q.get("lending_limit")),
            weight: opt_int(q.get("weight")),
            parent: opt_string(q.get("parent")),
        }),
    }
}

fn str_or_null(s: &Option<String>) -> Value {
    s.as_ref()
        .map(|s| Value::string(s.clone()))
        .unwrap_or(Value::Null)
}

fn int_or_null(i: Option<i64>) -> Value {
    i.map(Value::int).unwrap_or(Value::Null)
}

fn object(fields: Vec<(&str, Value)>) -> Value {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
    )
}

/// The spec attributes as values (`owners`, `quota`, ...), in `SPEC_ATTRS` order.
pub fn spec_values(spec: &TenantSpec) -> [Value; 6] {
    [
        Value::strings(&spec.owners),
        spec.quota
            .as_ref()
            .map(|q| {
                object(vec![
                    ("cpu", str_or_null(&q.cpu)),
                    ("memory", str_or_null(&q.memory)),
                    ("pods", int_or_null(q.pods)),
                    ("gpus", int_or_null(q.gpus)),
                    ("gpu_sharing", str_or_null(&q.gpu_sharing)),
                    ("gpu_types", Value::strings(&q.gpu_types)),
                    ("node_ports", int_or_null(q.node_ports)),
                    ("load_balancers", int_or_null(q.load_balancers)),
                    ("storage", str_or_null(&q.storage)),
                    ("objects", int_or_null(q.objects)),
                ])
            })
            .unwrap_or(Value::Null),
        spec.isolation
            .as_ref()
            .map(|i| {
                object(vec![
                    (
                        "node_selector",
                        Value::Map(
                            i.node_selector
                                .iter()
                                .map(|(k, v)| (k.clone(), Value::string(v.clone())))
                                .collect(),
                        ),
                    ),
                    ("dedicated_nodes", Value::Bool(i.dedicated_nodes)),
                    ("runtime_class", str_or_null(&i.runtime_class)),
                    ("allow", Value::strings(&i.allow)),
                    ("ingress_classes", Value::strings(&i.ingress_classes)),
                    ("external_names", Value::strings(&i.external_names)),
                    ("webhook_targets", Value::strings(&i.webhook_targets)),
                    ("gateways", Value::strings(&i.gateways)),
                    ("route_hostnames", Value::strings(&i.route_hostnames)),
                ])
            })
            .unwrap_or(Value::Null),
        spec.network
            .as_ref()
            .map(|n| object(vec![("segment", int_or_null(n.segment))]))
            .unwrap_or(Value::Null),
        spec.sync
            .as_ref()
            .map(|s| object(vec![("extra_kinds", Value::strings(&s.extra_kinds))]))
            .unwrap_or(Value::Null),
        spec.queue
            .as_ref()
            .map(|q| {
                object(vec![
                    ("borrowing_limit", int_or_null(q.borrowing_limit)),
                    ("lending_limit", int_or_null(q.lending_limit)),
                    ("weight", int_or_null(q.weight)),
                    ("parent", str_or_null(&q.parent)),
                ])
            })
            .unwrap_or(Value::Null),
    ]
}

/// What the server says, written the way the prior state wrote it where the Tenant API does
/// not tell the two apart (null, `false`, `[]`, `{}`): so that `owners = []` or an omitted
/// `dedicated_nodes` never shows as drift, while every real difference does. Without a prior
/// value (import), such empty values read as null, as an omitted attribute does.
pub fn reconcile(server: Value, prior: &Value) -> Value {
    if server.is_empty_like() && prior.is_empty_like() {
        return prior.clone();
    }
    match (server, prior) {
        // No prior (import, data sources): empty values inside objects read as null.
        (Value::Object(fields), Value::Object(_) | Value::Null) => Value::Object(
            fields
                .into_iter()
                .map(|(k, v)| {
                    let v = reconcile(v, prior.get(&k));
                    (k, v)
                })
                .collect(),
        ),
        (server, _) => server,
    }
}

/// Sets the attributes a Tenant object determines on `state` (an object of a resource or data
/// source type): `id`, `name`, the spec attributes (reconciled with `prior`), `endpoint` and
/// `phase`. Attributes the type lacks are left out.
pub fn fill_state(state: &mut Value, tenant: &Tenant, prior: &Value) {
    let name = tenant.name_any();
    state.set("id", Value::string(name.clone()));
    state.set("name", Value::string(name));
    for (attr, v) in SPEC_ATTRS.iter().zip(spec_values(&tenant.spec)) {
        state.set(attr, reconcile(v, prior.get(attr)));
    }
    let status = tenant.status.clone().unwrap_or_default();
    state.set("endpoint", str_or_null(&status.endpoint));
    state.set(
        "phase",
        Value::string(status.phase.unwrap_or_else(|| "Pending".into())),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema;

    fn config(fields: Vec<(&str, Value)>) -> Value {
        let mut v = Value::null_object(&schema::tenant_resource().ty());
        for (k, f) in fields {
            v.set(k, f);
        }
        v
    }

    fn paths(diags: &[Diag]) -> Vec<String> {
        diags
            .iter()
            .map(|d| crate::diag::display(d.path.as_deref().unwrap_or(&[])))
            .collect()
    }

    #[test]
    fn invalid_configuration_names_the_attribute() {
        let c = config(vec![
            ("name", Value::string("Bad_Name")),
            (
                "quota",
                object(vec![
                    ("cpu", Value::string("lots")),
                    ("memory", Value::string("64Gi")),
                    ("pods", Value::Number(Number::Float(1.5))),
                    ("gpus", Value::int(-1)),
                    ("gpu_sharing", Value::string("half")),
                    ("node_ports", Value::int(-2)),
                    ("load_balancers", Value::Number(Number::Float(0.5))),
                    ("storage", Value::string("a lot")),
                    ("objects", Value::int(-1)),
                ]),
            ),
            (
                "isolation",
                object(vec![
                    ("node_selector", Value::Null),
                    ("dedicated_nodes", Value::Null),
                    ("runtime_class", Value::Null),
                    ("allow", Value::strings(&["hostPath".into(), "root".into()])),
                ]),
            ),
            ("network", object(vec![("segment", Value::int(1 << 30))])),
            (
                "sync",
                object(vec![("extra_kinds", Value::strings(&["widgets".into()]))]),
            ),
            (
                "queue",
                object(vec![
                    ("borrowing_limit", Value::int(-2)),
                    ("lending_limit", Value::Null),
                    ("weight", Value::int(5000)),
                ]),
            ),
        ]);
        let diags = validate(&c);
        assert_eq!(
            paths(&diags),
            [
                "name",
                "quota.pods",
                "quota.load_balancers",
                "quota.cpu",
                "quota.storage",
                "quota.gpus",
                "quota.node_ports",
                "quota.objects",
                "quota.gpu_sharing",
                "isolation.allow[1]",
                "network.segment",
                "sync.extra_kinds[0]",
                "queue.borrowing_limit",
                "queue.weight"
            ]
        );
        assert!(diags.iter().all(|d| d.error));
        let summaries: Vec<&str> = diags.iter().map(|d| d.summary.as_str()).collect();
        assert_eq!(summaries[0], "Invalid tenant name");
        assert_eq!(summaries[3], "Invalid quantity");
        assert_eq!(summaries[8], "Invalid GPU sharing mode");
        assert_eq!(summaries[9], "Invalid privilege");
        // Map keys and list indices keep their place in the path.
        assert_eq!(
            crate::diag::display(&attr_path("spec.isolation.nodeSelector[example.com/pool]")),
            crate::diag::display(&[
                Step::Attr("isolation".into()),
                Step::Attr("node_selector".into()),
                Step::Key("example.com/pool".into()),
            ])
        );
    }

    #[test]
    fn unknown_values_are_not_checked_yet() {
        let c = config(vec![("name", Value::Unknown), ("quota", Value::Unknown)]);
        assert!(validate(&c).is_empty());
    }

    #[test]
    fn long_names_are_refused() {
        assert!(check_name(&"a".repeat(40)).is_ok());
        assert!(check_name(&"a".repeat(41)).is_err());
    }

    #[test]
    fn spec_round_trips_through_state() {
        let spec = TenantSpec {
            owners: vec!["alice".into(), "group:ml".into()],
            quota: Some(TenantQuota {
                cpu: Some("16".into()),
                memory: None,
                pods: Some(20),
                gpus: Some(4),
                gpu_sharing: Some("mig:1g.18gb".into()),
                gpu_types: vec!["whole".into()],
                node_ports: Some(3),
                load_balancers: Some(1),
                storage: Some("512Mi".into()),
                objects: Some(5000),
            }),
            isolation: Some(TenantIsolation {
                node_selector: [("pool".to_string(), "a".to_string())].into(),
                dedicated_nodes: true,
                runtime_class: None,
                allow: vec!["hostPath".into()],
                ingress_classes: vec!["public".into()],
                external_names: vec!["*.example.com".into()],
                webhook_targets: vec!["hooks.example.com".into()],
                gateways: vec!["infra/shared".into()],
                route_hostnames: vec!["*.ml.example.com".into()],
            }),
            network: Some(TenantNetwork { segment: Some(7) }),
            sync: None,
            queue: Some(TenantQueue {
                borrowing_limit: Some(4),
                lending_limit: None,
                weight: Some(2),
                parent: Some("research".into()),
            }),
        };
        let tenant = Tenant::new("ml", spec.clone());
        let mut state = Value::null_object(&schema::tenant_resource().ty());
        fill_state(&mut state, &tenant, &Value::Null);
        assert_eq!(state.get("id"), &Value::string("ml"));
        assert_eq!(state.get("phase"), &Value::string("Pending"));
        assert_eq!(state.get("quota").get("gpus"), &Value::int(4));
        assert_eq!(state.get("quota").get("node_ports"), &Value::int(3));
        assert_eq!(
            state.get("isolation").get("external_names"),
            &Value::strings(&["*.example.com".into()])
        );
        assert_eq!(spec_of(&state), spec);
    }

    #[test]
    fn empty_values_keep_the_prior_spelling() {
        // The configuration said `owners = []` and `isolation = { runtime_class = "x" }`.
        let prior = config(vec![
            ("owners", Value::List(vec![])),
            (
                "isolation",
                object(vec![
                    ("node_selector", Value::Null),
                    ("dedicated_nodes", Value::Null),
                    ("runtime_class", Value::string("x")),
                    ("allow", Value::Null),
                    ("ingress_classes", Value::Null),
                    ("external_names", Value::Null),
                    ("webhook_targets", Value::Null),
                    ("gateways", Value::Null),
                    ("route_hostnames", Value::Null),
                ]),
            ),
        ]);
        let spec = spec_of(&prior);
        let mut state = Value::null_object(&schema::tenant_resource().ty());
        fill_state(&mut state, &Tenant::new("t", spec), &prior);
        for attr in SPEC_ATTRS {
            assert_eq!(state.get(attr), prior.get(attr), "{attr}");
        }
        // A real change shows.
        let mut changed = spec_of(&prior);
        changed.owners = vec!["bob".into()];
        let mut state = Value::null_object(&schema::tenant_resource().ty());
        fill_state(&mut state, &Tenant::new("t", changed), &prior);
        assert_eq!(state.get("owners"), &Value::strings(&["bob".into()]));
    }

    #[test]
    fn imported_state_reads_empty_values_as_null() {
        let spec = TenantSpec {
            isolation: Some(TenantIsolation {
                runtime_class: Some("x".into()),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut state = Value::null_object(&schema::tenant_resource().ty());
        fill_state(&mut state, &Tenant::new("t", spec), &Value::Null);
        assert_eq!(state.get("owners"), &Value::Null);
        assert_eq!(state.get("isolation").get("dedicated_nodes"), &Value::Null);
        assert_eq!(state.get("isolation").get("node_selector"), &Value::Null);
        assert_eq!(
            state.get("isolation").get("runtime_class"),
            &Value::string("x")
        );
    }
}
