//! Conversions between stored bytes and API objects, and the server-owned metadata rules.
//!
//! Stored objects never carry `metadata.resourceVersion`: it is the store's `mod_revision`,
//! added on every read (like upstream's etcd versioner), so it can never disagree with the store.

use bytes::Bytes;
use fabrik_store::KeyValue;
use rand::Rng;
use serde_json::{json, Value};

use crate::error::ApiError;

/// The object as the API returns it: stored JSON plus `resourceVersion`.
pub fn decode(kv: &KeyValue) -> Result<Value, ApiError> {
    let mut obj: Value = serde_json::from_slice(&kv.value).map_err(|e| {
        ApiError::Internal(format!("stored object {} is not valid JSON: {e}", kv.key))
    })?;
    set_resource_version(&mut obj, kv.mod_revision);
    Ok(obj)
}

/// The object as `def` serves it: stored JSON plus `resourceVersion`, with `apiVersion` set to
/// the served version (custom resources with several versions share one stored object; their
/// conversion is `None`, so only `apiVersion` differs).
pub fn decode_as(kv: &KeyValue, api_version: &str) -> Result<Value, ApiError> {
    let mut obj = decode(kv)?;
    if let Some(o) = obj.as_object_mut() {
        if o.get("apiVersion").and_then(Value::as_str) != Some(api_version) {
            o.insert("apiVersion".into(), json!(api_version));
        }
    }
    Ok(obj)
}

/// Sets `metadata.resourceVersion`.
pub fn set_resource_version(obj: &mut Value, rev: u64) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.insert("resourceVersion".into(), json!(rev.to_string()));
    }
}

/// The largest object the store takes, encoded (etcd's default request limit, 1.5 MiB, which
/// makes kube-apiserver refuse larger objects though it reads bodies up to 3 MiB).
pub const MAX_OBJECT_BYTES: usize = 3 * 1024 * 1024 / 2;

/// The bytes to store: the object without `resourceVersion`. Every write path (create,
/// update, patch and apply results, subresources) stores through here, so an object over
/// [`MAX_OBJECT_BYTES`] is refused with 413 whatever built it.
pub fn encode(obj: &Value) -> Result<Bytes, ApiError> {
    let bytes = encode_unchecked(obj)?;
    if bytes.len() > MAX_OBJECT_BYTES {
        return Err(ApiError::ObjectTooLarge {
            size: bytes.len(),
            limit: MAX_OBJECT_BYTES,
        });
    }
    Ok(bytes)
}

/// [`encode`] for an update of an object stored as `old_len` bytes: an object stored before
/// the limit (or by a server with a larger one) may still be updated as long as the update does
/// not make it larger, so that it can be cleaned up (finalizers removed, fields dropped).
pub fn encode_update(obj: &Value, old_len: usize) -> Result<Bytes, ApiError> {
    let bytes = encode_unchecked(obj)?;
    if bytes.len() > MAX_OBJECT_BYTES && bytes.len() > old_len {
        return Err(ApiError::ObjectTooLarge {
            size: bytes.len(),
            limit: MAX_OBJECT_BYTES,
        });
    }
    Ok(bytes)
}

/// [`encode`] without the size limit: for the writes of a deletion (finalizers,
/// `deletionTimestamp`), which must go through even for an object stored before the limit.
pub fn encode_unchecked(obj: &Value) -> Result<Bytes, ApiError> {
    let mut obj = obj.clone();
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
    }
    serde_json::to_vec(&obj)
        .map(Bytes::from)
        .map_err(|e| ApiError::Internal(format!("failed to encode object: {e}")))
}

/// Parses a `resourceVersion` given by a client.
pub fn parse_resource_version(rv: &str) -> Result<u64, ApiError> {
    rv.parse::<u64>().map_err(|_| {
        ApiError::BadRequest(format!(
            "invalid resource version {rv:?}: must be a decimal number"
        ))
    })
}

/// `metadata.resourceVersion` of an object, if set and non-empty.
pub fn resource_version(obj: &Value) -> Result<Option<u64>, ApiError> {
    match obj["metadata"]["resourceVersion"].as_str() {
        None | Some("") => Ok(None),
        Some(rv) => parse_resource_version(rv).map(Some),
    }
}

/// `metadata.finalizers` as strings.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj["metadata"]["finalizers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| f.as_str().map(str::to_string))
        .collect()
}

/// Whether `metadata.deletionTimestamp` is set.
pub fn is_deleting(obj: &Value) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// The current time as Kubernetes writes timestamps (RFC 3339, seconds, `Z`).
pub fn now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

/// `secs` from now, formatted like [`now`].
pub fn now_plus(secs: i64) -> String {
    (chrono::Utc::now() + chrono::Duration::seconds(secs))
        .format("%Y-%m-%dT%H:%M:%SZ")
        .to_string()
}

/// Everything of an object but `metadata` and `status`: what bumps `generation` when it changes.
pub fn spec_part(obj: &Value) -> Value {
    match obj.as_object() {
        Some(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| {
                    !matches!(k.as_str(), "metadata" | "status" | "apiVersion" | "kind")
                })
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        ),
        None => Value::Null,
    }
}

/// Equality ignoring `resourceVersion` and the times of managedFields entries: an update that
/// changes nothing else is not written (a repeated apply of the same configuration is a no-op).
pub fn same_ignoring_rv(a: &Value, b: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            meta.remove("resourceVersion");
            if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
                for e in entries {
                    if let Some(o) = e.as_object_mut() {
                        o.remove("time");
                    }
                }
            }
        }
        v
    };
    strip(a) == strip(b)
}

/// Five characters of upstream's `generateName` alphabet (no vowels, no look-alikes).
pub(crate) fn random_suffix() -> String {
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    let mut rng = rand::rng();
    (0..5)
        .map(|_| ALPHABET[rng.random_range(0..ALPHABET.len())] as char)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_version_round_trip() {
        let kv = KeyValue {
            key: "/core/pods/a/b".into(),
            value: Bytes::from_static(br#"{"metadata":{"name":"b"}}"#),
            create_revision: 3,
            mod_revision: 7,
        };
        let obj = decode(&kv).expect("decodes");
        assert_eq!(obj["metadata"]["resourceVersion"], "7");
        let bytes = encode(&obj).expect("encodes");
        assert!(!String::from_utf8_lossy(&bytes).contains("resourceVersion"));
        assert!(parse_resource_version("12x").is_err());
    }
}
