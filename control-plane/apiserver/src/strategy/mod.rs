//! Per-kind behaviour plugged into the generic registry: defaulting, validation, the spec/status
//! split, field selectors and table columns. A kind implements only what differs; the trait's
//! default methods are the behaviour of a plain kind (NAME / CREATED AT, metadata fields only).
//!
//! The registry calls the hooks in one fixed order:
//! create: `prepare_for_create` → `allocate` → `validate`;
//! update: `prepare_for_update` → `allocate` → `validate` → `validate_update`.

mod configmap;
pub(crate) mod dra;
mod event;
mod generic;
pub(crate) mod hpa;
mod job;
mod namespace;
mod node;
mod pod;
mod service;
mod workload;

use std::borrow::Cow;
use std::sync::Arc;

use async_trait::async_trait;
use fabrik_machinery::validation::{self, FieldError, FieldErrorKind};
use fabrik_store::Store;
use serde_json::{json, Value};

use crate::error::ApiError;

pub use pod::{pod_phase, GracefulDelete};
pub use workload::WorkloadKind;

/// Validates an object name; empty result = valid.
pub type NameValidator = fn(&str) -> Vec<String>;

/// One column of a `meta.k8s.io/v1 Table`.
#[derive(Clone, Debug)]
pub struct Column {
    /// Header.
    pub name: Cow<'static, str>,
    /// `string`, `integer`, `date`, ...
    pub kind: Cow<'static, str>,
    /// `name` for the name column, else empty.
    pub format: Cow<'static, str>,
    /// 0 = always shown, 1 = only with `-o wide`.
    pub priority: u8,
    /// What the column shows.
    pub description: Cow<'static, str>,
}

impl Column {
    /// A column shown by default.
    pub const fn new(name: &'static str, kind: &'static str, description: &'static str) -> Column {
        Column {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed(kind),
            format: Cow::Borrowed(""),
            priority: 0,
            description: Cow::Borrowed(description),
        }
    }

    /// A column shown only with `-o wide`.
    pub const fn wide(name: &'static str, kind: &'static str, description: &'static str) -> Column {
        Column {
            name: Cow::Borrowed(name),
            kind: Cow::Borrowed(kind),
            format: Cow::Borrowed(""),
            priority: 1,
            description: Cow::Borrowed(description),
        }
    }

    /// The upstream NAME column.
    pub const NAME: Column = Column {
        name: Cow::Borrowed("Name"),
        kind: Cow::Borrowed("string"),
        format: Cow::Borrowed("name"),
        priority: 0,
        description: Cow::Borrowed("Name must be unique within a namespace."),
    };

    /// The upstream AGE column.
    pub const AGE: Column = Column::new(
        "Age",
        "string",
        "CreationTimestamp is a timestamp representing the server time when this object was created.",
    );

    /// The column definition as the Table carries it.
    pub fn to_json(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

/// What `allocate` may use: the cluster's store (for allocations that must be unique).
pub struct StrategyContext<'a> {
    /// The cluster's store.
    pub store: &'a dyn Store,
    /// Where Service IPs come from when not from the cluster's own range.
    pub service_ips: Option<&'a dyn crate::service_ips::ServiceIps>,
    /// A dry run: nothing may be reserved outside the store.
    pub dry_run: bool,
}

/// Per-kind behaviour. Every method has the behaviour of a plain kind as default.
#[async_trait]
pub trait Strategy: Send + Sync {
    /// Upstream defaulting and server-set fields on create.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Reservations outside the cluster (a tenant Service's address on its host, from
    /// [`StrategyContext::service_ips`]), made once the write is admitted, just before it is
    /// stored, and never on a dry run. `old` is the previous object on update.
    async fn reserve(
        &self,
        _ctx: &StrategyContext<'_>,
        _obj: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Allocations that must be unique in the cluster (Service IPs and node ports). `old` is the
    /// previous object on update.
    async fn allocate(
        &self,
        _ctx: &StrategyContext<'_>,
        _obj: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        Ok(())
    }

    /// Validation of the kind's own fields (metadata is validated by the registry).
    fn validate(&self, _obj: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Defaulting on update (after the registry kept status and server-owned metadata).
    fn prepare_for_update(&self, new: &mut Value, _old: &Value) {
        self.prepare_for_create_defaults_only(new);
    }

    /// The defaulting part of `prepare_for_create`, reused on update (no status reset).
    fn prepare_for_create_defaults_only(&self, _obj: &mut Value) {}

    /// Rules about changes: immutable fields.
    fn validate_update(&self, _new: &Value, _old: &Value) -> Vec<FieldError> {
        Vec::new()
    }

    /// Validates `metadata.name`.
    fn name_validator(&self) -> NameValidator {
        validation::dns1123_subdomain
    }

    /// Whether create resets `.status` (kinds whose status only controllers write).
    fn reset_status_on_create(&self) -> bool {
        true
    }

    /// Fields beyond `metadata.name` / `metadata.namespace` a field selector may use.
    fn selectable_fields(&self) -> &'static [&'static str] {
        &[]
    }

    /// Whether a field selector may use `field` (beyond `metadata.name` / `metadata.namespace`).
    fn allows_field(&self, field: &str) -> bool {
        self.selectable_fields().contains(&field)
    }

    /// The table columns.
    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new(
                "Created At",
                "date",
                "CreationTimestamp is a timestamp representing the server time when this object was created.",
            ),
        ]
    }

    /// One table row's cells, matching `columns`.
    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            json!(name_of(obj)),
            obj["metadata"]["creationTimestamp"].clone(),
        ]
    }

    /// Whether deleting this object is graceful (pods on a node): the grace period to apply.
    fn graceful_delete(&self, _obj: &Value, _requested: Option<i64>) -> GracefulDelete {
        GracefulDelete::Immediate
    }
}

/// Reads a field-selector field from an object: `metadata.name`, `spec.nodeName`, ...
pub fn field_value(obj: &Value, path: &str) -> Option<String> {
    let mut cur = obj;
    for part in path.split('.') {
        cur = cur.get(part)?;
    }
    match cur {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        Value::Bool(b) => Some(b.to_string()),
        Value::Number(n) => Some(n.to_string()),
        other => Some(other.to_string()),
    }
}

/// `metadata.name`.
pub fn name_of(obj: &Value) -> &str {
    obj["metadata"]["name"].as_str().unwrap_or("")
}

/// A human age like upstream's `HumanDuration` from `metadata.creationTimestamp`.
pub fn age(obj: &Value) -> String {
    timestamp_age(obj["metadata"]["creationTimestamp"].as_str())
}

/// Age of an RFC 3339 timestamp, `<unknown>` when missing.
pub fn timestamp_age(ts: Option<&str>) -> String {
    let Some(ts) = ts else {
        return "<unknown>".into();
    };
    match chrono::DateTime::parse_from_rfc3339(ts) {
        Ok(t) => {
            let secs = (chrono::Utc::now() - t.with_timezone(&chrono::Utc)).num_seconds();
            human_duration(secs.max(0))
        }
        Err(_) => "<invalid>".into(),
    }
}

/// Upstream's `duration.HumanDuration` for whole seconds.
pub fn human_duration(secs: i64) -> String {
    let minutes = secs / 60;
    let hours = secs / 3600;
    let days = hours / 24;
    if secs < 120 {
        format!("{secs}s")
    } else if minutes < 10 {
        let s = secs % 60;
        if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        }
    } else if minutes < 180 {
        format!("{minutes}m")
    } else if hours < 8 {
        let m = minutes % 60;
        if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        }
    } else if hours < 48 {
        format!("{hours}h")
    } else if hours < 24 * 8 {
        let h = hours % 24;
        if h == 0 {
            format!("{days}d")
        } else {
            format!("{days}d{h}h")
        }
    } else if hours < 24 * 365 * 2 {
        format!("{days}d")
    } else if hours < 24 * 365 * 8 {
        let y = days / 365;
        let d = days % 365;
        if d == 0 {
            format!("{y}y")
        } else {
            format!("{y}y{d}d")
        }
    } else {
        format!("{}y", days / 365)
    }
}

/// Sets `obj[path...] = value` unless already present, creating objects on the way.
pub fn default_field(obj: &mut Value, path: &[&str], value: Value) {
    let mut cur = obj;
    for (i, part) in path.iter().enumerate() {
        let Some(map) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == path.len() {
            if map.get(*part).is_none_or(Value::is_null) {
                map.insert((*part).to_string(), value);
            }
            return;
        }
        cur = map
            .entry((*part).to_string())
            .or_insert_with(|| Value::Object(Default::default()));
    }
}

/// `"<none>"` for missing or empty strings, like upstream printers.
pub fn or_none(s: Option<&str>) -> String {
    match s {
        Some(s) if !s.is_empty() => s.to_string(),
        _ => "<none>".into(),
    }
}

/// A required-field error.
pub fn required(field: impl Into<String>) -> FieldError {
    field_error(FieldErrorKind::FieldValueRequired, field, None, "")
}

/// A required-field error with a message.
pub fn field_required(field: impl Into<String>, message: &str) -> FieldError {
    field_error(FieldErrorKind::FieldValueRequired, field, None, message)
}

/// An invalid-value error.
pub fn invalid(field: impl Into<String>, value: &str, message: impl Into<String>) -> FieldError {
    field_error(
        FieldErrorKind::FieldValueInvalid,
        field,
        Some(value),
        message,
    )
}

/// A forbidden-change error.
pub fn forbidden(field: impl Into<String>, message: impl Into<String>) -> FieldError {
    field_error(FieldErrorKind::FieldValueForbidden, field, None, message)
}

/// An unsupported-value error listing the supported ones.
pub fn not_supported(field: impl Into<String>, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("\"{s}\"")).collect();
    field_error(
        FieldErrorKind::FieldValueNotSupported,
        field,
        Some(value),
        format!("supported values: {}", list.join(", ")),
    )
}

/// A too-long error (strings longer than `max` characters).
pub fn too_long(field: impl Into<String>, max: u64) -> FieldError {
    field_error(
        FieldErrorKind::FieldValueTooLong,
        field,
        None,
        format!("may not be more than {max} bytes"),
    )
}

/// A too-many error (lists or maps with more than `max` entries).
pub fn too_many(field: impl Into<String>, count: u64, max: u64) -> FieldError {
    field_error(
        FieldErrorKind::FieldValueInvalid,
        field,
        Some(&count.to_string()),
        format!("must have at most {max} items"),
    )
}

/// A duplicate-value error.
pub fn duplicate(field: impl Into<String>, value: &str) -> FieldError {
    field_error(FieldErrorKind::FieldValueDuplicate, field, Some(value), "")
}

fn field_error(
    kind: FieldErrorKind,
    field: impl Into<String>,
    value: Option<&str>,
    message: impl Into<String>,
) -> FieldError {
    FieldError {
        kind,
        field: field.into(),
        message: message.into(),
        value: value.map(str::to_string),
    }
}

/// The "field is immutable" error for `field` when it changed between `old` and `new`.
pub fn immutable(new: &Value, old: &Value, path: &[&str], field: &str) -> Option<FieldError> {
    let get = |v: &Value| path.iter().try_fold(v, |cur, p| cur.get(*p)).cloned();
    let (n, o) = (get(new), get(old));
    (n != o).then(|| {
        invalid(
            field,
            &n.map(|v| v.to_string()).unwrap_or_default(),
            "field is immutable",
        )
    })
}

/// The plain strategy: a kind without special behaviour.
pub fn generic() -> Arc<dyn Strategy> {
    Arc::new(generic::Generic)
}
/// Names may be any path segment (RBAC kinds).
pub fn path_named() -> Arc<dyn Strategy> {
    Arc::new(generic::PathNamed)
}
/// Pods.
pub fn pod() -> Arc<dyn Strategy> {
    Arc::new(pod::PodStrategy)
}
/// Services.
pub fn service() -> Arc<dyn Strategy> {
    Arc::new(service::ServiceStrategy::default())
}
/// Namespaces.
pub fn namespace() -> Arc<dyn Strategy> {
    Arc::new(namespace::NamespaceStrategy)
}
/// Nodes.
pub fn node() -> Arc<dyn Strategy> {
    Arc::new(node::NodeStrategy)
}
/// Core events.
pub fn event() -> Arc<dyn Strategy> {
    Arc::new(event::EventStrategy)
}
/// ConfigMaps.
pub fn configmap() -> Arc<dyn Strategy> {
    Arc::new(configmap::ConfigMapStrategy)
}
/// Secrets.
pub fn secret() -> Arc<dyn Strategy> {
    Arc::new(configmap::SecretStrategy)
}
/// Deployments, ReplicaSets, StatefulSets, DaemonSets.
pub fn workload(kind: WorkloadKind) -> Arc<dyn Strategy> {
    Arc::new(workload::WorkloadStrategy(kind))
}
/// Jobs.
pub fn job() -> Arc<dyn Strategy> {
    Arc::new(job::JobStrategy)
}
/// HorizontalPodAutoscalers.
pub fn hpa() -> Arc<dyn Strategy> {
    Arc::new(hpa::HpaStrategy)
}
/// DeviceClasses.
pub fn device_class() -> Arc<dyn Strategy> {
    Arc::new(dra::DraStrategy(dra::DraKind::DeviceClass))
}
/// ResourceClaims.
pub fn resource_claim() -> Arc<dyn Strategy> {
    Arc::new(dra::DraStrategy(dra::DraKind::Claim))
}
/// ResourceClaimTemplates.
pub fn resource_claim_template() -> Arc<dyn Strategy> {
    Arc::new(dra::DraStrategy(dra::DraKind::ClaimTemplate))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn human_durations_match_upstream() {
        assert_eq!(human_duration(5), "5s");
        assert_eq!(human_duration(119), "119s");
        assert_eq!(human_duration(125), "2m5s");
        assert_eq!(human_duration(600), "10m");
        assert_eq!(human_duration(3 * 3600 + 5 * 60), "3h5m");
        assert_eq!(human_duration(30 * 3600), "30h");
        assert_eq!(human_duration(3 * 86400 + 3600), "3d1h");
        assert_eq!(human_duration(30 * 86400), "30d");
    }

    #[test]
    fn default_field_creates_path_and_keeps_existing() {
        let mut v = json!({"spec": {"a": 1}});
        default_field(&mut v, &["spec", "a"], json!(2));
        default_field(&mut v, &["spec", "b", "c"], json!(3));
        assert_eq!(v, json!({"spec": {"a": 1, "b": {"c": 3}}}));
    }
}
