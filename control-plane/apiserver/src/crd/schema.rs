//! Structural-schema validation and defaulting of custom objects against their CRD version's
//! `openAPIV3Schema`: types, required, enum, bounds, lengths, patterns, item and property
//! counts, and `allOf`/`anyOf`/`oneOf`/`not`; defaults filled in where a field is absent.
//! Error messages follow kube-apiserver's (`spec.size in body should be less than or equal to 10`).

use fabrik_machinery::validation::FieldError;
use serde_json::{Map, Value};

use crate::strategy::{invalid, not_supported, required};

/// Nesting depth beyond which validation stops (objects are bounded by the body size anyway).
const MAX_DEPTH: usize = 64;

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn render(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn join(path: &str, field: &str) -> String {
    if path.is_empty() {
        field.to_string()
    } else {
        format!("{path}.{field}")
    }
}

fn type_ok(expected: &str, v: &Value) -> bool {
    match expected {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => {
            v.as_i64().is_some()
                || v.as_u64().is_some()
                || v.as_f64()
                    .is_some_and(|f| f.fract() == 0.0 && f.is_finite())
        }
        "number" => v.is_number(),
        _ => true,
    }
}

/// Validates `value` at `path` against `schema`.
pub fn validate(schema: &Value, value: &Value, path: &str) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(schema, value, path, 0, &mut errs);
    errs
}

fn walk(schema: &Value, value: &Value, path: &str, depth: usize, errs: &mut Vec<FieldError>) {
    if depth > MAX_DEPTH || !schema.is_object() {
        return;
    }
    let shown = if path.is_empty() { "<root>" } else { path };
    if value.is_null() {
        if schema["nullable"].as_bool() != Some(true) && schema.get("type").is_some() {
            errs.push(invalid(
                shown,
                "null",
                format!(
                    "{shown} in body must be of type {}: \"null\"",
                    schema["type"].as_str().unwrap_or("object")
                ),
            ));
        }
        return;
    }
    let int_or_string = schema["x-kubernetes-int-or-string"].as_bool() == Some(true);
    if int_or_string {
        if !(value.is_string() || type_ok("integer", value)) {
            errs.push(invalid(
                shown,
                &render(value),
                format!(
                    "{shown} in body must be of type int-or-string: \"{}\"",
                    type_name(value)
                ),
            ));
            return;
        }
    } else if let Some(t) = schema["type"].as_str() {
        if !type_ok(t, value) {
            errs.push(invalid(
                shown,
                &render(value),
                format!(
                    "{shown} in body must be of type {t}: \"{}\"",
                    type_name(value)
                ),
            ));
            return;
        }
    }
    if let Some(options) = schema["enum"].as_array() {
        if !options.contains(value) {
            let list: Vec<String> = options.iter().map(render).collect();
            let refs: Vec<&str> = list.iter().map(String::as_str).collect();
            errs.push(not_supported(shown, &render(value), &refs));
        }
    }
    match value {
        Value::Number(n) => numbers(schema, n.as_f64().unwrap_or(0.0), value, shown, errs),
        Value::String(s) => strings(schema, s, shown, errs),
        Value::Array(items) => {
            let count = items.len() as u64;
            if let Some(min) = schema["minItems"].as_u64().filter(|m| count < *m) {
                errs.push(invalid(
                    shown,
                    &count.to_string(),
                    format!("{shown} in body should have at least {min} items"),
                ));
            }
            if let Some(max) = schema["maxItems"].as_u64().filter(|m| count > *m) {
                errs.push(crate::strategy::too_many(shown, count, max));
            }
            if schema["uniqueItems"].as_bool() == Some(true) {
                for (i, a) in items.iter().enumerate() {
                    if items[..i].contains(a) {
                        errs.push(crate::strategy::duplicate(
                            format!("{shown}[{i}]"),
                            &render(a),
                        ));
                    }
                }
            }
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    walk(item_schema, item, &format!("{path}[{i}]"), depth + 1, errs);
                }
            }
        }
        Value::Object(map) => objects(schema, map, path, shown, depth, errs),
        _ => {}
    }
    for sub in schema["allOf"].as_array().into_iter().flatten() {
        walk(sub, value, path, depth + 1, errs);
    }
    if let Some(any) = schema["anyOf"].as_array() {
        if !any
            .iter()
            .any(|s| validate_inner(s, value, path, depth).is_empty())
        {
            errs.push(invalid(
                shown,
                &render(value),
                format!("{shown} in body must match at least one schema (anyOf)"),
            ));
        }
    }
    if let Some(one) = schema["oneOf"].as_array() {
        let matching = one
            .iter()
            .filter(|s| validate_inner(s, value, path, depth).is_empty())
            .count();
        if matching != 1 {
            errs.push(invalid(
                shown,
                &render(value),
                format!("{shown} in body must match exactly one schema (oneOf)"),
            ));
        }
    }
    if let Some(not) = schema.get("not") {
        if validate_inner(not, value, path, depth).is_empty() {
            errs.push(invalid(
                shown,
                &render(value),
                format!("{shown} in body must not be valid against the schema (not)"),
            ));
        }
    }
}

fn validate_inner(schema: &Value, value: &Value, path: &str, depth: usize) -> Vec<FieldError> {
    let mut errs = Vec::new();
    walk(schema, value, path, depth + 1, &mut errs);
    errs
}

fn numbers(schema: &Value, n: f64, value: &Value, shown: &str, errs: &mut Vec<FieldError>) {
    let text = render(value);
    if let Some(min) = schema["minimum"].as_f64() {
        let exclusive = schema["exclusiveMinimum"].as_bool() == Some(true);
        if n < min || (exclusive && n == min) {
            let rel = if exclusive {
                "greater than"
            } else {
                "greater than or equal to"
            };
            errs.push(invalid(
                shown,
                &text,
                format!(
                    "{shown} in body should be {rel} {}",
                    render(&schema["minimum"])
                ),
            ));
        }
    }
    if let Some(max) = schema["maximum"].as_f64() {
        let exclusive = schema["exclusiveMaximum"].as_bool() == Some(true);
        if n > max || (exclusive && n == max) {
            let rel = if exclusive {
                "less than"
            } else {
                "less than or equal to"
            };
            errs.push(invalid(
                shown,
                &text,
                format!(
                    "{shown} in body should be {rel} {}",
                    render(&schema["maximum"])
                ),
            ));
        }
    }
    if let Some(m) = schema["multipleOf"].as_f64().filter(|m| *m > 0.0) {
        let q = n / m;
        if (q - q.round()).abs() > 1e-9 {
            errs.push(invalid(
                shown,
                &text,
                format!(
                    "{shown} in body should be a multiple of {}",
                    render(&schema["multipleOf"])
                ),
            ));
        }
    }
}

fn strings(schema: &Value, s: &str, shown: &str, errs: &mut Vec<FieldError>) {
    let len = s.chars().count() as u64;
    if let Some(min) = schema["minLength"].as_u64().filter(|m| len < *m) {
        errs.push(invalid(
            shown,
            s,
            format!("{shown} in body should be at least {min} chars long"),
        ));
    }
    if let Some(max) = schema["maxLength"].as_u64().filter(|m| len > *m) {
        errs.push(crate::strategy::too_long(shown, max));
    }
    if let Some(p) = schema["pattern"].as_str() {
        match regex::Regex::new(p) {
            Ok(re) if !re.is_match(s) => errs.push(invalid(
                shown,
                s,
                format!("{shown} in body should match '{p}'"),
            )),
            Ok(_) => {}
            Err(_) => errs.push(invalid(
                shown,
                s,
                format!("the schema's pattern {p:?} is not a valid regular expression"),
            )),
        }
    }
}

fn objects(
    schema: &Value,
    map: &Map<String, Value>,
    path: &str,
    shown: &str,
    depth: usize,
    errs: &mut Vec<FieldError>,
) {
    for r in schema["required"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(Value::as_str)
    {
        if !map.contains_key(r) {
            errs.push(required(join(path, r)));
        }
    }
    let count = map.len() as u64;
    if let Some(min) = schema["minProperties"].as_u64().filter(|m| count < *m) {
        errs.push(invalid(
            shown,
            &count.to_string(),
            format!("{shown} in body should have at least {min} properties"),
        ));
    }
    if let Some(max) = schema["maxProperties"].as_u64().filter(|m| count > *m) {
        errs.push(crate::strategy::too_many(shown, count, max));
    }
    let props = schema["properties"].as_object();
    for (k, v) in map {
        if let Some(s) = props.and_then(|p| p.get(k)) {
            walk(s, v, &join(path, k), depth + 1, errs);
        } else if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            walk(extra, v, &join(path, k), depth + 1, errs);
        }
    }
}

/// Fills `default` values into `value` where the schema has them and the field is absent,
/// recursing into the objects and array items that exist.
pub fn apply_defaults(schema: &Value, value: &mut Value) {
    default_walk(schema, value, 0);
}

fn default_walk(schema: &Value, value: &mut Value, depth: usize) {
    if depth > MAX_DEPTH {
        return;
    }
    match value {
        Value::Object(map) => {
            if let Some(props) = schema["properties"].as_object() {
                for (k, s) in props {
                    if !map.contains_key(k) {
                        if let Some(d) = s.get("default") {
                            map.insert(k.clone(), d.clone());
                        }
                    }
                    if let Some(v) = map.get_mut(k) {
                        default_walk(s, v, depth + 1);
                    }
                }
            }
            if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
                let known = schema["properties"].as_object();
                for (k, v) in map.iter_mut() {
                    if known.is_none_or(|p| !p.contains_key(k)) {
                        default_walk(extra, v, depth + 1);
                    }
                }
            }
        }
        Value::Array(items) => {
            if let Some(s) = schema.get("items") {
                for item in items {
                    default_walk(s, item, depth + 1);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "string", "enum": ["small", "large"]},
            "replicas": {"type": "integer", "minimum": 1, "maximum": 10, "default": 1},
            "name": {"type": "string", "pattern": "^[a-z]+$", "maxLength": 8},
            "port": {"x-kubernetes-int-or-string": true},
            "tags": {"type": "array", "maxItems": 2, "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "nested": {"type": "object", "default": {}, "properties": {"mode": {"type": "string", "default": "auto"}}}
        }}}})
    }

    #[test]
    fn valid_object_passes_and_gets_defaults() {
        let mut v =
            json!({"spec": {"size": "small", "port": "http", "tags": ["a"], "labels": {"x": "y"}}});
        apply_defaults(&schema(), &mut v);
        assert_eq!(v["spec"]["replicas"], 1);
        assert_eq!(v["spec"]["nested"]["mode"], "auto");
        assert!(
            validate(&schema(), &v, "").is_empty(),
            "{:?}",
            validate(&schema(), &v, "")
        );
    }

    #[test]
    fn each_rule_reports_its_field() {
        let v = json!({"spec": {"size": "huge", "replicas": 50, "name": "Bad-Name!", "port": true, "tags": ["a", "b", "c"], "labels": {"x": 1}}});
        let errs = validate(&schema(), &v, "");
        let fields: Vec<&str> = errs.iter().map(|e| e.field.as_str()).collect();
        for f in [
            "spec.size",
            "spec.replicas",
            "spec.name",
            "spec.port",
            "spec.tags",
            "spec.labels.x",
        ] {
            assert!(fields.contains(&f), "{f} missing in {fields:?}");
        }
        let msg: Vec<String> = errs.iter().map(|e| e.message_string()).collect();
        assert!(
            msg.iter()
                .any(|m| m.contains("spec.replicas in body should be less than or equal to 10")),
            "{msg:?}"
        );
        let missing = validate(&schema(), &json!({"spec": {}}), "");
        assert_eq!(missing[0].field, "spec.size");
        let wrong = validate(&schema(), &json!({"spec": "nope"}), "");
        assert!(
            wrong[0].message_string().contains("must be of type object"),
            "{:?}",
            wrong[0].message_string()
        );
    }
}
