//! Namespaces: `Active` on create, the `kubernetes` finalizer, the name label, and DNS-1123
//! label names. Deletion (`Terminating`, then content removal) is the namespace controller's.

use fabrik_machinery::validation;
use serde_json::{json, Value};

use super::{age, default_field, name_of, Column, NameValidator, Strategy};

pub(super) struct NamespaceStrategy;

impl Strategy for NamespaceStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        let name = name_of(obj).to_string();
        default_field(obj, &["metadata", "labels"], json!({}));
        obj["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // spec.finalizers change only through the finalize subresource.
        new["spec"] = old["spec"].clone();
        let name = name_of(old).to_string();
        default_field(new, &["metadata", "labels"], json!({}));
        new["metadata"]["labels"]["kubernetes.io/metadata.name"] = json!(name);
    }

    fn name_validator(&self) -> NameValidator {
        validation::dns1123_label
    }

    fn reset_status_on_create(&self) -> bool {
        false
    }

    fn selectable_fields(&self) -> &'static [&'static str] {
        &["status.phase"]
    }

    fn columns(&self) -> Vec<Column> {
        vec![
            Column::NAME,
            Column::new("Status", "string", "The status of the namespace"),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        vec![
            json!(name_of(obj)),
            obj["status"]["phase"].clone(),
            json!(age(obj)),
        ]
    }
}
