//! Field paths as structured-merge-diff names them: a path is a list of elements, each a
//! field name, the key of a `map` list element, the value of a `set` list element, or an
//! index. They order, print and encode (as `fieldsV1` keys) the way upstream does.

use std::cmp::Ordering;
use std::fmt;

use serde_json::{Map, Value};

/// One step of a [`Path`].
#[derive(Clone, Debug)]
pub enum PathElement {
    /// A struct field or map key (`f:name`, printed `.name`).
    Field(String),
    /// The element of a `map` list with these key fields, sorted by name
    /// (`k:{"name":"nginx"}`, printed `[name="nginx"]`).
    Key(Vec<(String, Value)>),
    /// The element of a `set` list with this value (`v:"x"`, printed `[="x"]`).
    Value(Value),
    /// A list element by position (`i:0`, printed `[0]`).
    Index(usize),
}

/// A field path from the object's root.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Path(pub Vec<PathElement>);

impl Path {
    /// The path with `element` appended.
    pub fn child(&self, element: PathElement) -> Path {
        let mut v = Vec::with_capacity(self.0.len() + 1);
        v.extend(self.0.iter().cloned());
        v.push(element);
        Path(v)
    }

    /// Whether `prefix` is a prefix of (or equal to) this path.
    pub fn starts_with(&self, prefix: &Path) -> bool {
        self.0.len() >= prefix.0.len() && self.0.iter().zip(&prefix.0).all(|(a, b)| a == b)
    }

    /// A path of field names, e.g. `Path::fields(&["spec", "replicas"])`.
    pub fn fields(names: &[&str]) -> Path {
        Path(
            names
                .iter()
                .map(|n| PathElement::Field((*n).to_owned()))
                .collect(),
        )
    }
}

/// Upstream's path format: `.spec.containers[name="nginx"].image`.
impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.0 {
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

impl fmt::Display for PathElement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PathElement::Field(name) => write!(f, ".{name}"),
            PathElement::Key(fields) => {
                f.write_str("[")?;
                for (i, (name, value)) in fields.iter().enumerate() {
                    if i > 0 {
                        f.write_str(",")?;
                    }
                    write!(f, "{name}={value}")?;
                }
                f.write_str("]")
            }
            PathElement::Value(v) => write!(f, "[={v}]"),
            PathElement::Index(i) => write!(f, "[{i}]"),
        }
    }
}

impl PathElement {
    /// The element as a `fieldsV1` key (`f:`, `k:`, `v:` or `i:` prefixed).
    pub fn to_fields_key(&self) -> String {
        match self {
            PathElement::Field(name) => format!("f:{name}"),
            PathElement::Key(fields) => {
                let mut m = Map::new();
                for (name, value) in fields {
                    m.insert(name.clone(), value.clone());
                }
                format!("k:{}", Value::Object(m))
            }
            PathElement::Value(v) => format!("v:{v}"),
            PathElement::Index(i) => format!("i:{i}"),
        }
    }

    /// Parses a `fieldsV1` key; `None` when it is not a valid element.
    pub fn from_fields_key(key: &str) -> Option<PathElement> {
        let (prefix, rest) = (key.get(..2)?, key.get(2..)?);
        match prefix {
            "f:" => Some(PathElement::Field(rest.to_owned())),
            "v:" => serde_json::from_str(rest).ok().map(PathElement::Value),
            "i:" => rest.parse().ok().map(PathElement::Index),
            "k:" => match serde_json::from_str::<Value>(rest).ok()? {
                Value::Object(m) if !m.is_empty() => {
                    let mut fields: Vec<(String, Value)> = m.into_iter().collect();
                    fields.sort_by(|a, b| a.0.cmp(&b.0));
                    Some(PathElement::Key(fields))
                }
                _ => None,
            },
            _ => None,
        }
    }
}

/// Rank of a JSON value's type in upstream's total order of values.
fn type_rank(v: &Value) -> u8 {
    match v {
        Value::Number(_) => 0,
        Value::String(_) => 1,
        Value::Bool(_) => 2,
        Value::Array(_) => 3,
        Value::Object(_) => 4,
        Value::Null => 5,
    }
}

/// A total order of JSON values: numbers (numerically), strings, booleans, lists, maps, null.
pub(crate) fn compare_values(a: &Value, b: &Value) -> Ordering {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (x.as_i64(), y.as_i64()) {
            (Some(x), Some(y)) => x.cmp(&y),
            _ => {
                let (x, y) = (x.as_f64().unwrap_or(0.0), y.as_f64().unwrap_or(0.0));
                x.total_cmp(&y)
            }
        },
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => {
            for (p, q) in x.iter().zip(y) {
                let c = compare_values(p, q);
                if c != Ordering::Equal {
                    return c;
                }
            }
            x.len().cmp(&y.len())
        }
        (Value::Object(x), Value::Object(y)) => {
            let mut xs: Vec<_> = x.iter().collect();
            let mut ys: Vec<_> = y.iter().collect();
            xs.sort_by(|p, q| p.0.cmp(q.0));
            ys.sort_by(|p, q| p.0.cmp(q.0));
            for ((kx, vx), (ky, vy)) in xs.iter().zip(&ys) {
                let c = kx.cmp(ky).then_with(|| compare_values(vx, vy));
                if c != Ordering::Equal {
                    return c;
                }
            }
            xs.len().cmp(&ys.len())
        }
        _ => type_rank(a).cmp(&type_rank(b)),
    }
}

/// Upstream order: field names, then keys, then values, then indices.
impl Ord for PathElement {
    fn cmp(&self, other: &Self) -> Ordering {
        fn rank(e: &PathElement) -> u8 {
            match e {
                PathElement::Field(_) => 0,
                PathElement::Key(_) => 1,
                PathElement::Value(_) => 2,
                PathElement::Index(_) => 3,
            }
        }
        match (self, other) {
            (PathElement::Field(a), PathElement::Field(b)) => a.cmp(b),
            (PathElement::Key(a), PathElement::Key(b)) => {
                for ((na, va), (nb, vb)) in a.iter().zip(b) {
                    let c = na.cmp(nb).then_with(|| compare_values(va, vb));
                    if c != Ordering::Equal {
                        return c;
                    }
                }
                a.len().cmp(&b.len())
            }
            (PathElement::Value(a), PathElement::Value(b)) => compare_values(a, b),
            (PathElement::Index(a), PathElement::Index(b)) => a.cmp(b),
            _ => rank(self).cmp(&rank(other)),
        }
    }
}

impl PartialOrd for PathElement {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl PartialEq for PathElement {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for PathElement {}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prints_like_upstream() {
        let p = Path::fields(&["spec", "containers"])
            .child(PathElement::Key(vec![("name".into(), json!("nginx"))]))
            .child(PathElement::Field("image".into()));
        assert_eq!(p.to_string(), r#".spec.containers[name="nginx"].image"#);
        let ports = PathElement::Key(vec![
            ("containerPort".into(), json!(80)),
            ("protocol".into(), json!("TCP")),
        ]);
        assert_eq!(ports.to_string(), r#"[containerPort=80,protocol="TCP"]"#);
        assert_eq!(PathElement::Value(json!("a")).to_string(), r#"[="a"]"#);
        assert_eq!(PathElement::Index(3).to_string(), "[3]");
    }

    #[test]
    fn fields_keys_round_trip() {
        for key in [
            "f:app",
            "f:",
            r#"k:{"containerPort":80,"protocol":"TCP"}"#,
            r#"v:"example.com/f""#,
            "v:3",
            "i:0",
        ] {
            let e = PathElement::from_fields_key(key);
            assert_eq!(e.map(|e| e.to_fields_key()).as_deref(), Some(key));
        }
        for bad in ["", "x", "g:a", "k:{}", "k:[1]", "k:{", "v:", "i:-1", "i:x"] {
            assert!(PathElement::from_fields_key(bad).is_none(), "{bad}");
        }
        // Key fields are sorted on parse.
        let e = PathElement::from_fields_key(r#"k:{"protocol":"TCP","containerPort":80}"#);
        assert_eq!(
            e.map(|e| e.to_fields_key()).as_deref(),
            Some(r#"k:{"containerPort":80,"protocol":"TCP"}"#)
        );
    }

    #[test]
    fn order_fields_keys_values_indices() {
        let mut v = [
            PathElement::Index(0),
            PathElement::Value(json!("b")),
            PathElement::Value(json!(1)),
            PathElement::Key(vec![("name".into(), json!("a"))]),
            PathElement::Field("z".into()),
            PathElement::Field("a".into()),
        ];
        v.sort();
        let keys: Vec<String> = v.iter().map(PathElement::to_fields_key).collect();
        assert_eq!(
            keys,
            ["f:a", "f:z", r#"k:{"name":"a"}"#, "v:1", r#"v:"b""#, "i:0"]
        );
        assert_eq!(PathElement::Value(json!(1)), PathElement::Value(json!(1.0)));
    }
}
