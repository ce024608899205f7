//! The strategies of `customresourcedefinitions` themselves and of the custom objects they
//! define.

use fabrik_machinery::validation::{self, FieldError};
use serde_json::{json, Value};

use super::{cel, schema, CLEANUP_FINALIZER};
use crate::jsonpath::JsonPath;
use crate::strategy::{
    age, default_field, immutable, invalid, name_of, not_supported, required, timestamp_age,
    Column, Strategy,
};

/// One `additionalPrinterColumns` entry.
struct PrinterColumn {
    name: String,
    kind: String,
    format: String,
    description: String,
    priority: u8,
    path: Option<JsonPath>,
}

/// Custom objects: defaulting, structural validation and CEL rules from the version's schema,
/// and the CRD's printer columns.
pub struct CustomStrategy {
    schema: Value,
    columns: Vec<PrinterColumn>,
    selectable: Vec<String>,
}

impl CustomStrategy {
    /// A strategy for one version's schema and printer columns.
    pub fn new(schema: Value, columns: &[Value], selectable: Vec<String>) -> CustomStrategy {
        let columns = columns
            .iter()
            .map(|c| PrinterColumn {
                name: c["name"].as_str().unwrap_or("").to_string(),
                kind: c["type"].as_str().unwrap_or("string").to_string(),
                format: c["format"].as_str().unwrap_or("").to_string(),
                description: c["description"].as_str().unwrap_or("").to_string(),
                priority: c["priority"].as_u64().map_or(0, |p| p.min(255) as u8),
                path: c["jsonPath"].as_str().and_then(|p| JsonPath::parse(p).ok()),
            })
            .collect();
        CustomStrategy {
            schema,
            columns,
            selectable,
        }
    }
}

fn cell(kind: &str, values: Vec<&Value>) -> Value {
    let Some(first) = values.first() else {
        return Value::Null;
    };
    match kind {
        "date" => json!(timestamp_age(first.as_str())),
        "integer" => first.as_i64().map(Value::from).unwrap_or(Value::Null),
        "number" => first.as_f64().map(Value::from).unwrap_or(Value::Null),
        "boolean" => first.as_bool().map(Value::from).unwrap_or(Value::Null),
        _ => {
            let parts: Vec<String> = values
                .iter()
                .map(|v| match v {
                    Value::String(s) => s.clone(),
                    other => other.to_string(),
                })
                .collect();
            json!(parts.join(","))
        }
    }
}

impl Strategy for CustomStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        schema::apply_defaults(&self.schema, obj);
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        schema::apply_defaults(&self.schema, obj);
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut body = obj.clone();
        if let Some(o) = body.as_object_mut() {
            o.remove("metadata");
            o.remove("apiVersion");
            o.remove("kind");
        }
        let mut errs = schema::validate(&self.schema, &body, "");
        if errs.is_empty() {
            errs = cel::validate(&self.schema, &body, None, "");
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        let strip = |v: &Value| {
            let mut v = v.clone();
            if let Some(o) = v.as_object_mut() {
                o.remove("metadata");
                o.remove("apiVersion");
                o.remove("kind");
            }
            v
        };
        cel::validate(&self.schema, &strip(new), Some(&strip(old)), "")
    }

    fn allows_field(&self, field: &str) -> bool {
        self.selectable.iter().any(|f| f == field)
    }

    fn columns(&self) -> Vec<Column> {
        let mut cols = vec![Column::NAME];
        if self.columns.is_empty() {
            cols.push(Column::AGE);
            return cols;
        }
        cols.extend(self.columns.iter().map(|c| Column {
            name: c.name.clone().into(),
            kind: if c.kind == "date" {
                "string".into()
            } else {
                c.kind.clone().into()
            },
            format: c.format.clone().into(),
            priority: c.priority,
            description: c.description.clone().into(),
        }));
        cols
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let mut cells = vec![json!(name_of(obj))];
        if self.columns.is_empty() {
            cells.push(json!(age(obj)));
            return cells;
        }
        for c in &self.columns {
            let values = c.path.as_ref().map(|p| p.eval(obj)).unwrap_or_default();
            cells.push(cell(&c.kind, values));
        }
        cells
    }
}

/// `customresourcedefinitions`: validation of the definition itself.
pub struct CrdStrategy;

const SCOPES: [&str; 2] = ["Namespaced", "Cluster"];

fn validate_crd(obj: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    let spec = &obj["spec"];
    let group = spec["group"].as_str().unwrap_or("");
    let plural = spec["names"]["plural"].as_str().unwrap_or("");
    if group.is_empty() {
        errs.push(required("spec.group"));
    } else {
        for m in validation::dns1123_subdomain(group) {
            errs.push(invalid("spec.group", group, m));
        }
        if !group.contains('.') {
            errs.push(invalid(
                "spec.group",
                group,
                "should be a domain with at least one dot",
            ));
        }
    }
    for (field, value) in [
        ("plural", plural),
        ("singular", spec["names"]["singular"].as_str().unwrap_or("")),
        ("listKind", ""),
        ("kind", ""),
    ] {
        if matches!(field, "listKind" | "kind") {
            continue;
        }
        if field == "plural" && value.is_empty() {
            errs.push(required("spec.names.plural"));
            continue;
        }
        if !value.is_empty() {
            for m in validation::dns1035_label(value) {
                errs.push(invalid(format!("spec.names.{field}"), value, m));
            }
        }
    }
    if spec["names"]["kind"].as_str().is_none_or(str::is_empty) {
        errs.push(required("spec.names.kind"));
    }
    let name = name_of(obj);
    if !plural.is_empty() && !group.is_empty() && name != format!("{plural}.{group}") {
        errs.push(invalid(
            "metadata.name",
            name,
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    match spec["scope"].as_str() {
        Some(s) if SCOPES.contains(&s) => {}
        Some(s) => errs.push(not_supported("spec.scope", s, &SCOPES)),
        None => errs.push(required("spec.scope")),
    }
    let versions = spec["versions"].as_array().cloned().unwrap_or_default();
    if versions.is_empty() {
        errs.push(required("spec.versions"));
    }
    let storage = versions
        .iter()
        .filter(|v| v["storage"].as_bool() == Some(true))
        .count();
    if !versions.is_empty() && storage != 1 {
        errs.push(invalid(
            "spec.versions",
            "",
            "must have exactly one version marked as storage version",
        ));
    }
    let mut seen = Vec::new();
    for (i, v) in versions.iter().enumerate() {
        let vname = v["name"].as_str().unwrap_or("");
        if vname.is_empty() {
            errs.push(required(format!("spec.versions[{i}].name")));
        } else {
            for m in validation::dns1035_label(vname) {
                errs.push(invalid(format!("spec.versions[{i}].name"), vname, m));
            }
            if seen.contains(&vname) {
                errs.push(crate::strategy::duplicate(
                    format!("spec.versions[{i}].name"),
                    vname,
                ));
            }
            seen.push(vname);
        }
        let schema = &v["schema"]["openAPIV3Schema"];
        let at = format!("spec.versions[{i}].schema.openAPIV3Schema");
        if schema.is_null() {
            errs.push(required(at));
            continue;
        }
        if schema["type"].as_str() != Some("object") {
            errs.push(invalid(
                format!("{at}.type"),
                schema["type"].as_str().unwrap_or(""),
                "must be object at the root",
            ));
        }
        errs.extend(structural(schema, &at, 0));
        for (path, message) in cel::compile_errors(schema) {
            errs.push(invalid(
                format!("{at}{path}.x-kubernetes-validations"),
                "",
                message,
            ));
        }
        for (path, message) in cel::cost_errors(schema) {
            errs.push(FieldError::forbidden(format!("{at}{path}"), message));
        }
        for (j, c) in v["additionalPrinterColumns"]
            .as_array()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let p = c["jsonPath"].as_str().unwrap_or("");
            if let Err(e) = JsonPath::parse(p) {
                errs.push(invalid(
                    format!("spec.versions[{i}].additionalPrinterColumns[{j}].jsonPath"),
                    p,
                    e.reason,
                ));
            }
            if c["name"].as_str().is_none_or(str::is_empty) {
                errs.push(required(format!(
                    "spec.versions[{i}].additionalPrinterColumns[{j}].name"
                )));
            }
        }
    }
    errs
}

/// Structural-schema rules that matter for serving: every node with properties is typed, no
/// `$ref`, types are known.
fn structural(schema: &Value, at: &str, depth: usize) -> Vec<FieldError> {
    let mut errs = Vec::new();
    if depth > 64 || !schema.is_object() {
        return errs;
    }
    if schema.get("$ref").is_some() {
        errs.push(invalid(
            format!("{at}.$ref"),
            "",
            "$ref is not allowed in a structural schema",
        ));
    }
    let ty = schema["type"].as_str();
    if let Some(t) = ty {
        const TYPES: [&str; 6] = ["object", "array", "string", "integer", "number", "boolean"];
        if !TYPES.contains(&t) {
            errs.push(not_supported(format!("{at}.type"), t, &TYPES));
        }
    } else if depth > 0
        && schema["x-kubernetes-int-or-string"].as_bool() != Some(true)
        && schema["x-kubernetes-preserve-unknown-fields"].as_bool() != Some(true)
    {
        errs.push(required(format!("{at}.type")));
    }
    if let Some(p) = schema["pattern"].as_str() {
        if regex::Regex::new(p).is_err() {
            errs.push(invalid(
                format!("{at}.pattern"),
                p,
                "must be a valid regular expression",
            ));
        }
    }
    for (k, s) in schema["properties"].as_object().into_iter().flatten() {
        errs.extend(structural(s, &format!("{at}.properties[{k}]"), depth + 1));
    }
    if let Some(items) = schema.get("items") {
        errs.extend(structural(items, &format!("{at}.items"), depth + 1));
    }
    if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
        errs.extend(structural(
            extra,
            &format!("{at}.additionalProperties"),
            depth + 1,
        ));
    }
    errs
}

impl Strategy for CrdStrategy {
    fn prepare_for_create(&self, obj: &mut Value) {
        self.prepare_for_create_defaults_only(obj);
        let mut finalizers: Vec<Value> = obj["metadata"]["finalizers"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        if !finalizers.iter().any(|f| f == CLEANUP_FINALIZER) {
            finalizers.push(json!(CLEANUP_FINALIZER));
        }
        obj["metadata"]["finalizers"] = json!(finalizers);
    }

    fn prepare_for_create_defaults_only(&self, obj: &mut Value) {
        let kind = obj["spec"]["names"]["kind"]
            .as_str()
            .unwrap_or("")
            .to_string();
        if !kind.is_empty() {
            default_field(
                obj,
                &["spec", "names", "singular"],
                json!(kind.to_ascii_lowercase()),
            );
            default_field(
                obj,
                &["spec", "names", "listKind"],
                json!(format!("{kind}List")),
            );
        }
        if let Some(versions) = obj["spec"]
            .get_mut("versions")
            .and_then(Value::as_array_mut)
        {
            for v in versions {
                default_field(v, &["served"], json!(true));
                default_field(v, &["storage"], json!(false));
            }
        }
        default_field(obj, &["spec", "conversion"], json!({"strategy": "None"}));
    }

    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = validate_crd(obj);
        errs.extend(validate_conversion(&obj["spec"]["conversion"]));
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        [
            immutable(new, old, &["spec", "group"], "spec.group"),
            immutable(new, old, &["spec", "scope"], "spec.scope"),
        ]
        .into_iter()
        .flatten()
        .collect()
    }
}

/// `spec.conversion`: `None`, or `Webhook` with a client config (as admission webhooks') and
/// the ConversionReview versions the webhook accepts.
fn validate_conversion(conversion: &Value) -> Vec<FieldError> {
    let mut errs = Vec::new();
    match conversion["strategy"].as_str().unwrap_or("None") {
        "None" => {
            if !conversion["webhook"].is_null() {
                errs.push(crate::strategy::forbidden(
                    "spec.conversion.webhook",
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        "Webhook" => {
            let webhook = &conversion["webhook"];
            if !webhook.is_object() {
                errs.push(crate::strategy::required("spec.conversion.webhook"));
                return errs;
            }
            crate::webhook::config::validate_client_config(
                &webhook["clientConfig"],
                "spec.conversion.webhook.clientConfig",
                &mut errs,
            );
            let versions = crate::admission::rules::strings(&webhook["conversionReviewVersions"]);
            if !versions
                .iter()
                .any(|v| crate::webhook::conversion::REVIEW_VERSIONS.contains(v))
            {
                errs.push(crate::strategy::field_required(
                    "spec.conversion.webhook.conversionReviewVersions",
                    "must include at least one of v1, v1beta1",
                ));
            }
        }
        other => errs.push(crate::strategy::not_supported(
            "spec.conversion.strategy",
            other,
            &["None", "Webhook"],
        )),
    }
    errs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd() -> Value {
        json!({"metadata": {"name": "widgets.example.com"}, "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]}]}})
    }

    #[test]
    fn valid_crd_and_each_invalid_part() {
        assert!(
            validate_crd(&crd()).is_empty(),
            "{:?}",
            validate_crd(&crd())
        );
        let mut bad = crd();
        bad["metadata"]["name"] = json!("other.example.com");
        bad["spec"]["scope"] = json!("Galaxy");
        bad["spec"]["versions"][0]["storage"] = json!(false);
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
            ["properties"]["size"] = json!({"type": "int"});
        bad["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["x-kubernetes-validations"] =
            json!([{"rule": "self.("}]);
        let fields: Vec<String> = validate_crd(&bad).into_iter().map(|e| e.field).collect();
        for f in ["metadata.name", "spec.scope", "spec.versions"] {
            assert!(fields.iter().any(|x| x == f), "{f} not in {fields:?}");
        }
        assert!(
            fields.iter().any(|x| x.ends_with("properties[size].type")),
            "{fields:?}"
        );
        assert!(
            fields
                .iter()
                .any(|x| x.ends_with("x-kubernetes-validations")),
            "{fields:?}"
        );
    }

    #[test]
    fn custom_columns_render() {
        let c = crd();
        let s = CustomStrategy::new(
            c["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone(),
            c["spec"]["versions"][0]["additionalPrinterColumns"]
                .as_array()
                .map_or(&[][..], |v| v),
            vec![],
        );
        let cols: Vec<String> = s.columns().iter().map(|c| c.name.to_string()).collect();
        assert_eq!(cols, vec!["Name", "Size"]);
        assert_eq!(
            s.cells(&json!({"metadata": {"name": "w"}, "spec": {"size": 3}})),
            vec![json!("w"), json!(3)]
        );
        let errs = s.validate(&json!({"metadata": {"name": "w"}, "spec": {"size": "big"}}));
        assert_eq!(errs[0].field, "spec.size");
    }
}
