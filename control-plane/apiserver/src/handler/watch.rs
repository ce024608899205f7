//! Watches: an initial state if asked, then events as they come, with bookmarks.

use super::*;

impl ApiServer {
    pub(super) async fn watch(
        &self,
        def: &Arc<ResourceDef>,
        ns: Option<&str>,
        query: &Query,
        output: Output,
        slot: Option<crate::server::WatchSlot>,
        seat: Option<crate::fairness::Seat>,
    ) -> Result<Reply> {
        let (labels, fields) = query.selectors()?;
        let send_initial = match query.get("sendInitialEvents") {
            None | Some("") => None,
            Some(_) => Some(query.flag("sendInitialEvents")?),
        };
        let params = WatchParams {
            labels,
            fields,
            resource_version: query.get("resourceVersion").map(str::to_string),
            resource_version_match: query.get("resourceVersionMatch").map(str::to_string),
            bookmarks: query.flag("allowWatchBookmarks")?,
            send_initial_events: send_initial,
            bookmark_interval: self.settings.bookmark_interval,
        };
        let timeout = match query.int("timeoutSeconds")? {
            Some(t) if t > 0 => Duration::from_secs(t as u64),
            _ => self.settings.max_watch,
        };
        let events =
            crate::fairness::hold_until_idle(self.registry.watch(def, ns, params).await?, seat);
        let def = def.clone();
        let include =
            IncludeObject::parse(query.get("includeObject").unwrap_or("")).unwrap_or_default();
        let shutdown = self.shutdown_signal();
        let deadline = tokio::time::sleep(timeout);
        let frames = events
            .map(move |ev| {
                let convert = |_ty: &str, obj: Value| -> Value {
                    match output {
                        Output::Table => table::table(&def, &[obj], include, json!({})),
                        Output::Metadata => table::partial_metadata(&obj),
                        _ => obj,
                    }
                };
                // The watch is counted for as long as its stream lives.
                let _counted = &slot;
                let mut line = serde_json::to_vec(&ev.to_json(&def, &convert)).unwrap_or_default();
                line.push(b'\n');
                Ok::<_, Infallible>(Frame::data(Bytes::from(line)))
            })
            .take_until(async move {
                tokio::select! {
                    _ = deadline => {},
                    _ = shutdown => {},
                }
            });
        Ok(Reply {
            status: StatusCode::OK,
            body: StreamBody::new(frames).boxed_unsync(),
            content_type: "application/json",
            warnings: Vec::new(),
            upgrade: None,
        })
    }
}
