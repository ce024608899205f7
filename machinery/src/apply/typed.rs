//! Objects seen through the schema, as structured-merge-diff sees them: which values are
//! leaves, how list elements are named, how an applied configuration merges into an object,
//! and how owned paths are removed from it.
//!
//! Types come from a [`PatchSchema`]: a field it does not know is *deduced* (objects are
//! granular maps, lists atomic), as upstream does for untyped and
//! `x-kubernetes-preserve-unknown-fields` values.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

use super::fieldset::FieldSet;
use super::path::{Path, PathElement};
use crate::patch::{FieldPatchInfo, PatchSchema};

/// The deepest object walked (Kubernetes objects are far shallower).
pub const MAX_OBJECT_DEPTH: usize = 100;

/// Why an object does not fit its schema the way server-side apply needs.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// A value at `path` cannot be typed, e.g. a `map` list element without its key field,
    /// a `set` list element that is not a scalar, or duplicate list elements.
    #[error("{path}: {reason}")]
    Invalid {
        /// Where, upstream path format (`.spec.containers[0]` style for unnamed elements).
        path: String,
        /// What is wrong, in upstream's words where it has them.
        reason: String,
    },
    /// The object nests deeper than [`MAX_OBJECT_DEPTH`].
    #[error("the object nests deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
}

/// How a `set` or `map` list names its elements.
#[derive(Clone, Debug)]
enum ListRel {
    Atomic,
    Set,
    Map {
        keys: Vec<String>,
        defaults: BTreeMap<String, Value>,
    },
}

/// The type of a value.
#[derive(Clone, Debug)]
enum Ty {
    /// A struct of this definition.
    Struct { def: String, atomic: bool },
    /// A `map[string]X`.
    Map { elem: Box<Ty>, atomic: bool },
    /// A list.
    List { rel: ListRel, elem: Box<Ty> },
    /// A scalar or untyped value: objects granular, lists atomic.
    Deduced,
    /// A value replaced and owned as a whole.
    Atomic,
}

impl Ty {
    fn is_leaf(&self) -> bool {
        matches!(
            self,
            Ty::Atomic
                | Ty::Struct { atomic: true, .. }
                | Ty::Map { atomic: true, .. }
                | Ty::List {
                    rel: ListRel::Atomic,
                    ..
                }
        )
    }
}

/// The type of a field from its schema metadata.
fn ty_of(info: &FieldPatchInfo) -> Ty {
    let atomic = |t: &Option<String>| t.as_deref() == Some("atomic");
    let elem = match &info.definition {
        Some(def) => Ty::Struct {
            def: def.clone(),
            atomic: atomic(&info.struct_type),
        },
        None => Ty::Deduced,
    };
    if info.is_list {
        let rel = match info.list_kind() {
            Some("set") => ListRel::Set,
            Some("map") => {
                let keys = info.map_keys();
                if keys.is_empty() {
                    ListRel::Atomic
                } else {
                    ListRel::Map {
                        keys,
                        defaults: info.list_map_key_defaults.clone(),
                    }
                }
            }
            _ => ListRel::Atomic,
        };
        return Ty::List {
            rel,
            elem: Box::new(elem),
        };
    }
    if info.is_map {
        return Ty::Map {
            elem: Box::new(elem),
            atomic: atomic(&info.map_type),
        };
    }
    match &info.definition {
        Some(def) => Ty::Struct {
            def: def.clone(),
            atomic: atomic(&info.map_type),
        },
        None if atomic(&info.map_type) => Ty::Atomic,
        None => Ty::Deduced,
    }
}

/// A schema-aware view of objects of one root definition.
pub(crate) struct Typer<'a> {
    schema: &'a dyn PatchSchema,
    root: Ty,
}

/// Every member path of an object, with the leaf value where the member is a leaf, and the
/// paths of its (granular) maps.
#[derive(Debug, Default)]
pub(crate) struct Flat {
    /// Members and their leaf values (`None` for members with children).
    pub(crate) members: BTreeMap<Path, Option<Value>>,
    /// Paths holding a granular `map[string]X` (not members themselves). A map that appears
    /// counts as added, as upstream's comparison reports it.
    pub(crate) maps: BTreeSet<Path>,
}

impl<'a> Typer<'a> {
    /// A typer for objects of `definition` (empty: untyped).
    pub(crate) fn new(schema: &'a dyn PatchSchema, definition: &str) -> Typer<'a> {
        let root = if definition.is_empty() {
            Ty::Deduced
        } else {
            Ty::Struct {
                def: definition.to_owned(),
                atomic: false,
            }
        };
        Typer { schema, root }
    }

    /// The type of `key` inside a value of type `parent`, and whether the schema declares it
    /// as a struct field.
    fn child(&self, parent: &Ty, key: &str) -> (Ty, bool) {
        match parent {
            Ty::Struct { def, .. } => match self.schema.field(def, key) {
                Some(info) => (ty_of(&info), true),
                None => (Ty::Deduced, false),
            },
            Ty::Map { elem, .. } => ((**elem).clone(), false),
            _ => (Ty::Deduced, false),
        }
    }

    /// Members of `value` (see the module `fieldset` for what is a member), with leaf values.
    /// `strict`: malformed lists are errors; otherwise they are treated as atomic.
    pub(crate) fn flatten(&self, value: &Value, strict: bool) -> Result<Flat, ShapeError> {
        let mut out = Flat::default();
        self.flatten_at(value, &self.root, &Path::default(), 0, strict, &mut out)?;
        out.members.remove(&Path::default());
        Ok(out)
    }

    /// The field set of `value`.
    pub(crate) fn field_set(&self, value: &Value, strict: bool) -> Result<FieldSet, ShapeError> {
        Ok(self.flatten(value, strict)?.members.into_keys().collect())
    }

    fn flatten_at(
        &self,
        value: &Value,
        ty: &Ty,
        path: &Path,
        depth: usize,
        strict: bool,
        out: &mut Flat,
    ) -> Result<(), ShapeError> {
        if depth > MAX_OBJECT_DEPTH {
            if strict {
                return Err(ShapeError::TooDeep {
                    limit: MAX_OBJECT_DEPTH,
                });
            }
            out.members.insert(path.clone(), Some(value.clone()));
            return Ok(());
        }
        if ty.is_leaf() {
            out.members.insert(path.clone(), Some(value.clone()));
            return Ok(());
        }
        match (ty, value) {
            (Ty::Struct { .. } | Ty::Map { .. } | Ty::Deduced, Value::Object(m)) => {
                if matches!(ty, Ty::Map { .. }) && !m.is_empty() {
                    out.maps.insert(path.clone());
                }
                for (key, child) in m {
                    let (cty, declared) = self.child(ty, key);
                    let cpath = path.child(PathElement::Field(key.clone()));
                    self.flatten_at(child, &cty, &cpath, depth + 1, strict, out)?;
                    let empty = child.is_null() || child.as_object().is_some_and(Map::is_empty);
                    if empty {
                        out.members.insert(cpath, Some(child.clone()));
                    } else if !declared {
                        out.members.entry(cpath).or_insert(None);
                    }
                }
            }
            (Ty::List { rel, elem }, Value::Array(items)) => {
                let Some(names) = element_names(rel, items, path, strict)? else {
                    out.members.insert(path.clone(), Some(value.clone()));
                    return Ok(());
                };
                for (item, name) in items.iter().zip(names) {
                    let cpath = path.child(name);
                    self.flatten_at(item, elem, &cpath, depth + 1, strict, out)?;
                    out.members.entry(cpath).or_insert(None);
                }
            }
            _ => {
                out.members.insert(path.clone(), Some(value.clone()));
            }
        }
        Ok(())
    }

    /// Merges the applied configuration `config` into `live`: fields of the configuration
    /// win, `set` and `map` lists merge by element, atomic values are replaced, `null`
    /// removes a field. The configuration is checked strictly.
    pub(crate) fn merge(&self, live: &Value, config: &Value) -> Result<Value, ShapeError> {
        self.merge_at(Some(live), config, &self.root, &Path::default(), 0)
    }

    fn merge_at(
        &self,
        live: Option<&Value>,
        config: &Value,
        ty: &Ty,
        path: &Path,
        depth: usize,
    ) -> Result<Value, ShapeError> {
        if depth > MAX_OBJECT_DEPTH {
            return Err(ShapeError::TooDeep {
                limit: MAX_OBJECT_DEPTH,
            });
        }
        if ty.is_leaf() {
            return Ok(config.clone());
        }
        match (ty, config) {
            (Ty::Struct { .. } | Ty::Map { .. } | Ty::Deduced, Value::Object(c)) => {
                let mut out = match live {
                    Some(Value::Object(l)) => l.clone(),
                    _ => Map::new(),
                };
                for (key, value) in c {
                    if value.is_null() {
                        out.shift_remove(key);
                        continue;
                    }
                    let (cty, _) = self.child(ty, key);
                    let cpath = path.child(PathElement::Field(key.clone()));
                    let merged = self.merge_at(out.get(key), value, &cty, &cpath, depth + 1)?;
                    out.insert(key.clone(), merged);
                }
                Ok(Value::Object(out))
            }
            (Ty::List { rel, elem }, Value::Array(c)) => {
                let names = element_names(rel, c, path, true)?.unwrap_or_default();
                let live_items: &[Value] = match live {
                    Some(Value::Array(l)) => l,
                    _ => &[],
                };
                let live_names = element_names(rel, live_items, path, false)?;
                let (live_items, live_names) = match live_names {
                    Some(n) => (live_items, n),
                    None => (&[][..], Vec::new()),
                };
                let merged = merge_lists(live_items, &live_names, c, &names, |l, r, name| {
                    self.merge_at(l, r, elem, &path.child(name.clone()), depth + 1)
                })?;
                Ok(Value::Array(merged))
            }
            _ => Ok(config.clone()),
        }
    }

    /// Removes from `value` every member of `remove` (with everything below it).
    pub(crate) fn remove(&self, value: &mut Value, remove: &FieldSet) {
        self.remove_at(value, &self.root, &Path::default(), 0, remove);
    }

    fn remove_at(&self, value: &mut Value, ty: &Ty, path: &Path, depth: usize, remove: &FieldSet) {
        if depth > MAX_OBJECT_DEPTH || ty.is_leaf() {
            return;
        }
        match (ty, value) {
            (Ty::Struct { .. } | Ty::Map { .. } | Ty::Deduced, Value::Object(m)) => {
                let keys: Vec<String> = m.keys().cloned().collect();
                for key in keys {
                    let cpath = path.child(PathElement::Field(key.clone()));
                    if remove.contains(&cpath) {
                        m.shift_remove(&key);
                    } else if remove.has_prefix(&cpath) {
                        let (cty, _) = self.child(ty, &key);
                        if let Some(child) = m.get_mut(&key) {
                            self.remove_at(child, &cty, &cpath, depth + 1, remove);
                        }
                    }
                }
            }
            (Ty::List { rel, elem }, Value::Array(items)) => {
                let Ok(Some(names)) = element_names(rel, items, path, false) else {
                    return;
                };
                let old = std::mem::take(items);
                for (mut item, name) in old.into_iter().zip(names) {
                    let cpath = path.child(name);
                    if remove.contains(&cpath) {
                        continue;
                    }
                    if remove.has_prefix(&cpath) {
                        self.remove_at(&mut item, elem, &cpath, depth + 1, remove);
                    }
                    items.push(item);
                }
            }
            _ => {}
        }
    }
}

/// The path element of each list element, or `None` when a lenient list cannot be named
/// (it is then handled as atomic).
fn element_names(
    rel: &ListRel,
    items: &[Value],
    path: &Path,
    strict: bool,
) -> Result<Option<Vec<PathElement>>, ShapeError> {
    let mut names = Vec::with_capacity(items.len());
    let mut seen = BTreeSet::new();
    for (i, item) in items.iter().enumerate() {
        let name = match element_name(rel, item) {
            Ok(n) => n,
            Err(reason) if strict => {
                return Err(ShapeError::Invalid {
                    path: format!("{path}[{i}]"),
                    reason,
                })
            }
            Err(_) => return Ok(None),
        };
        if strict && !seen.insert(name.clone()) {
            return Err(ShapeError::Invalid {
                path: path.to_string(),
                reason: format!("duplicate entries for key {name}"),
            });
        }
        names.push(name);
    }
    Ok(Some(names))
}

/// The path element naming one list element.
fn element_name(rel: &ListRel, item: &Value) -> Result<PathElement, String> {
    match rel {
        ListRel::Atomic => Err("atomic lists have no element names".into()),
        ListRel::Set => match item {
            Value::Object(_) => {
                Err("associative list without keys has an element that's a map type".into())
            }
            Value::Array(_) => Err("not supported: associative list with lists as elements".into()),
            Value::Null => Err("associative list with null items".into()),
            v => Ok(PathElement::Value(v.clone())),
        },
        ListRel::Map { keys, defaults } => {
            let Value::Object(m) = item else {
                return Err("associative list with keys has an element that is not a map".into());
            };
            let mut fields = Vec::with_capacity(keys.len());
            for key in keys {
                let value = m
                    .get(key)
                    .filter(|v| !v.is_null())
                    .or_else(|| defaults.get(key))
                    .ok_or_else(|| {
                        format!(
                            "associative list with keys has an element that omitted key field \
                             {key:?} (and doesn't have default value)"
                        )
                    })?;
                fields.push((key.clone(), value.clone()));
            }
            fields.sort_by(|a, b| a.0.cmp(&b.0));
            Ok(PathElement::Key(fields))
        }
    }
}

/// Merges two named lists as structured-merge-diff does: elements present in both are
/// merged in the configuration's order, elements only in the live list keep their place
/// relative to their neighbours, new elements follow the configuration's order.
fn merge_lists(
    live: &[Value],
    live_names: &[PathElement],
    config: &[Value],
    names: &[PathElement],
    mut merge: impl FnMut(Option<&Value>, &Value, &PathElement) -> Result<Value, ShapeError>,
) -> Result<Vec<Value>, ShapeError> {
    let live_index: BTreeMap<&PathElement, usize> = live_names
        .iter()
        .enumerate()
        .rev()
        .map(|(i, n)| (n, i))
        .collect();
    let config_names: BTreeSet<&PathElement> = names.iter().collect();
    let shared: Vec<&PathElement> = names
        .iter()
        .filter(|n| live_index.contains_key(n))
        .collect();
    let mut next_shared = 0;
    let mut emitted: BTreeSet<&PathElement> = BTreeSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut li, mut ri) = (0, 0);
    while li < live.len() || ri < config.len() {
        if let (Some(ln), Some(rn)) = (live_names.get(li), names.get(ri)) {
            if ln == rn {
                let l = live_index.get(rn).and_then(|&i| live.get(i));
                if let Some(r) = config.get(ri) {
                    out.push(merge(l, r, rn)?);
                }
                emitted.insert(rn);
                if shared.get(next_shared) == Some(&rn) {
                    next_shared += 1;
                }
                li += 1;
                ri += 1;
                continue;
            }
            let waiting = shared.get(next_shared).is_some_and(|s| *s != ln);
            if config_names.contains(ln) && waiting && !emitted.contains(ln) {
                li += 1;
                continue;
            }
        }
        if let Some(ln) = live_names.get(li) {
            if !config_names.contains(ln) {
                if let Some(l) = live.get(li) {
                    out.push(l.clone());
                }
                li += 1;
                continue;
            }
            if emitted.contains(ln) {
                li += 1;
                continue;
            }
        }
        if let Some(rn) = names.get(ri) {
            let l = live_index.get(rn).and_then(|&i| live.get(i));
            if let Some(r) = config.get(ri) {
                out.push(merge(l, r, rn)?);
            }
            emitted.insert(rn);
            if shared.get(next_shared) == Some(&rn) {
                next_shared += 1;
            }
            ri += 1;
        } else {
            // Only shared live elements remain, all already emitted.
            li += 1;
        }
    }
    Ok(out)
}
