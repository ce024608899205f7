//! The JSONPath subset CRDs use: `additionalPrinterColumns[].jsonPath` and the scale
//! subresource's paths. Supported: `.a.b`, `.a[0]`, `.a[-1]`, `.a[*].b`, `.a['key.with.dots']`,
//! and filters `[?(@.type=="Ready")]` (also `!=`); an optional `{...}` wrapper is accepted.
//! Expressions come from CRD authors: parsing never panics and reports what it did not accept.

use serde_json::Value;

/// A parse failure.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("invalid JSONPath {expr:?}: {reason}")]
pub struct JsonPathError {
    /// The expression.
    pub expr: String,
    /// What is wrong.
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Step {
    Field(String),
    Index(i64),
    /// `[start:end]`, either bound optional, negative counting from the end.
    Slice(Option<i64>, Option<i64>),
    All,
    Filter {
        path: Vec<String>,
        negate: bool,
        value: String,
    },
}

/// A parsed path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JsonPath {
    steps: Vec<Step>,
}

fn err(expr: &str, reason: &str) -> JsonPathError {
    JsonPathError {
        expr: expr.to_string(),
        reason: reason.to_string(),
    }
}

impl JsonPath {
    /// Parses an expression.
    pub fn parse(expr: &str) -> Result<JsonPath, JsonPathError> {
        let mut s = expr.trim();
        if let Some(inner) = s.strip_prefix('{').and_then(|r| r.strip_suffix('}')) {
            s = inner.trim();
        }
        if !s.starts_with('.') && !s.starts_with('[') {
            return Err(err(expr, "must start with '.'"));
        }
        let chars: Vec<char> = s.chars().collect();
        let mut i = 0;
        let mut steps = Vec::new();
        while i < chars.len() {
            match chars[i] {
                '.' => {
                    i += 1;
                    let start = i;
                    while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                        i += 1;
                    }
                    let name: String = chars[start..i].iter().collect();
                    if name.is_empty() {
                        if i >= chars.len() && steps.is_empty() {
                            break; // "." alone: the object itself
                        }
                        return Err(err(expr, "empty field name"));
                    }
                    steps.push(Step::Field(name));
                }
                '[' => {
                    let close = chars[i..]
                        .iter()
                        .position(|c| *c == ']')
                        .map(|p| p + i)
                        .ok_or_else(|| err(expr, "unclosed '['"))?;
                    let inner: String = chars[i + 1..close].iter().collect();
                    let inner = inner.trim();
                    steps.push(Self::bracket(expr, inner)?);
                    i = close + 1;
                }
                _ => return Err(err(expr, "unexpected character")),
            }
        }
        Ok(JsonPath { steps })
    }

    fn bracket(expr: &str, inner: &str) -> Result<Step, JsonPathError> {
        if inner == "*" {
            return Ok(Step::All);
        }
        if let Some(q) = inner
            .strip_prefix('\'')
            .and_then(|r| r.strip_suffix('\''))
            .or_else(|| inner.strip_prefix('"').and_then(|r| r.strip_suffix('"')))
        {
            return Ok(Step::Field(q.to_string()));
        }
        if let Some(f) = inner.strip_prefix("?(").and_then(|r| r.strip_suffix(')')) {
            let (lhs, rhs, negate) = if let Some((l, r)) = f.split_once("!=") {
                (l, r, true)
            } else if let Some((l, r)) = f.split_once("==") {
                (l, r, false)
            } else {
                return Err(err(expr, "filters support == and != only"));
            };
            let path: Vec<String> = lhs
                .trim()
                .strip_prefix("@.")
                .ok_or_else(|| err(expr, "filter must compare @.field"))?
                .split('.')
                .map(str::to_string)
                .collect();
            let rhs = rhs.trim();
            let value = rhs
                .strip_prefix('"')
                .and_then(|r| r.strip_suffix('"'))
                .or_else(|| rhs.strip_prefix('\'').and_then(|r| r.strip_suffix('\'')))
                .unwrap_or(rhs)
                .to_string();
            return Ok(Step::Filter {
                path,
                negate,
                value,
            });
        }
        if let Some((a, b)) = inner.split_once(':') {
            let bound = |t: &str| -> Result<Option<i64>, JsonPathError> {
                let t = t.trim();
                if t.is_empty() {
                    Ok(None)
                } else {
                    t.parse::<i64>()
                        .map(Some)
                        .map_err(|_| err(expr, "invalid slice bound"))
                }
            };
            return Ok(Step::Slice(bound(a)?, bound(b)?));
        }
        inner
            .parse::<i64>()
            .map(Step::Index)
            .map_err(|_| err(expr, "unsupported bracket expression"))
    }

    /// Every value the path selects.
    pub fn eval<'a>(&self, root: &'a Value) -> Vec<&'a Value> {
        let mut cur = vec![root];
        for step in &self.steps {
            let mut next = Vec::new();
            for v in cur {
                match step {
                    Step::Field(f) => next.extend(v.get(f.as_str())),
                    Step::Index(n) => {
                        if let Some(a) = v.as_array() {
                            let idx = if *n < 0 { a.len() as i64 + n } else { *n };
                            if idx >= 0 {
                                next.extend(a.get(idx as usize));
                            }
                        }
                    }
                    Step::Slice(a, b) => {
                        if let Some(arr) = v.as_array() {
                            let len = arr.len() as i64;
                            let norm = |x: i64| if x < 0 { (len + x).max(0) } else { x.min(len) };
                            let start = a.map_or(0, norm);
                            let end = b.map_or(len, norm);
                            if start < end {
                                next.extend(arr[start as usize..end as usize].iter());
                            }
                        }
                    }
                    Step::All => match v {
                        Value::Array(a) => next.extend(a.iter()),
                        Value::Object(m) => next.extend(m.values()),
                        _ => {}
                    },
                    Step::Filter {
                        path,
                        negate,
                        value,
                    } => {
                        for item in v.as_array().into_iter().flatten() {
                            let got = path.iter().try_fold(item, |c, p| c.get(p.as_str()));
                            let text = got.map(|g| match g {
                                Value::String(s) => s.clone(),
                                other => other.to_string(),
                            });
                            let eq = text.as_deref() == Some(value.as_str());
                            if eq != *negate {
                                next.push(item);
                            }
                        }
                    }
                }
            }
            cur = next;
        }
        cur
    }

    /// Field names of a simple path (`.spec.replicas`), None if it has brackets.
    pub fn simple_fields(&self) -> Option<Vec<&str>> {
        self.steps
            .iter()
            .map(|s| match s {
                Step::Field(f) => Some(f.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// Reads a simple dotted path.
pub fn get<'a>(obj: &'a Value, path: &str) -> Option<&'a Value> {
    let p = JsonPath::parse(path).ok()?;
    let fields = p.simple_fields()?;
    fields.iter().try_fold(obj, |c, f| c.get(*f))
}

/// Writes a simple dotted path, creating objects on the way; false when it cannot.
pub fn set(obj: &mut Value, path: &str, value: Value) -> bool {
    let Ok(p) = JsonPath::parse(path) else {
        return false;
    };
    let Some(fields) = p.simple_fields() else {
        return false;
    };
    let Some((last, parents)) = fields.split_last() else {
        return false;
    };
    let mut cur = obj;
    for f in parents {
        let Some(map) = cur.as_object_mut() else {
            return false;
        };
        cur = map
            .entry(f.to_string())
            .or_insert_with(|| Value::Object(Default::default()));
    }
    match cur.as_object_mut() {
        Some(map) => {
            map.insert(last.to_string(), value);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_the_crd_subset() {
        let obj = json!({"spec": {"replicas": 3, "ports": [{"port": 80}, {"port": 443}]}, "status": {"conditions": [
            {"type": "Ready", "status": "True"}, {"type": "Synced", "status": "False"}
        ]}, "metadata": {"annotations": {"a.b/c": "x"}}});
        let one = |e: &str| {
            JsonPath::parse(e)
                .expect(e)
                .eval(&obj)
                .into_iter()
                .cloned()
                .collect::<Vec<_>>()
        };
        assert_eq!(one(".spec.replicas"), vec![json!(3)]);
        assert_eq!(one("{.spec.ports[1].port}"), vec![json!(443)]);
        assert_eq!(one(".spec.ports[-1].port"), vec![json!(443)]);
        assert_eq!(one(".status.conditions[-1:].type"), vec![json!("Synced")]);
        assert_eq!(one(".spec.ports[0:1].port"), vec![json!(80)]);
        assert!(one(".spec.ports[5:].port").is_empty());
        assert_eq!(one(".spec.ports[*].port"), vec![json!(80), json!(443)]);
        assert_eq!(
            one(r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![json!("True")]
        );
        assert_eq!(
            one(".status.conditions[?(@.type!='Ready')].type"),
            vec![json!("Synced")]
        );
        assert_eq!(one(".metadata.annotations['a.b/c']"), vec![json!("x")]);
        assert!(one(".nothing.here").is_empty());
    }

    #[test]
    fn refuses_garbage_and_sets_simple_paths() {
        for bad in ["spec", ".a[", ".a[?(@.x>1)]", ".a..b", ".a[x]"] {
            assert!(JsonPath::parse(bad).is_err(), "{bad}");
        }
        let mut v = json!({});
        assert!(set(&mut v, ".spec.replicas", json!(4)));
        assert_eq!(get(&v, ".spec.replicas"), Some(&json!(4)));
        assert!(!set(&mut v, ".spec.list[0]", json!(1)));
    }
}
