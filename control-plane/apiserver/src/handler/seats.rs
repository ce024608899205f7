//! Fairness stage: which requests are heavy (run off the listener's workers, on a lane of
//! their tenant; see [`crate::fairness`]).

use super::*;

/// Request bodies larger than this make a request heavy (see [`is_heavy`]).
const HEAVY_BODY_BYTES: u64 = 64 * 1024;

/// Whether handling `req` costs in proportion to data of unbounded size, so that it must not
/// run on the async workers (see [`crate::fairness`]): a collection read or delete (a list
/// is encoded in one piece; a watch is not heavy, it encodes event by event), or a body over
/// [`HEAVY_BODY_BYTES`] or of unknown length.
fn is_heavy(req: &Request<RequestBody>, route: &Route) -> bool {
    if matches!(route, Route::Resource(r) if matches!(r.verb, Verb::List | Verb::DeleteCollection))
    {
        return true;
    }
    if !matches!(
        *req.method(),
        http::Method::POST | http::Method::PUT | http::Method::PATCH
    ) {
        return false;
    }
    match header_str(req, header::CONTENT_LENGTH).map(str::parse::<u64>) {
        Some(Ok(length)) => length > HEAVY_BODY_BYTES,
        _ => true,
    }
}

impl ApiServer {
    /// Serves a request that passed authorization: a tenant's network request holds a seat of
    /// the listener's shared pool while it is handled (a watch: until it has written its
    /// initial state), and a heavy one also a lane of its tenant, off the listener's workers.
    pub(super) async fn dispatch(
        self: &Arc<Self>,
        req: Request<RequestBody>,
        query: &Query,
        route: Route,
        user: UserInfo,
        network: bool,
    ) -> Result<Reply> {
        let tenancy = self.tenancy();
        // A tenant's network requests take a seat of the listener's shared pool for as long as
        // they are handled (a watch: until it has written the events it had at once, its
        // initial list, as upstream's watch initialization).
        let mut seat = match (&tenancy, network) {
            (Some(t), true) => Some(t.fairness.acquire(&t.name, &user.name).await?),
            _ => None,
        };
        // A heavy request also takes a lane of its tenant and runs off the listener's workers.
        match &tenancy {
            Some(t) if seat.is_some() && is_heavy(&req, &route) => {
                let (server, query) = (self.clone(), query.clone());
                let work = async move {
                    let mut seat = seat;
                    server
                        .serve_route(req, &query, route, user, network, &mut seat)
                        .await
                };
                t.fairness.off_workers(&t.name, work).await?
            }
            _ => {
                self.serve_route(req, query, route, user, network, &mut seat)
                    .await
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn heavy_requests_are_collection_reads_and_large_or_unsized_bodies() {
        let heavy = |method: &str, path: &str, watch: bool, length: Option<usize>| {
            let method = http::Method::from_bytes(method.as_bytes()).expect("method");
            let route = request_info::parse(&method, path, watch).expect("route");
            let mut req = Request::builder().method(method).uri(path);
            if let Some(n) = length {
                req = req.header(header::CONTENT_LENGTH, n.to_string());
            }
            let req = req
                .body(Full::new(Bytes::new()).map_err(|e| match e {}).boxed())
                .expect("request");
            is_heavy(&req, &route)
        };
        let pods = "/api/v1/namespaces/default/pods";
        assert!(heavy("GET", pods, false, None), "a list");
        assert!(heavy("DELETE", pods, false, None), "a collection delete");
        assert!(
            !heavy("GET", pods, true, None),
            "a watch encodes event by event"
        );
        assert!(
            !heavy("GET", &format!("{pods}/p"), false, None),
            "one object"
        );
        assert!(!heavy("POST", pods, false, Some(2_000)), "a small body");
        assert!(heavy("POST", pods, false, Some(900 * 1024)), "a large body");
        assert!(
            heavy("PATCH", &format!("{pods}/p"), false, None),
            "a body of unknown length"
        );
        assert!(
            !heavy("DELETE", &format!("{pods}/p"), false, None),
            "a delete of one object"
        );
    }
}
