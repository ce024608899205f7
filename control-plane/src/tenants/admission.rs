//! The host's check of Tenant objects: on a host that is Fabrik's own API server (`fabrik
//! up`), a Tenant is admitted only when the tenant manager would run it — by
//! [`fabrik_api::validation`], which the CLI, the Terraform provider and the manager use too —
//! so that a bad spec is refused at `kubectl apply` (422, a cause per field) instead of stored
//! and then reported `Failed`. On a real host the Tenant CRD's schema (patterns and minimums
//! generated from `fabrik-api`) refuses the same values, and the manager reports anything else.

use fabrik_api::tenant::Tenant;
use fabrik_api::validation::{validate_name, validate_spec, SpecError};
use fabrik_apiserver::admission::{Admission, Operation, Request, Verdict};
use fabrik_apiserver::ApiError;
use fabrik_machinery::validation::FieldError;
use kube::Resource;
use serde_json::Value;

/// The plugin.
pub struct TenantValidation;

fn refuse(name: &str, problems: Vec<SpecError>) -> ApiError {
    ApiError::Invalid {
        kind: "Tenant".into(),
        group: Tenant::group(&()).into_owned(),
        name: name.into(),
        causes: problems
            .into_iter()
            .map(|p| FieldError::forbidden(p.field, p.message))
            .collect(),
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
        old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        if req.def.group != Tenant::group(&())
            || req.def.plural != Tenant::plural(&())
            || req.subresource.is_some()
        {
            return Ok(Verdict::ok());
        }
        // An update that leaves the spec alone (a finalizer removed, a label added) is not held
        // to rules the stored spec may predate: the manager must be able to finish a deletion.
        if old.is_some_and(|o| o["spec"] == obj["spec"]) {
            return Ok(Verdict::ok());
        }
        let name = obj["metadata"]["name"].as_str().unwrap_or("");
        // The schema has checked the types; what does not decode is refused, not guessed at.
        let tenant: Tenant = serde_json::from_value(obj.clone()).map_err(|e| {
            refuse(
                name,
                vec![SpecError {
                    field: "spec".into(),
                    message: format!("does not decode: {e}"),
                }],
            )
        })?;
        let mut problems = validate_spec(&tenant.spec);
        if req.op == Operation::Create {
            // A name never changes; one that was stored stays acceptable.
            problems.splice(0..0, validate_name(name).err());
        }
        if !problems.is_empty() {
            return Err(refuse(name, problems));
        }
        Ok(Verdict::ok())
    }
}
