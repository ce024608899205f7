//! The host's check of Tenant objects: on a host that is Fabrik's own API server (`fabrik
//! up`), a Tenant is admitted only when the tenant manager would run it — the same
//! [`manager::valid_name`] and [`manager::valid_quota`] the CLI and the manager use — so that a
//! bad spec is refused at `kubectl apply` (422, naming the field) instead of stored and then
//! reported `Failed`. On a real host the Tenant CRD's schema (patterns and minimums generated
//! from `fabrik-api`) refuses the same values, and the manager reports anything else.

use fabrik_api::tenant::Tenant;
use fabrik_apiserver::admission::{Admission, Operation, Request, Verdict};
use fabrik_apiserver::ApiError;
use fabrik_machinery::validation::FieldError;
use serde_json::Value;

use super::manager;

/// The Tenant's API group.
const GROUP: &str = "fabrik.dev";

/// The plugin.
pub struct TenantValidation;

/// `spec.quota.cpu: "x" is not ...` → (`spec.quota.cpu`, `"x" is not ...`).
fn split_field(message: &str) -> (&str, &str) {
    let end = message
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '.'))
        .unwrap_or(message.len());
    let (field, rest) = message.split_at(end);
    if field.starts_with("spec.") {
        (field, rest.trim_start_matches(':').trim_start())
    } else {
        ("spec", message)
    }
}

fn refuse(name: &str, field: &str, message: &str) -> ApiError {
    ApiError::Invalid {
        kind: "Tenant".into(),
        group: GROUP.into(),
        name: name.into(),
        causes: vec![FieldError::forbidden(field, message)],
    }
}

#[async_trait::async_trait]
impl Admission for TenantValidation {
    fn name(&self) -> &'static str {
        "FabrikTenantValidation"
    }

    async fn validate(
        &self,
        req: &Request<'_>,
        obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.def.group != GROUP || req.def.plural != "tenants" || req.subresource.is_some() {
            return Ok(Verdict::ok());
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        if req.op == Operation::Create {
            manager::valid_name(name).map_err(|why| refuse(name, "metadata.name", &why))?;
        }
        // The schema has checked the types; what does not decode is refused, not guessed at.
        let tenant: Tenant = serde_json::from_value(obj.clone())
            .map_err(|e| refuse(name, "spec", &format!("does not decode: {e}")))?;
        manager::valid_quota(&tenant).map_err(|why| {
            let (field, message) = split_field(&why);
            refuse(name, field, message)
        })?;
        Ok(Verdict::ok())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_field_is_taken_from_the_message() {
        assert_eq!(
            split_field("spec.quota.cpu: \"x\" is not a quantity"),
            ("spec.quota.cpu", "\"x\" is not a quantity")
        );
        assert_eq!(
            split_field("spec.quota.pods must not be negative"),
            ("spec.quota.pods", "must not be negative")
        );
        assert_eq!(split_field("something else"), ("spec", "something else"));
    }
}
