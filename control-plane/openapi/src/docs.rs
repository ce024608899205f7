//! What both document formats share: the origin of a resource (built in or not) and the
//! group/version/kind of subresource bodies, and a stable content hash for the v3 index.

use std::collections::BTreeMap;

use serde_json::Value;

use crate::definitions::Definitions;
use crate::gvk::gvks;
use crate::operations::{Gvk, Origin};
use crate::refs::lookup;
use crate::resource::ResourceDoc;

/// A subresource definition's group/version/kind: the entry of its
/// `x-kubernetes-group-version-kind` in the resource's group/version, else its first entry.
fn subresource_gvk(
    defs: &Definitions,
    extra: &BTreeMap<String, Value>,
    definition: &str,
    res: &ResourceDoc,
) -> Option<Gvk> {
    let schema = lookup(definition, extra, defs.schemas())?;
    let mut first = None;
    for (group, version, kind) in gvks(schema) {
        let gvk = Gvk {
            group: group.to_owned(),
            version: version.to_owned(),
            kind: kind.to_owned(),
        };
        if group == res.group && version == res.version {
            return Some(gvk);
        }
        first.get_or_insert(gvk);
    }
    first
}

/// The [`Origin`] of `res`: built in unless its definition comes from `extra`.
pub(crate) fn origin<'a>(
    defs: &'a Definitions,
    extra: &'a BTreeMap<String, Value>,
    res: &ResourceDoc,
) -> Origin<'a> {
    Origin {
        builtin: !extra.contains_key(&res.definition),
        subresource_gvk: Box::new(move |def, r| subresource_gvk(defs, extra, def, r)),
    }
}

/// A stable content hash (FNV-1a, 128 bits) as 32 upper-case hex digits, for the
/// `?hash=` of the v3 index: equal bytes give equal hashes across processes and builds.
pub fn content_hash(bytes: &[u8]) -> String {
    const OFFSET: u128 = 0x6c62272e07bb014262b821756295c58d;
    const PRIME: u128 = 0x0000000001000000000000000000013B;
    let hash = bytes
        .iter()
        .fold(OFFSET, |h, b| (h ^ u128::from(*b)).wrapping_mul(PRIME));
    format!("{hash:032X}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_hash_is_stable_and_sensitive() {
        assert_eq!(content_hash(b""), "6C62272E07BB014262B821756295C58D");
        assert_eq!(content_hash(b"a"), content_hash(b"a"));
        assert_ne!(content_hash(b"a"), content_hash(b"b"));
        assert_eq!(content_hash(b"abc").len(), 32);
    }

    #[test]
    fn scale_is_autoscaling_v1_and_status_is_the_kind() {
        let defs = Definitions::builtin();
        let extra = BTreeMap::new();
        let res = ResourceDoc {
            group: "apps".into(),
            version: "v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
            namespaced: true,
            verbs: vec![],
            subresources: vec![],
            definition: "io.k8s.api.apps.v1.Deployment".into(),
            list_definition: "io.k8s.api.apps.v1.DeploymentList".into(),
        };
        let scale = subresource_gvk(defs, &extra, "io.k8s.api.autoscaling.v1.Scale", &res);
        assert_eq!(
            scale.map(|g| (g.group, g.kind)),
            Some(("autoscaling".into(), "Scale".into()))
        );
        let status = subresource_gvk(defs, &extra, "io.k8s.api.apps.v1.Deployment", &res);
        assert_eq!(status.map(|g| g.kind), Some("Deployment".into()));
        assert!(origin(defs, &extra, &res).builtin);
    }
}
