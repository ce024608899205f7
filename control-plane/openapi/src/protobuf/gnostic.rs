//! Mapping of a Swagger 2.0 JSON document onto gnostic's `openapi.v2` messages.
//!
//! Field numbers are those of gnostic's `openapiv2/OpenAPIv2.proto`. Vendor extensions
//! (`x-…`) become `NamedAny` entries whose `yaml` holds the value as JSON text (valid YAML).
//! Keys Swagger 2.0 does not define are skipped; values of the wrong JSON type are errors.

use serde_json::{Map, Value};

use super::wire::Message;
use crate::error::OpenApiError;

type Result<T, E = OpenApiError> = std::result::Result<T, E>;

fn invalid(path: &str, reason: &'static str) -> OpenApiError {
    OpenApiError::InvalidDocument {
        path: path.to_owned(),
        reason,
    }
}

/// An object being read, with its location for error messages.
struct Obj<'a> {
    map: &'a Map<String, Value>,
    path: String,
}

impl<'a> Obj<'a> {
    fn new(value: &'a Value, path: String) -> Result<Obj<'a>> {
        match value {
            Value::Object(map) => Ok(Obj { map, path }),
            _ => Err(invalid(&path, "expected an object")),
        }
    }

    fn at(&self, key: &str) -> String {
        format!("{}/{key}", self.path)
    }

    fn child(&self, key: &str) -> Result<Option<Obj<'a>>> {
        self.map
            .get(key)
            .map(|v| Obj::new(v, self.at(key)))
            .transpose()
    }

    fn string(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(Value::String(s)) => {
                m.string(field, s);
                Ok(())
            }
            Some(_) => Err(invalid(&self.at(key), "expected a string")),
        }
    }

    fn strings(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(Value::Array(items)) => items.iter().try_for_each(|item| match item {
                Value::String(s) => {
                    m.repeated_string(field, s);
                    Ok(())
                }
                _ => Err(invalid(&self.at(key), "expected an array of strings")),
            }),
            Some(_) => Err(invalid(&self.at(key), "expected an array of strings")),
        }
    }

    fn bool(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(Value::Bool(b)) => {
                m.bool(field, *b);
                Ok(())
            }
            Some(_) => Err(invalid(&self.at(key), "expected a boolean")),
        }
    }

    fn int(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(v) => match v.as_i64() {
                Some(i) => {
                    m.int64(field, i);
                    Ok(())
                }
                None => Err(invalid(&self.at(key), "expected an integer")),
            },
        }
    }

    fn double(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(v) => match v.as_f64() {
                Some(f) => {
                    m.double(field, f);
                    Ok(())
                }
                None => Err(invalid(&self.at(key), "expected a number")),
            },
        }
    }

    fn any(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        if let Some(v) = self.map.get(key) {
            m.message(field, any(v, &self.at(key))?);
        }
        Ok(())
    }

    fn anys(&self, m: &mut Message, key: &str, field: u32) -> Result<()> {
        match self.map.get(key) {
            None => Ok(()),
            Some(Value::Array(items)) => items.iter().try_for_each(|v| {
                m.message(field, any(v, &self.at(key))?);
                Ok(())
            }),
            Some(_) => Err(invalid(&self.at(key), "expected an array")),
        }
    }

    /// Writes every `x-` key as a `NamedAny`.
    fn extensions(&self, m: &mut Message, field: u32) -> Result<()> {
        for (key, value) in self.map.iter().filter(|(k, _)| k.starts_with("x-")) {
            let mut named = Message::new();
            named.string(1, key);
            named.message(2, any(value, &self.at(key))?);
            m.message(field, named);
        }
        Ok(())
    }

    /// Writes each entry of the object at `key` as a named message `(name 1, value 2)`.
    fn named(
        &self,
        m: &mut Message,
        key: &str,
        field: u32,
        value: impl Fn(&Value, String) -> Result<Message>,
    ) -> Result<()> {
        let Some(obj) = self.child(key)? else {
            return Ok(());
        };
        for (name, v) in obj.map.iter().filter(|(k, _)| !k.starts_with("x-")) {
            let mut named = Message::new();
            named.string(1, name);
            named.message(2, value(v, obj.at(name))?);
            m.message(field, named);
        }
        Ok(())
    }
}

/// gnostic `Any`: the value as YAML text (field 2).
fn any(value: &Value, path: &str) -> Result<Message> {
    let text = serde_json::to_string(value).map_err(|source| OpenApiError::Serialize {
        path: path.to_owned(),
        source,
    })?;
    let mut m = Message::new();
    m.string(2, &text);
    Ok(m)
}

/// Encodes a Swagger 2.0 document (as [`crate::v2_document`] builds it) as gnostic's
/// `openapi.v2.Document` protobuf.
pub fn v2_protobuf(v2: &Value) -> Result<Vec<u8>> {
    let doc = Obj::new(v2, String::new())?;
    if !matches!(doc.map.get("swagger"), Some(Value::String(_))) {
        return Err(invalid("/swagger", "expected the Swagger version string"));
    }
    let mut m = Message::new();
    doc.string(&mut m, "swagger", 1)?;
    if let Some(info) = doc.child("info")? {
        let mut i = Message::new();
        info.string(&mut i, "title", 1)?;
        info.string(&mut i, "version", 2)?;
        info.string(&mut i, "description", 3)?;
        info.extensions(&mut i, 7)?;
        m.message(2, i);
    }
    doc.string(&mut m, "host", 3)?;
    doc.string(&mut m, "basePath", 4)?;
    doc.strings(&mut m, "schemes", 5)?;
    doc.strings(&mut m, "consumes", 6)?;
    doc.strings(&mut m, "produces", 7)?;
    if let Some(paths) = doc.child("paths")? {
        let mut p = Message::new();
        paths.extensions(&mut p, 1)?;
        doc.named(&mut p, "paths", 2, |v, path| path_item(&Obj::new(v, path)?))?;
        m.message(8, p);
    }
    if doc.map.contains_key("definitions") {
        let mut d = Message::new();
        doc.named(&mut d, "definitions", 1, |v, path| {
            schema(&Obj::new(v, path)?)
        })?;
        m.message(9, d);
    }
    security_requirements(&doc, &mut m, 12)?;
    if doc.map.contains_key("securityDefinitions") {
        let mut s = Message::new();
        doc.named(&mut s, "securityDefinitions", 1, |v, path| {
            security_definition(&Obj::new(v, path)?)
        })?;
        m.message(13, s);
    }
    doc.extensions(&mut m, 16)?;
    Ok(m.into_bytes())
}

fn security_requirements(obj: &Obj<'_>, m: &mut Message, field: u32) -> Result<()> {
    let Some(value) = obj.map.get("security") else {
        return Ok(());
    };
    let Value::Array(reqs) = value else {
        return Err(invalid(&obj.at("security"), "expected an array"));
    };
    for (i, req) in reqs.iter().enumerate() {
        let req = Obj::new(req, format!("{}/{i}", obj.at("security")))?;
        let mut r = Message::new();
        for (name, scopes) in req.map {
            let holder = Obj {
                map: req.map,
                path: req.path.clone(),
            };
            let mut list = Message::new();
            if !scopes.is_array() {
                return Err(invalid(&holder.at(name), "expected an array of strings"));
            }
            holder.strings(&mut list, name, 1)?;
            let mut named = Message::new();
            named.string(1, name);
            named.message(2, list);
            r.message(1, named);
        }
        m.message(field, r);
    }
    Ok(())
}

fn security_definition(obj: &Obj<'_>) -> Result<Message> {
    let mut inner = Message::new();
    let choice = match obj.map.get("type").and_then(Value::as_str) {
        Some("basic") => {
            obj.string(&mut inner, "type", 1)?;
            obj.string(&mut inner, "description", 2)?;
            obj.extensions(&mut inner, 3)?;
            1
        }
        Some("apiKey") => {
            obj.string(&mut inner, "type", 1)?;
            obj.string(&mut inner, "name", 2)?;
            obj.string(&mut inner, "in", 3)?;
            obj.string(&mut inner, "description", 4)?;
            obj.extensions(&mut inner, 5)?;
            2
        }
        _ => return Err(invalid(&obj.path, "unsupported security definition type")),
    };
    let mut item = Message::new();
    item.message(choice, inner);
    Ok(item)
}

fn path_item(obj: &Obj<'_>) -> Result<Message> {
    let mut m = Message::new();
    obj.string(&mut m, "$ref", 1)?;
    for (method, field) in [
        ("get", 2),
        ("put", 3),
        ("post", 4),
        ("delete", 5),
        ("options", 6),
        ("head", 7),
        ("patch", 8),
    ] {
        if let Some(op) = obj.child(method)? {
            m.message(field, operation(&op)?);
        }
    }
    parameters(obj, &mut m, 9)?;
    obj.extensions(&mut m, 10)?;
    Ok(m)
}

fn operation(obj: &Obj<'_>) -> Result<Message> {
    let mut m = Message::new();
    obj.strings(&mut m, "tags", 1)?;
    obj.string(&mut m, "summary", 2)?;
    obj.string(&mut m, "description", 3)?;
    obj.string(&mut m, "operationId", 5)?;
    obj.strings(&mut m, "produces", 6)?;
    obj.strings(&mut m, "consumes", 7)?;
    parameters(obj, &mut m, 8)?;
    if let Some(responses) = obj.child("responses")? {
        let mut r = Message::new();
        obj.named(&mut r, "responses", 1, |v, path| {
            let resp = Obj::new(v, path)?;
            let mut value = Message::new();
            if resp.map.contains_key("$ref") {
                value.message(2, json_reference(&resp)?);
            } else {
                value.message(1, response(&resp)?);
            }
            Ok(value)
        })?;
        responses.extensions(&mut r, 2)?;
        m.message(9, r);
    }
    obj.strings(&mut m, "schemes", 10)?;
    obj.bool(&mut m, "deprecated", 11)?;
    security_requirements(obj, &mut m, 12)?;
    obj.extensions(&mut m, 13)?;
    Ok(m)
}

fn response(obj: &Obj<'_>) -> Result<Message> {
    let mut m = Message::new();
    obj.string(&mut m, "description", 1)?;
    if let Some(s) = obj.child("schema")? {
        let mut item = Message::new();
        item.message(1, schema(&s)?);
        m.message(2, item);
    }
    obj.extensions(&mut m, 5)?;
    Ok(m)
}

fn json_reference(obj: &Obj<'_>) -> Result<Message> {
    let mut m = Message::new();
    obj.string(&mut m, "$ref", 1)?;
    obj.string(&mut m, "description", 2)?;
    Ok(m)
}

fn parameters(obj: &Obj<'_>, m: &mut Message, field: u32) -> Result<()> {
    let Some(value) = obj.map.get("parameters") else {
        return Ok(());
    };
    let Value::Array(params) = value else {
        return Err(invalid(&obj.at("parameters"), "expected an array"));
    };
    for (i, p) in params.iter().enumerate() {
        let p = Obj::new(p, format!("{}/{i}", obj.at("parameters")))?;
        let mut item = Message::new();
        if p.map.contains_key("$ref") {
            item.message(2, json_reference(&p)?);
        } else {
            item.message(1, parameter(&p)?);
        }
        m.message(field, item);
    }
    Ok(())
}

fn parameter(p: &Obj<'_>) -> Result<Message> {
    let mut param = Message::new();
    let location = p.map.get("in").and_then(Value::as_str);
    if location == Some("body") {
        let mut b = Message::new();
        p.string(&mut b, "description", 1)?;
        p.string(&mut b, "name", 2)?;
        p.string(&mut b, "in", 3)?;
        p.bool(&mut b, "required", 4)?;
        if let Some(s) = p.child("schema")? {
            b.message(5, schema(&s)?);
        }
        p.extensions(&mut b, 6)?;
        param.message(1, b);
        return Ok(param);
    }
    // Query and formData sub-schemas share one numbering, header and path another.
    let (choice, wide) = match location {
        Some("header") => (1, false),
        Some("formData") => (2, true),
        Some("query") => (3, true),
        Some("path") => (4, false),
        _ => return Err(invalid(&p.at("in"), "unknown parameter location")),
    };
    let shift = u32::from(wide);
    let mut s = Message::new();
    p.bool(&mut s, "required", 1)?;
    p.string(&mut s, "in", 2)?;
    p.string(&mut s, "description", 3)?;
    p.string(&mut s, "name", 4)?;
    if wide {
        p.bool(&mut s, "allowEmptyValue", 5)?;
    }
    p.string(&mut s, "type", 5 + shift)?;
    p.string(&mut s, "format", 6 + shift)?;
    p.string(&mut s, "collectionFormat", 8 + shift)?;
    p.any(&mut s, "default", 9 + shift)?;
    p.bool(&mut s, "uniqueItems", 19 + shift)?;
    p.anys(&mut s, "enum", 20 + shift)?;
    p.extensions(&mut s, 22 + shift)?;
    let mut non_body = Message::new();
    non_body.message(choice, s);
    param.message(2, non_body);
    Ok(param)
}

/// gnostic `Schema`.
fn schema(obj: &Obj<'_>) -> Result<Message> {
    let mut m = Message::new();
    obj.string(&mut m, "$ref", 1)?;
    obj.string(&mut m, "format", 2)?;
    obj.string(&mut m, "title", 3)?;
    obj.string(&mut m, "description", 4)?;
    obj.any(&mut m, "default", 5)?;
    obj.double(&mut m, "multipleOf", 6)?;
    obj.double(&mut m, "maximum", 7)?;
    obj.bool(&mut m, "exclusiveMaximum", 8)?;
    obj.double(&mut m, "minimum", 9)?;
    obj.bool(&mut m, "exclusiveMinimum", 10)?;
    obj.int(&mut m, "maxLength", 11)?;
    obj.int(&mut m, "minLength", 12)?;
    obj.string(&mut m, "pattern", 13)?;
    obj.int(&mut m, "maxItems", 14)?;
    obj.int(&mut m, "minItems", 15)?;
    obj.bool(&mut m, "uniqueItems", 16)?;
    obj.int(&mut m, "maxProperties", 17)?;
    obj.int(&mut m, "minProperties", 18)?;
    obj.strings(&mut m, "required", 19)?;
    obj.anys(&mut m, "enum", 20)?;
    match obj.map.get("additionalProperties") {
        None => {}
        Some(Value::Bool(b)) => {
            let mut item = Message::new();
            item.oneof_bool(2, *b);
            m.message(21, item);
        }
        Some(v) => {
            let mut item = Message::new();
            item.message(1, schema(&Obj::new(v, obj.at("additionalProperties"))?)?);
            m.message(21, item);
        }
    }
    match obj.map.get("type") {
        None => {}
        Some(Value::String(t)) => {
            let mut item = Message::new();
            item.repeated_string(1, t);
            m.message(22, item);
        }
        Some(Value::Array(_)) => {
            let mut item = Message::new();
            obj.strings(&mut item, "type", 1)?;
            m.message(22, item);
        }
        Some(_) => return Err(invalid(&obj.at("type"), "expected a string or strings")),
    }
    match obj.map.get("items") {
        None => {}
        Some(Value::Array(items)) => {
            let mut item = Message::new();
            for (i, s) in items.iter().enumerate() {
                item.message(
                    1,
                    schema(&Obj::new(s, format!("{}/{i}", obj.at("items")))?)?,
                );
            }
            m.message(23, item);
        }
        Some(v) => {
            let mut item = Message::new();
            item.message(1, schema(&Obj::new(v, obj.at("items"))?)?);
            m.message(23, item);
        }
    }
    match obj.map.get("allOf") {
        None => {}
        Some(Value::Array(all)) => {
            for (i, s) in all.iter().enumerate() {
                m.message(
                    24,
                    schema(&Obj::new(s, format!("{}/{i}", obj.at("allOf")))?)?,
                );
            }
        }
        Some(_) => return Err(invalid(&obj.at("allOf"), "expected an array")),
    }
    if obj.map.contains_key("properties") {
        let mut props = Message::new();
        obj.named(&mut props, "properties", 1, |v, path| {
            schema(&Obj::new(v, path)?)
        })?;
        m.message(25, props);
    }
    obj.string(&mut m, "discriminator", 26)?;
    obj.bool(&mut m, "readOnly", 27)?;
    obj.any(&mut m, "example", 30)?;
    obj.extensions(&mut m, 31)?;
    Ok(m)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    use super::super::wire::decode::{all, fields, len, string, Field};
    use super::*;
    use crate::{builtin_resources, v2_document, Definitions};

    /// Finds the named entry (`name` 1, value 2) called `name` among `field` of `msg`.
    fn named<'a>(msg: &'a [u8], field: u32, name: &str) -> Option<&'a [u8]> {
        fields(msg)?.into_iter().find_map(|(f, v)| match v {
            Field::Len(entry) if f == field => {
                let e = fields(entry)?;
                (string(&e, 1)? == name).then(|| len(&e, 2)).flatten()
            }
            _ => None,
        })
    }

    fn full_document() -> Vec<u8> {
        let doc = v2_document(
            Definitions::builtin(),
            &BTreeMap::new(),
            &builtin_resources(),
        );
        match v2_protobuf(&doc) {
            Ok(bytes) => bytes,
            Err(e) => panic!("encoding failed: {e}"),
        }
    }

    #[test]
    fn document_decodes_to_swagger_info_paths_and_definitions() {
        let bytes = full_document();
        let top = fields(&bytes).unwrap_or_default();
        assert_eq!(string(&top, 1), Some("2.0"));
        let info = fields(len(&top, 2).unwrap_or_default()).unwrap_or_default();
        assert_eq!(string(&info, 1), Some("Kubernetes"));

        let defs = len(&top, 9).unwrap_or_default();
        let pod = named(defs, 1, "io.k8s.api.core.v1.Pod").unwrap_or_default();
        let gvk = named(pod, 31, "x-kubernetes-group-version-kind").unwrap_or_default();
        let yaml = string(&fields(gvk).unwrap_or_default(), 2).unwrap_or_default();
        let parsed: Value = serde_json::from_str(yaml).unwrap_or_default();
        assert_eq!(
            parsed,
            json!([{"group": "", "kind": "Pod", "version": "v1"}])
        );

        let props = len(&fields(pod).unwrap_or_default(), 25).unwrap_or_default();
        let spec = fields(named(props, 1, "spec").unwrap_or_default()).unwrap_or_default();
        assert_eq!(
            string(&spec, 1),
            Some("#/definitions/io.k8s.api.core.v1.PodSpec")
        );
        assert!(string(&spec, 4).is_some_and(|d| !d.is_empty()));
    }

    #[test]
    fn patch_operation_keeps_field_validation_and_gvk() {
        let bytes = full_document();
        let top = fields(&bytes).unwrap_or_default();
        let paths = len(&top, 8).unwrap_or_default();
        let item = named(
            paths,
            2,
            "/apis/apps/v1/namespaces/{namespace}/deployments/{name}",
        )
        .unwrap_or_default();
        let op = fields(len(&fields(item).unwrap_or_default(), 8).unwrap_or_default())
            .unwrap_or_default();
        assert_eq!(string(&op, 5), Some("patchAppsV1NamespacedDeployment"));
        let query_names: Vec<String> = all(&op, 8)
            .into_iter()
            .filter_map(|f| match f {
                Field::Len(b) => Some(*b),
                _ => None,
            })
            .filter_map(|item| len(&fields(item)?, 1))
            .filter_map(|param| len(&fields(param)?, 2))
            .filter_map(|non_body| len(&fields(non_body)?, 3))
            .filter_map(|query| string(&fields(query)?, 4).map(str::to_owned))
            .collect();
        assert!(
            query_names.iter().any(|n| n == "fieldValidation"),
            "{query_names:?}"
        );
        assert!(named(op_bytes(item), 13, "x-kubernetes-group-version-kind").is_some());
    }

    fn op_bytes(item: &[u8]) -> &[u8] {
        fields(item).and_then(|f| len(&f, 8)).unwrap_or_default()
    }

    #[test]
    fn additional_properties_false_is_recorded() {
        let doc = json!({"swagger": "2.0", "definitions": {"A": {"additionalProperties": false}}});
        let bytes = v2_protobuf(&doc).unwrap_or_default();
        let defs = len(&fields(&bytes).unwrap_or_default(), 9).unwrap_or_default();
        let a = fields(named(defs, 1, "A").unwrap_or_default()).unwrap_or_default();
        let item = fields(len(&a, 21).unwrap_or_default()).unwrap_or_default();
        assert_eq!(item, [(2, Field::Varint(0))]);
    }

    #[test]
    fn malformed_documents_are_errors() {
        assert!(v2_protobuf(&json!([])).is_err());
        assert!(v2_protobuf(&json!({"info": {}})).is_err());
        let bad_type = json!({"swagger": "2.0", "definitions": {"A": {"type": 3}}});
        match v2_protobuf(&bad_type) {
            Err(OpenApiError::InvalidDocument { path, .. }) => {
                assert_eq!(path, "/definitions/A/type");
            }
            other => panic!("unexpected {other:?}"),
        }
        let bad_param =
            json!({"swagger": "2.0", "paths": {"/x": {"parameters": [{"in": "cookie"}]}}});
        assert!(v2_protobuf(&bad_param).is_err());
    }
}
