//! Strategic merge patch, following upstream `k8s.io/apimachinery/pkg/util/strategicpatch`
//! as the API server applies it (parallel deletion lists merged, unmatched nulls ignored).
//!
//! - `null` deletes a key; objects merge recursively; scalars and unknown lists replace.
//! - Lists with strategy `merge` and a merge key merge element by element (matching elements
//!   merge, new ones are added); lists of primitives with strategy `merge` are merged as sets.
//! - Directives: `$patch: replace | delete | merge` in objects (`merge` is accepted as the
//!   default, where upstream rejects it), `$patch: delete | replace` as list elements,
//!   `$retainKeys`, `$setElementOrder/<field>`, `$deleteFromPrimitiveList/<field>`.
//!   An unknown `$patch` value is an error.
//! - Directives never leak into the result: a patch value with no counterpart in the object
//!   is merged into an empty value, which strips its directives and nulls.
//! - Element order follows upstream (see the `order` module).

use serde_json::{Map, Value};

use super::order::{self, has_directive, same_element, values_equal};
use super::{FieldPatchInfo, PatchError, PatchSchema};

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";

/// Applies a strategic merge patch to `doc`, an object of the OpenAPI definition `definition`
/// (e.g. `io.k8s.api.core.v1.Pod`); `schema` tells how each field merges.
pub fn strategic_merge_patch(
    doc: &Value,
    patch: &Value,
    schema: &dyn PatchSchema,
    definition: &str,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::InvalidPatch(
            "a strategic merge patch must be a JSON object".into(),
        ));
    };
    let original = match doc {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => {
            return Err(PatchError::Conflict(
                "the object to patch is not a JSON object".into(),
            ))
        }
    };
    let ctx = Ctx::Struct((!definition.is_empty()).then_some(definition));
    let merger = Merger { schema };
    Ok(Value::Object(merger.merge_map(
        original,
        patch.clone(),
        ctx,
    )?))
}

/// What an object being merged is.
#[derive(Clone, Copy)]
enum Ctx<'a> {
    /// A struct of this definition (`None`: unknown, merged without schema).
    Struct(Option<&'a str>),
    /// A `map[string]X` whose values are of this definition.
    MapOf(Option<&'a str>),
}

fn child_ctx(info: &FieldPatchInfo) -> Ctx<'_> {
    if info.is_map {
        Ctx::MapOf(info.definition.as_deref())
    } else {
        Ctx::Struct(info.definition.as_deref())
    }
}

fn into_object(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

fn no_merge_key(key: &str) -> PatchError {
    PatchError::InvalidPatch(format!(
        "a list element does not contain declared merge key: {key}"
    ))
}

/// The kind shared by all elements of the lists being merged.
#[derive(PartialEq, Eq)]
enum ElementKind {
    Object,
    Scalar,
}

fn element_kind(lists: [&[Value]; 2]) -> Result<Option<ElementKind>, PatchError> {
    let mut seen: Option<&Value> = None;
    for item in lists.into_iter().flatten() {
        if item.is_array() {
            return Err(PatchError::InvalidPatch(
                "lists of lists are not supported".into(),
            ));
        }
        match seen {
            None => seen = Some(item),
            Some(first) => {
                if std::mem::discriminant(first) != std::mem::discriminant(item) {
                    return Err(PatchError::InvalidPatch(
                        "list element types are not identical".into(),
                    ));
                }
            }
        }
    }
    Ok(seen.map(|v| {
        if v.is_object() {
            ElementKind::Object
        } else {
            ElementKind::Scalar
        }
    }))
}

struct Merger<'a> {
    schema: &'a dyn PatchSchema,
}

impl Merger<'_> {
    fn info(&self, ctx: Ctx<'_>, key: &str) -> FieldPatchInfo {
        match ctx {
            Ctx::Struct(Some(def)) => self.schema.field(def, key).unwrap_or_default(),
            Ctx::Struct(None) => FieldPatchInfo::default(),
            Ctx::MapOf(elem) => FieldPatchInfo {
                definition: elem.map(str::to_string),
                ..FieldPatchInfo::default()
            },
        }
    }

    fn merge_map(
        &self,
        mut original: Map<String, Value>,
        mut patch: Map<String, Value>,
        ctx: Ctx<'_>,
    ) -> Result<Map<String, Value>, PatchError> {
        if let Some(directive) = patch.get(DIRECTIVE) {
            match directive.as_str() {
                Some("replace") => {
                    patch.shift_remove(DIRECTIVE);
                    return self.merge_map(Map::new(), patch, ctx);
                }
                Some("delete") => return Ok(Map::new()),
                Some("merge") => {
                    patch.shift_remove(DIRECTIVE);
                }
                _ => return Err(PatchError::UnsupportedDirective(directive.to_string())),
            }
        }
        apply_retain_keys(&mut original, &mut patch)?;
        self.apply_element_orders(&mut original, &mut patch, ctx)?;

        for (key, value) in patch {
            let (key, delete_list) = match key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
                Some(field) => (field.to_string(), true),
                None => (key, false),
            };
            if value.is_null() {
                original.shift_remove(&key);
                continue;
            }
            let info = self.info(ctx, &key);
            let Some(current) = original.get_mut(&key) else {
                if !delete_list {
                    let added = self.new_value(value, &info)?;
                    original.insert(key, added);
                }
                continue;
            };
            match (current, value) {
                (Value::Object(cur), Value::Object(p)) => {
                    let cur = std::mem::take(cur);
                    let merged = if info.has_strategy("replace") {
                        self.merge_map(Map::new(), p, child_ctx(&info))?
                    } else {
                        self.merge_map(cur, p, child_ctx(&info))?
                    };
                    original.insert(key, Value::Object(merged));
                }
                (Value::Array(cur), Value::Array(p)) => {
                    let cur = std::mem::take(cur);
                    let merged = if delete_list {
                        delete_from_list(cur, &p)
                    } else if info.has_strategy("merge") {
                        self.merge_list(cur, p, &info)?
                    } else {
                        self.new_list(p, &info)?
                    };
                    original.insert(key, Value::Array(merged));
                }
                (current, value) => {
                    if !delete_list {
                        *current = self.new_value(value, &info)?;
                    }
                }
            }
        }
        Ok(original)
    }

    /// Handles every `$setElementOrder/<field>` of `patch`: merges that field's list and
    /// orders it as the directive says; both are removed from `patch`.
    fn apply_element_orders(
        &self,
        original: &mut Map<String, Value>,
        patch: &mut Map<String, Value>,
        ctx: Ctx<'_>,
    ) -> Result<(), PatchError> {
        let directives: Vec<String> = patch
            .keys()
            .filter(|k| k.starts_with(SET_ELEMENT_ORDER))
            .cloned()
            .collect();
        for directive in directives {
            let bad =
                || PatchError::InvalidPatch("invalid patch format of setElementOrder list".into());
            let field = directive
                .strip_prefix(SET_ELEMENT_ORDER)
                .filter(|f| !f.is_empty())
                .ok_or_else(bad)?
                .to_string();
            let Some(Value::Array(order)) = patch.shift_remove(&directive) else {
                return Err(bad());
            };
            let info = self.info(ctx, &field);
            let live = match original.get(&field) {
                None | Some(Value::Null) => None,
                Some(Value::Array(list)) => Some(list.clone()),
                Some(_) => {
                    return Err(PatchError::Conflict(format!(
                        "field {field} of the object is not a list"
                    )))
                }
            };
            let patch_list = match patch.shift_remove(&field) {
                None => None,
                Some(Value::Array(list)) => Some(list),
                Some(_) => return Err(bad()),
            };
            let kind = element_kind([
                live.as_deref().unwrap_or_default(),
                patch_list.as_deref().unwrap_or_default(),
            ])?;
            let merge_key = match kind {
                Some(ElementKind::Object) => info.merge_key.as_deref(),
                _ => None,
            };
            if let Some(list) = &patch_list {
                validate_order(list, &order, merge_key)?;
            }
            let merged = match (&live, patch_list) {
                (Some(list), None) => list.clone(),
                (None, Some(p)) => self.new_list(p, &info)?,
                (Some(list), Some(p)) => {
                    if info.has_strategy("merge") {
                        self.merge_list(list.clone(), p, &info)?
                    } else {
                        self.new_list(p, &info)?
                    }
                }
                (None, None) => continue,
            };
            let server_order = live.unwrap_or_default();
            let (in_order, server_only) = order::partition(merged, &order, merge_key);
            let ordered = order::normalize_element_order(
                in_order,
                server_only,
                &order,
                &server_order,
                merge_key,
            );
            original.insert(field, Value::Array(ordered));
        }
        Ok(())
    }

    /// Merges a list field with strategy `merge`.
    fn merge_list(
        &self,
        original: Vec<Value>,
        patch: Vec<Value>,
        info: &FieldPatchInfo,
    ) -> Result<Vec<Value>, PatchError> {
        if original.is_empty() && patch.is_empty() {
            return Ok(original);
        }
        match element_kind([&original, &patch])? {
            None => Ok(original),
            Some(ElementKind::Scalar) => {
                let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
                for item in original.iter().chain(patch.iter()) {
                    if !merged.iter().any(|m| values_equal(m, item)) {
                        merged.push(item.clone());
                    }
                }
                let (in_patch, server_only) = order::partition(merged, &patch, None);
                Ok(order::normalize_element_order(
                    in_patch,
                    server_only,
                    &patch,
                    &original,
                    None,
                ))
            }
            Some(ElementKind::Object) => self.merge_object_list(original, patch, info),
        }
    }

    /// Merges a list of objects by merge key, honouring `$patch` elements.
    fn merge_object_list(
        &self,
        mut original: Vec<Value>,
        patch: Vec<Value>,
        info: &FieldPatchInfo,
    ) -> Result<Vec<Value>, PatchError> {
        let key = info.merge_key.as_deref().ok_or_else(|| {
            PatchError::InvalidPatch("cannot merge lists without merge key".into())
        })?;
        let elem_ctx = Ctx::Struct(info.definition.as_deref());
        let mut plain = Vec::with_capacity(patch.len());
        let mut replace = false;
        for item in patch {
            let Some(directive) = item.get(DIRECTIVE) else {
                plain.push(item);
                continue;
            };
            match directive.as_str() {
                Some("delete") => {
                    if item.get(key).is_none() {
                        return Err(no_merge_key(key));
                    }
                    original.retain(|e| !same_element(e, &item, Some(key)));
                }
                Some("replace") => replace = true,
                Some("merge") => {
                    return Err(PatchError::InvalidPatch(
                        "merging lists cannot yet be specified in the patch".into(),
                    ))
                }
                _ => return Err(PatchError::UnsupportedDirective(directive.to_string())),
            }
        }
        let (base, patch) = if replace {
            let base = plain
                .into_iter()
                .map(|e| self.new_element(e, elem_ctx))
                .collect::<Result<Vec<_>, _>>()?;
            (base, Vec::new())
        } else {
            (original, plain)
        };
        let server_order = base.clone();
        let mut merged = base;
        for item in &patch {
            if item.get(key).is_none() {
                return Err(no_merge_key(key));
            }
            match merged.iter().position(|e| same_element(e, item, Some(key))) {
                Some(i) => {
                    let slot = merged.get_mut(i).ok_or_else(|| no_merge_key(key))?;
                    let current = into_object(std::mem::take(slot));
                    *slot = Value::Object(self.merge_map(
                        current,
                        into_object(item.clone()),
                        elem_ctx,
                    )?);
                }
                None => merged.push(self.new_element(item.clone(), elem_ctx)?),
            }
        }
        let (in_patch, server_only) = order::partition(merged, &patch, Some(key));
        Ok(order::normalize_element_order(
            in_patch,
            server_only,
            &patch,
            &server_order,
            Some(key),
        ))
    }

    /// A patch value with no counterpart in the object, with directives and nulls resolved.
    fn new_value(&self, value: Value, info: &FieldPatchInfo) -> Result<Value, PatchError> {
        match value {
            Value::Object(m) => Ok(Value::Object(self.merge_map(
                Map::new(),
                m,
                child_ctx(info),
            )?)),
            Value::Array(list) => Ok(Value::Array(self.new_list(list, info)?)),
            other => Ok(other),
        }
    }

    /// A list that replaces (or, for merge lists, is merged into) nothing.
    fn new_list(&self, list: Vec<Value>, info: &FieldPatchInfo) -> Result<Vec<Value>, PatchError> {
        if info.has_strategy("merge") {
            return self.merge_list(Vec::new(), list, info);
        }
        let ctx = Ctx::Struct(info.definition.as_deref());
        list.into_iter().map(|e| self.new_element(e, ctx)).collect()
    }

    fn new_element(&self, item: Value, ctx: Ctx<'_>) -> Result<Value, PatchError> {
        match item {
            Value::Object(m) => Ok(Value::Object(self.merge_map(Map::new(), m, ctx)?)),
            other => Ok(other),
        }
    }
}

/// `$retainKeys`: drops the object's keys not listed; every key the patch sets must be listed.
fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &mut Map<String, Value>,
) -> Result<(), PatchError> {
    let Some(retain) = patch.shift_remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let bad = || PatchError::InvalidPatch("invalid patch format of retainKeys".into());
    let Value::Array(list) = retain else {
        return Err(bad());
    };
    let keys: Vec<&str> = list
        .iter()
        .map(Value::as_str)
        .collect::<Option<_>>()
        .ok_or_else(bad)?;
    for (k, v) in patch.iter() {
        if v.is_null()
            || k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            || k.starts_with(SET_ELEMENT_ORDER)
        {
            continue;
        }
        if !keys.contains(&k.as_str()) {
            return Err(PatchError::InvalidPatch(
                "patch content doesn't match retainKeys list".into(),
            ));
        }
    }
    original.retain(|k, _| keys.contains(&k.as_str()));
    Ok(())
}

/// `$deleteFromPrimitiveList`: removes every element equal to one listed.
fn delete_from_list(current: Vec<Value>, to_delete: &[Value]) -> Vec<Value> {
    current
        .into_iter()
        .filter(|v| !to_delete.iter().any(|d| values_equal(d, v)))
        .collect()
}

/// Checks that the patch list names its elements in the `$setElementOrder` order and names
/// none that the order list lacks (deletions and directive elements are exempt).
fn validate_order(
    patch: &[Value],
    order: &[Value],
    merge_key: Option<&str>,
) -> Result<(), PatchError> {
    if patch.is_empty() || order.is_empty() {
        return Ok(());
    }
    let mut at = 0;
    for item in patch.iter().filter(|i| !has_directive(i)) {
        match order
            .get(at..)
            .and_then(|rest| rest.iter().position(|o| same_element(item, o, merge_key)))
        {
            Some(offset) => at += offset + 1,
            None => {
                return Err(PatchError::InvalidPatch(
                    "the order in patch list doesn't match $setElementOrder list".into(),
                ))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "strategic_tests.rs"]
mod tests;
