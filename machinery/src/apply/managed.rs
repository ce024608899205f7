//! `metadata.managedFields`: reading and writing the entries, manager identity and order.
//!
//! An entry is `{manager, operation, apiVersion, time, fieldsType: "FieldsV1", fieldsV1,
//! subresource}`. As upstream, a manager is identified by its name, operation and subresource,
//! and for `Update` also by its apiVersion (so one name can own fields both by applying and by
//! updating).

use std::cmp::Ordering;

use serde_json::{Map, Value};

use super::fieldset::{FieldSet, FieldsV1Error};

/// The operation a managedFields entry records.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Operation {
    /// Server-side apply (`application/apply-patch+yaml`).
    Apply,
    /// Any other write: create, update, patch.
    Update,
}

impl Operation {
    /// The wire name: `Apply` or `Update`.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Apply => "Apply",
            Operation::Update => "Update",
        }
    }
}

/// Why `metadata.managedFields` could not be read (upstream: "failed to decode managed
/// fields").
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ManagedFieldsError {
    /// `managedFields` is not a list, or an entry is not an object.
    #[error("managedFields must be a list of objects")]
    NotAList,
    /// Entry `index` has an operation other than `Apply` or `Update`.
    #[error("managedFields[{index}]: operation must be `Apply` or `Update`")]
    InvalidOperation {
        /// The entry's position.
        index: usize,
    },
    /// Entry `index` has no apiVersion.
    #[error("managedFields[{index}]: apiVersion must not be empty")]
    MissingApiVersion {
        /// The entry's position.
        index: usize,
    },
    /// Entry `index` has a fieldsType other than `FieldsV1`.
    #[error("managedFields[{index}]: invalid fieldsType {found:?}, only FieldsV1 is supported")]
    InvalidFieldsType {
        /// The entry's position.
        index: usize,
        /// The fieldsType found (empty when missing).
        found: String,
    },
    /// A string field of entry `index` has another type.
    #[error("managedFields[{index}].{field} must be a string")]
    NotAString {
        /// The entry's position.
        index: usize,
        /// The field.
        field: &'static str,
    },
    /// Entry `index` has a malformed `fieldsV1`.
    #[error("managedFields[{index}].fieldsV1: {source}")]
    Fields {
        /// The entry's position.
        index: usize,
        /// What is wrong.
        source: FieldsV1Error,
    },
    /// Two entries name the same manager.
    #[error("managedFields[{index}]: duplicate entry for manager {manager:?}")]
    Duplicate {
        /// The position of the second entry.
        index: usize,
        /// The manager's name.
        manager: String,
    },
}

/// One `metadata.managedFields` entry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ManagedFieldsEntry {
    /// The field manager's name.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The apiVersion the fields were written with.
    pub api_version: String,
    /// When the entry last changed (RFC 3339), if known.
    pub time: Option<String>,
    /// The owned fields.
    pub fields: FieldSet,
    /// The subresource written (`status`), `None` for the main resource.
    pub subresource: Option<String>,
}

impl ManagedFieldsEntry {
    /// Whether `self` and `other` are the same manager (name, operation, subresource, and
    /// for `Update` the apiVersion).
    pub fn same_manager(&self, other: &ManagedFieldsEntry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// The entry as JSON.
    pub fn to_json(&self) -> Value {
        let mut m = Map::new();
        m.insert("manager".into(), Value::String(self.manager.clone()));
        m.insert(
            "operation".into(),
            Value::String(self.operation.as_str().into()),
        );
        m.insert("apiVersion".into(), Value::String(self.api_version.clone()));
        if let Some(t) = &self.time {
            m.insert("time".into(), Value::String(t.clone()));
        }
        m.insert("fieldsType".into(), Value::String("FieldsV1".into()));
        m.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if let Some(s) = &self.subresource {
            m.insert("subresource".into(), Value::String(s.clone()));
        }
        Value::Object(m)
    }

    /// Upstream's order of entries: operation (`Apply` first), time, manager, apiVersion,
    /// subresource. Times are compared as RFC 3339 strings (a missing time sorts first).
    pub fn upstream_order(&self, other: &ManagedFieldsEntry) -> Ordering {
        self.operation
            .cmp(&other.operation)
            .then_with(|| self.time.cmp(&other.time))
            .then_with(|| self.manager.cmp(&other.manager))
            .then_with(|| self.api_version.cmp(&other.api_version))
            .then_with(|| self.subresource.cmp(&other.subresource))
    }
}

/// Reads `metadata.managedFields` of `object`. Absent or `null` is the empty list.
pub fn managed_fields_of(object: &Value) -> Result<Vec<ManagedFieldsEntry>, ManagedFieldsError> {
    match object.get("metadata").and_then(|m| m.get("managedFields")) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(list) => parse_managed_fields(list),
    }
}

/// Reads a `managedFields` list (untrusted input: every malformation is a typed error).
pub fn parse_managed_fields(list: &Value) -> Result<Vec<ManagedFieldsEntry>, ManagedFieldsError> {
    let Value::Array(items) = list else {
        return Err(ManagedFieldsError::NotAList);
    };
    let mut out: Vec<ManagedFieldsEntry> = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let Value::Object(m) = item else {
            return Err(ManagedFieldsError::NotAList);
        };
        let text = |field: &'static str| -> Result<Option<String>, ManagedFieldsError> {
            match m.get(field) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(ManagedFieldsError::NotAString { index, field }),
            }
        };
        let operation = match text("operation")?.as_deref() {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            _ => return Err(ManagedFieldsError::InvalidOperation { index }),
        };
        let api_version = text("apiVersion")?
            .filter(|v| !v.is_empty())
            .ok_or(ManagedFieldsError::MissingApiVersion { index })?;
        let fields_type = text("fieldsType")?.unwrap_or_default();
        if fields_type != "FieldsV1" {
            return Err(ManagedFieldsError::InvalidFieldsType {
                index,
                found: fields_type,
            });
        }
        let fields = match m.get("fieldsV1") {
            None | Some(Value::Null) => FieldSet::new(),
            Some(doc) => FieldSet::from_fields_v1(doc)
                .map_err(|source| ManagedFieldsError::Fields { index, source })?,
        };
        let entry = ManagedFieldsEntry {
            manager: text("manager")?.unwrap_or_default(),
            operation,
            api_version,
            time: text("time")?,
            fields,
            subresource: text("subresource")?.filter(|s| !s.is_empty()),
        };
        if out.iter().any(|e| e.same_manager(&entry)) {
            return Err(ManagedFieldsError::Duplicate {
                index,
                manager: entry.manager,
            });
        }
        out.push(entry);
    }
    Ok(out)
}

/// Writes `entries` (dropping those that own nothing, sorted as upstream) into
/// `metadata.managedFields` of `object`; an empty list removes the field.
pub fn set_managed_fields(object: &mut Value, mut entries: Vec<ManagedFieldsEntry>) {
    entries.retain(|e| !e.fields.is_empty());
    entries.sort_by(ManagedFieldsEntry::upstream_order);
    let Value::Object(obj) = object else {
        return;
    };
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if !meta.is_object() {
        *meta = Value::Object(Map::new());
    }
    if let Value::Object(meta) = meta {
        if entries.is_empty() {
            meta.shift_remove("managedFields");
        } else {
            let list = entries.iter().map(ManagedFieldsEntry::to_json).collect();
            meta.insert("managedFields".into(), Value::Array(list));
        }
    }
}

/// Removes `metadata.managedFields` from `object`.
pub(crate) fn strip_managed_fields(object: &mut Value) {
    if let Some(Value::Object(meta)) = object.get_mut("metadata") {
        meta.shift_remove("managedFields");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn entries_round_trip_and_sort() {
        let list = json!([
            {"manager": "kubectl-edit", "operation": "Update", "apiVersion": "apps/v1",
             "time": "2024-01-01T00:00:02Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:spec": {"f:replicas": {}}}},
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1",
             "time": "2024-01-01T00:00:05Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}},
            {"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
             "time": "2024-01-01T00:00:01Z", "fieldsType": "FieldsV1",
             "fieldsV1": {"f:status": {"f:phase": {}}}, "subresource": "status"}
        ]);
        let entries = parse_managed_fields(&list).expect("valid");
        let mut obj = json!({"metadata": {"name": "x"}});
        set_managed_fields(&mut obj, entries);
        let managers: Vec<&str> = obj["metadata"]["managedFields"]
            .as_array()
            .map(|l| l.iter().filter_map(|e| e["manager"].as_str()).collect())
            .unwrap_or_default();
        assert_eq!(managers, ["kubectl", "kubelet", "kubectl-edit"]);
        let again = managed_fields_of(&obj).expect("valid");
        assert_eq!(again.len(), 3);
        assert_eq!(obj["metadata"]["managedFields"][1]["subresource"], "status");
    }

    #[test]
    fn malformed_entries_are_typed_errors() {
        let base = json!({"manager": "m", "operation": "Update", "apiVersion": "v1",
                          "fieldsType": "FieldsV1", "fieldsV1": {}});
        let with = |k: &str, v: Value| {
            let mut e = base.clone();
            e[k] = v;
            json!([e])
        };
        assert_eq!(
            parse_managed_fields(&json!({})),
            Err(ManagedFieldsError::NotAList)
        );
        assert_eq!(
            parse_managed_fields(&json!([1])),
            Err(ManagedFieldsError::NotAList)
        );
        assert_eq!(
            parse_managed_fields(&json!([{}])),
            Err(ManagedFieldsError::InvalidOperation { index: 0 })
        );
        assert_eq!(
            parse_managed_fields(&with("operation", json!("Patch"))),
            Err(ManagedFieldsError::InvalidOperation { index: 0 })
        );
        assert_eq!(
            parse_managed_fields(&with("apiVersion", json!(""))),
            Err(ManagedFieldsError::MissingApiVersion { index: 0 })
        );
        assert!(matches!(
            parse_managed_fields(&with("fieldsType", json!("FieldsV2"))),
            Err(ManagedFieldsError::InvalidFieldsType { .. })
        ));
        assert!(matches!(
            parse_managed_fields(&with("manager", json!(3))),
            Err(ManagedFieldsError::NotAString { .. })
        ));
        assert!(matches!(
            parse_managed_fields(&with("fieldsV1", json!({"bad": {}}))),
            Err(ManagedFieldsError::Fields { .. })
        ));
        assert!(matches!(
            parse_managed_fields(&json!([base.clone(), base])),
            Err(ManagedFieldsError::Duplicate { index: 1, .. })
        ));
    }
}
