//! The `fabrik_tenant` resource and the two data sources: plan, apply, read and import in
//! terms of [`Value`]s and the [`Host`], with every failure turned into diagnostics that
//! point at the attribute responsible where there is one.

use std::time::Duration;

use kube::ResourceExt;

use crate::diag::{display, path, Diag, Path, Step};
use crate::host::{self, Host};
use crate::schema;
use crate::tenant::{self, fill_state, spec_of, SPEC_ATTRS};
use crate::value::{Ty, Value};

/// Seconds to wait for `Ready` (and for deletion) when `ready_timeout` is not set.
pub const DEFAULT_READY_TIMEOUT: u64 = 180;

/// Attributes the provider computes.
const COMPUTED: [&str; 4] = ["id", "endpoint", "phase", "kubeconfig"];

/// `snake_case` of a `camelCase` Tenant field.
fn snake(field: &str) -> String {
    let mut out = String::new();
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

/// The attribute path of a Tenant field path the server names (`spec.quota.gpuSharing`,
/// `spec.owners[1]`, `metadata.name`).
pub fn field_path(field: &str) -> Option<Path> {
    if field == "metadata.name" {
        return Some(path(&["name"]));
    }
    let rest = field.strip_prefix("spec.")?;
    let mut out = Vec::new();
    for part in rest.split('.') {
        let (name, index) = match part.split_once('[') {
            Some((n, i)) => (n, i.trim_end_matches(']').parse::<i64>().ok()),
            None => (part, None),
        };
        if name.is_empty() {
            return None;
        }
        out.push(Step::Attr(snake(name)));
        if let Some(i) = index {
            out.push(Step::Index(i));
        }
    }
    Some(out)
}

/// The diagnostics for a failed host operation.
pub fn host_error(what: &str, err: &host::Error) -> Vec<Diag> {
    match err {
        host::Error::Rejected(status) => {
            let causes = status
                .details
                .as_ref()
                .map(|d| d.causes.clone())
                .unwrap_or_default();
            let with_fields: Vec<Diag> = causes
                .iter()
                .filter_map(|c| {
                    field_path(&c.field).map(|p| {
                        let summary = format!("{what}: the host rejected {}", display(&p));
                        Diag::attr(p, summary, c.message.clone())
                    })
                })
                .collect();
            if with_fields.is_empty() {
                vec![Diag::error(
                    format!("{what}: the host refused the request"),
                    format!("{} ({} {})", status.message, status.code, status.reason),
                )]
            } else {
                with_fields
            }
        }
        host::Error::Failed { message, .. } => {
            // The tenant manager's message reads `tenant "x": spec.quota.cpu: ...`.
            let field = message
                .split_whitespace()
                .find(|w| w.starts_with("spec.") || w.starts_with("metadata.name"))
                .map(|w| w.trim_end_matches(':'));
            let summary = format!("{what}: the tenant manager rejected the tenant");
            match field.and_then(field_path) {
                Some(p) => vec![Diag::attr(p, summary, message.clone())],
                None => vec![Diag::error(summary, message.clone())],
            }
        }
        host::Error::Exists(_) => vec![Diag::attr(
            path(&["name"]),
            what.to_string(),
            err.to_string(),
        )],
        other => vec![Diag::error(what.to_string(), other.to_string())],
    }
}

fn name_of(v: &Value) -> Option<String> {
    v.get("name")
        .as_str()
        .or_else(|| v.get("id").as_str())
        .map(str::to_string)
}

fn timeout_of(v: &Value) -> Duration {
    let secs = match v.get("ready_timeout") {
        Value::Number(n) => n.as_i64().and_then(|i| u64::try_from(i).ok()),
        _ => None,
    };
    Duration::from_secs(secs.unwrap_or(DEFAULT_READY_TIMEOUT))
}

/// What `PlanResourceChange` answers.
pub struct Plan {
    /// The planned new state.
    pub planned: Value,
    /// Attributes whose change replaces the tenant.
    pub requires_replace: Vec<Path>,
    /// Problems.
    pub diags: Vec<Diag>,
}

/// Plans a change of `fabrik_tenant`.
pub fn plan(prior: &Value, proposed: &Value, config: &Value) -> Plan {
    let mut out = Plan {
        planned: proposed.clone(),
        requires_replace: Vec::new(),
        diags: Vec::new(),
    };
    if proposed.is_null() {
        return out; // destroy
    }
    out.diags = tenant::validate(config);
    let planned = &mut out.planned;
    if prior.is_null() {
        let id = match proposed.get("name") {
            Value::String(s) => Value::string(s.clone()),
            _ => Value::Unknown,
        };
        planned.set("id", id);
        for attr in ["endpoint", "phase", "kubeconfig"] {
            planned.set(attr, Value::Unknown);
        }
        return out;
    }
    if prior.get("name") != proposed.get("name") {
        out.requires_replace.push(path(&["name"]));
        for attr in COMPUTED {
            planned.set(attr, Value::Unknown);
        }
        return out;
    }
    for attr in COMPUTED {
        planned.set(attr, prior.get(attr).clone());
    }
    let spec_changes = SPEC_ATTRS.iter().any(|a| prior.get(a) != proposed.get(a));
    if spec_changes {
        // Apply waits for `Ready` (or fails).
        planned.set("phase", Value::string("Ready"));
    }
    out
}

/// Applies a planned change of `fabrik_tenant`; returns the new state (null once destroyed).
pub async fn apply(host: &Host, prior: &Value, planned: &Value) -> (Value, Vec<Diag>) {
    if planned.is_null() {
        let Some(name) = name_of(prior) else {
            return (Value::Null, Vec::new());
        };
        return match host.delete(&name, timeout_of(prior)).await {
            Ok(()) => (Value::Null, Vec::new()),
            Err(e) => (prior.clone(), host_error("Cannot delete the tenant", &e)),
        };
    }
    let Some(name) = planned.get("name").as_str().map(str::to_string) else {
        return (
            Value::Null,
            vec![Diag::attr(
                path(&["name"]),
                "Missing tenant name",
                "`name` must be known at apply",
            )],
        );
    };
    let spec = spec_of(planned);
    let creating = prior.is_null() || prior.get("name") != planned.get("name");
    let written = if creating {
        host.create(&name, spec).await
    } else {
        host.update_spec(&name, &spec).await
    };
    let what = if creating {
        "Cannot create the tenant"
    } else {
        "Cannot update the tenant"
    };
    let tenant = match written {
        Ok(t) => t,
        Err(e) => {
            let kept = if creating { Value::Null } else { prior.clone() };
            return (kept, host_error(what, &e));
        }
    };
    let mut state = planned.clone();
    let ready = host
        .wait_ready(&name, tenant.metadata.generation, timeout_of(planned))
        .await;
    let tenant = match ready {
        Ok(t) => t,
        Err(e) => {
            // The tenant exists: keep it in state (Terraform taints it) with what is known.
            fill_state(&mut state, &tenant, planned);
            for attr in COMPUTED {
                if state.get(attr) == &Value::Unknown {
                    state.set(attr, Value::Null);
                }
            }
            return (state, host_error(what, &e));
        }
    };
    fill_state(&mut state, &tenant, planned);
    match host.kubeconfig(&name).await {
        Ok(Some(k)) => state.set("kubeconfig", Value::string(k)),
        Ok(None) => {
            let e = host::Error::NoKubeconfig(name.clone());
            state.set("kubeconfig", Value::Null);
            return (state, host_error(what, &e));
        }
        Err(e) => {
            state.set("kubeconfig", Value::Null);
            return (state, host_error(what, &e));
        }
    }
    (state, Vec::new())
}

/// Reads a `fabrik_tenant` back from the host: null when it is gone.
pub async fn read(host: &Host, prior: &Value) -> (Value, Vec<Diag>) {
    let Some(name) = name_of(prior) else {
        return (prior.clone(), Vec::new());
    };
    let tenant = match host.get(&name).await {
        Ok(Some(t)) => t,
        Ok(None) => return (Value::Null, Vec::new()),
        Err(e) => return (prior.clone(), host_error("Cannot read the tenant", &e)),
    };
    let mut state = prior.clone();
    fill_state(&mut state, &tenant, prior);
    match host.kubeconfig(&name).await {
        Ok(Some(k)) => state.set("kubeconfig", Value::string(k)),
        Ok(None) => {}
        Err(e) => {
            return (
                prior.clone(),
                host_error("Cannot read the tenant's kubeconfig", &e),
            )
        }
    }
    (state, Vec::new())
}

/// Imports an existing tenant by name.
pub async fn import(host: &Host, id: &str) -> (Value, Vec<Diag>) {
    if let Err(why) = tenant::check_name(id) {
        return (
            Value::Null,
            vec![Diag::error(
                "Invalid import ID",
                format!("{id:?} is not a tenant name: {why}"),
            )],
        );
    }
    let tenant = match host.get(id).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            return (
                Value::Null,
                vec![Diag::error(
                    "Cannot import a tenant that does not exist",
                    format!("no tenant {id:?} on the host {}", host.url()),
                )],
            )
        }
        Err(e) => return (Value::Null, host_error("Cannot import the tenant", &e)),
    };
    let mut state = Value::null_object(&schema::tenant_resource().ty());
    fill_state(&mut state, &tenant, &Value::Null);
    match host.kubeconfig(id).await {
        Ok(k) => state.set("kubeconfig", k.map(Value::string).unwrap_or(Value::Null)),
        Err(e) => return (Value::Null, host_error("Cannot import the tenant", &e)),
    }
    (state, Vec::new())
}

/// Checks a data source's configuration.
pub fn validate_data_source(config: &Value) -> Vec<Diag> {
    match config.get("name").as_str() {
        Some(name) => match tenant::check_name(name) {
            Ok(()) => Vec::new(),
            Err(why) => vec![Diag::attr(
                path(&["name"]),
                "Invalid tenant name",
                format!("{name:?}: {why}"),
            )],
        },
        None => Vec::new(),
    }
}

/// Reads a data source (`fabrik_tenant` or `fabrik_tenant_kubeconfig`, per `kubeconfig`).
pub async fn read_data_source(
    host: &Host,
    config: &Value,
    ty: &Ty,
    kubeconfig: bool,
) -> (Value, Vec<Diag>) {
    let Some(name) = config.get("name").as_str().map(str::to_string) else {
        return (
            Value::Null,
            vec![Diag::attr(
                path(&["name"]),
                "Missing tenant name",
                "`name` must be known",
            )],
        );
    };
    let tenant = match host.get(&name).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            return (
                Value::Null,
                vec![Diag::attr(
                    path(&["name"]),
                    "Tenant not found",
                    format!("no tenant {name:?} on the host {}", host.url()),
                )],
            )
        }
        Err(e) => return (Value::Null, host_error("Cannot read the tenant", &e)),
    };
    let mut state = Value::null_object(ty);
    fill_state(&mut state, &tenant, &Value::Null);
    if kubeconfig {
        match host.kubeconfig(&name).await {
            Ok(Some(k)) => state.set("kubeconfig", Value::string(k)),
            Ok(None) => {
                return (
                    Value::Null,
                    vec![Diag::attr(
                        path(&["name"]),
                        "Tenant has no kubeconfig yet",
                        format!(
                            "tenant {:?} is {}: its kubeconfig is issued once it is Ready",
                            tenant.name_any(),
                            host::phase(&tenant)
                        ),
                    )],
                )
            }
            Err(e) => {
                return (
                    Value::Null,
                    host_error("Cannot read the tenant's kubeconfig", &e),
                )
            }
        }
    }
    (state, Vec::new())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resource(name: &str, gpus: i64) -> Value {
        let mut v = Value::null_object(&schema::tenant_resource().ty());
        v.set("name", Value::string(name));
        v.set(
            "quota",
            Value::Object(
                [
                    ("cpu", Value::Null),
                    ("memory", Value::Null),
                    ("pods", Value::Null),
                    ("gpus", Value::int(gpus)),
                    ("gpu_sharing", Value::Null),
                    ("node_ports", Value::Null),
                    ("load_balancers", Value::Null),
                    ("storage", Value::Null),
                    ("objects", Value::Null),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ),
        );
        v
    }

    fn applied(name: &str, gpus: i64) -> Value {
        let mut v = resource(name, gpus);
        v.set("id", Value::string(name));
        v.set(
            "endpoint",
            Value::string(format!("https://h/clusters/{name}")),
        );
        v.set("phase", Value::string("Ready"));
        v.set("kubeconfig", Value::string("apiVersion: v1"));
        v
    }

    #[test]
    fn create_plans_unknown_status() {
        let p = plan(&Value::Null, &resource("a", 1), &resource("a", 1));
        assert!(p.requires_replace.is_empty());
        assert_eq!(p.planned.get("id"), &Value::string("a"));
        assert_eq!(p.planned.get("kubeconfig"), &Value::Unknown);
        assert!(p.diags.is_empty());
    }

    #[test]
    fn quota_change_is_in_place_and_rename_replaces() {
        let prior = applied("a", 1);
        let p = plan(&prior, &resource("a", 2), &resource("a", 2));
        assert!(p.requires_replace.is_empty());
        assert_eq!(p.planned.get("kubeconfig"), prior.get("kubeconfig"));
        assert_eq!(p.planned.get("quota").get("gpus"), &Value::int(2));

        let p = plan(&prior, &resource("b", 1), &resource("b", 1));
        assert_eq!(p.requires_replace, vec![path(&["name"])]);
        assert_eq!(p.planned.get("endpoint"), &Value::Unknown);

        let same = plan(&prior, &applied("a", 1), &resource("a", 1));
        assert_eq!(same.planned, prior);
    }

    #[test]
    fn destroy_plans_null() {
        let p = plan(&applied("a", 1), &Value::Null, &Value::Null);
        assert!(p.planned.is_null());
    }

    #[test]
    fn server_fields_map_to_attributes() {
        let p = field_path("spec.quota.gpuSharing").expect("path");
        assert_eq!(display(&p), "quota.gpu_sharing");
        let p = field_path("spec.owners[1]").expect("path");
        assert_eq!(display(&p), "owners[1]");
        assert_eq!(field_path("metadata.name"), Some(path(&["name"])));
        assert_eq!(field_path("status.phase"), None);
    }

    #[test]
    fn manager_failures_point_at_the_field() {
        let e = host::Error::Failed {
            name: "a".into(),
            message: "tenant \"a\": spec.quota.cpu: \"x\" is not a quantity".into(),
        };
        let d = host_error("Cannot create the tenant", &e);
        assert_eq!(display(d[0].path.as_deref().unwrap_or(&[])), "quota.cpu");
    }

    #[test]
    fn timeouts() {
        let mut v = resource("a", 1);
        assert_eq!(timeout_of(&v), Duration::from_secs(DEFAULT_READY_TIMEOUT));
        v.set("ready_timeout", Value::int(5));
        assert_eq!(timeout_of(&v), Duration::from_secs(5));
    }
}
