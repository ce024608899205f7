//! ControllerRevisions of StatefulSets and DaemonSets: one per distinct pod template, named
//! `<owner>-<hash>`, numbered in the order templates were used (a template used again gets the
//! next number, as upstream's rollback does), old ones pruned to `revisionHistoryLimit`.
//!
//! [`plan`] is pure; [`ensure`] does the I/O.

use k8s_openapi::api::apps::v1::ControllerRevision;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::runtime::RawExtension;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::ResourceExt;
use serde_json::json;

use crate::deployment::hash::template_hash;
use crate::shared::controller_ref;

/// The label pods carry with the name-less hash of their revision.
pub const HASH_LABEL: &str = "controller-revision-hash";

/// Errors of revision bookkeeping.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing ControllerRevisions failed.
    #[error("failed to list controller revisions: {why}", why = crate::shared::brief(.0))]
    List(#[source] kube::Error),
    /// Creating or renumbering a ControllerRevision failed.
    #[error("failed to write controller revision {0}: {why}", why = crate::shared::brief(.1))]
    Write(String, #[source] kube::Error),
    /// Deleting an old ControllerRevision failed.
    #[error("failed to delete controller revision {0}: {why}", why = crate::shared::brief(.1))]
    Delete(String, #[source] kube::Error),
}

/// Result of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The revision for the current template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Current {
    /// `<owner>-<hash>`: the revision's name, and the pods' `controller-revision-hash`.
    pub name: String,
    /// Its revision number.
    pub revision: i64,
}

/// What to write so that the current template has the newest revision.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    /// It exists and is the newest.
    Keep(Current),
    /// Create it with this number.
    Create(Current),
    /// It exists with an older number: renumber it.
    Renumber(Current),
}

/// The revision name of `template` for the owner `owner`.
pub fn name_for(owner: &str, template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    format!("{owner}-{}", template_hash(template, collision_count))
}

/// Decides how the revision `name` becomes the newest among `existing` (name, number).
pub fn plan(name: &str, existing: &[(String, i64)]) -> Plan {
    let max = existing.iter().map(|(_, r)| *r).max().unwrap_or(0);
    match existing.iter().find(|(n, _)| n == name) {
        Some((_, r)) if *r == max => Plan::Keep(Current {
            name: name.into(),
            revision: *r,
        }),
        Some(_) => Plan::Renumber(Current {
            name: name.into(),
            revision: max + 1,
        }),
        None => Plan::Create(Current {
            name: name.into(),
            revision: max + 1,
        }),
    }
}

/// The revisions to delete: the oldest beyond `limit`, never one named in `keep`.
pub fn prune(existing: &[(String, i64)], keep: &[&str], limit: usize) -> Vec<String> {
    let mut old: Vec<&(String, i64)> = existing
        .iter()
        .filter(|(n, _)| !keep.contains(&n.as_str()))
        .collect();
    old.sort_by_key(|(_, r)| *r);
    let excess = old.len().saturating_sub(limit);
    old.into_iter()
        .take(excess)
        .map(|(n, _)| n.clone())
        .collect()
}

/// Makes the revision of `template` the newest of the owner's (controller uid `owner.uid`),
/// returns it and all revisions (name, number) that exist afterwards.
pub async fn ensure(
    api: &Api<ControllerRevision>,
    owner: &OwnerReference,
    selector_labels: &std::collections::BTreeMap<String, String>,
    template: &PodTemplateSpec,
    collision_count: Option<i32>,
) -> Result<(Current, Vec<(String, i64)>)> {
    let all = api
        .list(&ListParams::default())
        .await
        .map_err(Error::List)?
        .items;
    let mut existing: Vec<(String, i64)> = all
        .iter()
        .filter(|r| controller_ref(&r.metadata).is_some_and(|o| o.uid == owner.uid))
        .map(|r| (r.name_any(), r.revision.unwrap_or(0)))
        .collect();
    let name = name_for(&owner.name, template, collision_count);
    let current = match plan(&name, &existing) {
        Plan::Keep(c) => c,
        Plan::Create(c) => {
            let mut labels = selector_labels.clone();
            labels.insert(
                HASH_LABEL.into(),
                c.name
                    .trim_start_matches(&format!("{}-", owner.name))
                    .into(),
            );
            let rev = ControllerRevision {
                metadata: ObjectMeta {
                    name: Some(c.name.clone()),
                    labels: Some(labels),
                    owner_references: Some(vec![owner.clone()]),
                    ..ObjectMeta::default()
                },
                data: RawExtension(json!({"spec": {"template": template, "$patch": "replace"}})),
                revision: Some(c.revision),
            };
            match api.create(&PostParams::default(), &rev).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 409 => {}
                Err(e) => return Err(Error::Write(c.name, e)),
            }
            existing.push((c.name.clone(), c.revision));
            c
        }
        Plan::Renumber(c) => {
            api.patch(
                &c.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"revision": c.revision})),
            )
            .await
            .map_err(|e| Error::Write(c.name.clone(), e))?;
            for e in existing.iter_mut().filter(|(n, _)| *n == c.name) {
                e.1 = c.revision;
            }
            c
        }
    };
    Ok((current, existing))
}

/// Deletes `names` (a vanished one is fine).
pub async fn delete(api: &Api<ControllerRevision>, names: &[String]) -> Result<()> {
    for n in names {
        match api.delete(n, &DeleteParams::default()).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => return Err(Error::Delete(n.clone(), e)),
        }
    }
    Ok(())
}

/// The hash part of a revision name (what pods carry in [`HASH_LABEL`]).
pub fn hash_of<'a>(owner: &str, revision_name: &'a str) -> &'a str {
    revision_name
        .strip_prefix(owner)
        .and_then(|s| s.strip_prefix('-'))
        .unwrap_or(revision_name)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn revs(v: &[(&str, i64)]) -> Vec<(String, i64)> {
        v.iter().map(|(n, r)| (n.to_string(), *r)).collect()
    }

    #[test]
    fn plans() {
        let cases = [
            (
                vec![],
                "a",
                Plan::Create(Current {
                    name: "a".into(),
                    revision: 1,
                }),
            ),
            (
                vec![("a", 1), ("b", 2)],
                "b",
                Plan::Keep(Current {
                    name: "b".into(),
                    revision: 2,
                }),
            ),
            (
                vec![("a", 1), ("b", 2)],
                "a",
                Plan::Renumber(Current {
                    name: "a".into(),
                    revision: 3,
                }),
            ),
            (
                vec![("a", 1), ("b", 2)],
                "c",
                Plan::Create(Current {
                    name: "c".into(),
                    revision: 3,
                }),
            ),
        ];
        for (i, (existing, name, want)) in cases.into_iter().enumerate() {
            assert_eq!(plan(name, &revs(&existing)), want, "case {i}");
        }
    }

    #[test]
    fn prunes_oldest_but_keeps_in_use() {
        let existing = revs(&[("a", 1), ("b", 2), ("c", 3), ("d", 4)]);
        assert_eq!(prune(&existing, &["a", "d"], 1), vec!["b".to_string()]);
        assert!(prune(&existing, &["d"], 10).is_empty());
        assert_eq!(hash_of("web", "web-abc"), "abc");
    }
}
