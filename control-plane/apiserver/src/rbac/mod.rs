//! Authorization: RBAC with upstream semantics, decided from an in-memory index of the
//! cluster's Roles, ClusterRoles and bindings that a store watch keeps current ([`cache`]) —
//! no store read per request, and a removed binding stops granting as soon as its deletion is
//! committed.
//!
//! `system:masters` is allowed everything (the bootstrap admin and in-process controllers), as
//! upstream's privileged-group authorizer. The default roles are created by [`bootstrap`],
//! aggregated ClusterRoles are filled by [`aggregation`], and writes of roles and bindings are
//! checked for privilege escalation by [`escalation`].

pub mod aggregation;
pub mod bootstrap;
pub mod cache;
pub mod escalation;
pub mod rules;

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

pub use cache::RbacCache;
pub use rules::{Attributes, Rule};

use crate::auth::UserInfo;

/// The answer to "may this user do this?".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Allowed; the reason names the grant.
    Allow(String),
    /// Not allowed by any rule.
    Deny,
}

impl Decision {
    /// Whether allowed.
    pub fn allowed(&self) -> bool {
        matches!(self, Decision::Allow(_))
    }
}

/// Who a binding grants to.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub(crate) enum Subject {
    User(String),
    Group(String),
}

/// A binding's grant: the role it refers to, and the binding (for reasons).
#[derive(Clone, Debug)]
pub(crate) struct Grant {
    /// `ClusterRole` or `Role`.
    pub(crate) cluster_role: bool,
    pub(crate) role: String,
    pub(crate) binding: String,
}

/// The derived, read-optimised view of the RBAC objects.
#[derive(Default)]
pub(crate) struct Index {
    pub(crate) cluster_roles: HashMap<String, Arc<Vec<Rule>>>,
    pub(crate) roles: HashMap<(String, String), Arc<Vec<Rule>>>,
    pub(crate) cluster_grants: HashMap<Subject, Vec<Grant>>,
    pub(crate) namespace_grants: HashMap<String, HashMap<Subject, Vec<Grant>>>,
}

impl Index {
    fn subjects(user: &UserInfo) -> Vec<Subject> {
        let mut out = Vec::with_capacity(1 + user.groups.len());
        out.push(Subject::User(user.name.clone()));
        out.extend(user.groups.iter().cloned().map(Subject::Group));
        out
    }

    fn rules_of(&self, namespace: &str, g: &Grant) -> Option<&Arc<Vec<Rule>>> {
        if g.cluster_role {
            self.cluster_roles.get(&g.role)
        } else {
            self.roles.get(&(namespace.to_string(), g.role.clone()))
        }
    }

    /// The grants that apply to `user` in `namespace` ("" = cluster-wide only), with the
    /// namespace whose roles they refer to.
    fn grants<'a>(&'a self, user: &UserInfo, namespace: &str) -> Vec<(&'a str, &'a Grant)> {
        let mut out = Vec::new();
        let subjects = Index::subjects(user);
        for s in &subjects {
            if let Some(gs) = self.cluster_grants.get(s) {
                out.extend(gs.iter().map(|g| ("", g)));
            }
        }
        if !namespace.is_empty() {
            if let Some((ns, by_subject)) = self.namespace_grants.get_key_value(namespace) {
                for s in &subjects {
                    if let Some(gs) = by_subject.get(s) {
                        out.extend(gs.iter().map(|g| (ns.as_str(), g)));
                    }
                }
            }
        }
        out
    }
}

/// The RBAC authorizer of one cluster.
#[derive(Clone, Default)]
pub struct Authorizer {
    cache: Arc<RbacCache>,
}

impl Authorizer {
    /// An authorizer over `cache`.
    pub fn new(cache: Arc<RbacCache>) -> Authorizer {
        Authorizer { cache }
    }

    /// The cache (to start its watch).
    pub fn cache(&self) -> &Arc<RbacCache> {
        &self.cache
    }

    /// Decides one request.
    pub fn authorize(&self, user: &UserInfo, a: &Attributes) -> Decision {
        if user.is_master() {
            return Decision::Allow("group system:masters".into());
        }
        let index = self.cache.index();
        for (ns, g) in index.grants(user, &a.namespace) {
            if let Some(rules) = index.rules_of(ns, g) {
                if rules.iter().any(|r| r.allows(a)) {
                    let kind = if ns.is_empty() {
                        "ClusterRoleBinding"
                    } else {
                        "RoleBinding"
                    };
                    return Decision::Allow(format!(
                        "RBAC: allowed by {kind} \"{}\" of {} \"{}\"",
                        g.binding,
                        if g.cluster_role {
                            "ClusterRole"
                        } else {
                            "Role"
                        },
                        g.role
                    ));
                }
            }
        }
        Decision::Deny
    }

    /// Every rule that applies to `user` in `namespace` (cluster-wide grants included).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> Vec<Rule> {
        if user.is_master() {
            return vec![
                Rule {
                    verbs: vec!["*".into()],
                    api_groups: vec!["*".into()],
                    resources: vec!["*".into()],
                    ..Rule::default()
                },
                Rule {
                    verbs: vec!["*".into()],
                    non_resource_urls: vec!["*".into()],
                    ..Rule::default()
                },
            ];
        }
        let index = self.cache.index();
        let mut out = Vec::new();
        for (ns, g) in index.grants(user, namespace) {
            if let Some(rules) = index.rules_of(ns, g) {
                out.extend(rules.iter().cloned());
            }
        }
        out
    }

    /// The rules of a role reference (`ClusterRole` or `Role` in `namespace`), if it exists.
    pub fn role_rules(&self, cluster_role: bool, namespace: &str, name: &str) -> Option<Vec<Rule>> {
        let index = self.cache.index();
        let rules = if cluster_role {
            index.cluster_roles.get(name)
        } else {
            index.roles.get(&(namespace.to_string(), name.to_string()))
        };
        rules.map(|r| r.as_ref().clone())
    }
}

/// Upstream's message for a denied request.
pub fn forbidden_message(user: &UserInfo, a: &Attributes) -> String {
    if !a.resource_request {
        return format!(
            "forbidden: User \"{}\" cannot {} path \"{}\"",
            user.name, a.verb, a.path
        );
    }
    let what = if a.resource.is_empty() {
        String::new()
    } else if a.api_group.is_empty() {
        a.full_resource()
    } else {
        format!("{}.{}", a.full_resource(), a.api_group)
    };
    let name = if a.name.is_empty() {
        String::new()
    } else {
        format!(" \"{}\"", a.name)
    };
    let scope = if a.namespace.is_empty() {
        "at the cluster scope".to_string()
    } else {
        format!("in the namespace \"{}\"", a.namespace)
    };
    format!(
        "{what}{name} is forbidden: User \"{}\" cannot {} resource \"{}\" in API group \"{}\" {scope}",
        user.name,
        a.verb,
        a.full_resource(),
        a.api_group
    )
}

/// The subjects of a binding object, as index keys (`namespace`: the binding's own, the
/// default for ServiceAccount subjects).
pub(crate) fn binding_subjects(binding: &Value, namespace: &str) -> Vec<Subject> {
    let Some(subjects) = binding["subjects"].as_array() else {
        return Vec::new();
    };
    subjects
        .iter()
        .filter_map(|s| {
            let name = s["name"].as_str().filter(|n| !n.is_empty())?;
            match s["kind"].as_str()? {
                "User" => Some(Subject::User(name.to_string())),
                "Group" => Some(Subject::Group(name.to_string())),
                "ServiceAccount" => {
                    let ns = s["namespace"]
                        .as_str()
                        .filter(|n| !n.is_empty())
                        .unwrap_or(namespace);
                    (!ns.is_empty())
                        .then(|| Subject::User(format!("system:serviceaccount:{ns}:{name}")))
                }
                _ => None,
            }
        })
        .collect()
}
