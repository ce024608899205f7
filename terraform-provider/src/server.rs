//! The `tfplugin6.Provider` gRPC service: decodes each request against the schemas, calls
//! the resource logic, and encodes the answer. Every failure is a diagnostic in the answer;
//! gRPC errors are kept for requests Terraform should never send (an unknown type name).

use std::sync::Arc;

use tokio::sync::{watch, RwLock};
use tonic::{Request, Response, Status};

use crate::config::{self, Settings};
use crate::diag::{self, path, Diag};
use crate::host::Host;
use crate::proto::tfplugin6 as pb;
use crate::proto::tfplugin6::provider_server::Provider as ProviderService;
use crate::resource;
use crate::schema::{self, Schema, TENANT, TENANT_KUBECONFIG};
use crate::value::{Ty, Value};

/// The provider: its schemas, the host once configured, and the stop signal.
pub struct Provider {
    provider_schema: Schema,
    tenant: Schema,
    tenant_ds: Schema,
    kubeconfig_ds: Schema,
    host: RwLock<Option<Host>>,
    stop_tx: watch::Sender<bool>,
}

impl Default for Provider {
    fn default() -> Self {
        Provider::new()
    }
}

fn decode(dv: Option<&pb::DynamicValue>, ty: &Ty, what: &str) -> Result<Value, Diag> {
    let Some(dv) = dv else {
        return Ok(Value::Null);
    };
    let decoded = if !dv.msgpack.is_empty() {
        Value::from_msgpack(&dv.msgpack, ty)
    } else if !dv.json.is_empty() {
        serde_json::from_slice::<serde_json::Value>(&dv.json)
            .map_err(crate::value::Error::from)
            .and_then(|j| Value::from_json(&j, ty))
    } else {
        Ok(Value::Null)
    };
    decoded.map_err(|e| Diag::error(format!("Invalid {what} from Terraform"), e.to_string()))
}

fn encode(v: &Value) -> Result<pb::DynamicValue, Diag> {
    v.to_msgpack()
        .map(|msgpack| pb::DynamicValue {
            msgpack,
            json: Vec::new(),
        })
        .map_err(|e| Diag::error("Cannot encode the new state", e.to_string()))
}

fn unknown_type(kind: &str, name: &str) -> Status {
    Status::invalid_argument(format!("this provider has no {kind} {name:?}"))
}

impl Provider {
    /// A provider with no host yet.
    pub fn new() -> Provider {
        let (stop_tx, _) = watch::channel(false);
        Provider {
            provider_schema: schema::provider(),
            tenant: schema::tenant_resource(),
            tenant_ds: schema::tenant_data_source(),
            kubeconfig_ds: schema::tenant_kubeconfig_data_source(),
            host: RwLock::new(None),
            stop_tx,
        }
    }

    /// Wraps the provider as a gRPC service.
    pub fn into_service(self: Arc<Self>) -> pb::provider_server::ProviderServer<Arc<Provider>> {
        pb::provider_server::ProviderServer::new(self)
            .max_decoding_message_size(256 << 20)
            .max_encoding_message_size(256 << 20)
    }

    async fn host(&self) -> Result<Host, Diag> {
        self.host.read().await.clone().ok_or_else(|| {
            Diag::error(
                "Provider not configured",
                "the fabrik provider has no host cluster (ConfigureProvider was not called)",
            )
        })
    }

    fn data_source(&self, name: &str) -> Option<&Schema> {
        match name {
            TENANT => Some(&self.tenant_ds),
            TENANT_KUBECONFIG => Some(&self.kubeconfig_ds),
            _ => None,
        }
    }

    fn capabilities() -> pb::ServerCapabilities {
        pb::ServerCapabilities {
            plan_destroy: false,
            get_provider_schema_optional: false,
            move_resource_state: false,
        }
    }

    async fn configure(&self, config: &Value) -> Vec<Diag> {
        let mut diags = config::validate(config);
        if diag::has_errors(&diags) {
            return diags;
        }
        if !config.is_wholly_known() {
            diags.push(Diag::error(
                "Provider configuration not known",
                "the fabrik provider's settings depend on values known only after apply; \
                 set them from values known at plan time",
            ));
            return diags;
        }
        let settings = Settings::from_value(config);
        let attr = settings.source_attr();
        let at = |summary: &str, detail: String| match attr {
            Some(a) => Diag::attr(path(&[a]), summary, detail),
            None => Diag::error(summary, detail),
        };
        let (client, url) = match config::client(&settings).await {
            Ok(c) => c,
            Err(e) => {
                diags.push(at("Invalid host configuration", e.to_string()));
                return diags;
            }
        };
        let host = Host::new(client, url, self.stop_tx.subscribe());
        if let Err(e) = host.probe().await {
            diags.push(at("Host cluster unreachable", e.to_string()));
            return diags;
        }
        *self.host.write().await = Some(host);
        diags
    }
}

#[tonic::async_trait]
impl ProviderService for Arc<Provider> {
    async fn get_metadata(
        &self,
        _request: Request<pb::get_metadata::Request>,
    ) -> Result<Response<pb::get_metadata::Response>, Status> {
        Ok(Response::new(pb::get_metadata::Response {
            server_capabilities: Some(Provider::capabilities()),
            diagnostics: Vec::new(),
            data_sources: [TENANT, TENANT_KUBECONFIG]
                .iter()
                .map(|n| pb::get_metadata::DataSourceMetadata {
                    type_name: n.to_string(),
                })
                .collect(),
            resources: vec![pb::get_metadata::ResourceMetadata {
                type_name: TENANT.to_string(),
            }],
        }))
    }

    async fn get_provider_schema(
        &self,
        _request: Request<pb::get_provider_schema::Request>,
    ) -> Result<Response<pb::get_provider_schema::Response>, Status> {
        Ok(Response::new(pb::get_provider_schema::Response {
            provider: Some(self.provider_schema.to_proto()),
            resource_schemas: [(TENANT.to_string(), self.tenant.to_proto())].into(),
            data_source_schemas: [
                (TENANT.to_string(), self.tenant_ds.to_proto()),
                (TENANT_KUBECONFIG.to_string(), self.kubeconfig_ds.to_proto()),
            ]
            .into(),
            diagnostics: Vec::new(),
            provider_meta: None,
            server_capabilities: Some(Provider::capabilities()),
        }))
    }

    async fn validate_provider_config(
        &self,
        request: Request<pb::validate_provider_config::Request>,
    ) -> Result<Response<pb::validate_provider_config::Response>, Status> {
        let r = request.into_inner();
        let diags = match decode(
            r.config.as_ref(),
            &self.provider_schema.ty(),
            "configuration",
        ) {
            Ok(v) => config::validate(&v),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_provider_config::Response {
            diagnostics: diag::to_proto(&diags),
        }))
    }

    async fn validate_resource_config(
        &self,
        request: Request<pb::validate_resource_config::Request>,
    ) -> Result<Response<pb::validate_resource_config::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        let diags = match decode(r.config.as_ref(), &self.tenant.ty(), "configuration") {
            Ok(v) => crate::tenant::validate(&v),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_resource_config::Response {
            diagnostics: diag::to_proto(&diags),
        }))
    }

    async fn validate_data_resource_config(
        &self,
        request: Request<pb::validate_data_resource_config::Request>,
    ) -> Result<Response<pb::validate_data_resource_config::Response>, Status> {
        let r = request.into_inner();
        let schema = self
            .data_source(&r.type_name)
            .ok_or_else(|| unknown_type("data source", &r.type_name))?;
        let diags = match decode(r.config.as_ref(), &schema.ty(), "configuration") {
            Ok(v) => resource::validate_data_source(&v),
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::validate_data_resource_config::Response {
            diagnostics: diag::to_proto(&diags),
        }))
    }

    async fn upgrade_resource_state(
        &self,
        request: Request<pb::upgrade_resource_state::Request>,
    ) -> Result<Response<pb::upgrade_resource_state::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        // Version 0 is the only version so far: the stored JSON is re-read with the current
        // schema (attributes added later come back null).
        let raw = r.raw_state.map(|s| s.json).unwrap_or_default();
        let (state, diags) = if raw.is_empty() {
            (Value::Null, Vec::new())
        } else {
            let dv = pb::DynamicValue {
                msgpack: Vec::new(),
                json: raw,
            };
            match decode(Some(&dv), &self.tenant.ty(), "stored state") {
                Ok(v) => (v, Vec::new()),
                Err(d) => (Value::Null, vec![d]),
            }
        };
        let (upgraded, diags) = match encode(&state) {
            Ok(dv) => (Some(dv), diags),
            Err(d) => (None, vec![d]),
        };
        Ok(Response::new(pb::upgrade_resource_state::Response {
            upgraded_state: upgraded,
            diagnostics: diag::to_proto(&diags),
        }))
    }

    async fn configure_provider(
        &self,
        request: Request<pb::configure_provider::Request>,
    ) -> Result<Response<pb::configure_provider::Response>, Status> {
        let r = request.into_inner();
        let diags = match decode(
            r.config.as_ref(),
            &self.provider_schema.ty(),
            "configuration",
        ) {
            Ok(v) => self.configure(&v).await,
            Err(d) => vec![d],
        };
        Ok(Response::new(pb::configure_provider::Response {
            diagnostics: diag::to_proto(&diags),
        }))
    }

    async fn read_resource(
        &self,
        request: Request<pb::read_resource::Request>,
    ) -> Result<Response<pb::read_resource::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        let ty = self.tenant.ty();
        let result = async {
            let prior = decode(r.current_state.as_ref(), &ty, "state").map_err(|d| vec![d])?;
            let host = self.host().await.map_err(|d| vec![d])?;
            let (state, diags) = resource::read(&host, &prior).await;
            let dv = encode(&state).map_err(|d| vec![d])?;
            Ok::<_, Vec<Diag>>((dv, diags))
        }
        .await;
        let (new_state, diags) = match result {
            Ok((dv, diags)) => (Some(dv), diags),
            Err(diags) => (r.current_state.clone(), diags),
        };
        Ok(Response::new(pb::read_resource::Response {
            new_state,
            diagnostics: diag::to_proto(&diags),
            private: r.private,
            deferred: None,
        }))
    }

    async fn plan_resource_change(
        &self,
        request: Request<pb::plan_resource_change::Request>,
    ) -> Result<Response<pb::plan_resource_change::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        let ty = self.tenant.ty();
        let decoded = (|| {
            Ok::<_, Diag>((
                decode(r.prior_state.as_ref(), &ty, "prior state")?,
                decode(r.proposed_new_state.as_ref(), &ty, "proposed state")?,
                decode(r.config.as_ref(), &ty, "configuration")?,
            ))
        })();
        let response = match decoded {
            Ok((prior, proposed, config)) => {
                let plan = resource::plan(&prior, &proposed, &config);
                match encode(&plan.planned) {
                    Ok(dv) => pb::plan_resource_change::Response {
                        planned_state: Some(dv),
                        requires_replace: plan
                            .requires_replace
                            .iter()
                            .map(|p| diag::to_proto_path(p))
                            .collect(),
                        planned_private: r.prior_private,
                        diagnostics: diag::to_proto(&plan.diags),
                        legacy_type_system: false,
                        deferred: None,
                    },
                    Err(d) => plan_error(d),
                }
            }
            Err(d) => plan_error(d),
        };
        Ok(Response::new(response))
    }

    async fn apply_resource_change(
        &self,
        request: Request<pb::apply_resource_change::Request>,
    ) -> Result<Response<pb::apply_resource_change::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        let ty = self.tenant.ty();
        let result = async {
            let prior = decode(r.prior_state.as_ref(), &ty, "prior state").map_err(|d| vec![d])?;
            let planned =
                decode(r.planned_state.as_ref(), &ty, "planned state").map_err(|d| vec![d])?;
            let host = self.host().await.map_err(|d| vec![d])?;
            let (state, diags) = resource::apply(&host, &prior, &planned).await;
            let dv = encode(&state).map_err(|d| vec![d])?;
            Ok::<_, Vec<Diag>>((dv, diags))
        }
        .await;
        let (new_state, diags) = match result {
            Ok((dv, diags)) => (Some(dv), diags),
            Err(diags) => (r.prior_state.clone(), diags),
        };
        Ok(Response::new(pb::apply_resource_change::Response {
            new_state,
            private: r.planned_private,
            diagnostics: diag::to_proto(&diags),
            legacy_type_system: false,
        }))
    }

    async fn import_resource_state(
        &self,
        request: Request<pb::import_resource_state::Request>,
    ) -> Result<Response<pb::import_resource_state::Response>, Status> {
        let r = request.into_inner();
        if r.type_name != TENANT {
            return Err(unknown_type("resource", &r.type_name));
        }
        let (imported, diags) = match self.host().await {
            Ok(host) => {
                let (state, diags) = resource::import(&host, &r.id).await;
                if diag::has_errors(&diags) {
                    (Vec::new(), diags)
                } else {
                    match encode(&state) {
                        Ok(dv) => (
                            vec![pb::import_resource_state::ImportedResource {
                                type_name: TENANT.to_string(),
                                state: Some(dv),
                                private: Vec::new(),
                            }],
                            diags,
                        ),
                        Err(d) => (Vec::new(), vec![d]),
                    }
                }
            }
            Err(d) => (Vec::new(), vec![d]),
        };
        Ok(Response::new(pb::import_resource_state::Response {
            imported_resources: imported,
            diagnostics: diag::to_proto(&diags),
            deferred: None,
        }))
    }

    async fn read_data_source(
        &self,
        request: Request<pb::read_data_source::Request>,
    ) -> Result<Response<pb::read_data_source::Response>, Status> {
        let r = request.into_inner();
        let schema = self
            .data_source(&r.type_name)
            .ok_or_else(|| unknown_type("data source", &r.type_name))?;
        let ty = schema.ty();
        let with_kubeconfig = r.type_name == TENANT_KUBECONFIG;
        let result = async {
            let config = decode(r.config.as_ref(), &ty, "configuration").map_err(|d| vec![d])?;
            let host = self.host().await.map_err(|d| vec![d])?;
            let (state, diags) =
                resource::read_data_source(&host, &config, &ty, with_kubeconfig).await;
            if diag::has_errors(&diags) {
                return Err(diags);
            }
            let dv = encode(&state).map_err(|d| vec![d])?;
            Ok::<_, Vec<Diag>>((dv, diags))
        }
        .await;
        let (state, diags) = match result {
            Ok((dv, diags)) => (Some(dv), diags),
            Err(diags) => (None, diags),
        };
        Ok(Response::new(pb::read_data_source::Response {
            state,
            diagnostics: diag::to_proto(&diags),
            deferred: None,
        }))
    }

    async fn stop_provider(
        &self,
        _request: Request<pb::stop_provider::Request>,
    ) -> Result<Response<pb::stop_provider::Response>, Status> {
        self.stop_tx.send_replace(true);
        Ok(Response::new(pb::stop_provider::Response {
            error: String::new(),
        }))
    }
}

fn plan_error(d: Diag) -> pb::plan_resource_change::Response {
    pb::plan_resource_change::Response {
        planned_state: None,
        requires_replace: Vec::new(),
        planned_private: Vec::new(),
        diagnostics: vec![d.to_proto()],
        legacy_type_system: false,
        deferred: None,
    }
}
