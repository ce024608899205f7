//! Host names of tenant objects and the labels and annotations that tie them together.
//!
//! Scheme: tenant `t`'s object `name` in namespace `ns` is `<name>-x-<ns>-x-<t>` in host namespace
//! `fabrik-<t>`. When that is longer than 63 characters (the DNS label limit that Services and
//! pod hostnames need), it becomes the first 46 characters of it (trailing `-` and `.` trimmed),
//! `-`, and the 16 hex digits of the FNV-1a 64-bit hash of the full name: at most 63 characters,
//! and the same on every run, release and machine (FNV-1a is fixed by its definition, unlike
//! `std`'s hasher). Cluster-scoped objects (none synced down yet) would use `<name>-x-<t>`.
//!
//! Two different objects can map to one name (`a-x-b` in `c` and `a` in `b-x-c`); the syncer
//! never updates or deletes a host object whose annotations name another tenant object, so such
//! a collision leaves the second object unsynced (and logged) rather than hijacked.

use std::collections::BTreeMap;

use fabrik_api::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, ANNOTATION_VIRTUAL_UID,
    HOST_NAMESPACE_PREFIX, LABEL_NAMESPACE, LABEL_TENANT,
};
use serde_json::{json, Map, Value};

/// The longest host name: a DNS label.
pub const MAX_NAME: usize = 63;

/// Length of the readable prefix kept before the hash.
const PREFIX: usize = MAX_NAME - 1 - 16;

/// The host namespace of a tenant.
pub fn host_namespace(tenant: &str) -> String {
    format!("{HOST_NAMESPACE_PREFIX}{tenant}")
}

/// The tenant a host namespace belongs to, if it is one.
pub fn tenant_of_namespace(namespace: &str) -> Option<&str> {
    namespace
        .strip_prefix(HOST_NAMESPACE_PREFIX)
        .filter(|t| !t.is_empty())
}

/// The host name of tenant object `name` in namespace `namespace`.
pub fn host_name(name: &str, namespace: &str, tenant: &str) -> String {
    let full = format!("{name}-x-{namespace}-x-{tenant}");
    if full.len() <= MAX_NAME {
        return full;
    }
    let mut prefix: String = full.chars().take(PREFIX).collect();
    while prefix.ends_with('-') || prefix.ends_with('.') {
        prefix.pop();
    }
    format!("{prefix}-{:016x}", fnv1a(full.as_bytes()))
}

/// FNV-1a, 64 bits.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
    }
    hash
}

/// Where a host object came from, read back from its labels and annotations.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Origin {
    /// Tenant.
    pub tenant: String,
    /// Namespace inside the tenant.
    pub namespace: String,
    /// Name inside the tenant.
    pub name: String,
    /// UID inside the tenant (empty when unknown).
    pub uid: String,
}

/// Reads a host object's origin; `None` when it does not carry the syncer's marks.
pub fn origin(host: &Value) -> Option<Origin> {
    let meta = &host["metadata"];
    let label = |k: &str| meta["labels"][k].as_str().map(str::to_string);
    let annotation = |k: &str| meta["annotations"][k].as_str().map(str::to_string);
    Some(Origin {
        tenant: label(LABEL_TENANT)?,
        namespace: annotation(ANNOTATION_VIRTUAL_NAMESPACE)?,
        name: annotation(ANNOTATION_VIRTUAL_NAME)?,
        uid: annotation(ANNOTATION_VIRTUAL_UID).unwrap_or_default(),
    })
}

/// Whether a host object is the copy of tenant object `namespace/name` (any UID).
pub fn is_copy_of(host: &Value, tenant: &str, namespace: &str, name: &str) -> bool {
    origin(host).is_some_and(|o| o.tenant == tenant && o.namespace == namespace && o.name == name)
}

/// Host metadata for the copy of `virtual_obj`: name, namespace, the tenant labels (plus
/// `extra_labels`) and the origin annotations (plus `extra_annotations`).
pub fn host_metadata(
    virtual_obj: &Value,
    tenant: &str,
    extra_labels: BTreeMap<String, String>,
    extra_annotations: BTreeMap<String, String>,
) -> Value {
    let meta = &virtual_obj["metadata"];
    let name = meta["name"].as_str().unwrap_or_default();
    let namespace = meta["namespace"].as_str().unwrap_or_default();
    let mut labels: Map<String, Value> = extra_labels
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    labels.insert(LABEL_TENANT.into(), json!(tenant));
    labels.insert(LABEL_NAMESPACE.into(), json!(namespace));
    let mut annotations: Map<String, Value> = extra_annotations
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    annotations.insert(ANNOTATION_VIRTUAL_NAME.into(), json!(name));
    annotations.insert(ANNOTATION_VIRTUAL_NAMESPACE.into(), json!(namespace));
    annotations.insert(
        ANNOTATION_VIRTUAL_UID.into(),
        json!(meta["uid"].as_str().unwrap_or_default()),
    );
    json!({
        "name": host_name(name, namespace, tenant),
        "namespace": host_namespace(tenant),
        "labels": labels,
        "annotations": annotations,
    })
}

/// The tenant's labels on an object, less any under `fabrik.dev/` (which admission refuses
/// anyway).
pub fn tenant_labels(virtual_obj: &Value) -> BTreeMap<String, String> {
    string_map(&virtual_obj["metadata"]["labels"])
        .into_iter()
        .filter(|(k, _)| !k.starts_with(fabrik_api::RESERVED_PREFIX))
        .collect()
}

/// The tenant's annotations that cannot change how the host treats an object: those outside
/// the `kubernetes.io`, `k8s.io` and `fabrik.dev` domains (AppArmor, seccomp, and controller
/// annotations live there).
pub fn tenant_annotations(virtual_obj: &Value) -> BTreeMap<String, String> {
    string_map(&virtual_obj["metadata"]["annotations"])
        .into_iter()
        .filter(|(k, _)| {
            let domain = k.split_once('/').map(|(d, _)| d).unwrap_or("");
            !(domain.ends_with("kubernetes.io")
                || domain.ends_with("k8s.io")
                || domain.ends_with("fabrik.dev"))
        })
        .collect()
}

/// A JSON object of strings as a map (non-strings skipped).
pub fn string_map(v: &Value) -> BTreeMap<String, String> {
    v.as_object()
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names_are_readable() {
        assert_eq!(host_name("web", "default", "a"), "web-x-default-x-a");
        assert_eq!(host_namespace("a"), "fabrik-a");
        assert_eq!(tenant_of_namespace("fabrik-a"), Some("a"));
        assert_eq!(tenant_of_namespace("fabrik-"), None);
        assert_eq!(tenant_of_namespace("default"), None);
    }

    #[test]
    fn long_names_get_a_stable_hash() {
        let name = "a-very-long-deployment-name-7d9f8c6b5-abcde";
        let h = host_name(name, "production-namespace", "team-alpha");
        assert!(h.len() <= MAX_NAME, "{h} is {} long", h.len());
        assert!(h.starts_with("a-very-long-deployment-name-7d9f8c6b5-abcde-x"));
        // Stable: the same input, the same name; the value is pinned so that a change to the
        // scheme (which would orphan every host object) fails here.
        assert_eq!(h, host_name(name, "production-namespace", "team-alpha"));
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
        // Different inputs that share the prefix get different names.
        let other = host_name(name, "production-namespace", "team-beta");
        assert_ne!(h, other);
        assert!(other.len() <= MAX_NAME);
    }

    #[test]
    fn exactly_63_is_kept_and_64_is_hashed() {
        let ns = "n";
        let t = "t";
        let base = 63 - "-x-n-x-t".len();
        let name63 = "a".repeat(base);
        assert_eq!(host_name(&name63, ns, t).len(), 63);
        assert!(host_name(&name63, ns, t).ends_with("-x-n-x-t"));
        let name64 = "a".repeat(base + 1);
        let h = host_name(&name64, ns, t);
        assert_eq!(h.len(), 63);
        assert!(!h.ends_with("-x-n-x-t"));
    }

    #[test]
    fn hash_prefix_never_ends_with_a_separator() {
        let name = format!("{}-{}", "b".repeat(PREFIX - 1), "c".repeat(40));
        let h = host_name(&name, "ns", "t");
        assert!(!h.contains("--"), "{h}");
        assert!(h.len() <= MAX_NAME);
    }

    #[test]
    fn metadata_carries_origin() {
        let obj = json!({"metadata": {"name": "web", "namespace": "default", "uid": "u1",
            "labels": {"app": "web", "fabrik.dev/tenant": "b"}}});
        let meta = host_metadata(&obj, "a", tenant_labels(&obj), BTreeMap::new());
        let host = json!({ "metadata": meta });
        assert_eq!(host["metadata"]["labels"]["fabrik.dev/tenant"], "a");
        assert_eq!(host["metadata"]["labels"]["app"], "web");
        assert_eq!(
            origin(&host),
            Some(Origin {
                tenant: "a".into(),
                namespace: "default".into(),
                name: "web".into(),
                uid: "u1".into()
            })
        );
        assert!(is_copy_of(&host, "a", "default", "web"));
        assert!(!is_copy_of(&host, "b", "default", "web"));
    }

    #[test]
    fn annotations_in_kubernetes_domains_are_not_copied() {
        let obj = json!({"metadata": {"annotations": {
            "container.apparmor.security.beta.kubernetes.io/c": "unconfined",
            "seccomp.security.alpha.kubernetes.io/pod": "unconfined",
            "fabrik.dev/virtual-name": "x",
            "example.com/owner": "me",
            "plain": "yes"}}});
        let kept = tenant_annotations(&obj);
        assert_eq!(kept.len(), 2);
        assert!(kept.contains_key("example.com/owner"));
        assert!(kept.contains_key("plain"));
    }
}
