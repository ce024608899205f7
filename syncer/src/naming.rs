//! Host names of tenant objects and the labels and annotations that tie them together.
//!
//! The translation itself (`<name>-x-<ns>-x-<t>` in `fabrik-<t>`, hashed where that could be
//! ambiguous or too long) is [`fabrik_api::naming`]: one injective function shared with the
//! control plane. This module adds what the syncer writes on host objects so that every sync is
//! idempotent: the tenant labels and the origin annotations.

use std::collections::BTreeMap;

use fabrik_api::{
    ANNOTATION_VIRTUAL_NAME, ANNOTATION_VIRTUAL_NAMESPACE, ANNOTATION_VIRTUAL_UID, LABEL_NAMESPACE,
    LABEL_TENANT,
};
use serde_json::{json, Map, Value};

pub use fabrik_api::naming::{
    fnv1a, host_name, host_namespace, legacy_host_name, tenant_of_namespace, tenant_words,
    tenant_words_with, MAX_NAME,
};

/// Which tenant object (namespace, name) a hashed host name was made for, where known
/// ([`tenant_words_with`]).
pub type Hashed<'a> = &'a dyn Fn(&str) -> Option<(String, String)>;

/// Every `message` in `m` (at any depth: a status, its conditions, its container states)
/// with the host names of tenant `tenant`'s objects written as the tenant knows them
/// ([`tenant_words_with`]; `hashed` for the hashed ones).
pub fn tenant_messages(m: &mut Map<String, Value>, tenant: &str, hashed: Hashed<'_>) {
    fn walk(v: &mut Value, tenant: &str, hashed: Hashed<'_>) {
        match v {
            Value::Object(m) => tenant_messages(m, tenant, hashed),
            Value::Array(items) => items.iter_mut().for_each(|v| walk(v, tenant, hashed)),
            _ => {}
        }
    }
    for (k, v) in m.iter_mut() {
        match v {
            Value::String(text) if k == "message" => {
                *text = tenant_words_with(text, tenant, hashed);
            }
            _ => walk(v, tenant, hashed),
        }
    }
}

/// The tenant object (`namespace`, name) that `object` — a tenant object in `namespace` —
/// refers to by a name whose host name is `word`: any string in it that is a name of that
/// namespace's objects, `word` being exactly its host name. For messages about an object its
/// spec names that has no host copy to look up (a claim that does not exist yet), where the
/// host name is hashed ([`tenant_words_with`]).
pub fn referred_to(
    object: &Value,
    namespace: &str,
    tenant: &str,
    word: &str,
) -> Option<(String, String)> {
    fn find(v: &Value, namespace: &str, tenant: &str, word: &str) -> Option<String> {
        match v {
            // (Only what could be a name: at most 253 characters of a DNS subdomain.)
            Value::String(name) => (!name.is_empty()
                && name.len() <= 253
                && name.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                })
                && host_name(name, namespace, tenant) == word)
                .then(|| name.clone()),
            Value::Array(items) => items.iter().find_map(|v| find(v, namespace, tenant, word)),
            Value::Object(m) => m.values().find_map(|v| find(v, namespace, tenant, word)),
            _ => None,
        }
    }
    find(object, namespace, tenant, word).map(|name| (namespace.to_string(), name))
}

/// The suffix of a host pod's token Secret name.
pub const TOKEN_SECRET_SUFFIX: &str = "-token";

/// The host Secret holding the service-account tokens of host pod `host_pod`:
/// `<host pod name>-token`.
///
/// Injective, and never the name of a host copy (current or earlier scheme), because host pod
/// names are injective and a fixed suffix keeps them apart, and a copy's name is either readable,
/// ending in `-x-<tenant>`, or hashed, ending in hex digits: `-token` is neither. (A readable
/// copy name ending in `-token` would need `-x-<tenant>` to be a suffix of `<tenant>-token`,
/// which gives that string period 6 and puts the `x` of `-x-` into `-token`.) At most
/// 63 + 6 characters, well within a Secret name's 253.
pub fn token_secret_name(host_pod: &str) -> String {
    format!("{host_pod}{TOKEN_SECRET_SUFFIX}")
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
            SIMULATION_ANNOTATIONS.contains(&k.as_str())
                || !(domain.ends_with("kubernetes.io")
                    || domain.ends_with("k8s.io")
                    || domain.ends_with("fabrik.dev"))
        })
        .collect()
}

/// The annotations of Fabrik's domains a tenant may set and the host copy keeps: only what
/// simulated nodes read (they mean nothing to a real kubelet).
pub const SIMULATION_ANNOTATIONS: &[&str] = fabrik_api::sim::ALL;

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
    fn a_hashed_name_reads_back_through_what_the_object_refers_to() {
        let claim = format!("data-{}", "d".repeat(60));
        let spec = json!({"volumes": [{"name": "data",
            "persistentVolumeClaim": {"claimName": claim}}],
            "containers": [{"name": "main", "command": ["sh", "-c", "Not A Name"]}]});
        let word = host_name(&claim, "prod", "a");
        assert_eq!(word.len(), MAX_NAME, "a hashed host name");
        assert_eq!(
            referred_to(&spec, "prod", "a", &word),
            Some(("prod".to_string(), claim.clone()))
        );
        // Not the host name of anything it names in that namespace and tenant.
        assert_eq!(referred_to(&spec, "prod", "b", &word), None);
        assert_eq!(referred_to(&spec, "dev", "a", &word), None);
        assert_eq!(
            referred_to(&spec, "prod", "a", &host_name("other", "prod", "a")),
            None
        );
        let message = format!("persistentvolumeclaim \"{word}\" not found");
        assert_eq!(
            tenant_words_with(&message, "a", &|w| referred_to(&spec, "prod", "a", w)),
            format!("persistentvolumeclaim \"prod/{claim}\" not found")
        );
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
    fn token_secret_names_never_meet_copy_names() {
        let names = ["web", "a-token", "token", "x", "web-token", "a-x-token"];
        let namespaces = ["default", "token", "x-token", "a-x-b", "ns-token"];
        let tenants = ["a", "token", "t-token", "x-token"];
        let mut copies = std::collections::HashSet::new();
        let mut tokens = std::collections::HashSet::new();
        for t in tenants {
            for ns in namespaces {
                for n in names {
                    for long in [false, true] {
                        let n = if long { n.repeat(12) } else { n.to_string() };
                        let copy = host_name(&n, ns, t);
                        copies.insert((t, copy.clone()));
                        copies.insert((t, legacy_host_name(&n, ns, t)));
                        assert!(tokens.insert((t, token_secret_name(&copy))));
                    }
                }
            }
        }
        for (t, token) in &tokens {
            assert!(
                !copies.contains(&(*t, token.clone())),
                "{token} is a copy's name"
            );
            assert!(token.len() <= 253);
        }
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
