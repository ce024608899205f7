//! ConfigMaps and Secrets: key validation, base64 data, `immutable`, and their columns.

use base64::Engine;
use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::{age, default_field, forbidden, immutable, invalid, name_of, Column, Strategy};

pub(super) struct ConfigMapStrategy;
pub(super) struct SecretStrategy;

/// Total size limit of a ConfigMap's or Secret's data (upstream: 1 MiB).
const MAX_DATA_BYTES: usize = 1024 * 1024;

fn valid_key(key: &str) -> bool {
    !key.is_empty()
        && key.len() <= 253
        && key != "."
        && key != ".."
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
}

fn validate_keys(obj: &Value, fields: &[&str]) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let mut total = 0usize;
    for f in fields {
        for (k, v) in obj[*f].as_object().into_iter().flatten() {
            if !valid_key(k) {
                errs.push(invalid(
                    format!("{f}[{k}]"),
                    k,
                    "a valid config key must consist of alphanumeric characters, '-', '_' or '.' (e.g. 'key.name',  or 'KEY_NAME',  or 'key-name', regex used for validation is '[-._a-zA-Z0-9]+')",
                ));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if total > MAX_DATA_BYTES {
        errs.push(FieldError {
            kind: fabrik_machinery::validation::FieldErrorKind::FieldValueTooLong,
            field: "data".into(),
            message: format!("may not be more than {MAX_DATA_BYTES} bytes"),
            value: None,
        });
    }
    errs
}

fn validate_immutable(new: &Value, old: &Value) -> Vec<FieldError> {
    if old["immutable"].as_bool() != Some(true) {
        return Vec::new();
    }
    let mut errs = Vec::new();
    if new["immutable"].as_bool() != Some(true) {
        errs.push(forbidden(
            "immutable",
            "field is immutable when `immutable` is set",
        ));
    }
    for f in ["data", "binaryData", "stringData"] {
        if new[f] != old[f] {
            errs.push(forbidden(f, "field is immutable when `immutable` is set"));
        }
    }
    errs
}

fn data_count(obj: &Value) -> usize {
    obj["data"].as_object().map_or(0, |m| m.len())
        + obj["binaryData"].as_object().map_or(0, |m| m.len())
}

impl Strategy for ConfigMapStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        validate_keys(obj, &["data", "binaryData"])
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        validate_immutable(new, old)
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Data", "string", "The number of entries in the data."),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![json!(name_of(obj)), json!(data_count(obj)), json!(age(obj))]
    }
}

impl Strategy for SecretStrategy {
    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        default_field(obj, &["type"], json!("Opaque"));
        // stringData is write-only: merged into data as base64, like upstream.
        if let Some(sd) = obj.as_object_mut().and_then(|o| o.remove("stringData")) {
            let engine = base64::engine::general_purpose::STANDARD;
            for (k, v) in sd.as_object().into_iter().flatten() {
                if let Some(s) = v.as_str() {
                    default_field(obj, &["data"], json!({}));
                    obj["data"][k.as_str()] = json!(engine.encode(s));
                }
            }
        }
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_keys(obj, &["data"]);
        let engine = base64::engine::general_purpose::STANDARD;
        for (k, v) in obj["data"].as_object().into_iter().flatten() {
            let ok = v.as_str().is_some_and(|s| engine.decode(s).is_ok());
            if !ok {
                errs.push(invalid(
                    format!("data[{k}]"),
                    "",
                    "must be a base64-encoded value",
                ));
            }
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let mut errs = validate_immutable(new, old);
        errs.extend(immutable(new, old, &["type"], "type"));
        errs
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["type"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Type", "string", "The type of the secret"),
            Column::new("Data", "string", "The number of entries in the data."),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            json!(name_of(obj)),
            obj["type"].clone(),
            json!(data_count(obj)),
            json!(age(obj)),
        ]
    }
}
