//! Policy rules and what they allow, with upstream's matching: `*` wildcards for verbs, groups,
//! resources (and `*/subresource`), resource names restricting only requests that name an
//! object, non-resource URLs with a trailing `*` as a prefix.

use serde::Deserialize;
use serde_json::Value;

/// What a request asks to do, as the authorizer sees it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Attributes {
    /// `get`, `list`, `create`, ..., `impersonate`, `bind`, `escalate`.
    pub verb: String,
    /// Namespace ("" for cluster-scoped requests and non-resource paths).
    pub namespace: String,
    /// API group ("" = core).
    pub api_group: String,
    /// Resource (plural).
    pub resource: String,
    /// Subresource ("" if none).
    pub subresource: String,
    /// Object name ("" if the request names none).
    pub name: String,
    /// Path of a non-resource request.
    pub path: String,
    /// Resource request (true) or non-resource URL (false).
    pub resource_request: bool,
}

impl Attributes {
    /// A resource request.
    pub fn resource(
        verb: &str,
        api_group: &str,
        resource: &str,
        subresource: &str,
        namespace: &str,
        name: &str,
    ) -> Attributes {
        Attributes {
            verb: verb.into(),
            namespace: namespace.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            subresource: subresource.into(),
            name: name.into(),
            path: String::new(),
            resource_request: true,
        }
    }

    /// A non-resource request.
    pub fn non_resource(verb: &str, path: &str) -> Attributes {
        Attributes {
            verb: verb.into(),
            path: path.into(),
            ..Attributes::default()
        }
    }

    /// `resource/subresource` (or the resource alone).
    pub fn full_resource(&self) -> String {
        if self.subresource.is_empty() {
            self.resource.clone()
        } else {
            format!("{}/{}", self.resource, self.subresource)
        }
    }
}

/// One RBAC `PolicyRule`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Rule {
    /// Verbs.
    #[serde(default)]
    pub verbs: Vec<String>,
    /// API groups.
    #[serde(default)]
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/log`, `*`, `*/scale`).
    #[serde(default)]
    pub resources: Vec<String>,
    /// Object names (empty: every object).
    #[serde(default)]
    pub resource_names: Vec<String>,
    /// Non-resource URLs.
    #[serde(default, rename = "nonResourceURLs")]
    pub non_resource_urls: Vec<String>,
}

fn has(list: &[String], v: &str) -> bool {
    list.iter().any(|x| x == "*" || x == v)
}

impl Rule {
    /// The rules of a Role or ClusterRole object (`rules`); malformed entries are skipped.
    pub fn of(role: &Value) -> Vec<Rule> {
        role["rules"]
            .as_array()
            .map(|rules| {
                rules
                    .iter()
                    .filter_map(|r| Rule::deserialize(r).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Whether this rule allows `a`.
    pub fn allows(&self, a: &Attributes) -> bool {
        if !has(&self.verbs, &a.verb) {
            return false;
        }
        if !a.resource_request {
            return self.non_resource_urls.iter().any(|u| {
                u == "*"
                    || *u == a.path
                    || u.strip_suffix('*').is_some_and(|p| a.path.starts_with(p))
            });
        }
        if !has(&self.api_groups, &a.api_group) {
            return false;
        }
        let full = a.full_resource();
        let resource_ok = self.resources.iter().any(|r| {
            r == "*"
                || *r == full
                || (!a.subresource.is_empty() && *r == format!("*/{}", a.subresource))
        });
        if !resource_ok {
            return false;
        }
        self.resource_names.is_empty() || self.resource_names.contains(&a.name)
    }

    /// The rule broken into single (verb, group, resource, name) or (verb, URL) rules, the
    /// unit of the escalation check.
    fn atoms(&self) -> Vec<Rule> {
        let mut out = Vec::new();
        for verb in &self.verbs {
            for group in &self.api_groups {
                for resource in &self.resources {
                    let names: Vec<Vec<String>> = if self.resource_names.is_empty() {
                        vec![Vec::new()]
                    } else {
                        self.resource_names
                            .iter()
                            .map(|n| vec![n.clone()])
                            .collect()
                    };
                    for n in names {
                        out.push(Rule {
                            verbs: vec![verb.clone()],
                            api_groups: vec![group.clone()],
                            resources: vec![resource.clone()],
                            resource_names: n,
                            non_resource_urls: Vec::new(),
                        });
                    }
                }
            }
            for url in &self.non_resource_urls {
                out.push(Rule {
                    verbs: vec![verb.clone()],
                    non_resource_urls: vec![url.clone()],
                    ..Rule::default()
                });
            }
        }
        out
    }

    /// Whether this (owner's) rule grants everything of the single rule `atom`. Wildcards in
    /// the atom are literal: only a wildcard covers a wildcard.
    fn covers_atom(&self, atom: &Rule) -> bool {
        let (Some(verb), true) = (atom.verbs.first(), atom.verbs.len() == 1) else {
            return false;
        };
        if !has(&self.verbs, verb) {
            return false;
        }
        if let Some(url) = atom.non_resource_urls.first() {
            return self.non_resource_urls.iter().any(|u| {
                u == "*" || u == url || u.strip_suffix('*').is_some_and(|p| url.starts_with(p))
            });
        }
        let (Some(group), Some(resource)) = (atom.api_groups.first(), atom.resources.first())
        else {
            return false;
        };
        if !has(&self.api_groups, group) {
            return false;
        }
        let resource_ok = self.resources.iter().any(|r| {
            r == "*"
                || r == resource
                || resource
                    .split_once('/')
                    .is_some_and(|(_, sub)| *r == format!("*/{sub}"))
        });
        if !resource_ok {
            return false;
        }
        if self.resource_names.is_empty() {
            return true;
        }
        atom.resource_names
            .first()
            .is_some_and(|n| self.resource_names.contains(n))
    }
}

/// The requested rules that `owner` does not cover (empty: no escalation).
pub fn uncovered(owner: &[Rule], requested: &[Rule]) -> Vec<Rule> {
    requested
        .iter()
        .flat_map(Rule::atoms)
        .filter(|atom| !owner.iter().any(|o| o.covers_atom(atom)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(verbs: &[&str], groups: &[&str], resources: &[&str], names: &[&str]) -> Rule {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect();
        Rule {
            verbs: s(verbs),
            api_groups: s(groups),
            resources: s(resources),
            resource_names: s(names),
            non_resource_urls: Vec::new(),
        }
    }

    #[test]
    fn matching_follows_upstream() {
        let pods = rule(&["get", "list"], &[""], &["pods"], &[]);
        assert!(pods.allows(&Attributes::resource("get", "", "pods", "", "ns", "p")));
        assert!(!pods.allows(&Attributes::resource("delete", "", "pods", "", "ns", "p")));
        assert!(!pods.allows(&Attributes::resource("get", "apps", "pods", "", "ns", "p")));
        // A subresource needs its own entry.
        assert!(!pods.allows(&Attributes::resource("get", "", "pods", "log", "ns", "p")));
        let any_scale = rule(&["*"], &["*"], &["*/scale"], &[]);
        assert!(any_scale.allows(&Attributes::resource(
            "update",
            "apps",
            "deployments",
            "scale",
            "ns",
            "d"
        )));
        let named = rule(&["get"], &[""], &["configmaps"], &["one"]);
        assert!(named.allows(&Attributes::resource(
            "get",
            "",
            "configmaps",
            "",
            "ns",
            "one"
        )));
        assert!(!named.allows(&Attributes::resource(
            "get",
            "",
            "configmaps",
            "",
            "ns",
            "two"
        )));
        assert!(!named.allows(&Attributes::resource(
            "list",
            "",
            "configmaps",
            "",
            "ns",
            ""
        )));
        let urls = Rule {
            verbs: vec!["get".into()],
            non_resource_urls: vec!["/healthz".into(), "/apis/*".into()],
            ..Rule::default()
        };
        assert!(urls.allows(&Attributes::non_resource("get", "/apis/apps/v1")));
        assert!(urls.allows(&Attributes::non_resource("get", "/healthz")));
        assert!(!urls.allows(&Attributes::non_resource("get", "/metrics")));
        assert!(!urls.allows(&Attributes::resource("get", "", "pods", "", "", "")));
    }

    #[test]
    fn escalation_needs_every_permission() {
        let owner = vec![
            rule(&["get", "list"], &[""], &["pods"], &[]),
            rule(&["*"], &[""], &["configmaps"], &["cfg"]),
        ];
        assert!(uncovered(&owner, &[rule(&["get"], &[""], &["pods"], &[])]).is_empty());
        assert!(uncovered(
            &owner,
            &[rule(&["update"], &[""], &["configmaps"], &["cfg"])]
        )
        .is_empty());
        // Wildcards are covered only by wildcards.
        assert_eq!(
            uncovered(&owner, &[rule(&["*"], &[""], &["pods"], &[])]).len(),
            1
        );
        // All names is more than one name.
        assert_eq!(
            uncovered(&owner, &[rule(&["get"], &[""], &["configmaps"], &[])]).len(),
            1
        );
        assert_eq!(
            uncovered(
                &owner,
                &[rule(&["get", "delete"], &[""], &["pods", "secrets"], &[])]
            )
            .len(),
            3
        );
        let admin = vec![rule(&["*"], &["*"], &["*"], &[])];
        assert!(uncovered(&admin, &[rule(&["*"], &["*"], &["*"], &[])]).is_empty());
    }
}
