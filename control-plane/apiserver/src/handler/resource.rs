//! Resource requests: each verb (get, list, watch, create, update, patch, delete, delete
//! collection) and subresource (status, scale, log, exec/attach/port-forward, token,
//! eviction, binding) to its registry call.

use super::*;

/// The options object of a pod connection, from its query (`PodExecOptions`,
/// `PodAttachOptions`, `PodPortForwardOptions`), as admission sees it.
fn connect_options(sub: Subresource, raw_query: &str) -> Value {
    let pairs: Vec<(String, String)> = form_urlencoded::parse(raw_query.as_bytes())
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect();
    let all = |k: &str| -> Vec<String> {
        pairs
            .iter()
            .filter(|(key, _)| key == k)
            .map(|(_, v)| v.clone())
            .collect()
    };
    let first = |k: &str| all(k).into_iter().next();
    let flag = |k: &str| first(k).is_some_and(|v| v == "true" || v == "1");
    match sub {
        Subresource::PortForward => json!({
            "kind": "PodPortForwardOptions", "apiVersion": "v1",
            "ports": all("ports").iter().filter_map(|p| p.parse::<u16>().ok()).collect::<Vec<_>>(),
        }),
        other => {
            let mut o = json!({
                "kind": if other == Subresource::Exec { "PodExecOptions" } else { "PodAttachOptions" },
                "apiVersion": "v1",
                "stdin": flag("stdin"), "stdout": flag("stdout"), "stderr": flag("stderr"),
                "tty": flag("tty"),
            });
            if let Some(c) = first("container") {
                o["container"] = json!(c);
            }
            if other == Subresource::Exec {
                o["command"] = json!(all("command"));
            }
            o
        }
    }
}

impl ApiServer {
    pub(super) async fn serve_route(
        &self,
        req: Request<RequestBody>,
        query: &Query,
        route: Route,
        user: UserInfo,
        network: bool,
        seat: &mut Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        if let Some(reg) = self.aggregated(&route).await {
            return self.proxy(req, route, query, reg, &user).await;
        }
        if self.serves_metrics(&route) {
            return self.metrics_api(route, query).await;
        }
        match route {
            Route::Resource(r) => self.resource(req, query, r, user, network, seat).await,
            other => self.non_resource(&req, other).await,
        }
    }

    /// The write options of a request, with its user for admission.
    pub(super) fn write_options(
        &self,
        query: &Query,
        user_agent: Option<&str>,
        user: &UserInfo,
    ) -> Result<WriteOptions> {
        let mut opts = query.write_options(user_agent)?;
        opts.user = Some(Arc::new(user.clone()));
        Ok(opts)
    }

    pub(super) async fn resource(
        &self,
        mut req: Request<RequestBody>,
        query: &Query,
        r: ResourceRequest,
        user: UserInfo,
        network: bool,
        seat: &mut Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        let def = self
            .registry
            .catalog()
            .get(&r.group, &r.version, &r.resource)
            .ok_or(ApiError::NoRoute)?;
        let sub = match r.subresource.as_deref() {
            None => None,
            Some(s) => Some(
                Subresource::parse(s)
                    .filter(|s| def.has(*s))
                    .ok_or(ApiError::NoRoute)?,
            ),
        };
        if !def.namespaced && r.namespace.is_some() {
            return Err(ApiError::NoRoute);
        }
        let collection_verb = matches!(r.verb, Verb::List | Verb::Watch | Verb::DeleteCollection);
        if def.namespaced && r.namespace.is_none() && !(collection_verb && r.name.is_none()) {
            return Err(ApiError::NoRoute);
        }
        let ns = r.namespace.as_deref();
        let output = negotiation::output(header_str(&req, header::ACCEPT))?;
        if def.create_only {
            if r.verb != Verb::Create || r.name.is_some() {
                return Err(ApiError::MethodNotAllowed);
            }
            let content_type = header_str(&req, header::CONTENT_TYPE).map(str::to_string);
            let body = self.decode(req, content_type.as_deref(), false).await?;
            let answer = self.review(&def, ns, &user, body).await?;
            return Ok(Reply::encoded(StatusCode::CREATED, &answer, output));
        }
        let content_type = header_str(&req, header::CONTENT_TYPE).map(str::to_string);
        let user_agent = header_str(&req, header::USER_AGENT).map(str::to_string);
        let reg: &Registry = &self.registry;
        let name = r.name.clone().unwrap_or_default();
        match (r.verb, sub) {
            (Verb::Get, None | Some(Subresource::Status)) => {
                let obj = reg.get(&def, ns, &name).await?;
                Ok(self.render_object(&def, StatusCode::OK, obj, output, query))
            }
            (Verb::Get, Some(Subresource::Scale)) => {
                let obj = reg.get(&def, ns, &name).await?;
                Ok(Reply::encoded(
                    StatusCode::OK,
                    &registry::scale_of(&def, &obj),
                    output,
                ))
            }
            (Verb::List, None) => {
                self.list(&def, ns, &query.list_params()?, output, query)
                    .await
            }
            (Verb::Watch, None) => {
                // Watches of network users are counted (in-process callers, the cluster's own
                // controllers, are not).
                let slot = if network {
                    Some(self.open_watch(&user.name)?)
                } else {
                    None
                };
                self.watch(&def, ns, query, output, slot, seat.take()).await
            }
            (Verb::Create, None) if r.name.is_none() => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let w = reg
                    .create(
                        &def,
                        ns,
                        body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::CREATED, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Create, Some(Subresource::Binding)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                reg.bind_pod(&def, ns, &name, &body).await?;
                Ok(Reply::json(StatusCode::CREATED, &success_status()))
            }
            (Verb::Get, Some(Subresource::Log)) => {
                let pod = reg.get(&def, ns, &name).await?;
                let container = crate::pod_streams::container_of(&pod, query.get("container"))?;
                let number = |k: &str| -> Result<Option<usize>> {
                    match query.get(k) {
                        None | Some("") => Ok(None),
                        Some(v) => v.parse::<usize>().map(Some).map_err(|_| {
                            ApiError::BadRequest(format!("{k} must be a non-negative integer"))
                        }),
                    }
                };
                let (tail, limit) = (number("tailLines")?, number("limitBytes")?);
                let previous = query.flag("previous")?;
                let streams = self.pod_streams.read().ok().and_then(|s| s.clone());
                let Some(streams) = streams else {
                    return Err(ApiError::BadRequest(format!(
                        "pod {name} does not run on a node that serves logs"
                    )));
                };
                if query.flag("follow")? && !previous {
                    // limitBytes counts over the whole stream.
                    let chunks = streams.follow(&pod, &container, tail).await?.scan(
                        limit.unwrap_or(usize::MAX),
                        |left, chunk| {
                            if *left == 0 {
                                return std::future::ready(None);
                            }
                            let cut = crate::pod_streams::trim(&chunk, None, Some(*left));
                            *left -= cut.len();
                            std::future::ready(Some(Ok::<_, std::convert::Infallible>(
                                Frame::data(Bytes::from(cut)),
                            )))
                        },
                    );
                    return Ok(Reply {
                        status: StatusCode::OK,
                        body: StreamBody::new(chunks).boxed_unsync(),
                        content_type: "text/plain",
                        warnings: Vec::new(),
                        upgrade: None,
                    });
                }
                let text = streams.logs(&pod, &container, previous).await?;
                Ok(Reply::text(
                    StatusCode::OK,
                    crate::pod_streams::trim(&text, tail, limit),
                    "text/plain",
                ))
            }
            (
                Verb::Create | Verb::Get,
                Some(sub @ (Subresource::Exec | Subresource::Attach | Subresource::PortForward)),
            ) => {
                let pod = reg.get(&def, ns, &name).await?;
                reg.admit_connect(
                    &def,
                    ns,
                    &name,
                    sub.name(),
                    &connect_options(sub, req.uri().query().unwrap_or("")),
                    Some(&user),
                )
                .await?;
                let streams = self.pod_streams.read().ok().and_then(|s| s.clone());
                let Some(streams) = streams else {
                    return Err(ApiError::BadRequest(format!(
                        "pod {name} does not run on a node that serves {}",
                        sub.name()
                    )));
                };
                let wants_upgrade = header_str(&req, header::CONNECTION)
                    .is_some_and(|c| c.to_ascii_lowercase().contains("upgrade"))
                    && req.headers().contains_key(header::UPGRADE);
                if !wants_upgrade {
                    return Err(ApiError::BadRequest(format!(
                        "{} needs a streaming connection (an HTTP upgrade to WebSocket or SPDY)",
                        sub.name()
                    )));
                }
                let ask = crate::pod_streams::StreamRequest {
                    what: sub.name(),
                    method: req.method().clone(),
                    query: req.uri().query().unwrap_or("").to_string(),
                    headers: crate::pod_streams::negotiation_headers(req.headers()),
                };
                let answer = streams.stream(&pod, ask).await?;
                let pending = crate::pod_streams::PendingSession::new(answer.session);
                // A network caller's connection is upgraded once this reply is sent; an
                // in-process caller takes the session from the reply.
                if let Some(on_upgrade) = req.extensions_mut().remove::<hyper::upgrade::OnUpgrade>()
                {
                    let session = pending.clone();
                    tokio::spawn(async move {
                        match on_upgrade.await {
                            Ok(upgraded) => {
                                if let Some(run) = session.take() {
                                    run(Box::pin(hyper_util::rt::TokioIo::new(upgraded))).await;
                                }
                            }
                            Err(e) => tracing::debug!(error = %e, "a stream upgrade failed"),
                        }
                    });
                }
                Ok(Reply {
                    status: StatusCode::SWITCHING_PROTOCOLS,
                    body: full(Bytes::new()),
                    content_type: "",
                    warnings: Vec::new(),
                    upgrade: Some((answer.headers, pending)),
                })
            }
            (Verb::Create, Some(Subresource::Token)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let answer = self
                    .token_request(&def, ns.unwrap_or(""), &name, body)
                    .await?;
                Ok(Reply::encoded(StatusCode::CREATED, &answer, output))
            }
            (Verb::Create, Some(Subresource::Eviction)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                reg.evict_pod(&def, ns, &name, &body).await?;
                Ok(Reply::json(StatusCode::CREATED, &success_status()))
            }
            (Verb::Update, None | Some(Subresource::Status) | Some(Subresource::Finalize)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let w = reg
                    .update(
                        &def,
                        ns,
                        &name,
                        body,
                        Part::of(sub),
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::OK, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Update, Some(Subresource::Scale)) => {
                let body = self.decode(req, content_type.as_deref(), false).await?;
                let scale = reg
                    .update_scale(
                        &def,
                        ns,
                        &name,
                        &body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(Reply::encoded(StatusCode::OK, &scale, output))
            }
            (Verb::Patch, None | Some(Subresource::Status)) => {
                let ty = negotiation::body_type(content_type.as_deref())?;
                let body = self.decode(req, content_type.as_deref(), true).await?;
                if ty == BodyType::ApplyPatch {
                    let force = query.flag("force")?;
                    let manager = query.get("fieldManager").unwrap_or("").to_string();
                    let mut opts = self.write_options(query, user_agent.as_deref(), &user)?;
                    opts.field_manager = None;
                    let w = reg
                        .apply(&def, ns, &name, body, Part::of(sub), &manager, force, &opts)
                        .await?;
                    let status = if w.created {
                        StatusCode::CREATED
                    } else {
                        StatusCode::OK
                    };
                    return Ok(self
                        .render_object(&def, status, w.object, output, query)
                        .with_warnings(w.warnings));
                }
                let w = reg
                    .patch(
                        &def,
                        ns,
                        &name,
                        ty,
                        &body,
                        Part::of(sub),
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(self
                    .render_object(&def, StatusCode::OK, w.object, output, query)
                    .with_warnings(w.warnings))
            }
            (Verb::Patch, Some(Subresource::Scale)) => {
                let ty = negotiation::body_type(content_type.as_deref())?;
                let body = self.decode(req, content_type.as_deref(), true).await?;
                let scale = reg
                    .patch_scale(
                        &def,
                        ns,
                        &name,
                        ty,
                        &body,
                        &self.write_options(query, user_agent.as_deref(), &user)?,
                    )
                    .await?;
                Ok(Reply::encoded(StatusCode::OK, &scale, output))
            }
            (Verb::Delete, None) => {
                let mut opts = self.delete_options(req, query).await?;
                opts.user = Some(Arc::new(user.clone()));
                let (obj, gone) = reg.delete(&def, ns, &name, &opts).await?;
                let status = if gone {
                    StatusCode::OK
                } else {
                    StatusCode::ACCEPTED
                };
                Ok(self.render_object(&def, status, obj, output, query))
            }
            (Verb::DeleteCollection, None) => {
                let mut opts = self.delete_options(req, query).await?;
                opts.user = Some(Arc::new(user.clone()));
                let items = reg
                    .delete_collection(&def, ns, &query.list_params()?, &opts)
                    .await?;
                let list = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": {},
                    "items": items,
                });
                Ok(Reply::encoded(StatusCode::OK, &list, output))
            }
            _ => Err(ApiError::MethodNotAllowed),
        }
    }
}
