//! Terraform values and their wire form: MessagePack `DynamicValue`s decoded against a schema
//! type, and encoded back.
//!
//! Terraform's encoding (its `object-wire-format`): objects and maps are MessagePack maps with
//! string keys, lists and sets are arrays, numbers are integers, floats or (for numbers too
//! large for both) strings, null is nil, and a value not yet known is the extension type 0
//! (or 12, an unknown with refinements such as "not null"). An object always carries every
//! attribute of its type; absent ones are null.

use std::collections::BTreeMap;

use thiserror::Error;

/// A Terraform type, as far as this provider's schemas need it.
#[derive(Clone, Debug, PartialEq)]
pub enum Ty {
    /// `string`.
    String,
    /// `number`.
    Number,
    /// `bool`.
    Bool,
    /// `list(T)`.
    List(Box<Ty>),
    /// `map(T)`.
    Map(Box<Ty>),
    /// `object({...})`, attributes in order.
    Object(Vec<(String, Ty)>),
}

impl Ty {
    /// The type in Terraform's JSON type syntax (`"string"`, `["list","string"]`, ...).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::{json, Map};
        match self {
            Ty::String => json!("string"),
            Ty::Number => json!("number"),
            Ty::Bool => json!("bool"),
            Ty::List(t) => json!(["list", t.to_json()]),
            Ty::Map(t) => json!(["map", t.to_json()]),
            Ty::Object(attrs) => {
                let mut m = Map::new();
                for (name, t) in attrs {
                    m.insert(name.clone(), t.to_json());
                }
                json!(["object", m])
            }
        }
    }
}

/// A number: Terraform numbers are arbitrary precision; the ones here are whole or floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Number {
    /// A whole number.
    Int(i64),
    /// Anything else.
    Float(f64),
}

impl Number {
    /// The number if it is whole and fits an `i64`.
    pub fn as_i64(self) -> Option<i64> {
        match self {
            Number::Int(i) => Some(i),
            Number::Float(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => Some(f as i64),
            Number::Float(_) => None,
        }
    }
}

/// A Terraform value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Not known until apply.
    Unknown,
    /// Null.
    Null,
    /// A bool.
    Bool(bool),
    /// A number.
    Number(Number),
    /// A string.
    String(String),
    /// A list (or set) of elements.
    List(Vec<Value>),
    /// A map.
    Map(BTreeMap<String, Value>),
    /// An object: every attribute of its type is present.
    Object(BTreeMap<String, Value>),
}

/// Errors decoding a value.
#[derive(Debug, Error)]
pub enum Error {
    /// The bytes are not MessagePack.
    #[error("invalid MessagePack: {0}")]
    MsgPack(#[from] rmpv::decode::Error),
    /// The bytes are not JSON.
    #[error("invalid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The value does not have the schema's type.
    #[error("{path}: expected {expected}")]
    Type {
        /// Where, as `a.b[0]`.
        path: String,
        /// What was expected.
        expected: &'static str,
    },
    /// Encoding failed (writing to memory does not fail; kept for completeness).
    #[error("cannot encode MessagePack: {0}")]
    Encode(#[from] rmpv::encode::Error),
}

/// `Result` with this module's error.
pub type Result<T, E = Error> = std::result::Result<T, E>;

fn type_error<T>(path: &str, expected: &'static str) -> Result<T> {
    Err(Error::Type {
        path: if path.is_empty() {
            "value".into()
        } else {
            path.into()
        },
        expected,
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Value {
    /// Decodes MessagePack bytes as a value of type `ty`. Empty bytes are null.
    pub fn from_msgpack(bytes: &[u8], ty: &Ty) -> Result<Value> {
        if bytes.is_empty() {
            return Ok(Value::Null);
        }
        let mut rd = bytes;
        let raw = rmpv::decode::read_value(&mut rd)?;
        Self::from_rmpv(raw, ty, "")
    }

    fn from_rmpv(raw: rmpv::Value, ty: &Ty, path: &str) -> Result<Value> {
        use rmpv::Value as M;
        match raw {
            M::Nil => return Ok(Value::Null),
            // Type 0: unknown; type 12: unknown with refinements. Either way: not known yet.
            M::Ext(_, _) => return Ok(Value::Unknown),
            _ => {}
        }
        match ty {
            Ty::String => match raw {
                M::String(s) => match s.into_str() {
                    Some(s) => Ok(Value::String(s)),
                    None => type_error(path, "a UTF-8 string"),
                },
                _ => type_error(path, "a string"),
            },
            Ty::Bool => match raw {
                M::Boolean(b) => Ok(Value::Bool(b)),
                _ => type_error(path, "a bool"),
            },
            Ty::Number => match raw {
                M::Integer(i) => match i.as_i64() {
                    Some(i) => Ok(Value::Number(Number::Int(i))),
                    None => Ok(Value::Number(Number::Float(i.as_f64().unwrap_or(f64::MAX)))),
                },
                M::F32(f) => Ok(Value::Number(Number::Float(f64::from(f)))),
                M::F64(f) => Ok(Value::Number(Number::Float(f))),
                M::String(s) => match s.as_str().and_then(parse_number) {
                    Some(n) => Ok(Value::Number(n)),
                    None => type_error(path, "a number"),
                },
                _ => type_error(path, "a number"),
            },
            Ty::List(elem) => match raw {
                M::Array(items) => items
                    .into_iter()
                    .enumerate()
                    .map(|(i, v)| Self::from_rmpv(v, elem, &format!("{path}[{i}]")))
                    .collect::<Result<Vec<_>>>()
                    .map(Value::List),
                _ => type_error(path, "a list"),
            },
            Ty::Map(elem) => match raw {
                M::Map(entries) => {
                    let mut out = BTreeMap::new();
                    for (k, v) in entries {
                        let Some(k) = k.as_str().map(str::to_string) else {
                            return type_error(path, "a map with string keys");
                        };
                        let v = Self::from_rmpv(v, elem, &format!("{path}[{k:?}]"))?;
                        out.insert(k, v);
                    }
                    Ok(Value::Map(out))
                }
                _ => type_error(path, "a map"),
            },
            Ty::Object(attrs) => match raw {
                M::Map(entries) => {
                    let mut given: BTreeMap<String, rmpv::Value> = BTreeMap::new();
                    for (k, v) in entries {
                        let Some(k) = k.as_str().map(str::to_string) else {
                            return type_error(path, "an object with string keys");
                        };
                        given.insert(k, v);
                    }
                    let mut out = BTreeMap::new();
                    for (name, t) in attrs {
                        let v = match given.remove(name) {
                            Some(v) => Self::from_rmpv(v, t, &join(path, name))?,
                            None => Value::Null,
                        };
                        out.insert(name.clone(), v);
                    }
                    Ok(Value::Object(out))
                }
                _ => type_error(path, "an object"),
            },
        }
    }

    /// Decodes JSON (as in stored state) as a value of type `ty`; missing attributes are null.
    pub fn from_json(json: &serde_json::Value, ty: &Ty) -> Result<Value> {
        Self::from_json_at(json, ty, "")
    }

    fn from_json_at(json: &serde_json::Value, ty: &Ty, path: &str) -> Result<Value> {
        use serde_json::Value as J;
        if json.is_null() {
            return Ok(Value::Null);
        }
        match (ty, json) {
            (Ty::String, J::String(s)) => Ok(Value::String(s.clone())),
            (Ty::Bool, J::Bool(b)) => Ok(Value::Bool(*b)),
            (Ty::Number, J::Number(n)) => match n.as_i64() {
                Some(i) => Ok(Value::Number(Number::Int(i))),
                None => Ok(Value::Number(Number::Float(n.as_f64().unwrap_or(f64::MAX)))),
            },
            (Ty::Number, J::String(s)) => match parse_number(s) {
                Some(n) => Ok(Value::Number(n)),
                None => type_error(path, "a number"),
            },
            (Ty::List(elem), J::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, v)| Self::from_json_at(v, elem, &format!("{path}[{i}]")))
                .collect::<Result<Vec<_>>>()
                .map(Value::List),
            (Ty::Map(elem), J::Object(m)) => m
                .iter()
                .map(|(k, v)| Ok((k.clone(), Self::from_json_at(v, elem, &join(path, k))?)))
                .collect::<Result<BTreeMap<_, _>>>()
                .map(Value::Map),
            (Ty::Object(attrs), J::Object(m)) => attrs
                .iter()
                .map(|(name, t)| {
                    let v = match m.get(name) {
                        Some(v) => Self::from_json_at(v, t, &join(path, name))?,
                        None => Value::Null,
                    };
                    Ok((name.clone(), v))
                })
                .collect::<Result<BTreeMap<_, _>>>()
                .map(Value::Object),
            (Ty::String, _) => type_error(path, "a string"),
            (Ty::Bool, _) => type_error(path, "a bool"),
            (Ty::Number, _) => type_error(path, "a number"),
            (Ty::List(_), _) => type_error(path, "a list"),
            (Ty::Map(_), _) => type_error(path, "a map"),
            (Ty::Object(_), _) => type_error(path, "an object"),
        }
    }

    /// Encodes the value as MessagePack.
    pub fn to_msgpack(&self) -> Result<Vec<u8>> {
        let mut out = Vec::new();
        rmpv::encode::write_value(&mut out, &self.to_rmpv())?;
        Ok(out)
    }

    fn to_rmpv(&self) -> rmpv::Value {
        use rmpv::Value as M;
        match self {
            // What Terraform itself writes for an unknown: fixext1, type 0, one zero byte.
            Value::Unknown => M::Ext(0, vec![0]),
            Value::Null => M::Nil,
            Value::Bool(b) => M::Boolean(*b),
            Value::Number(Number::Int(i)) => M::from(*i),
            Value::Number(Number::Float(f)) => M::F64(*f),
            Value::String(s) => M::from(s.as_str()),
            Value::List(items) => M::Array(items.iter().map(Value::to_rmpv).collect()),
            Value::Map(m) | Value::Object(m) => M::Map(
                m.iter()
                    .map(|(k, v)| (M::from(k.as_str()), v.to_rmpv()))
                    .collect(),
            ),
        }
    }

    /// An attribute of an object (null for anything else or a missing attribute).
    pub fn get(&self, name: &str) -> &Value {
        const NULL: &Value = &Value::Null;
        match self {
            Value::Object(m) => m.get(name).unwrap_or(NULL),
            _ => NULL,
        }
    }

    /// Sets an attribute an object has (no-op on anything else: an object never gains
    /// attributes its type lacks).
    pub fn set(&mut self, name: &str, value: Value) {
        if let Value::Object(m) = self {
            if let Some(slot) = m.get_mut(name) {
                *slot = value;
            }
        }
    }

    /// The string, if this is a known string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// Whether this is null.
    pub fn is_null(&self) -> bool {
        matches!(self, Value::Null)
    }

    /// Whether this value, and everything inside it, is known.
    pub fn is_wholly_known(&self) -> bool {
        match self {
            Value::Unknown => false,
            Value::List(items) => items.iter().all(Value::is_wholly_known),
            Value::Map(m) | Value::Object(m) => m.values().all(Value::is_wholly_known),
            _ => true,
        }
    }

    /// Null, `false`, an empty list or map, or an object of such: what the Tenant API does not
    /// distinguish from "not set".
    pub fn is_empty_like(&self) -> bool {
        match self {
            Value::Null | Value::Bool(false) => true,
            Value::List(items) => items.is_empty(),
            Value::Map(m) => m.is_empty(),
            Value::Object(m) => m.values().all(Value::is_empty_like),
            _ => false,
        }
    }

    /// A null object of type `ty` with every attribute null (for building states).
    pub fn null_object(ty: &Ty) -> Value {
        match ty {
            Ty::Object(attrs) => Value::Object(
                attrs
                    .iter()
                    .map(|(n, _)| (n.clone(), Value::Null))
                    .collect(),
            ),
            _ => Value::Null,
        }
    }

    /// A string value.
    pub fn string(s: impl Into<String>) -> Value {
        Value::String(s.into())
    }

    /// A list of strings.
    pub fn strings(items: &[String]) -> Value {
        Value::List(items.iter().map(|s| Value::String(s.clone())).collect())
    }

    /// A whole number.
    pub fn int(i: i64) -> Value {
        Value::Number(Number::Int(i))
    }
}

fn parse_number(s: &str) -> Option<Number> {
    if let Ok(i) = s.parse::<i64>() {
        return Some(Number::Int(i));
    }
    s.parse::<f64>().ok().map(Number::Float)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ty() -> Ty {
        Ty::Object(vec![
            ("name".into(), Ty::String),
            ("n".into(), Ty::Number),
            ("on".into(), Ty::Bool),
            ("tags".into(), Ty::List(Box::new(Ty::String))),
            ("labels".into(), Ty::Map(Box::new(Ty::String))),
            ("inner".into(), Ty::Object(vec![("x".into(), Ty::Number)])),
        ])
    }

    #[test]
    fn round_trips_through_msgpack() {
        let mut v = Value::null_object(&ty());
        v.set("name", Value::string("a"));
        v.set("n", Value::int(-4));
        v.set("on", Value::Bool(true));
        v.set("tags", Value::strings(&["x".into(), "y".into()]));
        v.set(
            "labels",
            Value::Map([("k".to_string(), Value::string("v"))].into()),
        );
        v.set("inner", Value::Unknown);
        let bytes = v.to_msgpack().expect("encode");
        let back = Value::from_msgpack(&bytes, &ty()).expect("decode");
        assert_eq!(back, v);
    }

    #[test]
    fn unknown_is_terraforms_extension_zero() {
        assert_eq!(
            Value::Unknown.to_msgpack().expect("encode"),
            vec![0xd4, 0, 0]
        );
        // An unknown with refinements (extension 12) is also unknown.
        let refined = [0xd4, 12, 0];
        assert_eq!(
            Value::from_msgpack(&refined, &Ty::String).expect("decode"),
            Value::Unknown
        );
    }

    #[test]
    fn missing_attributes_are_null_and_types_are_checked() {
        // {"name": "a"}
        let bytes = [0x81, 0xa4, b'n', b'a', b'm', b'e', 0xa1, b'a'];
        let v = Value::from_msgpack(&bytes, &ty()).expect("decode");
        assert_eq!(v.get("name"), &Value::string("a"));
        assert_eq!(v.get("n"), &Value::Null);
        // {"name": 1}
        let bad = [0x81, 0xa4, b'n', b'a', b'm', b'e', 0x01];
        let err = Value::from_msgpack(&bad, &ty()).expect_err("type error");
        assert_eq!(err.to_string(), "name: expected a string");
    }

    #[test]
    fn numbers_come_as_ints_floats_or_strings() {
        let float =
            Value::from_msgpack(&[0xcb, 64, 16, 0, 0, 0, 0, 0, 0], &Ty::Number).expect("decode");
        assert_eq!(float, Value::Number(Number::Float(4.0)));
        if let Value::Number(n) = float {
            assert_eq!(n.as_i64(), Some(4));
        }
        let s = Value::from_msgpack(&[0xa2, b'1', b'2'], &Ty::Number).expect("decode");
        assert_eq!(s, Value::int(12));
        assert_eq!(Number::Float(0.5).as_i64(), None);
    }

    #[test]
    fn json_state_decodes_with_missing_attributes() {
        let json = serde_json::json!({"name": "a", "n": 3, "inner": {"x": 1.5}, "extra": true});
        let v = Value::from_json(&json, &ty()).expect("decode");
        assert_eq!(v.get("n"), &Value::int(3));
        assert_eq!(v.get("tags"), &Value::Null);
        assert_eq!(v.get("inner").get("x"), &Value::Number(Number::Float(1.5)));
    }

    #[test]
    fn empty_like_values() {
        assert!(Value::Null.is_empty_like());
        assert!(Value::List(vec![]).is_empty_like());
        assert!(Value::null_object(&ty()).is_empty_like());
        assert!(!Value::int(0).is_empty_like());
        assert!(!Value::string("").is_empty_like());
        assert!(!Value::Unknown.is_wholly_known());
        assert!(!Value::List(vec![Value::Unknown]).is_wholly_known());
    }

    #[test]
    fn type_json_is_terraforms_syntax() {
        let t = Ty::Object(vec![("a".into(), Ty::List(Box::new(Ty::String)))]);
        assert_eq!(
            t.to_json(),
            serde_json::json!(["object", {"a": ["list", "string"]}])
        );
    }
}
