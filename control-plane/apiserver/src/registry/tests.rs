//! Registry semantics against a real sled store in a temporary directory.

use std::sync::Arc;

use fabrik_machinery::labels::Selector;
use fabrik_store::{SledBackend, SledConfig, Store};
use serde_json::{json, Value};

use super::*;
use crate::negotiation::BodyType;
use crate::resources::Catalog;

struct Fixture {
    _dir: tempfile::TempDir,
    reg: Registry,
}

async fn fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
    let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
    let reg = Registry::new(store, Arc::new(Catalog::builtin()));
    crate::cluster::bootstrap(&reg).await.expect("bootstrap");
    Fixture { _dir: dir, reg }
}

fn def(reg: &Registry, group: &str, plural: &str) -> Arc<ResourceDef> {
    reg.catalog().get(group, "v1", plural).expect("served")
}

fn cm(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "labels": {"app": "a"}}, "data": {"k": "v"}})
}

fn deploy(name: &str) -> Value {
    json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name}, "spec": {
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    }})
}

#[tokio::test]
async fn create_sets_server_fields_and_refuses_duplicates() {
    let f = fixture().await;
    let d = def(&f.reg, "", "configmaps");
    let w = f
        .reg
        .create(&d, Some("default"), cm("a"), &WriteOptions::default())
        .await
        .expect("create");
    let meta = &w.object["metadata"];
    assert!(meta["uid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(meta["creationTimestamp"].is_string());
    assert_eq!(meta["namespace"], "default");
    assert!(meta["resourceVersion"]
        .as_str()
        .is_some_and(|rv| rv.parse::<u64>().is_ok()));
    let err = f
        .reg
        .create(&d, Some("default"), cm("a"), &WriteOptions::default())
        .await
        .expect_err("duplicate");
    assert_eq!(err.code(), 409);
    assert_eq!(err.reason(), "AlreadyExists");
    let err = f
        .reg
        .create(&d, Some("missing"), cm("b"), &WriteOptions::default())
        .await
        .expect_err("no namespace");
    assert_eq!(err.code(), 404);
}

#[tokio::test]
async fn generate_name_and_dry_run() {
    let f = fixture().await;
    let d = def(&f.reg, "", "configmaps");
    let obj = json!({"metadata": {"generateName": "gen-"}, "data": {}});
    let w = f
        .reg
        .create(&d, Some("default"), obj.clone(), &WriteOptions::default())
        .await
        .expect("create");
    let name = w.object["metadata"]["name"]
        .as_str()
        .expect("name")
        .to_string();
    assert!(name.starts_with("gen-") && name.len() == 9, "{name}");
    let dry = WriteOptions {
        dry_run: true,
        ..Default::default()
    };
    let w = f
        .reg
        .create(&d, Some("default"), cm("dry"), &dry)
        .await
        .expect("dry run");
    assert_eq!(w.object["metadata"]["name"], "dry");
    assert!(
        f.reg.get(&d, Some("default"), "dry").await.is_err(),
        "dry run stored the object"
    );
}

#[tokio::test]
async fn stale_resource_version_conflicts_and_generation_tracks_spec() {
    let f = fixture().await;
    let d = def(&f.reg, "apps", "deployments");
    let w = f
        .reg
        .create(&d, Some("default"), deploy("web"), &WriteOptions::default())
        .await
        .expect("create");
    assert_eq!(w.object["metadata"]["generation"], 1);
    let rv1 = w.object["metadata"]["resourceVersion"].clone();
    let mut changed = w.object.clone();
    changed["spec"]["replicas"] = json!(3);
    let w2 = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            changed.clone(),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("update");
    assert_eq!(w2.object["metadata"]["generation"], 2);
    // The same update with the old resourceVersion is stale now.
    changed["metadata"]["resourceVersion"] = rv1;
    changed["spec"]["replicas"] = json!(4);
    let err = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            changed,
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect_err("stale");
    assert_eq!((err.code(), err.reason()), (409, "Conflict"));
    // A label change does not bump generation.
    let mut labelled = w2.object.clone();
    labelled["metadata"]["labels"] = json!({"x": "y"});
    let w3 = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            labelled,
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("label");
    assert_eq!(w3.object["metadata"]["generation"], 2);
    // An update that changes nothing writes nothing.
    let w4 = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            w3.object.clone(),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("noop");
    assert_eq!(
        w4.object["metadata"]["resourceVersion"],
        w3.object["metadata"]["resourceVersion"]
    );
}

#[tokio::test]
async fn status_and_main_resource_are_separate() {
    let f = fixture().await;
    let d = def(&f.reg, "apps", "deployments");
    let mut obj = deploy("web");
    obj["status"] = json!({"replicas": 9});
    let w = f
        .reg
        .create(&d, Some("default"), obj, &WriteOptions::default())
        .await
        .expect("create");
    assert!(
        w.object.get("status").is_none(),
        "create kept a client-written status"
    );
    let mut s = w.object.clone();
    s["status"] = json!({"replicas": 2});
    s["spec"]["replicas"] = json!(50);
    let w = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            s,
            Part::Status,
            &WriteOptions::default(),
        )
        .await
        .expect("status");
    assert_eq!(w.object["status"]["replicas"], 2);
    assert_eq!(
        w.object["spec"]["replicas"], 1,
        "a status write changed the spec"
    );
    let mut m = w.object.clone();
    m["status"] = json!({"replicas": 7});
    m["spec"]["replicas"] = json!(3);
    let w = f
        .reg
        .update(
            &d,
            Some("default"),
            "web",
            m,
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("main");
    assert_eq!(
        (
            w.object["spec"]["replicas"].clone(),
            w.object["status"]["replicas"].clone()
        ),
        (json!(3), json!(2))
    );
}

#[tokio::test]
async fn finalizers_hold_deletion_until_removed() {
    let f = fixture().await;
    let d = def(&f.reg, "", "configmaps");
    let mut obj = cm("held");
    obj["metadata"]["finalizers"] = json!(["example.com/x"]);
    f.reg
        .create(&d, Some("default"), obj, &WriteOptions::default())
        .await
        .expect("create");
    let (o, gone) = f
        .reg
        .delete(&d, Some("default"), "held", &DeleteOptions::default())
        .await
        .expect("delete");
    assert!(!gone);
    assert!(o["metadata"]["deletionTimestamp"].is_string());
    let err = f
        .reg
        .patch(
            &d,
            Some("default"),
            "held",
            BodyType::MergePatch,
            &json!({"metadata": {"finalizers": ["example.com/x", "new"]}}),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect_err("new finalizer while deleting");
    assert_eq!(err.code(), 403);
    f.reg
        .patch(
            &d,
            Some("default"),
            "held",
            BodyType::MergePatch,
            &json!({"metadata": {"finalizers": null}}),
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("remove finalizer");
    assert_eq!(
        f.reg
            .get(&d, Some("default"), "held")
            .await
            .expect_err("gone")
            .code(),
        404
    );
}

#[tokio::test]
async fn paged_lists_with_selectors_are_complete_and_consistent() {
    let f = fixture().await;
    let d = def(&f.reg, "", "configmaps");
    for i in 0..30 {
        let mut o = cm(&format!("c{i:02}"));
        o["metadata"]["labels"]["parity"] = json!(if i % 2 == 0 { "even" } else { "odd" });
        f.reg
            .create(&d, Some("default"), o, &WriteOptions::default())
            .await
            .expect("create");
    }
    let labels = Selector::parse("parity=even").expect("selector");
    let mut token = None;
    let mut names = Vec::new();
    let mut rvs = Vec::new();
    loop {
        let page = f
            .reg
            .list(
                &d,
                Some("default"),
                &ListParams {
                    labels: labels.clone(),
                    limit: Some(4),
                    continue_token: token.clone(),
                    ..Default::default()
                },
            )
            .await
            .expect("page");
        // A write between pages is not visible to the paged list.
        f.reg
            .create(
                &d,
                Some("default"),
                cm(&format!("late{}", names.len())),
                &WriteOptions::default(),
            )
            .await
            .expect("late");
        rvs.push(page.resource_version);
        names.extend(
            page.items
                .iter()
                .map(|o| o["metadata"]["name"].as_str().unwrap_or("").to_string()),
        );
        match page.continue_token {
            Some(t) => token = Some(t),
            None => break,
        }
    }
    let expected: Vec<String> = (0..30).step_by(2).map(|i| format!("c{i:02}")).collect();
    assert_eq!(names, expected);
    assert!(
        rvs.windows(2).all(|w| w[0] == w[1]),
        "pages at different revisions: {rvs:?}"
    );
    let bad = f
        .reg
        .list(
            &d,
            Some("default"),
            &ListParams {
                continue_token: Some("garbage!".into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(bad.expect_err("garbage token").code(), 400);
}

#[tokio::test]
async fn namespace_deletion_empties_and_removes_it() {
    let f = fixture().await;
    let ns = def(&f.reg, "", "namespaces");
    f.reg
        .create(
            &ns,
            None,
            json!({"metadata": {"name": "team"}}),
            &WriteOptions::default(),
        )
        .await
        .expect("ns");
    let d = def(&f.reg, "", "configmaps");
    f.reg
        .create(&d, Some("team"), cm("a"), &WriteOptions::default())
        .await
        .expect("cm");
    let (o, gone) = f
        .reg
        .delete(&ns, None, "team", &DeleteOptions::default())
        .await
        .expect("delete ns");
    assert!(!gone);
    assert_eq!(o["status"]["phase"], "Terminating");
    let err = f
        .reg
        .create(&d, Some("team"), cm("b"), &WriteOptions::default())
        .await
        .expect_err("terminating");
    assert_eq!(err.code(), 403);
    let waiting = crate::controllers::namespace::reconcile_all(&f.reg)
        .await
        .expect("reconcile");
    assert!(!waiting);
    assert_eq!(
        f.reg.get(&ns, None, "team").await.expect_err("gone").code(),
        404
    );
    assert_eq!(
        f.reg
            .get(&d, Some("team"), "a")
            .await
            .expect_err("content gone")
            .code(),
        404
    );
}

#[tokio::test]
async fn scale_binding_and_eviction() {
    let f = fixture().await;
    let d = def(&f.reg, "apps", "deployments");
    f.reg
        .create(&d, Some("default"), deploy("web"), &WriteOptions::default())
        .await
        .expect("create");
    let scale = f
        .reg
        .update_scale(
            &d,
            Some("default"),
            "web",
            &json!({"spec": {"replicas": 5}}),
            &WriteOptions::default(),
        )
        .await
        .expect("scale");
    assert_eq!(scale["spec"]["replicas"], 5);
    assert_eq!(scale["status"]["selector"], "app=web");
    assert_eq!(
        f.reg
            .update_scale(
                &d,
                Some("default"),
                "web",
                &json!({"spec": {"replicas": -1}}),
                &WriteOptions::default()
            )
            .await
            .expect_err("negative")
            .code(),
        422
    );

    let pods = def(&f.reg, "", "pods");
    let pod = json!({"metadata": {"name": "p", "labels": {"app": "x"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}});
    f.reg
        .create(&pods, Some("default"), pod, &WriteOptions::default())
        .await
        .expect("pod");
    f.reg
        .bind_pod(
            &pods,
            Some("default"),
            "p",
            &json!({"target": {"name": "n1"}}),
        )
        .await
        .expect("bind");
    let err = f
        .reg
        .bind_pod(
            &pods,
            Some("default"),
            "p",
            &json!({"target": {"name": "n2"}}),
        )
        .await
        .expect_err("rebind");
    assert_eq!(err.code(), 409);
    // Running, ready, and protected by a budget that allows no disruption.
    f.reg
        .patch(&pods, Some("default"), "p", BodyType::MergePatch, &json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}}), Part::Status, &WriteOptions::default())
        .await
        .expect("status");
    let pdbs = f
        .reg
        .catalog()
        .get("policy", "v1", "poddisruptionbudgets")
        .expect("pdb");
    f.reg
        .create(&pdbs, Some("default"), json!({"metadata": {"name": "b"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "x"}}}}), &WriteOptions::default())
        .await
        .expect("pdb");
    let err = f
        .reg
        .evict_pod(&pods, Some("default"), "p", &json!({}))
        .await
        .expect_err("budget");
    assert_eq!(err.code(), 429);
}

/// Issue 12, item 11: a tenant over its store quota gets 403 Forbidden naming the limit, the
/// refused object is not stored, and a full tenant can still clean up — also objects with
/// finalizers, whose deletion is an update (`deletionTimestamp`) that grows them.
#[tokio::test]
async fn store_quota_refuses_growth_with_403_and_allows_cleanup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
    let keyspace = backend.keyspace("t").expect("keyspace");
    let store: Arc<dyn Store> = Arc::new(keyspace.clone());
    let reg = Registry::new(store.clone(), Arc::new(Catalog::builtin()));
    crate::cluster::bootstrap(&reg).await.expect("bootstrap");
    let d = def(&reg, "", "configmaps");
    let mut held = cm("held");
    held["metadata"]["finalizers"] = json!(["example.com/x"]);
    reg.create(&d, Some("default"), held, &WriteOptions::default())
        .await
        .expect("create");
    // Room for exactly one more object.
    let used = store.usage().await.expect("usage");
    store
        .set_limits(fabrik_store::StorageLimits {
            bytes: Some(used.bytes + 64 * 1024),
            objects: Some(used.objects + 1),
        })
        .await
        .expect("limits");
    reg.create(&d, Some("default"), cm("fits"), &WriteOptions::default())
        .await
        .expect("one more fits");
    let err = reg
        .create(&d, Some("default"), cm("over"), &WriteOptions::default())
        .await
        .expect_err("over the objects quota");
    assert_eq!((err.code(), err.reason()), (403, "Forbidden"));
    assert!(err.to_string().contains("exceeded quota: objects"), "{err}");
    assert_eq!(
        reg.get(&d, Some("default"), "over")
            .await
            .expect_err("not stored")
            .code(),
        404
    );
    // A value that does not fit in the bytes left (nor in the update grace).
    let mut big = cm("fits");
    big["data"]["k"] = json!("x".repeat(200 * 1024));
    let err = reg
        .update(
            &d,
            Some("default"),
            "fits",
            big,
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect_err("over the bytes quota");
    assert_eq!(err.code(), 403);
    assert!(err.to_string().contains("exceeded quota: storage"), "{err}");
    let kept = reg.get(&d, Some("default"), "fits").await.expect("kept");
    assert_eq!(kept["data"]["k"], "v", "the refused update changed nothing");

    // Full: deletes pass, the finalizer dance too.
    reg.delete(&d, Some("default"), "fits", &DeleteOptions::default())
        .await
        .expect("delete while full");
    let (_, gone) = reg
        .delete(&d, Some("default"), "held", &DeleteOptions::default())
        .await
        .expect("mark for deletion while full");
    assert!(!gone);
    reg.patch(
        &d,
        Some("default"),
        "held",
        BodyType::MergePatch,
        &json!({"metadata": {"finalizers": null}}),
        Part::Main,
        &WriteOptions::default(),
    )
    .await
    .expect("remove the finalizer");
    assert_eq!(
        reg.get(&d, Some("default"), "held")
            .await
            .expect_err("gone")
            .code(),
        404
    );
    // The room freed is usable again.
    reg.create(&d, Some("default"), cm("again"), &WriteOptions::default())
        .await
        .expect("create after cleanup");
    drop(keyspace);
}

/// A source of Service addresses that records what it was asked (the host copies of a tenant
/// cluster, in the tenant manager).
#[derive(Debug, Default)]
struct Recording {
    asked: std::sync::Mutex<Vec<String>>,
}

#[async_trait::async_trait]
impl crate::service_ips::ServiceIps for Recording {
    async fn allocate(&self, svc: &Value) -> Result<Option<String>> {
        let name = svc["metadata"]["name"].as_str().unwrap_or("").to_string();
        let mut asked = self.asked.lock().unwrap_or_else(|e| e.into_inner());
        asked.push(name);
        Ok(Some(format!("192.0.2.{}", asked.len())))
    }
}

#[tokio::test]
async fn service_addresses_come_from_the_source_only_for_admitted_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
    let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
    let source = Arc::new(Recording::default());
    let reg =
        Registry::new(store, Arc::new(Catalog::builtin())).with_service_ips(Some(source.clone()));
    crate::cluster::bootstrap(&reg).await.expect("bootstrap");
    let d = def(&reg, "", "services");
    let svc = |name: &str, spec: Value| json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": spec});
    let asked = || source.asked.lock().map(|a| a.clone()).unwrap_or_default();

    // Admitted: the address is the source's (outside the cluster's own range).
    let w = reg
        .create(
            &d,
            Some("default"),
            svc("web", json!({"ports": [{"port": 80}]})),
            &WriteOptions::default(),
        )
        .await
        .expect("create");
    assert_eq!(w.object["spec"]["clusterIP"], "192.0.2.1");
    assert_eq!(w.object["spec"]["clusterIPs"], json!(["192.0.2.1"]));
    // A dry run, an invalid Service, a headless one and an ExternalName reserve nothing.
    let dry = WriteOptions {
        dry_run: true,
        ..Default::default()
    };
    reg.create(
        &d,
        Some("default"),
        svc("dry", json!({"ports": [{"port": 80}]})),
        &dry,
    )
    .await
    .expect("dry run");
    let invalid = reg
        .create(
            &d,
            Some("default"),
            svc("bad", json!({"ports": [{"port": 0}]})),
            &WriteOptions::default(),
        )
        .await;
    assert!(
        matches!(invalid, Err(ApiError::Invalid { .. })),
        "{invalid:?}"
    );
    reg.create(
        &d,
        Some("default"),
        svc(
            "db",
            json!({"clusterIP": "None", "ports": [{"port": 5432}]}),
        ),
        &WriteOptions::default(),
    )
    .await
    .expect("headless");
    reg.create(
        &d,
        Some("default"),
        svc(
            "ext",
            json!({"type": "ExternalName", "externalName": "example.com"}),
        ),
        &WriteOptions::default(),
    )
    .await
    .expect("external name");
    // A namespace that does not exist is refused by admission, before anything is reserved.
    let refused = reg
        .create(
            &d,
            Some("nowhere"),
            svc("lost", json!({"ports": [{"port": 80}]})),
            &WriteOptions::default(),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert_eq!(asked(), vec!["web".to_string()]);
    // An update keeps the address without asking again.
    let mut changed = w.object.clone();
    changed["spec"]["ports"] = json!([{"port": 8080}]);
    let u = reg
        .update(
            &d,
            Some("default"),
            "web",
            changed,
            Part::Main,
            &WriteOptions::default(),
        )
        .await
        .expect("update");
    assert_eq!(u.object["spec"]["clusterIP"], "192.0.2.1");
    assert_eq!(asked(), vec!["web".to_string()]);
}
