//! Reference handling: reading `$ref` targets, collecting the definitions a document needs,
//! and rewriting references between the OpenAPI v3 and Swagger 2.0 forms.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use crate::builtin::REF_PREFIX;

/// The definition a reference string points to, if it is a local schema reference.
pub(crate) fn ref_name(reference: &str) -> Option<&str> {
    reference
        .strip_prefix(REF_PREFIX)
        .or_else(|| reference.strip_prefix("#/definitions/"))
}

/// The definition a schema stands for: its own `$ref`, or the single `$ref` of its `allOf`.
pub(crate) fn schema_target(schema: &Value) -> Option<&str> {
    if let Some(Value::String(r)) = schema.get("$ref") {
        return ref_name(r);
    }
    match schema.get("allOf") {
        Some(Value::Array(all)) if all.len() == 1 => all
            .first()
            .and_then(|s| s.get("$ref"))
            .and_then(Value::as_str)
            .and_then(ref_name),
        _ => None,
    }
}

/// Adds every definition name referenced anywhere inside `value` to `out`.
pub(crate) fn collect_refs(value: &Value, out: &mut BTreeSet<String>) {
    match value {
        Value::Object(map) => {
            for (key, v) in map {
                if key == "$ref" {
                    if let Some(name) = v.as_str().and_then(ref_name) {
                        out.insert(name.to_owned());
                    }
                } else {
                    collect_refs(v, out);
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// Looks a definition up in `extra` first, then in the built-ins.
pub(crate) fn lookup<'a>(
    name: &str,
    extra: &'a BTreeMap<String, Value>,
    builtin: &'a BTreeMap<String, Value>,
) -> Option<&'a Value> {
    extra.get(name).or_else(|| builtin.get(name))
}

/// The transitive closure of `roots` over references, as (name, schema) sorted by name.
/// Names that resolve nowhere are left out (they would be dangling; tests guard against it).
pub(crate) fn closure<'a>(
    roots: BTreeSet<String>,
    extra: &'a BTreeMap<String, Value>,
    builtin: &'a BTreeMap<String, Value>,
) -> BTreeMap<String, &'a Value> {
    let mut done: BTreeMap<String, &Value> = BTreeMap::new();
    let mut pending: Vec<String> = roots.into_iter().collect();
    while let Some(name) = pending.pop() {
        if done.contains_key(&name) {
            continue;
        }
        let Some(schema) = lookup(&name, extra, builtin) else {
            continue;
        };
        let mut found = BTreeSet::new();
        collect_refs(schema, &mut found);
        pending.extend(found.into_iter().filter(|n| !done.contains_key(n)));
        done.insert(name, schema);
    }
    done
}

/// Rewrites a v3 schema into Swagger 2.0 form: references point at `#/definitions/`, a lone
/// `allOf: [{$ref}]` becomes a `$ref` with its siblings kept, `nullable` is dropped.
pub(crate) fn to_v2_schema(value: &Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut out = Map::with_capacity(map.len());
            if let Some(target) = single_all_of_target(map) {
                out.insert(
                    "$ref".into(),
                    Value::String(format!("#/definitions/{target}")),
                );
            }
            for (key, v) in map {
                match key.as_str() {
                    "allOf" if out.contains_key("$ref") => {}
                    "nullable" => {}
                    "$ref" => {
                        let rewritten = match v.as_str().and_then(ref_name) {
                            Some(name) => Value::String(format!("#/definitions/{name}")),
                            None => v.clone(),
                        };
                        out.insert(key.clone(), rewritten);
                    }
                    _ => {
                        out.insert(key.clone(), to_v2_schema(v));
                    }
                }
            }
            Value::Object(out)
        }
        Value::Array(items) => Value::Array(items.iter().map(to_v2_schema).collect()),
        other => other.clone(),
    }
}

/// The target of `allOf: [{$ref}]` when that is all the `allOf` holds and no `$ref` is beside.
fn single_all_of_target(map: &Map<String, Value>) -> Option<&str> {
    if map.contains_key("$ref") {
        return None;
    }
    match map.get("allOf") {
        Some(Value::Array(all)) if all.len() == 1 => {
            let only = all.first()?.as_object()?;
            if only.len() != 1 {
                return None;
            }
            only.get("$ref")?.as_str().and_then(ref_name)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn targets_of_plain_and_all_of_refs() {
        let plain = json!({"$ref": "#/components/schemas/a.B"});
        let wrapped = json!({"allOf": [{"$ref": "#/components/schemas/a.C"}], "description": "d"});
        assert_eq!(schema_target(&plain), Some("a.B"));
        assert_eq!(schema_target(&wrapped), Some("a.C"));
        assert_eq!(schema_target(&json!({"type": "string"})), None);
        assert_eq!(ref_name("http://elsewhere/x"), None);
    }

    #[test]
    fn closure_follows_references_transitively() {
        let mut builtin = BTreeMap::new();
        builtin.insert(
            "A".to_owned(),
            json!({"properties": {"b": {"$ref": "#/components/schemas/B"}}}),
        );
        builtin.insert(
            "B".to_owned(),
            json!({"items": {"$ref": "#/components/schemas/C"}}),
        );
        builtin.insert("C".to_owned(), json!({"type": "string"}));
        builtin.insert("D".to_owned(), json!({"type": "string"}));
        let extra = BTreeMap::new();
        let roots = BTreeSet::from(["A".to_owned()]);
        let got: Vec<_> = closure(roots, &extra, &builtin).into_keys().collect();
        assert_eq!(got, ["A", "B", "C"]);
    }

    #[test]
    fn v2_form_unwraps_all_of() {
        let v3 = json!({"properties": {"spec": {"allOf": [{"$ref": "#/components/schemas/X"}], "description": "d", "nullable": true}}});
        let v2 = to_v2_schema(&v3);
        assert_eq!(
            v2,
            json!({"properties": {"spec": {"$ref": "#/definitions/X", "description": "d"}}})
        );
    }
}
