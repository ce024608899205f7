//! One object in and out: decoding a request body, delete options, encoding an object for the
//! client's `Accept`.

use super::*;

impl ApiServer {
    pub(super) async fn decode(
        &self,
        req: Request<RequestBody>,
        content_type: Option<&str>,
        patch: bool,
    ) -> Result<Value> {
        let ty = negotiation::body_type(content_type)?;
        let is_patch_type = matches!(
            ty,
            BodyType::JsonPatch
                | BodyType::MergePatch
                | BodyType::StrategicMergePatch
                | BodyType::ApplyPatch
        );
        if patch != is_patch_type {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: {}",
                if patch {
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json"
                } else {
                    "application/json, application/yaml"
                }
            )));
        }
        let bytes = read_body(req.into_body()).await?;
        negotiation::decode_body(&bytes, ty)
    }

    pub(super) async fn delete_options(
        &self,
        req: Request<RequestBody>,
        query: &Query,
    ) -> Result<DeleteOptions> {
        let ty = negotiation::body_type(header_str(&req, header::CONTENT_TYPE))?;
        let bytes = read_body(req.into_body()).await?;
        let body: Value = if bytes.is_empty() {
            Value::Null
        } else {
            match ty {
                BodyType::Json | BodyType::Yaml | BodyType::Protobuf => {
                    negotiation::decode_body(&bytes, ty)?
                }
                _ => {
                    return Err(ApiError::UnsupportedMediaType(
                        "DeleteOptions must be JSON, YAML or protobuf".into(),
                    ))
                }
            }
        };
        let propagation = match body["propagationPolicy"].as_str().or(query.get("propagationPolicy")) {
            None | Some("") if body["orphanDependents"].as_bool() == Some(true) || query.get("orphanDependents") == Some("true") => {
                Some(Propagation::Orphan)
            }
            None | Some("") => None,
            Some("Background") => Some(Propagation::Background),
            Some("Foreground") => Some(Propagation::Foreground),
            Some("Orphan") => Some(Propagation::Orphan),
            Some(p) => {
                return Err(ApiError::BadRequest(format!(
                    "propagationPolicy: Unsupported value: {p:?}: supported values: \"Foreground\", \"Background\", \"Orphan\""
                )))
            }
        };
        let body_dry = body["dryRun"]
            .as_array()
            .is_some_and(|d| d.iter().any(|v| v == "All"));
        Ok(DeleteOptions {
            dry_run: body_dry || query.dry_run()?,
            grace_period: body["gracePeriodSeconds"]
                .as_i64()
                .or(query.int("gracePeriodSeconds")?),
            propagation,
            uid: body["preconditions"]["uid"].as_str().map(str::to_string),
            resource_version: body["preconditions"]["resourceVersion"]
                .as_str()
                .map(str::to_string),
            user: None,
        })
    }

    pub(super) fn render_object(
        &self,
        def: &ResourceDef,
        status: StatusCode,
        obj: Value,
        output: Output,
        query: &Query,
    ) -> Reply {
        match output {
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                let meta = json!({"resourceVersion": obj["metadata"]["resourceVersion"]});
                Reply::json(status, &table::table(def, &[obj], include, meta))
            }
            Output::Metadata => Reply::json(status, &table::partial_metadata(&obj)),
            other => Reply::encoded(status, &obj, other),
        }
    }
}
