//! Watches: the store's change stream turned into Kubernetes watch events, with initial events,
//! selectors applied to both sides of each change (an object leaving a selector is a DELETED),
//! bookmarks from the store's progress notifications, and 410 for compacted history.

use std::sync::Arc;
use std::time::Duration;

use fabrik_machinery::fields::FieldSelector;
use fabrik_machinery::labels::Selector;
use fabrik_store::{EventKind, StoreError, WatchItem};
use futures::stream::{self, BoxStream, StreamExt};
use serde_json::{json, Value};

use super::{object, ListParams, Registry};
use crate::error::{ApiError, Result};
use crate::resources::ResourceDef;

/// One event of a watch stream.
#[derive(Clone, Debug)]
pub enum WatchEvent {
    /// ADDED, MODIFIED or DELETED with the object.
    Object(&'static str, Value),
    /// BOOKMARK at a revision; `initial_end` marks the end of `sendInitialEvents`.
    Bookmark {
        /// The revision.
        revision: u64,
        /// `k8s.io/initial-events-end`.
        initial_end: bool,
    },
    /// ERROR with a Status (410 Gone when history is compacted).
    Error(Value),
}

impl WatchEvent {
    /// The event as it goes on the wire, with the object already converted by `convert`.
    pub fn to_json(&self, def: &ResourceDef, convert: &dyn Fn(&str, Value) -> Value) -> Value {
        match self {
            WatchEvent::Object(ty, obj) => json!({"type": ty, "object": convert(ty, obj.clone())}),
            WatchEvent::Bookmark {
                revision,
                initial_end,
            } => {
                let mut meta = json!({"resourceVersion": revision.to_string()});
                if *initial_end {
                    meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
                }
                json!({"type": "BOOKMARK", "object": {"kind": def.kind, "apiVersion": def.api_version(), "metadata": meta}})
            }
            WatchEvent::Error(status) => json!({"type": "ERROR", "object": status}),
        }
    }
}

/// Parameters of a watch.
#[derive(Clone, Debug, Default)]
pub struct WatchParams {
    /// Selectors.
    pub labels: Selector,
    /// Field selector.
    pub fields: FieldSelector,
    /// `resourceVersion`.
    pub resource_version: Option<String>,
    /// `resourceVersionMatch`.
    pub resource_version_match: Option<String>,
    /// `allowWatchBookmarks`.
    pub bookmarks: bool,
    /// `sendInitialEvents`.
    pub send_initial_events: Option<bool>,
    /// How often to send bookmarks.
    pub bookmark_interval: Duration,
}

impl Registry {
    /// Starts a watch. The stream ends only when the client goes away or on an ERROR event.
    pub async fn watch(
        self: &Arc<Self>,
        def: &ResourceDef,
        ns: Option<&str>,
        params: WatchParams,
    ) -> Result<BoxStream<'static, WatchEvent>> {
        self.check_field_selector(def, &params.fields)?;
        let prefix = def.key_prefix(ns);
        let rv = params.resource_version.clone().filter(|r| !r.is_empty());
        let send_initial = params.send_initial_events;
        if send_initial == Some(true) {
            if params.resource_version_match.as_deref() != Some("NotOlderThan") {
                return Err(ApiError::Invalid {
                    kind: "ListOptions".into(),
                    group: "meta.k8s.io".into(),
                    name: String::new(),
                    causes: vec![crate::strategy::invalid(
                        "resourceVersionMatch",
                        "",
                        "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
                    )],
                });
            }
            if !params.bookmarks {
                return Err(ApiError::Invalid {
                    kind: "ListOptions".into(),
                    group: "meta.k8s.io".into(),
                    name: String::new(),
                    causes: vec![crate::strategy::invalid(
                        "allowWatchBookmarks",
                        "",
                        "sendInitialEvents requires allowWatchBookmarks=true",
                    )],
                });
            }
        }
        // Initial state: for sendInitialEvents, or for a watch without a resourceVersion / "0".
        let initial = match (send_initial, rv.as_deref()) {
            (Some(true), _) => true,
            (Some(false), _) => false,
            (None, None) | (None, Some("0")) => true,
            (None, Some(_)) => false,
        };
        let mut initial_events = Vec::new();
        let start = if initial {
            let page = self
                .list(
                    def,
                    ns,
                    &ListParams {
                        labels: params.labels.clone(),
                        fields: params.fields.clone(),
                        ..Default::default()
                    },
                )
                .await?;
            initial_events = page
                .items
                .into_iter()
                .map(|o| WatchEvent::Object("ADDED", o))
                .collect();
            if send_initial == Some(true) {
                initial_events.push(WatchEvent::Bookmark {
                    revision: page.resource_version,
                    initial_end: true,
                });
            }
            page.resource_version
        } else {
            match rv.as_deref() {
                Some(r) => object::parse_resource_version(r)?,
                None => self.store.current_revision().await?,
            }
        };
        let interval = params.bookmarks.then_some(params.bookmark_interval);
        let changes = match self.store.watch(&prefix, start, interval).await {
            Ok(s) => s,
            Err(StoreError::Compacted {
                requested,
                compacted,
            }) => {
                let err = ApiError::Gone(format!(
                    "too old resource version: {requested} ({compacted})"
                ));
                return Ok(stream::iter(vec![WatchEvent::Error(err.to_status())]).boxed());
            }
            Err(StoreError::FutureRevision { requested, current }) => {
                return Err(ApiError::Timeout(format!(
                    "Too large resource version: {requested}, current: {current}"
                )));
            }
            Err(e) => return Err(e.into()),
        };
        let labels = params.labels;
        let fields = params.fields;
        let bookmarks = params.bookmarks;
        let api_version = def.api_version();
        // A CRD with a conversion webhook: events keep their stored version here and are
        // converted one by one below.
        let converting = def
            .conversion
            .is_some()
            .then(|| self.catalog.get(&def.group, &def.version, &def.plural))
            .flatten();
        let keep_version = converting.is_some();
        let live = changes.filter_map(move |item| {
            futures::future::ready(translate(
                item,
                &labels,
                &fields,
                bookmarks,
                &api_version,
                keep_version,
            ))
        });
        let live = match converting {
            None => live.boxed(),
            Some(def) => {
                let registry = self.clone();
                live.then(move |ev| {
                    let (registry, def) = (registry.clone(), def.clone());
                    async move {
                        let WatchEvent::Object(ty, obj) = ev else {
                            return ev;
                        };
                        match registry.convert(&def, vec![obj], &def.api_version()).await {
                            Ok(mut out) => match out.pop() {
                                Some(o) => WatchEvent::Object(ty, o),
                                None => WatchEvent::Error(
                                    ApiError::Internal("conversion returned no object".into())
                                        .to_status(),
                                ),
                            },
                            Err(e) => WatchEvent::Error(e.to_status()),
                        }
                    }
                })
                .boxed()
            }
        };
        // End the stream after the first ERROR.
        let mut ended = false;
        let live = live.take_while(move |ev| {
            let keep = !ended;
            if matches!(ev, WatchEvent::Error(_)) {
                ended = true;
            }
            futures::future::ready(keep)
        });
        Ok(stream::iter(initial_events).chain(live).boxed())
    }
}

fn translate(
    item: std::result::Result<WatchItem, StoreError>,
    labels: &Selector,
    fields: &FieldSelector,
    bookmarks: bool,
    api_version: &str,
    keep_version: bool,
) -> Option<WatchEvent> {
    let event = match item {
        Ok(WatchItem::Event(e)) => e,
        Ok(WatchItem::Progress(rev)) => {
            return bookmarks.then_some(WatchEvent::Bookmark {
                revision: rev,
                initial_end: false,
            });
        }
        Err(StoreError::Compacted {
            requested,
            compacted,
        }) => {
            let err = ApiError::Gone(format!(
                "too old resource version: {requested} ({compacted})"
            ));
            return Some(WatchEvent::Error(err.to_status()));
        }
        Err(e) => {
            return Some(WatchEvent::Error(
                ApiError::Internal(e.to_string()).to_status(),
            ))
        }
    };
    let decoded = if keep_version {
        object::decode(&event.kv)
    } else {
        object::decode_as(&event.kv, api_version)
    };
    let new = match decoded {
        Ok(v) => v,
        Err(e) => return Some(WatchEvent::Error(e.to_status())),
    };
    // Without selectors every object matches: the previous version need not be decoded
    // (one JSON parse fewer per event and watcher — most watches have none).
    let everything = labels.is_empty() && fields.is_empty();
    let old_matches = if everything {
        event.prev.is_some()
    } else {
        event
            .prev
            .as_ref()
            .and_then(|kv| object::decode_as(kv, api_version).ok())
            .is_some_and(|o| Registry::matches(labels, fields, &o))
    };
    let new_matches = everything || Registry::matches(labels, fields, &new);
    let ty = match (event.kind, old_matches, new_matches) {
        (EventKind::Delete, true, _) => "DELETED",
        (EventKind::Delete, false, _) => return None,
        (EventKind::Create, _, true) => "ADDED",
        (EventKind::Create, _, false) => return None,
        (EventKind::Update, true, true) => "MODIFIED",
        (EventKind::Update, false, true) => "ADDED",
        (EventKind::Update, true, false) => "DELETED",
        (EventKind::Update, false, false) => return None,
    };
    Some(WatchEvent::Object(ty, new))
}
