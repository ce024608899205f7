//! The aggregation stage: a request for a group and version this cluster does not serve itself
//! but an APIService names goes to that APIService's backend ([`crate::aggregation`]) — after
//! authentication and authorization here, with the caller's identity in front-proxy headers,
//! the body passed as it came and the answer streamed back (watches included).

use std::convert::Infallible;

use super::*;
use crate::aggregation::Registration;

/// How long a proxied request other than a watch may take.
const PROXY_TIMEOUT: Duration = Duration::from_secs(60);

/// The content types a backend's answer is passed on with (others become
/// `application/octet-stream`).
fn content_type(v: Option<&http::HeaderValue>) -> &'static str {
    const KNOWN: &[&str] = &[
        "application/json",
        "application/json;stream=watch",
        "application/yaml",
        "application/vnd.kubernetes.protobuf",
        "application/vnd.kubernetes.protobuf;stream=watch",
        "application/json;as=Table;v=v1;g=meta.k8s.io",
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList",
        "text/plain",
        "text/plain; charset=utf-8",
    ];
    let given = v.and_then(|v| v.to_str().ok()).unwrap_or("");
    let bare: String = given.chars().filter(|c| !c.is_whitespace()).collect();
    KNOWN
        .iter()
        .find(|k| k.replace(' ', "").eq_ignore_ascii_case(&bare))
        .or_else(|| {
            KNOWN.iter().find(|k| {
                bare.split(';')
                    .next()
                    .is_some_and(|b| b.eq_ignore_ascii_case(k))
            })
        })
        .copied()
        .unwrap_or("application/octet-stream")
}

impl ApiServer {
    /// The APIService that serves `route`, when the cluster does not serve its group and
    /// version itself.
    pub(super) async fn aggregated(&self, route: &Route) -> Option<Registration> {
        let (group, version) = match route {
            Route::Resource(r) if !r.group.is_empty() => (r.group.as_str(), r.version.as_str()),
            Route::GroupVersion(g, v) if !g.is_empty() => (g.as_str(), v.as_str()),
            _ => return None,
        };
        let catalog = self.registry.catalog();
        if catalog
            .group_versions()
            .iter()
            .any(|(g, v)| g == group && v == version)
        {
            return None;
        }
        self.aggregator.find(&self.registry, group, version).await
    }

    /// Answers for an APIService whose pods run on simulated nodes: the cluster's own
    /// implementation of the group version when it has one, else an API with no resources.
    async fn simulated(&self, route: Route, query: &Query, reg: &Registration) -> Result<Reply> {
        if self.aggregator.implements(&reg.group_version()) && self.serves_metrics(&route) {
            return self.metrics_api(route, query).await;
        }
        match route {
            Route::GroupVersion(..) => Ok(Reply::json(
                StatusCode::OK,
                &self.aggregator.simulated_discovery(reg),
            )),
            _ => Err(ApiError::NoRoute),
        }
    }

    /// Proxies `req` to the backend of `reg` as `user`.
    pub(super) async fn proxy(
        &self,
        req: Request<RequestBody>,
        route: Route,
        query: &Query,
        reg: Registration,
        user: &UserInfo,
    ) -> Result<Reply> {
        let (mut url, client) = match self.aggregator.target(&self.registry, &reg).await? {
            crate::aggregation::Backend::Http { base, client } => (base, client),
            crate::aggregation::Backend::Simulated => {
                return self.simulated(route, query, &reg).await;
            }
        };
        url.set_path(req.uri().path());
        url.set_query(req.uri().query());
        let method = reqwest::Method::from_bytes(req.method().as_str().as_bytes())
            .map_err(|_| ApiError::MethodNotAllowed)?;
        let copied: Vec<(http::HeaderName, http::HeaderValue)> =
            [header::ACCEPT, header::CONTENT_TYPE, header::USER_AGENT]
                .into_iter()
                .filter_map(|h| req.headers().get(&h).map(|v| (h, v.clone())))
                .collect();
        let body = read_body(req.into_body()).await?;
        let mut out = client.request(method, url.clone()).body(body.to_vec());
        for (h, v) in copied {
            out = out.header(h.as_str(), v.as_bytes());
        }
        out = out.header("X-Remote-User", user.name.as_str());
        if !user.uid.is_empty() {
            out = out.header("X-Remote-Uid", user.uid.as_str());
        }
        for g in &user.groups {
            out = out.header("X-Remote-Group", g.as_str());
        }
        for (key, values) in &user.extra {
            let key: String =
                percent_encoding::utf8_percent_encode(key, percent_encoding::NON_ALPHANUMERIC)
                    .collect();
            for v in values {
                out = out.header(format!("X-Remote-Extra-{key}"), v.as_str());
            }
        }
        if !query.flag("watch")? {
            out = out.timeout(PROXY_TIMEOUT);
        }
        let resp = out.send().await.map_err(|e| {
            ApiError::Unavailable(format!(
                "the aggregated API {} did not answer: {}",
                reg.group_version(),
                crate::webhook::call::describe(e)
            ))
        })?;
        let status =
            StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let content_type = content_type(resp.headers().get(header::CONTENT_TYPE));
        let warnings: Vec<String> = resp
            .headers()
            .get_all(header::WARNING)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .map(|w| {
                w.splitn(3, ' ')
                    .nth(2)
                    .unwrap_or(w)
                    .trim_matches('"')
                    .to_string()
            })
            .collect();
        // A broken stream ends the answer (a watch ends; the client starts another).
        let stream = futures::stream::unfold(resp, |mut resp| async move {
            let chunk = resp.chunk().await.ok().flatten()?;
            Some((Ok::<_, Infallible>(Frame::data(chunk)), resp))
        });
        Ok(Reply {
            status,
            body: StreamBody::new(stream).boxed_unsync(),
            content_type,
            warnings,
            upgrade: None,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types_are_passed_on_when_known() {
        let v = |s: &'static str| http::HeaderValue::from_static(s);
        assert_eq!(
            content_type(Some(&v("application/json"))),
            "application/json"
        );
        assert_eq!(
            content_type(Some(&v("application/json; charset=utf-8"))),
            "application/json"
        );
        assert_eq!(
            content_type(Some(&v("application/json;stream=watch"))),
            "application/json;stream=watch"
        );
        assert_eq!(
            content_type(Some(&v("image/png"))),
            "application/octet-stream"
        );
        assert_eq!(content_type(None), "application/octet-stream");
    }
}
