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
