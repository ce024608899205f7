//! Admission: checks that run on every create and update after the kind's own validation and
//! before anything is stored. A plugin refuses with an `ApiError` (`Forbidden` with a message
//! naming the field, `Invalid`, ...). The tenant manager installs the syncer's pod policy here;
//! the full plugin chain (quota, pod security, policies) plugs into the same trait.

use serde_json::Value;

use crate::error::ApiError;
use crate::resources::ResourceDef;

/// The operation being admitted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Operation {
    /// A create.
    Create,
    /// An update (PUT, PATCH, apply, subresource writes that change the object).
    Update,
}

/// One admission plugin.
pub trait Admission: Send + Sync {
    /// Admits `obj` (with the stored `old` on update), or refuses it.
    fn validate(
        &self,
        def: &ResourceDef,
        op: Operation,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError>;
}

/// Refuses pods a policy forbids: `check` returns the reasons (one per field).
pub struct PodPolicy<F>(pub F);

impl<F> Admission for PodPolicy<F>
where
    F: Fn(&Value) -> Result<(), Vec<String>> + Send + Sync,
{
    fn validate(
        &self,
        def: &ResourceDef,
        op: Operation,
        obj: &Value,
        old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if !(def.group.is_empty() && def.plural == "pods") {
            return Ok(());
        }
        // Status writes by the syncer and kubelet change no spec; only check what a user sent.
        if op == Operation::Update
            && old.is_some_and(|o| {
                o.get("spec") == obj.get("spec")
                    && o["metadata"]["labels"] == obj["metadata"]["labels"]
                    && o["metadata"]["annotations"] == obj["metadata"]["annotations"]
            })
        {
            return Ok(());
        }
        (self.0)(obj).map_err(|reasons| {
            let name = obj["metadata"]["name"].as_str().unwrap_or("");
            ApiError::Forbidden(format!(
                "pods \"{name}\" is forbidden: {}",
                reasons.join("; ")
            ))
        })
    }
}
