//! NamespaceLifecycle: nothing is created in a namespace that does not exist or is being
//! terminated.

use serde_json::Value;

use super::{Admission, Operation, Request, Verdict};
use crate::error::{ApiError, GroupResource};
use crate::object;

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
        let namespace = match req.objects.resource("", "v1", "namespaces") {
            Some(def) => req.objects.get(&def, None, ns).await.map(Some),
            None => Ok(None),
        };
        match namespace {
            Ok(None) | Err(ApiError::NotFound { .. }) => Err(ApiError::NotFound {
                resource: GroupResource::new("", "namespaces"),
                name: ns.to_string(),
            }),
            Err(e) => Err(e),
            Ok(Some(namespace)) if object::is_deleting(&namespace) => Err(ApiError::Forbidden(format!(
                "{} is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                req.def.group_resource()
            ))),
            Ok(Some(_)) => Ok(Verdict::ok()),
        }
    }
}
