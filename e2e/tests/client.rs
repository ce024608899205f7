//! kube-rs against a real `fabrik up`: exactly-once ordered watches that resume (also across a
//! restart of the server), 410 beyond `--history`, bookmarks and streaming lists, the runtime
//! `watcher`, optimistic concurrency under concurrent writers, paged lists pinned to one revision
//! while writes happen, and typed round trips for Deployments and Pods.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, ensure, Context, Result};
use e2e::{init_crypto, Fabrik};
use futures::stream::BoxStream;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, PersistentVolumeClaim, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{
    Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, VersionMatch, WatchEvent,
    WatchParams,
};
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

/// How long any single expected event or response may take.
const WAIT: Duration = Duration::from_secs(30);

async fn start(args: &[&str]) -> Result<(Fabrik, Client)> {
    init_crypto();
    let fabrik = Fabrik::start_with(args)?;
    let client = fabrik.client().await?;
    Ok((fabrik, client))
}

/// A ConfigMap labelled `suite=<suite>` with `data.v = <v>`.
fn config_map(name: &str, suite: &str, v: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([("suite".to_string(), suite.to_string())])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("v".to_string(), v.to_string())])),
        ..Default::default()
    }
}

fn rv_of<K: Resource>(obj: &K) -> Result<u64> {
    let rv = obj
        .meta()
        .resource_version
        .as_deref()
        .context("object without resourceVersion")?;
    rv.parse()
        .with_context(|| format!("resourceVersion {rv:?} is not a number"))
}

fn data_v(cm: &ConfigMap) -> String {
    cm.data
        .as_ref()
        .and_then(|d| d.get("v"))
        .cloned()
        .unwrap_or_default()
}

/// The status code of an API error, if it is one.
fn api_status(err: &kube::Error) -> Option<(u16, &str)> {
    match err {
        kube::Error::Api(s) => Some((s.code, s.reason.as_str())),
        _ => None,
    }
}

/// The next item of a stream, failing after [`WAIT`] or at its end.
async fn next<T>(stream: &mut BoxStream<'static, T>) -> Result<T> {
    tokio::time::timeout(WAIT, stream.next())
        .await
        .context("nothing arrived on the stream in time")?
        .context("the stream ended")
}

/// One write as made, or one event as watched.
#[derive(Clone, Debug)]
struct Change {
    ty: &'static str,
    name: String,
    v: String,
    /// Known for everything watched, and for creates and updates made.
    rv: Option<u64>,
}

/// Makes the writes numbered `range` to ConfigMaps labelled `suite=<suite>`: every fourth write
/// creates an object, the next two update it, the fourth deletes it. Reports progress on `progress`.
async fn write_changes(
    api: Api<ConfigMap>,
    suite: &'static str,
    range: std::ops::Range<usize>,
    progress: watch::Sender<usize>,
) -> Result<Vec<Change>> {
    let mut out = Vec::new();
    for i in range {
        let name = format!("{suite}-{:03}", i / 4);
        let v = i.to_string();
        let change = match i % 4 {
            0 => {
                let c = api
                    .create(&PostParams::default(), &config_map(&name, suite, &v))
                    .await?;
                Change {
                    ty: "ADDED",
                    name,
                    v,
                    rv: Some(rv_of(&c)?),
                }
            }
            1 | 2 => {
                let patch = Patch::Merge(json!({"data": {"v": v}}));
                let c = api.patch(&name, &PatchParams::default(), &patch).await?;
                ensure!(data_v(&c) == v, "patch of {name} returned {c:?}");
                Change {
                    ty: "MODIFIED",
                    name,
                    v,
                    rv: Some(rv_of(&c)?),
                }
            }
            _ => {
                api.delete(&name, &DeleteParams::default()).await?;
                // A DELETED event carries the object's last state.
                Change {
                    ty: "DELETED",
                    name,
                    v: (i - 1).to_string(),
                    rv: None,
                }
            }
        };
        out.push(change);
        progress.send_replace(out.len());
    }
    Ok(out)
}

/// Watches `suite=<suite>` from `from_rv` until `seen` holds `until` object events; returns the
/// resourceVersion to resume from (of the last event or a later bookmark).
async fn watch_changes(
    api: &Api<ConfigMap>,
    suite: &str,
    from_rv: &str,
    seen: &mut Vec<Change>,
    until: usize,
) -> Result<String> {
    let wp = WatchParams::default()
        .labels(&format!("suite={suite}"))
        .timeout(120);
    let mut stream = api.watch(&wp, from_rv).await?.boxed();
    let mut last = from_rv.to_string();
    let mut last_num: u64 = from_rv.parse()?;
    while seen.len() < until {
        let (ty, obj) = match next(&mut stream).await?? {
            WatchEvent::Added(o) => ("ADDED", o),
            WatchEvent::Modified(o) => ("MODIFIED", o),
            WatchEvent::Deleted(o) => ("DELETED", o),
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse()?;
                ensure!(
                    rv >= last_num,
                    "bookmark at {rv} after an event at {last_num}"
                );
                last = b.metadata.resource_version;
                last_num = rv;
                continue;
            }
            WatchEvent::Error(s) => bail!("watch from {from_rv} failed: {s:?}"),
        };
        let rv = rv_of(&obj)?;
        seen.push(Change {
            ty,
            name: obj.name_any(),
            v: data_v(&obj),
            rv: Some(rv),
        });
        last = rv.to_string();
        last_num = rv;
    }
    Ok(last)
}

/// The watched events are exactly the writes, each once, in order, with strictly increasing
/// resourceVersions that match those the writes returned.
fn check_exactly_once(wrote: &[Change], seen: &[Change]) -> Result<()> {
    ensure!(
        seen.len() == wrote.len(),
        "wrote {} changes, watched {}",
        wrote.len(),
        seen.len()
    );
    for (i, (w, s)) in wrote.iter().zip(seen).enumerate() {
        ensure!(
            w.ty == s.ty && w.name == s.name && w.v == s.v,
            "change {i}: wrote {w:?}, watched {s:?}"
        );
        if let Some(rv) = w.rv {
            ensure!(s.rv == Some(rv), "change {i}: wrote at {rv}, watched {s:?}");
        }
    }
    for pair in seen.windows(2) {
        ensure!(
            pair[0].rv < pair[1].rv,
            "resourceVersions out of order: {:?} then {:?}",
            pair[0],
            pair[1]
        );
    }
    Ok(())
}

async fn list_rv(api: &Api<ConfigMap>) -> Result<String> {
    let list = api.list(&ListParams::default()).await?;
    list.metadata
        .resource_version
        .context("list without resourceVersion")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_resumes_exactly_once_in_order() -> Result<()> {
    let (_fabrik, client) = start(&[]).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let start_rv = list_rv(&cms).await?;
    let (tx, mut progress) = watch::channel(0);
    let writer = tokio::spawn(write_changes(cms.clone(), "once", 0..200, tx));

    // Three watches: each dropped midway, and writes go on while none is open.
    let mut seen = Vec::new();
    let mut rv = start_rv;
    for until in [60, 130] {
        rv = watch_changes(&cms, "once", &rv, &mut seen, until).await?;
        tokio::time::timeout(WAIT, progress.wait_for(|n| *n >= until + 25))
            .await
            .context("writer stalled")?
            .context("writer stopped")?;
    }
    watch_changes(&cms, "once", &rv, &mut seen, 200).await?;
    let wrote = writer.await??;
    check_exactly_once(&wrote, &seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_resumes_exactly_once_across_server_restart() -> Result<()> {
    let (mut fabrik, client) = start(&[]).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let start_rv = list_rv(&cms).await?;
    let (tx, _progress) = watch::channel(0);
    let writer = tokio::spawn(write_changes(cms.clone(), "restart", 0..100, tx));
    let mut seen = Vec::new();
    // Stop watching before the writer is done: the rest must come from the new process.
    let rv = watch_changes(&cms, "restart", &start_rv, &mut seen, 60).await?;
    let mut wrote = writer.await??;

    tokio::task::block_in_place(|| fabrik.restart())?;
    let client = fabrik.client().await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let (tx, _progress) = watch::channel(0);
    let writer = tokio::spawn(write_changes(cms.clone(), "restart", 100..200, tx));
    watch_changes(&cms, "restart", &rv, &mut seen, 200).await?;
    wrote.extend(writer.await??);
    check_exactly_once(&wrote, &seen)
}

#[tokio::test]
async fn history_beyond_limit_is_gone() -> Result<()> {
    let (_fabrik, client) = start(&["--history", "50"]).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    for i in 0..10 {
        cms.create(
            &PostParams::default(),
            &config_map(&format!("page-{i}"), "page", "0"),
        )
        .await?;
    }
    let lp = ListParams::default().labels("suite=page").limit(3);
    let first = cms.list(&lp).await?;
    ensure!(first.items.len() == 3, "first page: {:?}", first.items);
    let token = first
        .metadata
        .continue_
        .clone()
        .filter(|t| !t.is_empty())
        .context("no continue token")?;
    let early = first
        .metadata
        .resource_version
        .clone()
        .context("page without resourceVersion")?;
    // Within history the token works.
    let second = cms.list(&lp.clone().continue_token(&token)).await?;
    ensure!(
        second.items.len() == 3
            && second.metadata.resource_version.as_deref() == Some(early.as_str())
    );

    cms.create(&PostParams::default(), &config_map("churn", "churn", "0"))
        .await?;
    let mut rvs = Vec::new();
    for i in 1..=80 {
        let patch = Patch::Merge(json!({"data": {"v": i.to_string()}}));
        rvs.push(rv_of(
            &cms.patch("churn", &PatchParams::default(), &patch).await?,
        )?);
    }

    // A watch from before the history: one ERROR event with a 410 Status, then the end.
    let mut w = cms.watch(&WatchParams::default(), &early).await?.boxed();
    match next(&mut w).await? {
        Ok(WatchEvent::Error(s)) => ensure!(s.code == 410 && s.reason == "Expired", "{s:?}"),
        Err(e) => ensure!(api_status(&e).map(|s| s.0) == Some(410), "{e:?}"),
        Ok(other) => bail!("expected a 410 ERROR event, got {other:?}"),
    }
    let end = tokio::time::timeout(WAIT, w.next())
        .await
        .context("watch did not end after its ERROR")?;
    ensure!(end.is_none(), "events after the ERROR: {end:?}");

    // A watch from within the history still replays it.
    let mut w = cms
        .watch(&WatchParams::default(), &rvs[74].to_string())
        .await?
        .boxed();
    match next(&mut w).await?? {
        WatchEvent::Modified(c) => ensure!(data_v(&c) == "76" && rv_of(&c)? == rvs[75], "{c:?}"),
        other => bail!("expected the 76th update, got {other:?}"),
    }

    // The continue token from before the history: 410 Expired.
    match cms.list(&lp.clone().continue_token(&token)).await {
        Err(e) => ensure!(api_status(&e) == Some((410, "Expired")), "{e:?}"),
        Ok(page) => bail!("an expired continue token listed {:?}", page.items),
    }
    // A fresh list still works.
    ensure!(
        cms.list(&ListParams::default().labels("suite=page"))
            .await?
            .items
            .len()
            == 10
    );
    Ok(())
}

#[tokio::test]
async fn bookmarks_and_streaming_lists() -> Result<()> {
    let (_fabrik, client) = start(&["--watch-bookmark-interval", "1"]).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");

    // A bookmark after an event is at or past that event.
    let rv0: u64 = list_rv(&cms).await?.parse()?;
    let wp = WatchParams::default().labels("suite=bm").timeout(60);
    let mut w = cms.watch(&wp, &rv0.to_string()).await?.boxed();
    let created = rv_of(
        &cms.create(&PostParams::default(), &config_map("bm-1", "bm", "1"))
            .await?,
    )?;
    let mut added = None;
    loop {
        match next(&mut w).await?? {
            WatchEvent::Added(c) => {
                ensure!(
                    c.name_any() == "bm-1" && added.is_none(),
                    "unexpected {c:?}"
                );
                ensure!(rv_of(&c)? == created);
                added = Some(created);
            }
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse()?;
                ensure!(rv >= rv0, "bookmark at {rv} before the watch's start {rv0}");
                ensure!(
                    b.types.kind == "ConfigMap" && b.types.api_version == "v1",
                    "{:?}",
                    b.types
                );
                if let Some(a) = added {
                    ensure!(rv >= a, "bookmark at {rv} after an event at {a}");
                    break;
                }
            }
            other => bail!("unexpected {other:?}"),
        }
    }
    drop(w);

    // sendInitialEvents: the current objects as ADDED, then the initial-events-end bookmark.
    let mut want = BTreeSet::new();
    for name in ["sl-a", "sl-b", "sl-c"] {
        cms.create(&PostParams::default(), &config_map(name, "sl", "0"))
            .await?;
        want.insert(name.to_string());
    }
    let wp = WatchParams::streaming_lists()
        .labels("suite=sl")
        .timeout(60);
    let mut w = cms.watch(&wp, "").await?.boxed();
    let mut initial = BTreeMap::new();
    let end_rv = loop {
        match next(&mut w).await?? {
            WatchEvent::Added(c) => {
                ensure!(
                    initial.insert(c.name_any(), rv_of(&c)?).is_none(),
                    "{} twice",
                    c.name_any()
                );
            }
            WatchEvent::Bookmark(b) => {
                let rv: u64 = b.metadata.resource_version.parse()?;
                let end = b
                    .metadata
                    .annotations
                    .get("k8s.io/initial-events-end")
                    .map(String::as_str);
                ensure!(
                    end == Some("true"),
                    "first bookmark is not the end of initial events: {:?}",
                    b.metadata.annotations
                );
                break rv;
            }
            other => bail!("unexpected {other:?}"),
        }
    };
    ensure!(
        initial.keys().cloned().collect::<BTreeSet<_>>() == want,
        "initial events: {initial:?}"
    );
    ensure!(
        initial.values().all(|rv| *rv <= end_rv),
        "initial {initial:?} after the bookmark at {end_rv}"
    );
    let d = rv_of(
        &cms.create(&PostParams::default(), &config_map("sl-d", "sl", "0"))
            .await?,
    )?;
    loop {
        match next(&mut w).await?? {
            WatchEvent::Added(c) => {
                ensure!(
                    c.name_any() == "sl-d" && rv_of(&c)? == d && d > end_rv,
                    "{c:?}"
                );
                break;
            }
            WatchEvent::Bookmark(b) => {
                ensure!(
                    !b.metadata
                        .annotations
                        .contains_key("k8s.io/initial-events-end"),
                    "a second end bookmark"
                );
            }
            other => bail!("unexpected {other:?}"),
        }
    }
    Ok(())
}

/// Runs `kube::runtime::watcher` over `suite=<suite>`: the initial state holds exactly the object
/// made before, and an object made after initialisation arrives as an Apply.
async fn watcher_sees_changes(
    client: Client,
    config: watcher::Config,
    suite: &'static str,
) -> Result<()> {
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let before = format!("{suite}-before");
    let after = format!("{suite}-after");
    cms.create(&PostParams::default(), &config_map(&before, suite, "0"))
        .await?;
    let mut events = watcher(cms.clone(), config.labels(&format!("suite={suite}"))).boxed();
    let mut initial = BTreeSet::new();
    loop {
        match next(&mut events).await?? {
            watcher::Event::Init => {}
            watcher::Event::InitApply(c) => {
                initial.insert(c.name_any());
            }
            watcher::Event::InitDone => break,
            other => bail!("{suite}: {other:?} before the initial state was complete"),
        }
    }
    ensure!(
        initial == BTreeSet::from([before.clone()]),
        "{suite}: initial state {initial:?}"
    );
    cms.create(&PostParams::default(), &config_map(&after, suite, "1"))
        .await?;
    match next(&mut events).await?? {
        watcher::Event::Apply(c) => {
            ensure!(c.name_any() == after && data_v(&c) == "1", "{suite}: {c:?}")
        }
        other => bail!("{suite}: expected {after} applied, got {other:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn runtime_watcher_list_watch_and_streaming_list() -> Result<()> {
    let (_fabrik, client) = start(&[]).await?;
    watcher_sees_changes(client.clone(), watcher::Config::default(), "listwatch").await?;
    watcher_sees_changes(
        client,
        watcher::Config::default().streaming_lists(),
        "streaming",
    )
    .await
}

/// Increments `data.n` of `counter` `times` times by read-modify-write, retrying on 409.
/// Returns how many conflicts it met.
async fn increment(api: Api<ConfigMap>, times: usize) -> Result<usize> {
    let mut conflicts = 0;
    for _ in 0..times {
        let mut tries = 0;
        loop {
            tries += 1;
            ensure!(tries <= 1000, "no successful increment in 1000 tries");
            let mut cm = api.get("counter").await?;
            let n: u64 = cm
                .data
                .as_ref()
                .and_then(|d| d.get("n"))
                .context("counter without n")?
                .parse()?;
            cm.data
                .get_or_insert_with(BTreeMap::new)
                .insert("n".into(), (n + 1).to_string());
            match api.replace("counter", &PostParams::default(), &cm).await {
                Ok(_) => break,
                Err(e) if api_status(&e).map(|s| s.0) == Some(409) => conflicts += 1,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(conflicts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn optimistic_concurrency_loses_no_update() -> Result<()> {
    let (_fabrik, client) = start(&[]).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "default");
    let mut counter = config_map("counter", "occ", "0");
    counter.data = Some(BTreeMap::from([("n".to_string(), "0".to_string())]));
    let created = cms.create(&PostParams::default(), &counter).await?;

    // A replace carrying the current resourceVersion succeeds; one carrying a stale one is refused.
    let mut fresh = created.clone();
    fresh.data = Some(BTreeMap::from([
        ("n".to_string(), "0".to_string()),
        ("fresh".to_string(), "yes".to_string()),
    ]));
    let replaced = cms
        .replace("counter", &PostParams::default(), &fresh)
        .await?;
    ensure!(rv_of(&replaced)? > rv_of(&created)?);
    let mut stale = created.clone();
    stale.data = Some(BTreeMap::from([("n".to_string(), "99".to_string())]));
    match cms.replace("counter", &PostParams::default(), &stale).await {
        Err(e) => ensure!(api_status(&e) == Some((409, "Conflict")), "{e:?}"),
        Ok(c) => bail!("a stale replace succeeded: {c:?}"),
    }
    let now = cms.get("counter").await?;
    ensure!(
        now.data == replaced.data && rv_of(&now)? == rv_of(&replaced)?,
        "the stale replace changed {now:?}"
    );

    const WRITERS: usize = 16;
    const TIMES: usize = 10;
    let tasks: Vec<_> = (0..WRITERS)
        .map(|_| tokio::spawn(increment(cms.clone(), TIMES)))
        .collect();
    let mut conflicts = 0;
    for t in tasks {
        conflicts += t.await??;
    }
    let done = cms.get("counter").await?;
    let n = done
        .data
        .as_ref()
        .and_then(|d| d.get("n"))
        .cloned()
        .unwrap_or_default();
    ensure!(
        n == (WRITERS * TIMES).to_string(),
        "counter is {n} after {} increments ({conflicts} conflicts)",
        WRITERS * TIMES
    );
    Ok(())
}

/// Writes to the paged collection until `stop`: creates objects sorting after every listed one,
/// deletes listed objects from the end (then the ones it created), updates listed objects.
async fn churn(
    api: Api<ConfigMap>,
    progress: watch::Sender<usize>,
    stop: Arc<AtomicBool>,
) -> Result<usize> {
    let mut i = 0;
    while !stop.load(Ordering::SeqCst) {
        let k = i / 3;
        match i % 3 {
            0 => {
                let extra = config_map(&format!("item-999-{i:05}"), "churn", "new");
                api.create(&PostParams::default(), &extra).await?;
            }
            1 if k < 150 => {
                api.delete(&format!("item-{:03}", 299 - k), &DeleteParams::default())
                    .await?;
            }
            1 => {
                api.delete(&format!("item-999-{:05}", i - 1), &DeleteParams::default())
                    .await?;
            }
            _ => {
                let patch = Patch::Merge(json!({"data": {"v": format!("changed-{i}")}}));
                api.patch(
                    &format!("item-{:03}", k % 150),
                    &PatchParams::default(),
                    &patch,
                )
                .await?;
            }
        }
        i += 1;
        progress.send_replace(i);
    }
    Ok(i)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn paged_list_is_consistent_while_writes_happen() -> Result<()> {
    let (_fabrik, client) = start(&[]).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some("paging".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    namespaces.create(&PostParams::default(), &ns).await?;
    let cms: Api<ConfigMap> = Api::namespaced(client, "paging");
    let created: Vec<Result<ConfigMap, kube::Error>> = futures::stream::iter(0..300)
        .map(|i| {
            let cms = cms.clone();
            async move {
                cms.create(
                    &PostParams::default(),
                    &config_map(&format!("item-{i:03}"), "page", "orig"),
                )
                .await
            }
        })
        .buffer_unordered(16)
        .collect()
        .await;
    for c in created {
        c?;
    }

    const LIMIT: u32 = 25;
    let first = cms.list(&ListParams::default().limit(LIMIT)).await?;
    let pinned = first
        .metadata
        .resource_version
        .clone()
        .context("page without resourceVersion")?;
    let (tx, mut progress) = watch::channel(0);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = tokio::spawn(churn(cms.clone(), tx, stop.clone()));

    let mut pages = vec![first];
    while let Some(token) = pages
        .last()
        .and_then(|p| p.metadata.continue_.clone())
        .filter(|t| !t.is_empty())
    {
        ensure!(pages.len() < 100, "paging does not end");
        // At least one more concurrent write between any two pages.
        tokio::time::timeout(WAIT, progress.changed())
            .await
            .context("churn stalled")?
            .context("churn stopped")?;
        pages.push(
            cms.list(&ListParams::default().limit(LIMIT).continue_token(&token))
                .await?,
        );
    }
    stop.store(true, Ordering::SeqCst);
    let churned = writer.await??;
    ensure!(
        churned >= pages.len() - 1,
        "only {churned} writes while paging"
    );

    // The collection as of the pinned revision.
    let exact = cms
        .list(
            &ListParams::default()
                .at(&pinned)
                .matching(VersionMatch::Exact),
        )
        .await?;
    let expected: BTreeSet<String> = exact.items.iter().map(|c| c.name_any()).collect();
    let items: BTreeSet<String> = (0..300).map(|i| format!("item-{i:03}")).collect();
    ensure!(
        items.is_subset(&expected),
        "the pinned revision lacks listed items"
    );
    ensure!(
        expected.iter().all(|n| !n.starts_with("item-999-")),
        "the pinned revision has churned items"
    );

    let total = expected.len();
    let mut seen = Vec::new();
    for (i, page) in pages.iter().enumerate() {
        ensure!(
            page.metadata.resource_version.as_deref() == Some(pinned.as_str()),
            "page {i} at {:?}, not {pinned}",
            page.metadata.resource_version
        );
        let last = i + 1 == pages.len();
        for c in &page.items {
            ensure!(
                data_v(c) == "orig" || !c.name_any().starts_with("item-"),
                "page {i} shows a later write: {c:?}"
            );
            seen.push(c.name_any());
        }
        if last {
            ensure!(
                page.metadata.remaining_item_count.unwrap_or(0) == 0,
                "last page: {:?}",
                page.metadata
            );
        } else {
            ensure!(
                page.items.len() == LIMIT as usize,
                "page {i} has {} items",
                page.items.len()
            );
            let remaining = (total - seen.len()) as i64;
            ensure!(
                page.metadata.remaining_item_count == Some(remaining),
                "page {i}: remainingItemCount {:?}, want {remaining}",
                page.metadata.remaining_item_count
            );
        }
    }
    let unique: BTreeSet<String> = seen.iter().cloned().collect();
    ensure!(unique.len() == seen.len(), "duplicates across pages");
    ensure!(
        unique == expected,
        "pages differ from the pinned collection: missing {:?}, extra {:?}",
        expected.difference(&unique).collect::<Vec<_>>(),
        unique.difference(&expected).collect::<Vec<_>>()
    );
    ensure!(
        pages.len() == total.div_ceil(LIMIT as usize),
        "{} pages for {total} objects",
        pages.len()
    );

    // The churn is visible to a fresh list.
    let now: BTreeSet<String> = cms
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|c| c.name_any())
        .collect();
    ensure!(now != expected, "the concurrent writes are not visible");
    Ok(())
}

fn generation(d: &Deployment) -> i64 {
    d.metadata.generation.unwrap_or(0)
}

fn containers(d: &Deployment) -> Vec<(String, Option<String>, usize)> {
    d.spec
        .template
        .spec
        .as_ref()
        .map(|p| {
            p.containers
                .iter()
                .map(|c| {
                    (
                        c.name.clone(),
                        c.image.clone(),
                        c.ports.as_ref().map_or(0, Vec::len),
                    )
                })
                .collect()
        })
        .unwrap_or_default()
}

fn replicas(d: &Deployment) -> Option<i32> {
    d.spec.replicas
}

#[tokio::test]
async fn deployment_round_trip() -> Result<()> {
    let (_fabrik, client) = start(&[]).await?;
    let deploys: Api<Deployment> = Api::namespaced(client.clone(), "default");
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [
                    {"name": "web", "image": "nginx:1.25", "ports": [{"containerPort": 80}]},
                    {"name": "sidecar", "image": "busybox:1.36"}
                ]}
            }
        }
    }))?;
    let created = deploys.create(&PostParams::default(), &d).await?;
    ensure!(
        created.metadata.uid.is_some() && generation(&created) == 1,
        "{:?}",
        created.metadata
    );
    let got = deploys.get("web").await?;
    // The Deployment controller may already have written status (a newer resourceVersion).
    ensure!(got.metadata.uid == created.metadata.uid && rv_of(&got)? >= rv_of(&created)?);
    ensure!(containers(&got).len() == 2, "{:?}", containers(&got));

    // Strategic merge: containers merge by name; the other container and the ports stay.
    let patch = json!({"spec": {"template": {"spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}}}});
    let s = deploys
        .patch("web", &PatchParams::default(), &Patch::Strategic(patch))
        .await?;
    ensure!(
        containers(&s)
            == vec![
                ("web".into(), Some("nginx:1.27".into()), 1),
                ("sidecar".into(), Some("busybox:1.36".into()), 0)
            ],
        "strategic merge: {:?}",
        containers(&s)
    );
    ensure!(
        generation(&s) == 2,
        "generation after a spec change: {}",
        generation(&s)
    );

    // Merge patch of metadata only: no new generation.
    let patch = json!({"metadata": {"labels": {"tier": "frontend"}, "annotations": {"note": "x"}}});
    let m = deploys
        .patch("web", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    let labels = m.labels();
    ensure!(
        labels.get("tier").map(String::as_str) == Some("frontend")
            && labels.get("app").map(String::as_str) == Some("web"),
        "{labels:?}"
    );
    ensure!(m.annotations().get("note").map(String::as_str) == Some("x") && generation(&m) == 2);

    // JSON patch with a test operation.
    let ops = json!([
        {"op": "test", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/replicas", "value": 2},
        {"op": "remove", "path": "/spec/template/spec/containers/1"}
    ]);
    let j = deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(ops)?),
        )
        .await?;
    ensure!(
        replicas(&j) == Some(2) && containers(&j).len() == 1 && generation(&j) == 3,
        "json patch: {j:?}"
    );
    let failing = json!([{"op": "test", "path": "/spec/replicas", "value": 7}, {"op": "replace", "path": "/spec/replicas", "value": 8}]);
    match deploys
        .patch(
            "web",
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(failing)?),
        )
        .await
    {
        Err(e) => ensure!(
            api_status(&e).is_some_and(|s| (400..500).contains(&s.0)),
            "{e:?}"
        ),
        Ok(d) => bail!("a failing test operation patched {d:?}"),
    }
    ensure!(replicas(&deploys.get("web").await?) == Some(2));

    // Scale: read, replace, patch.
    let scale = deploys.get_scale("web").await?;
    ensure!(
        scale.spec.as_ref().and_then(|s| s.replicas) == Some(2),
        "{scale:?}"
    );
    // The Deployment controller writes the object too: like any client, re-read on a 409.
    let mut attempt = 0;
    let replaced = loop {
        let mut scale3 = deploys.get_scale("web").await?;
        scale3.spec.get_or_insert_with(Default::default).replicas = Some(3);
        match deploys
            .replace_scale("web", &PostParams::default(), &scale3)
            .await
        {
            Err(e) if api_status(&e).map(|s| s.0) == Some(409) && attempt < 20 => attempt += 1,
            other => break other?,
        }
    };
    ensure!(
        replaced.spec.as_ref().and_then(|s| s.replicas) == Some(3),
        "{replaced:?}"
    );
    ensure!(replicas(&deploys.get("web").await?) == Some(3));
    match deploys
        .replace_scale("web", &PostParams::default(), &scale)
        .await
    {
        Err(e) => ensure!(
            api_status(&e).map(|s| s.0) == Some(409),
            "stale scale: {e:?}"
        ),
        Ok(s) => bail!("a stale scale replace succeeded: {s:?}"),
    }
    let patched = deploys
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 4}})),
        )
        .await?;
    ensure!(patched.spec.as_ref().and_then(|s| s.replicas) == Some(4));
    ensure!(replicas(&deploys.get("web").await?) == Some(4));

    // Status writes change only status, and main writes keep it. Checked on a kind no
    // controller writes the status of (the Deployment's status belongs to its controller).
    let pvcs: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), "default");
    let claim: PersistentVolumeClaim = serde_json::from_value(json!({
        "metadata": {"name": "data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    }))?;
    let before_status = pvcs.create(&PostParams::default(), &claim).await?;
    let mut st = before_status.clone();
    st.status = Some(serde_json::from_value(
        json!({"phase": "Bound", "capacity": {"storage": "1Gi"}}),
    )?);
    st.spec.get_or_insert_with(Default::default).volume_name = Some("changed".into());
    st.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert("via".into(), "status".into());
    let after = pvcs
        .replace_status("data", &PostParams::default(), &st)
        .await?;
    ensure!(
        after
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .is_none(),
        "status write changed spec: {after:?}"
    );
    ensure!(
        !after.labels().contains_key("via"),
        "status write changed labels"
    );
    ensure!(
        after.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound"),
        "{:?}",
        after.status
    );
    let patch = json!({"spec": {"volumeName": "x"}, "status": {"phase": "Lost"}});
    let after = pvcs
        .patch_status("data", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    ensure!(
        after
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .is_none()
            && after.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost"),
        "{after:?}"
    );
    let patch = json!({"status": {"phase": "Pending"}, "metadata": {"labels": {"main": "yes"}}});
    let main = pvcs
        .patch("data", &PatchParams::default(), &Patch::Merge(patch))
        .await?;
    ensure!(
        main.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost")
            && main.labels().contains_key("main"),
        "{main:?}"
    );

    deploys.delete("web", &DeleteParams::default()).await?;
    match deploys.get("web").await {
        Err(e) => ensure!(api_status(&e) == Some((404, "NotFound")), "{e:?}"),
        Ok(d) => bail!("still there after delete: {d:?}"),
    }
    Ok(())
}

#[tokio::test]
async fn pods_list_with_label_and_field_selectors() -> Result<()> {
    // No simulated nodes: nothing may start these pods while the test reads their phases.
    let (_fabrik, client) = start(&["--nodes", "0"]).await?;
    let pods: Api<Pod> = Api::namespaced(client, "default");
    for (name, app) in [("p-a1", "a"), ("p-a2", "a"), ("p-b1", "b")] {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"app": app}},
            "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]}
        }))?;
        let p = pods.create(&PostParams::default(), &pod).await?;
        let phase = p.status.as_ref().and_then(|s| s.phase.clone());
        ensure!(
            phase.as_deref() == Some("Pending"),
            "{name} created with phase {phase:?}"
        );
    }
    let names = |list: kube::core::ObjectList<Pod>| {
        list.items
            .iter()
            .map(|p| p.name_any())
            .collect::<BTreeSet<_>>()
    };
    let set = |ns: &[&str]| ns.iter().map(|n| n.to_string()).collect::<BTreeSet<_>>();

    ensure!(
        names(pods.list(&ListParams::default().labels("app=a")).await?) == set(&["p-a1", "p-a2"])
    );
    ensure!(
        names(
            pods.list(&ListParams::default().labels("app in (a,b),app!=a"))
                .await?
        ) == set(&["p-b1"])
    );
    ensure!(
        names(
            pods.list(&ListParams::default().fields("status.phase=Pending"))
                .await?
        ) == set(&["p-a1", "p-a2", "p-b1"])
    );

    pods.patch_status(
        "p-a2",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"phase": "Running"}})),
    )
    .await?;
    let lp = ListParams::default()
        .labels("app=a")
        .fields("status.phase=Pending");
    ensure!(names(pods.list(&lp).await?) == set(&["p-a1"]));
    ensure!(
        names(
            pods.list(&ListParams::default().fields("status.phase=Running"))
                .await?
        ) == set(&["p-a2"])
    );
    ensure!(
        names(
            pods.list(&ListParams::default().fields("status.phase!=Pending"))
                .await?
        ) == set(&["p-a2"])
    );
    ensure!(
        names(
            pods.list(&ListParams::default().fields("metadata.name=p-b1,status.phase=Pending"))
                .await?
        ) == set(&["p-b1"])
    );
    match pods
        .list(&ListParams::default().fields("spec.nonsense=x"))
        .await
    {
        Err(e) => ensure!(api_status(&e).map(|s| s.0) == Some(400), "{e:?}"),
        Ok(l) => bail!("an unsupported field selector listed {:?}", l.items),
    }
    Ok(())
}
