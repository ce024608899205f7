//! Privilege-escalation prevention, as upstream: a user may create or update a Role or
//! ClusterRole only with rules they already hold (or with the `escalate` verb on it), and may
//! create or update a binding only to a role whose rules they hold (or with the `bind` verb on
//! it). Cluster-wide rules are checked against cluster-wide grants, namespaced ones against the
//! grants in that namespace.

use serde_json::Value;

use super::{rules, Attributes, Authorizer, Rule};
use crate::admission::{Admission, Request, Verdict};
use crate::error::ApiError;

/// The admission plugin.
pub struct Escalation {
    authz: Authorizer,
}

impl Escalation {
    /// A plugin deciding with `authz`.
    pub fn new(authz: Authorizer) -> Escalation {
        Escalation { authz }
    }
}

const GROUP: &str = "rbac.authorization.k8s.io";

fn describe(rules: &[Rule]) -> String {
    rules
        .iter()
        .take(8)
        .map(|r| {
            if r.non_resource_urls.is_empty() {
                format!(
                    "{{APIGroups:{:?}, Resources:{:?}, ResourceNames:{:?}, Verbs:{:?}}}",
                    r.api_groups, r.resources, r.resource_names, r.verbs
                )
            } else {
                format!(
                    "{{NonResourceURLs:{:?}, Verbs:{:?}}}",
                    r.non_resource_urls, r.verbs
                )
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

#[async_trait::async_trait]
impl Admission for Escalation {
    fn name(&self) -> &'static str {
        "RBACEscalation"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.def.group != GROUP || req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let Some(user) = req.user else {
            return Ok(Verdict::ok());
        };
        if user.is_master() {
            return Ok(Verdict::ok());
        }
        let ns = req.namespace.unwrap_or("");
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        let plural = req.def.plural.as_str();
        let (requested, special_verb) = match plural {
            "roles" | "clusterroles" => {
                // An aggregated role's rules are the controller's to fill; the selectors are
                // what the user sets, and they cannot grant anything the user could not label.
                (Rule::of(obj), "escalate")
            }
            "rolebindings" | "clusterrolebindings" => {
                let role_ref = &obj["roleRef"];
                let cluster_role = role_ref["kind"].as_str() == Some("ClusterRole");
                let role = role_ref["name"].as_str().unwrap_or("");
                let rules = self
                    .authz
                    .role_rules(cluster_role, ns, role)
                    .unwrap_or_default();
                // Binding a missing role grants nothing now, but would grant whatever it
                // becomes: upstream requires the `bind` verb then (rules are empty: the check
                // below passes only with `bind`).
                let special = Attributes::resource(
                    "bind",
                    GROUP,
                    if cluster_role {
                        "clusterroles"
                    } else {
                        "roles"
                    },
                    "",
                    if plural == "rolebindings" && !cluster_role {
                        ns
                    } else {
                        ""
                    },
                    role,
                );
                if self.authz.authorize(user, &special).allowed()
                    || (plural == "rolebindings"
                        && self
                            .authz
                            .authorize(
                                user,
                                &Attributes {
                                    namespace: ns.to_string(),
                                    ..special.clone()
                                },
                            )
                            .allowed())
                {
                    return Ok(Verdict::ok());
                }
                if self.authz.role_rules(cluster_role, ns, role).is_none() {
                    return Err(ApiError::Forbidden(format!(
                        "{plural}.{GROUP} \"{name}\" is forbidden: user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held: the referenced role {role:?} does not exist and the user has no \"bind\" permission on it",
                        user.name, user.groups
                    )));
                }
                (rules, "bind")
            }
            _ => return Ok(Verdict::ok()),
        };
        if special_verb == "escalate" {
            let a = Attributes::resource("escalate", GROUP, plural, "", ns, name);
            if self.authz.authorize(user, &a).allowed() {
                return Ok(Verdict::ok());
            }
        }
        let held = self.authz.rules_for(user, ns);
        let missing = rules::uncovered(&held, &requested);
        if missing.is_empty() {
            return Ok(Verdict::ok());
        }
        Err(ApiError::Forbidden(format!(
            "{plural}.{GROUP} \"{name}\" is forbidden: user \"{}\" (groups={:?}) is attempting to grant RBAC permissions not currently held: {}",
            user.name,
            user.groups,
            describe(&missing)
        )))
    }
}
