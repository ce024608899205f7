//! Non-resource paths: discovery, OpenAPI, version, health.

use super::*;

impl ApiServer {
    /// The group versions APIServices serve here (none the cluster serves itself), with their
    /// backends' last discovery documents.
    async fn aggregated_groups(&self) -> Vec<discovery::Aggregated> {
        use crate::resource_metrics as rm;
        let local = self.registry.catalog().group_versions();
        let mut out: Vec<discovery::Aggregated> = self
            .aggregator
            .registrations(&self.registry)
            .await
            .into_iter()
            .filter(|r| !local.iter().any(|(g, v)| *g == r.group && *v == r.version))
            .map(|r| discovery::Aggregated {
                resources: self.aggregator.resources(&r.group_version()),
                group: r.group,
                version: r.version,
            })
            .collect();
        // The built-in metrics API, unless an APIService took its place.
        let registered = out
            .iter()
            .any(|a| a.group == rm::GROUP && a.version == rm::VERSION);
        if self.settings.resource_metrics.is_some() && !registered {
            out.push(discovery::Aggregated {
                group: rm::GROUP.into(),
                version: rm::VERSION.into(),
                resources: Some(rm::resource_list()),
            });
        }
        out
    }

    pub(super) async fn non_resource(
        &self,
        req: &Request<RequestBody>,
        route: Route,
    ) -> Result<Reply> {
        let accept = header_str(req, header::ACCEPT);
        let catalog = self.registry.catalog();
        match route {
            Route::Health => Ok(Reply::text(
                StatusCode::OK,
                "ok".into(),
                "text/plain; charset=utf-8",
            )),
            Route::Version => Ok(Reply::json(StatusCode::OK, &crate::server::version_info())),
            Route::Metrics => {
                let mut text = self.metrics.render();
                let extra = self
                    .metrics_sources
                    .read()
                    .map(|s| s.clone())
                    .unwrap_or_default();
                for source in extra {
                    text.push_str(&source());
                }
                Ok(Reply::text(
                    StatusCode::OK,
                    text,
                    "text/plain; version=0.0.4",
                ))
            }
            Route::CoreVersions | Route::Groups => {
                let core = route == Route::CoreVersions;
                let served = if core {
                    Vec::new()
                } else {
                    self.aggregated_groups().await
                };
                match negotiation::output(accept)? {
                    Output::Discovery(v) => {
                        let mut doc = discovery::aggregated(catalog, core, v);
                        discovery::add_aggregated_items(&mut doc, &served);
                        let mut reply = Reply::json(StatusCode::OK, &doc);
                        reply.content_type = if v == "v2" {
                            "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
                        } else {
                            "application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList"
                        };
                        Ok(reply)
                    }
                    _ if core => Ok(Reply::json(
                        StatusCode::OK,
                        &discovery::core_versions(&self.settings.server_address),
                    )),
                    _ => {
                        let mut list = discovery::group_list(catalog);
                        discovery::add_aggregated_groups(&mut list, &served);
                        Ok(Reply::json(StatusCode::OK, &list))
                    }
                }
            }
            Route::Group(g) => match discovery::group(catalog, &g) {
                Some(d) => Ok(Reply::json(StatusCode::OK, &d)),
                None => discovery::aggregated_group(&g, &self.aggregated_groups().await)
                    .map(|d| Reply::json(StatusCode::OK, &d))
                    .ok_or(ApiError::NoRoute),
            },
            Route::GroupVersion(g, v) => discovery::resource_list(catalog, &g, &v)
                .map(|d| Reply::json(StatusCode::OK, &d))
                .ok_or(ApiError::NoRoute),
            Route::OpenApiV2 => {
                let wants_proto = accept.is_some_and(|a| a.contains("protobuf"));
                let doc = self.openapi.v2(catalog)?;
                // Aggregated APIs' paths and definitions join the cluster's own.
                if let Some(merged) = self.aggregator.merged_openapi_v2(&doc) {
                    if wants_proto {
                        // What a backend wrote cannot make the cluster's own document
                        // unavailable: without the backends' part when it does not encode.
                        let bytes = match fabrik_openapi::v2_protobuf(&merged) {
                            Ok(b) => b,
                            Err(_) => self.openapi.v2_protobuf(catalog)?,
                        };
                        return Ok(Reply {
                            status: StatusCode::OK,
                            body: full(bytes),
                            content_type:
                                "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                            warnings: Vec::new(),
                            upgrade: None,
                        });
                    }
                    return Ok(Reply::json(StatusCode::OK, &merged));
                }
                if wants_proto {
                    let bytes = self.openapi.v2_protobuf(catalog)?;
                    return Ok(Reply {
                        status: StatusCode::OK,
                        body: full(bytes),
                        content_type: "application/com.github.proto-openapi.spec.v2.v1.0+protobuf",
                        warnings: Vec::new(),
                        upgrade: None,
                    });
                }
                Ok(Reply::json(StatusCode::OK, &doc))
            }
            Route::OpenApiV3Index => {
                let mut index = self.openapi.v3_index(catalog)?;
                // Aggregated APIs' documents, as their backends serve them.
                if let Some(paths) = index["paths"].as_object_mut() {
                    for (gv, hash) in self.aggregator.openapi_v3_hashes() {
                        paths.entry(format!("apis/{gv}")).or_insert_with(|| {
                            json!({"serverRelativeURL": format!("/openapi/v3/apis/{gv}?hash={hash}")})
                        });
                    }
                }
                Ok(Reply::json(StatusCode::OK, &index))
            }
            Route::OpenApiV3(g, v) => match self.openapi.v3(catalog, &g, &v) {
                Err(ApiError::NoRoute) if !g.is_empty() => self
                    .aggregator
                    .openapi_v3(&format!("{g}/{v}"))
                    .map(|d| Reply::json(StatusCode::OK, &d))
                    .ok_or(ApiError::NoRoute),
                other => other.map(|d| Reply::json(StatusCode::OK, &d)),
            },
            Route::OidcDiscovery => {
                Ok(Reply::json(StatusCode::OK, &self.auth.tokens().discovery()))
            }
            Route::Jwks => {
                let mut reply = Reply::json(StatusCode::OK, &self.auth.tokens().jwks());
                reply.content_type = "application/jwk-set+json";
                Ok(reply)
            }
            Route::Extension(path) => {
                let route = self
                    .routes
                    .read()
                    .ok()
                    .and_then(|r| r.get(&path).cloned())
                    .ok_or(ApiError::NoRoute)?;
                if req.method() != http::Method::GET {
                    return Err(ApiError::MethodNotAllowed);
                }
                let query = Query::parse(req.uri().query());
                Ok(Reply::json(StatusCode::OK, &route(&query.0)?))
            }
            Route::Resource(_) => Err(ApiError::NoRoute),
        }
    }
}
