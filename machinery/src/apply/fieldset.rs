//! Sets of field paths and their `fieldsV1` encoding.
//!
//! A [`FieldSet`] holds the paths a manager owns. Upstream keeps a path as a member when it is
//! a leaf (a scalar, an atomic list or map, an empty or null value), a list element or a map
//! key; the struct fields above them are implied. In `fieldsV1` every path element is a key
//! (`f:`, `k:`, `v:`, `i:`) whose value holds its children, and `".": {}` marks a path that
//! is itself a member and also has children.

use std::collections::BTreeMap;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use super::path::{Path, PathElement};

/// The deepest `fieldsV1` document accepted (a Kubernetes object is far shallower).
pub const MAX_FIELDS_DEPTH: usize = 64;

/// Why a `fieldsV1` document could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FieldsV1Error {
    /// A node of the document is not a JSON object.
    #[error("fieldsV1 node at {path:?} is not an object")]
    NotAnObject {
        /// The path of the node, upstream format.
        path: String,
    },
    /// A key is neither `.` nor a valid `f:`, `k:`, `v:` or `i:` element.
    #[error("invalid fieldsV1 key {key:?} at {path:?}")]
    InvalidKey {
        /// The offending key.
        key: String,
        /// The path of the node holding it.
        path: String,
    },
    /// The `.` marker has a value other than `{}`, or stands at the root.
    #[error("invalid \".\" marker at {path:?}")]
    InvalidMarker {
        /// The path of the node holding it.
        path: String,
    },
    /// The document nests deeper than [`MAX_FIELDS_DEPTH`].
    #[error("fieldsV1 nests deeper than {limit} levels")]
    TooDeep {
        /// The limit.
        limit: usize,
    },
}

/// A set of field paths.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldSet(BTreeSet<Path>);

impl FieldSet {
    /// The empty set.
    pub fn new() -> FieldSet {
        FieldSet::default()
    }

    /// Adds `path`.
    pub fn insert(&mut self, path: Path) {
        self.0.insert(path);
    }

    /// Whether `path` is a member.
    pub fn contains(&self, path: &Path) -> bool {
        self.0.contains(path)
    }

    /// Whether the set has no member.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The number of members.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// The members, in order.
    pub fn iter(&self) -> impl Iterator<Item = &Path> {
        self.0.iter()
    }

    /// Whether a member equals `prefix` or lies below it.
    pub fn has_prefix(&self, prefix: &Path) -> bool {
        self.0
            .range(prefix..)
            .next()
            .is_some_and(|p| p.starts_with(prefix))
    }

    /// Members in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.intersection(&other.0).cloned().collect())
    }

    /// Members of either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.union(&other.0).cloned().collect())
    }

    /// Members of `self` not in `other`.
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        FieldSet(self.0.difference(&other.0).cloned().collect())
    }

    /// Keeps the members `keep` accepts.
    pub fn retain(&mut self, keep: impl FnMut(&Path) -> bool) {
        self.0.retain(keep);
    }

    /// The set plus every prefix of a member that ends in a field name: the struct fields
    /// upstream implies above the members ("named fields are members").
    pub fn with_named_prefixes(&self) -> FieldSet {
        let mut out = self.0.clone();
        for p in &self.0 {
            for end in 1..p.0.len() {
                if matches!(p.0.get(end - 1), Some(PathElement::Field(_))) {
                    out.insert(Path(p.0.get(..end).unwrap_or_default().to_vec()));
                }
            }
        }
        FieldSet(out)
    }

    /// The `fieldsV1` document of the set.
    pub fn to_fields_v1(&self) -> Value {
        let mut root = Node::default();
        for p in &self.0 {
            let mut node = &mut root;
            for e in &p.0 {
                node = node.children.entry(e.clone()).or_default();
            }
            node.member = true;
        }
        Value::Object(root.children_json())
    }

    /// Reads a `fieldsV1` document (untrusted input: bounded depth, typed errors).
    pub fn from_fields_v1(doc: &Value) -> Result<FieldSet, FieldsV1Error> {
        let mut set = FieldSet::new();
        let Value::Object(m) = doc else {
            return Err(FieldsV1Error::NotAnObject {
                path: String::new(),
            });
        };
        if m.contains_key(".") {
            return Err(FieldsV1Error::InvalidMarker {
                path: String::new(),
            });
        }
        parse_node(m, &Path::default(), 0, &mut set)?;
        Ok(set)
    }
}

impl FromIterator<Path> for FieldSet {
    fn from_iter<I: IntoIterator<Item = Path>>(iter: I) -> FieldSet {
        FieldSet(iter.into_iter().collect())
    }
}

/// A node of the tree form of a set, used to write `fieldsV1`.
#[derive(Default)]
struct Node {
    member: bool,
    children: BTreeMap<PathElement, Node>,
}

impl Node {
    fn children_json(&self) -> Map<String, Value> {
        let mut out = Map::new();
        for (e, child) in &self.children {
            let mut body = Map::new();
            if !child.children.is_empty() {
                if child.member {
                    body.insert(".".into(), Value::Object(Map::new()));
                }
                body.extend(child.children_json());
            }
            out.insert(e.to_fields_key(), Value::Object(body));
        }
        out
    }
}

/// Adds the members below `path` described by the object `m`.
fn parse_node(
    m: &Map<String, Value>,
    path: &Path,
    depth: usize,
    set: &mut FieldSet,
) -> Result<(), FieldsV1Error> {
    if depth >= MAX_FIELDS_DEPTH {
        return Err(FieldsV1Error::TooDeep {
            limit: MAX_FIELDS_DEPTH,
        });
    }
    for (key, value) in m {
        let Value::Object(child) = value else {
            return Err(FieldsV1Error::NotAnObject {
                path: format!("{path}{}", display_key(key)),
            });
        };
        if key == "." {
            if !child.is_empty() {
                return Err(FieldsV1Error::InvalidMarker {
                    path: path.to_string(),
                });
            }
            set.insert(path.clone());
            continue;
        }
        let element =
            PathElement::from_fields_key(key).ok_or_else(|| FieldsV1Error::InvalidKey {
                key: key.clone(),
                path: path.to_string(),
            })?;
        let child_path = path.child(element);
        if child.is_empty() {
            set.insert(child_path);
        } else {
            parse_node(child, &child_path, depth + 1, set)?;
        }
    }
    Ok(())
}

/// A key for an error message: its element form when it parses, else the raw key.
fn display_key(key: &str) -> String {
    PathElement::from_fields_key(key)
        .map(|e| e.to_string())
        .unwrap_or_else(|| key.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn writes_markers_only_where_a_member_has_children() {
        let doc = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"nginx\"}": {".": {}, "f:image": {}}}}
        });
        let set = FieldSet::from_fields_v1(&doc).expect("valid");
        assert_eq!(set.len(), 4);
        assert!(set.contains(&Path::fields(&["metadata", "labels"])));
        assert_eq!(set.to_fields_v1(), doc);
        assert_eq!(
            serde_json::to_string(&set.to_fields_v1()).ok().as_deref(),
            Some(
                r#"{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{"f:containers":{"k:{\"name\":\"nginx\"}":{".":{},"f:image":{}}}}}"#
            )
        );
    }

    #[test]
    fn malformed_documents_are_typed_errors() {
        let cases = [
            (json!([]), "NotAnObject"),
            (json!({"f:a": 1}), "NotAnObject"),
            (json!({".": {}}), "InvalidMarker"),
            (json!({"f:a": {".": {"x": {}}, "f:b": {}}}), "InvalidMarker"),
            (json!({"x:a": {}}), "InvalidKey"),
            (json!({"k:{\"a\":": {}}), "InvalidKey"),
        ];
        for (doc, want) in cases {
            let err = FieldSet::from_fields_v1(&doc).err();
            let name = err.as_ref().map(|e| format!("{e:?}")).unwrap_or_default();
            assert!(name.starts_with(want), "{doc}: {err:?}");
        }
        let mut deep = json!({});
        for _ in 0..200 {
            deep = json!({ "f:a": deep });
        }
        assert_eq!(
            FieldSet::from_fields_v1(&deep),
            Err(FieldsV1Error::TooDeep {
                limit: MAX_FIELDS_DEPTH
            })
        );
    }

    #[test]
    fn set_operations_and_named_prefixes() {
        let a: FieldSet = [
            Path::fields(&["spec", "replicas"]),
            Path::fields(&["metadata", "labels", "app"]),
        ]
        .into_iter()
        .collect();
        let b: FieldSet = [Path::fields(&["spec", "replicas"])].into_iter().collect();
        assert_eq!(a.intersection(&b), b);
        assert_eq!(a.difference(&b).len(), 1);
        assert!(a.has_prefix(&Path::fields(&["metadata"])));
        assert!(!a.has_prefix(&Path::fields(&["status"])));
        let named = b.with_named_prefixes();
        assert!(named.contains(&Path::fields(&["spec"])));
        assert_eq!(named.len(), 2);
    }
}
