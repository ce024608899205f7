//! NamespaceLifecycle: nothing is created in a namespace that does not exist or is being
//! terminated.

use serde_json::Value;

use super::{Admission, Operation, Request, Verdict};
use crate::error::{ApiError, GroupResource};
use crate::registry::object;

/// The plugin.
pub struct NamespaceLifecycle;

#[async_trait::async_trait]
impl Admission for NamespaceLifecycle {
    fn name(&self) -> &'static str {
        "NamespaceLifecycle"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        _obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        let (Operation::Create, Some(ns), true) = (req.op, req.namespace, req.def.namespaced)
        else {
            return Ok(Verdict::ok());
        };
        if req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let key = format!("/core/namespaces/{ns}");
        match req.registry.store().get(&key).await? {
            None => Err(ApiError::NotFound {
                resource: GroupResource::new("", "namespaces"),
                name: ns.to_string(),
            }),
            Some(kv) if object::is_deleting(&object::decode(&kv)?) => Err(ApiError::Forbidden(format!(
                "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                req.def.group_resource()
            ))),
            Some(_) => Ok(Verdict::ok()),
        }
    }
}
