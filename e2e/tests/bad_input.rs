//! Hostile and malformed requests against a real `fabrik up`, sent as raw HTTP through kube-rs:
//! every one is answered with an upstream `meta.k8s.io/v1 Status` (kind `Status`, status
//! `Failure`, the upstream `reason` and `code`), nothing is stored, and the server keeps serving
//! (`/readyz` and a list succeed after each batch).
//!
//! Upstream behaviour each case mirrors is named beside it; where Fabrik answers differently on
//! purpose, the comment says so.

use anyhow::{Context, Result};
use base64::Engine;
use e2e::raw::{failure, get, send, Answer, JSON, JSON_PATCH, MERGE};
use e2e::{init_crypto, Fabrik};
use kube::Client;
use serde_json::{json, Value};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const PODS: &str = "/api/v1/namespaces/default/pods";
const DEPLOYS: &str = "/apis/apps/v1/namespaces/default/deployments";

async fn post_json(client: &Client, path: &str, body: &Value) -> Result<Answer> {
    send(client, "POST", path, Some(JSON), body.to_string()).await
}

fn cause_fields(status: &Value) -> Vec<String> {
    status["details"]["causes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["field"].as_str().map(str::to_string))
        .collect()
}

/// Asserts `path` (one object) does not exist.
async fn absent(client: &Client, path: &str) -> Result<()> {
    let a = get(client, path).await?;
    failure(
        &a,
        404,
        "NotFound",
        &format!("GET {path} after a refused write"),
    );
    Ok(())
}

/// Names of the items a list returns.
async fn names(client: &Client, path: &str) -> Result<Vec<String>> {
    let a = get(client, path).await?;
    assert_eq!(a.code, 200, "list {path}: {}", a.text);
    Ok(created(&a.body["items"]))
}

/// The names of listed objects the tests made: without `kube-root-ca.crt`, which the cluster
/// publishes in every namespace.
fn created(items: &Value) -> Vec<String> {
    items
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|i| i["metadata"]["name"].as_str().map(str::to_string))
        .filter(|n| n != "kube-root-ca.crt")
        .collect()
}

/// The server still serves: `/readyz` is ok and a list succeeds.
async fn still_serving(client: &Client) -> Result<()> {
    let ready = get(client, "/readyz").await?;
    assert_eq!(ready.code, 200, "readyz: {}", ready.text);
    let list = get(client, CM).await?;
    assert_eq!(list.code, 200, "list after bad input: {}", list.text);
    assert_eq!(list.body["kind"], "ConfigMapList");
    Ok(())
}

fn configmap(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}})
}

fn pod(name: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    })
}

async fn start() -> (Fabrik, Client) {
    init_crypto();
    // No simulated nodes: they would start the test's pods, changing objects the tests check
    // were left untouched by refused writes.
    let f = Fabrik::start_with(&["--nodes", "0"]).expect("fabrik up starts");
    let client = f.client().await.expect("kube client");
    (f, client)
}

#[tokio::test]
async fn malformed_bodies_are_bad_requests() -> Result<()> {
    let (_f, c) = start().await;

    // Upstream: a body the decoder cannot read is 400 BadRequest ("couldn't get version/kind;
    // json parse error" and friends), whatever the syntax error.
    let bodies: [(&str, &str, &str); 8] = [
        (
            "truncated JSON",
            JSON,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"broken""#,
        ),
        (
            "JSON with a trailing comma",
            JSON,
            r#"{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"broken",}}"#,
        ),
        ("not JSON at all", JSON, "hello, server"),
        ("an empty body", JSON, ""),
        (
            "a JSON array",
            JSON,
            r#"[{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"broken"}}]"#,
        ),
        ("a JSON string", JSON, r#""broken""#),
        ("a JSON number", JSON, "42"),
        (
            "malformed YAML",
            "application/yaml",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: broken\n data: [unclosed\n",
        ),
    ];
    for (what, ct, body) in bodies {
        let a = send(&c, "POST", CM, Some(ct), body).await?;
        failure(&a, 400, "BadRequest", what);
    }
    let yaml_list = "- apiVersion: v1\n  kind: ConfigMap\n  metadata:\n    name: broken\n";
    let a = send(&c, "POST", CM, Some("application/yaml"), yaml_list).await?;
    failure(&a, 400, "BadRequest", "a YAML sequence");
    absent(&c, &format!("{CM}/broken")).await?;

    // The same checks on PUT to an existing object: it keeps its data.
    post_json(&c, CM, &configmap("kept")).await?;
    let a = send(&c, "PUT", &format!("{CM}/kept"), Some(JSON), "[1, 2]").await?;
    failure(&a, 400, "BadRequest", "PUT of a JSON array");
    let a = send(&c, "PUT", &format!("{CM}/kept"), Some(JSON), "{\"data\":").await?;
    failure(&a, 400, "BadRequest", "PUT of truncated JSON");
    assert_eq!(get(&c, &format!("{CM}/kept")).await?.body["data"]["k"], "v");

    // Upstream: a body whose apiVersion / kind is not the endpoint's is 400 BadRequest
    // ("the API version in the data ... does not match the expected API version").
    let service = json!({
        "apiVersion": "v1", "kind": "Service", "metadata": {"name": "sneaky"},
        "spec": {"ports": [{"port": 80}]},
    });
    let a = post_json(&c, PODS, &service).await?;
    failure(&a, 400, "BadRequest", "a Service posted to pods");
    let mut apps_pod = pod("sneaky");
    apps_pod["apiVersion"] = json!("apps/v1");
    let a = post_json(&c, PODS, &apps_pod).await?;
    failure(&a, 400, "BadRequest", "a Pod with apiVersion apps/v1");
    let mut v2 = configmap("sneaky");
    v2["apiVersion"] = json!("v2");
    let a = post_json(&c, CM, &v2).await?;
    failure(&a, 400, "BadRequest", "a ConfigMap with apiVersion v2");
    let deployment_as_pod = json!({
        "apiVersion": "apps/v1", "kind": "Pod", "metadata": {"name": "sneaky"},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    });
    let a = post_json(&c, DEPLOYS, &deployment_as_pod).await?;
    failure(&a, 400, "BadRequest", "kind Pod posted to deployments");
    // A namespace in the body that is not the one in the path (upstream: 400 BadRequest).
    let mut elsewhere = configmap("sneaky");
    elsewhere["metadata"]["namespace"] = json!("kube-system");
    let a = post_json(&c, CM, &elsewhere).await?;
    failure(
        &a,
        400,
        "BadRequest",
        "a body namespace that differs from the path's",
    );

    absent(&c, &format!("{PODS}/sneaky")).await?;
    absent(&c, &format!("{CM}/sneaky")).await?;
    absent(&c, &format!("{DEPLOYS}/sneaky")).await?;
    absent(&c, "/api/v1/namespaces/default/services/sneaky").await?;
    absent(&c, "/api/v1/namespaces/kube-system/configmaps/sneaky").await?;
    assert!(names(&c, PODS).await?.is_empty());
    still_serving(&c).await
}

#[tokio::test]
async fn invalid_objects_are_422_with_causes() -> Result<()> {
    let (_f, c) = start().await;
    let long = "a".repeat(300);

    // Upstream ValidateObjectMeta: names must be DNS-1123 subdomains (at most 253 characters)
    // and present unless generateName is set; each failure is a cause on metadata.name.
    for (what, name) in [
        ("an underscore and capitals", "Foo_Bar"),
        ("300 characters", long.as_str()),
        ("an empty name", ""),
        ("'..'", ".."),
        ("a leading dot", ".hidden"),
        ("a slash", "a/b"),
    ] {
        let a = post_json(&c, CM, &configmap(name)).await?;
        let s = failure(&a, 422, "Invalid", what);
        assert!(
            cause_fields(s).iter().any(|f| f == "metadata.name"),
            "{what}: causes name metadata.name: {}",
            a.text
        );
        assert_eq!(s["details"]["kind"], "ConfigMap", "{what}: {}", a.text);
    }
    let mut unnamed = configmap("");
    unnamed["metadata"] = json!({});
    let a = post_json(&c, CM, &unnamed).await?;
    let s = failure(&a, 422, "Invalid", "no name and no generateName");
    assert!(
        cause_fields(s).contains(&"metadata.name".to_string()),
        "{}",
        a.text
    );
    let mut bad_generate = configmap("");
    bad_generate["metadata"] = json!({"generateName": "Bad_Prefix-"});
    let a = post_json(&c, CM, &bad_generate).await?;
    let s = failure(&a, 422, "Invalid", "an invalid generateName");
    assert!(
        cause_fields(s).iter().any(|f| f == "metadata.generateName"),
        "{}",
        a.text
    );

    // Upstream ValidateLabels: qualified-name keys, label values of at most 63 characters.
    let too_long_value = "v".repeat(64);
    for (what, labels) in [
        ("a key with a space", json!({"bad key": "x"})),
        ("a key with two slashes", json!({"a/b/c": "x"})),
        ("an empty key", json!({"": "x"})),
        ("a value of 64 characters", json!({"app": too_long_value})),
        ("a value starting with a dash", json!({"app": "-web"})),
        ("a value with a space", json!({"app": "web server"})),
    ] {
        let mut cm = configmap("labelled");
        cm["metadata"]["labels"] = labels;
        let a = post_json(&c, CM, &cm).await?;
        let s = failure(&a, 422, "Invalid", what);
        assert!(
            cause_fields(s)
                .iter()
                .any(|f| f.starts_with("metadata.labels")),
            "{what}: causes name metadata.labels: {}",
            a.text
        );
    }
    let mut cm = configmap("annotated");
    cm["metadata"]["annotations"] = json!({"no spaces/in keys": "x"});
    let a = post_json(&c, CM, &cm).await?;
    let s = failure(&a, 422, "Invalid", "an invalid annotation key");
    assert!(
        cause_fields(s)
            .iter()
            .any(|f| f.starts_with("metadata.annotations")),
        "{}",
        a.text
    );

    // Upstream ValidatePodSpec: containers are required ("spec.containers: Required value").
    let no_containers = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "empty"}, "spec": {"containers": []},
    });
    let a = post_json(&c, PODS, &no_containers).await?;
    let s = failure(&a, 422, "Invalid", "a pod without containers");
    assert!(
        cause_fields(s).iter().any(|f| f == "spec.containers"),
        "causes name spec.containers: {}",
        a.text
    );
    assert_eq!(s["details"]["kind"], "Pod");
    assert_eq!(s["details"]["name"], "empty");
    let mut no_image = pod("noimage");
    no_image["spec"]["containers"][0]
        .as_object_mut()
        .context("container")?
        .remove("image");
    let a = post_json(&c, PODS, &no_image).await?;
    let s = failure(&a, 422, "Invalid", "a container without an image");
    assert!(
        cause_fields(s)
            .iter()
            .any(|f| f.starts_with("spec.containers[0].image")),
        "{}",
        a.text
    );

    // An invalid update leaves the stored object as it was.
    post_json(&c, CM, &configmap("stable")).await?;
    let mut stable = get(&c, &format!("{CM}/stable")).await?.body;
    stable["metadata"]["labels"] = json!({"bad key": "x"});
    let a = send(
        &c,
        "PUT",
        &format!("{CM}/stable"),
        Some(JSON),
        stable.to_string(),
    )
    .await?;
    failure(&a, 422, "Invalid", "PUT with an invalid label");
    let stored = get(&c, &format!("{CM}/stable")).await?.body;
    assert!(stored["metadata"]["labels"].is_null(), "{stored}");

    assert_eq!(
        names(&c, CM)
            .await?
            .iter()
            .filter(|n| n.as_str() != "stable")
            .count(),
        0
    );
    assert!(names(&c, PODS).await?.is_empty());
    still_serving(&c).await
}

#[tokio::test]
async fn unknown_fields_and_wrong_types() -> Result<()> {
    let (_f, c) = start().await;
    let mut with_foo = pod("p");
    with_foo["spec"]["foo"] = json!("bar");

    // Strict: 400 BadRequest, `strict decoding error: unknown field "spec.foo"` upstream.
    let a = post_json(&c, &format!("{PODS}?fieldValidation=Strict"), &with_foo).await?;
    let s = failure(&a, 400, "BadRequest", "Strict with an unknown field");
    let msg = s["message"].as_str().unwrap_or("");
    assert!(msg.contains("unknown field \"spec.foo\""), "{msg}");
    absent(&c, &format!("{PODS}/p")).await?;

    // An unknown fieldValidation value is 400 upstream (the directive is validated first).
    let a = post_json(&c, &format!("{PODS}?fieldValidation=Loud"), &with_foo).await?;
    failure(&a, 400, "BadRequest", "fieldValidation=Loud");
    absent(&c, &format!("{PODS}/p")).await?;

    // Warn: 201 and a Warning header naming the field; the field is dropped.
    let a = post_json(&c, &format!("{PODS}?fieldValidation=Warn"), &with_foo).await?;
    assert_eq!(a.code, 201, "{}", a.text);
    assert!(
        a.warnings
            .iter()
            .any(|w| w.starts_with("299 ") && w.contains("spec.foo")),
        "Warn: a Warning header names spec.foo: {:?}",
        a.warnings
    );
    assert!(a.body["spec"].get("foo").is_none(), "{}", a.text);
    let stored = get(&c, &format!("{PODS}/p")).await?.body;
    assert!(stored["spec"].get("foo").is_none(), "{stored}");

    // No directive: the server default is Warn (upstream since 1.27).
    let mut with_foo2 = with_foo.clone();
    with_foo2["metadata"]["name"] = json!("p-default");
    let a = post_json(&c, PODS, &with_foo2).await?;
    assert_eq!(a.code, 201, "{}", a.text);
    assert!(
        a.warnings.iter().any(|w| w.contains("spec.foo")),
        "{:?}",
        a.warnings
    );

    // Ignore: 201, no warning, and the field is not stored either.
    let mut with_foo3 = with_foo.clone();
    with_foo3["metadata"]["name"] = json!("p-ignore");
    with_foo3["metadata"]["bogus"] = json!(1);
    let a = post_json(&c, &format!("{PODS}?fieldValidation=Ignore"), &with_foo3).await?;
    assert_eq!(a.code, 201, "{}", a.text);
    assert!(
        a.warnings.is_empty(),
        "Ignore warns nothing: {:?}",
        a.warnings
    );
    let stored = get(&c, &format!("{PODS}/p-ignore")).await?.body;
    assert!(stored["spec"].get("foo").is_none(), "{stored}");
    assert!(stored["metadata"].get("bogus").is_none(), "{stored}");

    // Strict applies to updates and patches too: the stored object keeps its spec.
    let mut strict_put = stored.clone();
    strict_put["spec"]["foo"] = json!("bar");
    let a = send(
        &c,
        "PUT",
        &format!("{PODS}/p-ignore?fieldValidation=Strict"),
        Some(JSON),
        strict_put.to_string(),
    )
    .await?;
    let s = failure(&a, 400, "BadRequest", "Strict PUT with an unknown field");
    assert!(
        s["message"].as_str().unwrap_or("").contains("spec.foo"),
        "{}",
        a.text
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{PODS}/p-ignore?fieldValidation=Strict"),
        Some(MERGE),
        r#"{"spec":{"foo":"bar"}}"#,
    )
    .await?;
    failure(
        &a,
        400,
        "BadRequest",
        "Strict merge patch with an unknown field",
    );
    let after = get(&c, &format!("{PODS}/p-ignore")).await?.body;
    assert!(after["spec"].get("foo").is_none(), "{after}");
    assert_eq!(
        after["metadata"]["resourceVersion"],
        stored["metadata"]["resourceVersion"]
    );

    // Upstream: a value of the wrong JSON type cannot be decoded into the typed object:
    // 400 BadRequest ("cannot unmarshal string into Go struct field ... of type int32").
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
        "spec": {
            "replicas": "three",
            "selector": {"matchLabels": {"app": "d"}},
            "template": {
                "metadata": {"labels": {"app": "d"}},
                "spec": {"containers": [{"name": "c", "image": "busybox"}]},
            },
        },
    });
    let a = post_json(&c, DEPLOYS, &deployment).await?;
    failure(&a, 400, "BadRequest", "spec.replicas: \"three\"");
    absent(&c, &format!("{DEPLOYS}/d")).await?;
    for (what, body) in [
        (
            "data values must be strings",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t"}, "data": {"a": 1}}),
        ),
        (
            "labels must be a map",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "t", "labels": ["a"]}}),
        ),
        (
            "metadata must be an object",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": "t"}),
        ),
        (
            "the name must be a string",
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": 7}}),
        ),
    ] {
        let a = post_json(&c, CM, &body).await?;
        failure(&a, 400, "BadRequest", what);
    }
    absent(&c, &format!("{CM}/t")).await?;
    let mut containers_object = pod("typed");
    containers_object["spec"]["containers"] = json!({"name": "c", "image": "busybox"});
    let a = post_json(&c, PODS, &containers_object).await?;
    failure(&a, 400, "BadRequest", "spec.containers as an object");
    absent(&c, &format!("{PODS}/typed")).await?;
    still_serving(&c).await
}

#[tokio::test]
async fn oversized_bodies() -> Result<()> {
    let (_f, c) = start().await;

    // Upstream: request bodies are limited to 3 MiB; more is 413 RequestEntityTooLarge.
    let mut huge = configmap("huge");
    huge["data"] = json!({"blob": "x".repeat(4 * 1024 * 1024)});
    let a = post_json(&c, CM, &huge).await?;
    failure(&a, 413, "RequestEntityTooLarge", "a 4 MiB ConfigMap");
    absent(&c, &format!("{CM}/huge")).await?;

    // The same for PUT and PATCH of an existing object, which keeps its data.
    post_json(&c, CM, &configmap("small")).await?;
    let mut huge_small = huge.clone();
    huge_small["metadata"]["name"] = json!("small");
    let a = send(
        &c,
        "PUT",
        &format!("{CM}/small"),
        Some(JSON),
        huge_small.to_string(),
    )
    .await?;
    failure(&a, 413, "RequestEntityTooLarge", "a 4 MiB PUT");
    let patch = json!({"data": {"blob": "y".repeat(4 * 1024 * 1024)}});
    let a = send(
        &c,
        "PATCH",
        &format!("{CM}/small"),
        Some(MERGE),
        patch.to_string(),
    )
    .await?;
    failure(&a, 413, "RequestEntityTooLarge", "a 4 MiB merge patch");
    let stored = get(&c, &format!("{CM}/small")).await?.body;
    assert_eq!(stored["data"], json!({"k": "v"}));

    // Under the body limit but over the ConfigMap data limit (1 MiB): upstream answers 422
    // Invalid ("must have at most 1048576 bytes").
    let mut big = configmap("big");
    big["data"] = json!({"blob": "x".repeat(1536 * 1024)});
    let a = post_json(&c, CM, &big).await?;
    failure(&a, 422, "Invalid", "a 1.5 MiB ConfigMap");
    absent(&c, &format!("{CM}/big")).await?;
    // Split over keys it is still too much in total.
    let mut split = configmap("split");
    split["data"] = json!({"a": "x".repeat(600 * 1024), "b": "y".repeat(600 * 1024)});
    let a = post_json(&c, CM, &split).await?;
    failure(&a, 422, "Invalid", "two 600 KiB values");
    absent(&c, &format!("{CM}/split")).await?;

    // Just under 1 MiB is accepted: the limit is the limit, not a rounding.
    let mut fits = configmap("fits");
    fits["data"] = json!({"blob": "x".repeat(1000 * 1024)});
    let a = post_json(&c, CM, &fits).await?;
    assert_eq!(
        a.code,
        201,
        "{}",
        a.text.chars().take(300).collect::<String>()
    );

    assert_eq!(
        names(&c, CM).await?.len(),
        2,
        "only small and fits are stored"
    );
    still_serving(&c).await
}

#[tokio::test]
async fn unknown_routes_and_verbs() -> Result<()> {
    let (_f, c) = start().await;
    post_json(&c, CM, &configmap("x")).await?;

    // Upstream: paths that name no resource are 404 NotFound ("the server could not find the
    // requested resource"), whatever the verb.
    for (method, path) in [
        ("GET", "/api/v1/namespaces/default/widgets"),
        ("POST", "/api/v1/namespaces/default/widgets"),
        ("GET", "/apis/nope/v1/things"),
        ("GET", "/apis/apps/v9/deployments"),
        ("GET", "/api/v2/pods"),
        ("GET", "/apis/nope/v1"),
        ("GET", "/apis/nope"),
        ("GET", "/totally/unknown"),
        ("GET", "/api/v1/namespaces/default/configmaps/x/scale"),
        ("PUT", "/api/v1/namespaces/default/configmaps/x/status"),
        ("GET", "/api/v1/namespaces/default/configmaps/x/log"),
        ("GET", "/api/v1/namespaces/default/configmaps/x/a/b"),
        // A cluster-scoped kind under a namespace.
        ("GET", "/api/v1/namespaces/default/nodes"),
        (
            "GET",
            "/apis/rbac.authorization.k8s.io/v1/namespaces/default/clusterroles",
        ),
    ] {
        let body = if method == "GET" {
            String::new()
        } else {
            configmap("x").to_string()
        };
        let a = send(&c, method, path, Some(JSON), body).await?;
        failure(&a, 404, "NotFound", &format!("{method} {path}"));
    }

    // Upstream: a known path without the verb is 405 MethodNotAllowed.
    for (method, path, body) in [
        ("PUT", CM, configmap("x").to_string()),
        ("PATCH", CM, "{}".to_string()),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps/x",
            configmap("x").to_string(),
        ),
        (
            "POST",
            "/api/v1/namespaces/default/configmaps/new",
            configmap("new").to_string(),
        ),
    ] {
        let ct = if method == "PATCH" { MERGE } else { JSON };
        let a = send(&c, method, path, Some(ct), body).await?;
        failure(&a, 405, "MethodNotAllowed", &format!("{method} {path}"));
    }
    absent(&c, &format!("{CM}/new")).await?;

    // Upstream: creating in a namespace that does not exist is 404 NotFound for the namespace.
    let a = post_json(
        &c,
        "/api/v1/namespaces/nope/configmaps",
        &configmap("orphan"),
    )
    .await?;
    let s = failure(&a, 404, "NotFound", "create in a missing namespace");
    assert_eq!(s["details"]["kind"], "namespaces", "{}", a.text);
    assert_eq!(s["details"]["name"], "nope", "{}", a.text);
    assert!(names(&c, "/api/v1/configmaps")
        .await?
        .iter()
        .all(|n| n != "orphan"));
    // Reading a missing object names the resource and the object.
    let a = get(&c, &format!("{CM}/missing")).await?;
    let s = failure(&a, 404, "NotFound", "a missing object");
    assert_eq!(s["details"]["kind"], "configmaps");
    assert_eq!(s["details"]["name"], "missing");
    assert_eq!(s["message"], "configmaps \"missing\" not found");

    // The object the 404s and 405s were aimed at is untouched.
    let x = get(&c, &format!("{CM}/x")).await?.body;
    assert_eq!(x["data"], json!({"k": "v"}));
    assert_eq!(names(&c, CM).await?, vec!["x".to_string()]);
    still_serving(&c).await
}

fn token(doc: &Value) -> String {
    base64::engine::general_purpose::URL_SAFE.encode(doc.to_string())
}

#[tokio::test]
async fn garbage_list_parameters() -> Result<()> {
    let (_f, c) = start().await;
    for n in ["a", "b", "c"] {
        post_json(&c, CM, &configmap(n)).await?;
    }
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "dg=="}});
    post_json(&c, "/api/v1/namespaces/default/secrets", &secret).await?;

    // A real token, to show what the garbage is garbage relative to.
    let page = get(&c, &format!("{CM}?limit=1")).await?;
    let real = page.body["metadata"]["continue"]
        .as_str()
        .context("continue")?
        .to_string();
    let rest = get(&c, &format!("{CM}?limit=5&continue={real}")).await?;
    assert_eq!(rest.code, 200, "{}", rest.text);

    // Upstream: a continue token that does not decode is 400 BadRequest ("continue key is not
    // valid"), including one whose start key climbs out of the listed prefix.
    let bad_tokens = [
        ("not base64", "%25%25%25not-base64!".to_string()),
        (
            "base64 of garbage",
            base64::engine::general_purpose::URL_SAFE.encode([0xff, 0x00, 0x13, 0x37]),
        ),
        (
            "base64 JSON with wrong fields",
            token(&json!({"foo": 1, "bar": "baz"})),
        ),
        ("base64 JSON array", token(&json!([1, 2, 3]))),
        (
            "a wrong version",
            token(&json!({"v": "meta.k8s.io/v9", "rv": 1, "start": "a"})),
        ),
        (
            "a zero revision",
            token(&json!({"v": "meta.k8s.io/v1", "rv": 0, "start": "a"})),
        ),
        (
            "an empty start",
            token(&json!({"v": "meta.k8s.io/v1", "rv": 1, "start": ""})),
        ),
        (
            "a negative revision",
            token(&json!({"v": "meta.k8s.io/v1", "rv": -4, "start": "a"})),
        ),
        (
            "a start climbing out",
            token(&json!({"v": "meta.k8s.io/v1", "rv": 1, "start": "../secrets/default/s"})),
        ),
        (
            "a start with an empty segment",
            token(&json!({"v": "meta.k8s.io/v1", "rv": 1, "start": "a//b"})),
        ),
    ];
    for (what, t) in bad_tokens {
        let a = get(&c, &format!("{CM}?limit=1&continue={t}")).await?;
        failure(&a, 400, "BadRequest", what);
        assert!(
            !a.text.contains("\"kind\":\"Secret\""),
            "{what}: {}",
            a.text
        );
    }

    // Upstream: label selectors that do not parse are 400 BadRequest.
    for sel in ["a%20in%20(b", "!!x", "a=b=c", "a%20in%20b", "=x", "a,,b"] {
        let a = get(&c, &format!("{CM}?labelSelector={sel}")).await?;
        failure(&a, 400, "BadRequest", &format!("labelSelector {sel}"));
    }
    // Upstream: field selectors on fields the kind does not index, or that do not parse, are
    // 400 BadRequest ("field label not supported: spec.foo").
    for sel in [
        "spec.foo=bar",
        "data.k=v",
        "metadata.name",
        "metadata.labels.app=x",
    ] {
        let a = get(&c, &format!("{CM}?fieldSelector={sel}")).await?;
        let s = failure(&a, 400, "BadRequest", &format!("fieldSelector {sel}"));
        if sel == "spec.foo=bar" {
            assert!(
                s["message"].as_str().unwrap_or("").contains("spec.foo"),
                "{}",
                a.text
            );
        }
    }
    // The same selectors on a watch are refused the same way, before any stream starts.
    let a = get(&c, &format!("{CM}?watch=true&fieldSelector=spec.foo=bar")).await?;
    failure(
        &a,
        400,
        "BadRequest",
        "watch with an unsupported field selector",
    );
    let a = get(&c, &format!("{CM}?watch=true&labelSelector=!!x")).await?;
    failure(&a, 400, "BadRequest", "watch with a garbage label selector");
    let a = get(&c, &format!("{CM}?watch=maybe")).await?;
    failure(&a, 400, "BadRequest", "watch=maybe");

    // Upstream: `limit` that is not an integer does not decode into ListOptions: 400.
    for l in ["abc", "1.5", "9999999999999999999999"] {
        let a = get(&c, &format!("{CM}?limit={l}")).await?;
        failure(&a, 400, "BadRequest", &format!("limit={l}"));
    }
    // Upstream does not validate the sign of `limit`: a negative limit, like 0, means "no
    // limit" (the storage layer pages only when limit > 0), so the whole list comes back.
    let a = get(&c, &format!("{CM}?limit=-1")).await?;
    assert_eq!(a.code, 200, "limit=-1: {}", a.text);
    assert_eq!(created(&a.body["items"]).len(), 3, "{}", a.text);
    assert!(a.body["metadata"].get("continue").is_none(), "{}", a.text);

    // Upstream ValidateListOptions: resourceVersionMatch without resourceVersion, or with an
    // unknown value, is 422 Invalid on kind ListOptions with a cause on resourceVersionMatch.
    for (what, q) in [
        (
            "Exact without resourceVersion",
            "resourceVersionMatch=Exact",
        ),
        (
            "NotOlderThan without resourceVersion",
            "resourceVersionMatch=NotOlderThan",
        ),
        (
            "an unknown match",
            "resourceVersion=1&resourceVersionMatch=Sometimes",
        ),
    ] {
        let a = get(&c, &format!("{CM}?{q}")).await?;
        let s = failure(&a, 422, "Invalid", what);
        assert_eq!(s["details"]["kind"], "ListOptions", "{what}: {}", a.text);
        assert_eq!(s["details"]["group"], "meta.k8s.io", "{what}: {}", a.text);
        assert!(
            cause_fields(s).contains(&"resourceVersionMatch".to_string()),
            "{what}: {}",
            a.text
        );
    }

    // None of it changed anything.
    let mut all = names(&c, CM).await?;
    all.sort();
    assert_eq!(all, vec!["a", "b", "c"]);
    still_serving(&c).await
}

#[tokio::test]
async fn conflicts_and_bad_patches() -> Result<()> {
    let (_f, c) = start().await;
    let path = format!("{CM}/cm");
    let created = post_json(&c, CM, &configmap("cm")).await?;
    assert_eq!(created.code, 201, "{}", created.text);

    // Upstream: create of a taken name is 409 AlreadyExists naming it.
    let mut again = configmap("cm");
    again["data"] = json!({"k": "overwritten"});
    let a = post_json(&c, CM, &again).await?;
    let s = failure(&a, 409, "AlreadyExists", "create of an existing name");
    assert_eq!(s["details"]["name"], "cm");
    assert_eq!(s["details"]["kind"], "configmaps");
    // Also under dryRun: the answer is the same and nothing changes.
    let a = post_json(&c, &format!("{CM}?dryRun=All"), &again).await?;
    failure(
        &a,
        409,
        "AlreadyExists",
        "dry-run create of an existing name",
    );

    // Upstream: PUT with a stale resourceVersion is 409 Conflict.
    let stale = created.body.clone();
    let mut fresh = stale.clone();
    fresh["data"] = json!({"k": "second"});
    let a = send(&c, "PUT", &path, Some(JSON), fresh.to_string()).await?;
    assert_eq!(a.code, 200, "{}", a.text);
    let mut late = stale.clone();
    late["data"] = json!({"k": "lost update"});
    let a = send(&c, "PUT", &path, Some(JSON), late.to_string()).await?;
    let s = failure(&a, 409, "Conflict", "PUT with a stale resourceVersion");
    assert!(
        s["message"]
            .as_str()
            .unwrap_or("")
            .contains("the object has been modified"),
        "{}",
        a.text
    );
    // A resourceVersion that is not a number at all cannot be a precondition; Fabrik answers
    // 400 BadRequest (upstream's versioner also refuses to parse it before any write).
    let mut garbled = fresh.clone();
    garbled["metadata"]["resourceVersion"] = json!("not-a-number");
    let a = send(&c, "PUT", &path, Some(JSON), garbled.to_string()).await?;
    failure(
        &a,
        400,
        "BadRequest",
        "PUT with a non-numeric resourceVersion",
    );
    // A stale resourceVersion inside a merge patch is a precondition too.
    let rv_patch = json!({"metadata": {"resourceVersion": stale["metadata"]["resourceVersion"]}, "data": {"k": "lost"}});
    let a = send(&c, "PATCH", &path, Some(MERGE), rv_patch.to_string()).await?;
    failure(
        &a,
        409,
        "Conflict",
        "merge patch with a stale resourceVersion",
    );
    // PUT whose name differs from the URL's: 400 BadRequest upstream.
    let mut renamed = get(&c, &path).await?.body;
    renamed["metadata"]["name"] = json!("other");
    let a = send(&c, "PUT", &path, Some(JSON), renamed.to_string()).await?;
    failure(&a, 400, "BadRequest", "PUT with a different name");

    // Upstream: a merge patch that is not JSON is 400 BadRequest.
    let a = send(&c, "PATCH", &path, Some(MERGE), "{not json").await?;
    failure(&a, 400, "BadRequest", "malformed merge patch");
    let a = send(
        &c,
        "PATCH",
        &path,
        Some("application/strategic-merge-patch+json"),
        "{\"data\":",
    )
    .await?;
    failure(&a, 400, "BadRequest", "malformed strategic merge patch");
    // Upstream: a JSON patch that does not decode as a list of operations is 400
    // (jsonpatch.DecodePatch fails before anything is applied).
    for (what, body) in [
        ("malformed JSON patch", "[{\"op\":"),
        (
            "a JSON patch that is an object",
            r#"{"op":"replace","path":"/data/k","value":"x"}"#,
        ),
        ("a JSON patch of numbers", "[1, 2]"),
    ] {
        let a = send(&c, "PATCH", &path, Some(JSON_PATCH), body).await?;
        failure(&a, 400, "BadRequest", what);
    }
    // Upstream: a JSON patch whose operations fail to apply — a `test` that does not hold, a
    // `remove` of a missing path — is 422 (NewGenericServerResponse(422): reason Invalid), and
    // none of the patch's other operations take effect.
    for (what, body) in [
        (
            "a failing test op",
            r#"[{"op":"replace","path":"/data/k","value":"evil"},{"op":"test","path":"/data/k","value":"nope"}]"#,
        ),
        (
            "remove of a missing path",
            r#"[{"op":"remove","path":"/data/absent"}]"#,
        ),
        ("an unknown op", r#"[{"op":"frobnicate","path":"/data/k"}]"#),
    ] {
        let a = send(&c, "PATCH", &path, Some(JSON_PATCH), body).await?;
        failure(&a, 422, "Invalid", what);
    }
    // A patch that renames the object is refused (upstream: 400 BadRequest).
    let a = send(
        &c,
        "PATCH",
        &path,
        Some(MERGE),
        r#"{"metadata":{"name":"other"}}"#,
    )
    .await?;
    failure(&a, 400, "BadRequest", "a patch renaming the object");

    // Upstream: a body media type the endpoint does not take is 415 UnsupportedMediaType.
    for (method, ct) in [
        ("PATCH", "text/plain"),
        ("PATCH", "application/json"),
        ("PATCH", "application/x-www-form-urlencoded"),
        ("POST", "text/plain"),
        ("POST", "application/merge-patch+json"),
        ("PUT", "application/json-patch+json"),
    ] {
        let target = if method == "POST" {
            CM.to_string()
        } else {
            path.clone()
        };
        let a = send(
            &c,
            method,
            &target,
            Some(ct),
            r#"{"data":{"k":"wrong type"}}"#,
        )
        .await?;
        failure(
            &a,
            415,
            "UnsupportedMediaType",
            &format!("{method} as {ct}"),
        );
    }
    // Patching a missing object is 404.
    let a = send(
        &c,
        "PATCH",
        &format!("{CM}/nothing"),
        Some(MERGE),
        r#"{"data":{"k":"v"}}"#,
    )
    .await?;
    failure(&a, 404, "NotFound", "patch of a missing object");
    absent(&c, &format!("{CM}/nothing")).await?;

    // After all of it the object holds what the one successful write put there.
    let now = get(&c, &path).await?.body;
    assert_eq!(now["data"], json!({"k": "second"}), "{now}");
    assert_eq!(names(&c, CM).await?, vec!["cm".to_string()]);
    still_serving(&c).await
}

#[tokio::test]
async fn path_traversal_reaches_nothing_else() -> Result<()> {
    let (_f, c) = start().await;
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}, "data": {"k": "c2VjcmV0"}});
    post_json(&c, "/api/v1/namespaces/default/secrets", &secret).await?;
    post_json(
        &c,
        "/api/v1/namespaces/kube-system/configmaps",
        &configmap("target"),
    )
    .await?;
    let target = "/api/v1/namespaces/kube-system/configmaps/target";
    let before = get(&c, target).await?.body;

    // Upstream decodes `%2F` before routing and refuses names that are `.`, `..` or contain `/`
    // or `%` (IsValidPathSegmentName: 400 BadRequest); unknown paths are 404. Fabrik routes on
    // the raw path and refuses the same segments with 400. Either way nothing else is reached.
    let attempts = [
        ("GET", "/api/v1/namespaces/default/configmaps/..%2Fsecrets"),
        (
            "GET",
            "/api/v1/namespaces/default/configmaps/..%2Fsecrets%2Fs",
        ),
        ("GET", "/api/v1/namespaces/default/configmaps/%2e%2e"),
        ("GET", "/api/v1/namespaces/default/configmaps/../secrets"),
        ("GET", "/api/v1/namespaces/default/configmaps/../secrets/s"),
        ("GET", "/api/v1/namespaces/default/configmaps/./s"),
        ("GET", "/api/v1/namespaces/..%2Fkube-system/configmaps"),
        (
            "GET",
            "/api/v1/namespaces/..%2Fkube-system/configmaps/target",
        ),
        (
            "GET",
            "/api/v1/namespaces/default%2F..%2Fkube-system/configmaps/target",
        ),
        ("GET", "/api/v1/namespaces/../configmaps"),
        ("POST", "/api/v1/namespaces/..%2Fkube-system/configmaps"),
        (
            "PUT",
            "/api/v1/namespaces/..%2Fkube-system/configmaps/target",
        ),
        (
            "PUT",
            "/api/v1/namespaces/default/configmaps/..%2F..%2Fkube-system%2Fconfigmaps%2Ftarget",
        ),
        (
            "PATCH",
            "/api/v1/namespaces/default/configmaps/..%2F..%2Fkube-system%2Fconfigmaps%2Ftarget",
        ),
        (
            "DELETE",
            "/api/v1/namespaces/default/configmaps/..%2F..%2Fkube-system%2Fconfigmaps%2Ftarget",
        ),
        ("DELETE", "/api/v1/namespaces/..%2Fkube-system/configmaps"),
        ("DELETE", "/api/v1/namespaces/default/secrets/..%2Fs"),
    ];
    for (method, path) in attempts {
        let (ct, body) = match method {
            "PATCH" => (MERGE, r#"{"data":{"k":"pwned"}}"#.to_string()),
            "POST" | "PUT" => {
                let mut cm = configmap("target");
                cm["data"] = json!({"k": "pwned"});
                (JSON, cm.to_string())
            }
            _ => (JSON, String::new()),
        };
        let a = send(&c, method, path, Some(ct), body).await?;
        assert!(
            matches!(a.code, 400 | 404),
            "{method} {path}: expected 400 or 404, got {}: {}",
            a.code,
            a.text
        );
        let reason = if a.code == 400 {
            "BadRequest"
        } else {
            "NotFound"
        };
        failure(&a, a.code, reason, &format!("{method} {path}"));
        assert!(
            !a.text.contains("c2VjcmV0"),
            "{method} {path} leaked the secret: {}",
            a.text
        );
    }
    // Names carrying `/` or `%` cannot be created either (they would not be addressable).
    let a = post_json(&c, CM, &configmap("..%2Fsecrets")).await?;
    failure(&a, 422, "Invalid", "a name with %2F");

    let after = get(&c, target).await?.body;
    assert_eq!(after, before, "kube-system/target is untouched");
    let s = get(&c, "/api/v1/namespaces/default/secrets/s").await?;
    assert_eq!(s.code, 200, "{}", s.text);
    assert_eq!(s.body["data"]["k"], "c2VjcmV0");
    assert!(names(&c, CM).await?.is_empty());
    // Only what was there: the target and the ConfigMaps every cluster publishes there.
    let mut in_kube_system = names(&c, "/api/v1/namespaces/kube-system/configmaps").await?;
    in_kube_system.retain(|n| n != "extension-apiserver-authentication" && n != "kube-root-ca.crt");
    assert_eq!(in_kube_system, vec!["target".to_string()]);
    still_serving(&c).await
}

#[tokio::test]
async fn requests_without_a_client_certificate() -> Result<()> {
    let (f, c) = start().await;
    // The kubeconfig's CA (so the server is trusted) but no client certificate or key.
    let kubeconfig = kube::config::Kubeconfig::read_from(f.kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info = Default::default();
    let anon = Client::try_from(config)?;

    // Upstream with anonymous auth off: resource requests are 401 Unauthorized.
    for (method, path) in [
        ("GET", "/api/v1/pods"),
        ("GET", CM),
        ("GET", "/apis/apps/v1/deployments"),
        ("GET", "/api"),
        ("GET", "/apis"),
        ("GET", "/openapi/v2"),
        ("DELETE", CM),
        // Unauthenticated callers learn nothing about which paths exist (upstream authenticates
        // before it routes).
        ("GET", "/api/v1/namespaces/default/widgets"),
        ("GET", "/totally/unknown"),
        ("PUT", CM),
    ] {
        let a = send(&anon, method, path, None, Vec::new()).await?;
        failure(
            &a,
            401,
            "Unauthorized",
            &format!("anonymous {method} {path}"),
        );
    }
    let a = post_json(&anon, CM, &configmap("anon")).await?;
    failure(&a, 401, "Unauthorized", "anonymous create");
    absent(&c, &format!("{CM}/anon")).await?;

    // Health and version are public (upstream's system:public-info-viewer role grants them to
    // unauthenticated callers; Fabrik serves them without a certificate so probes need none).
    for path in ["/readyz", "/livez", "/healthz"] {
        let a = get(&anon, path).await?;
        assert_eq!(a.code, 200, "anonymous {path}: {}", a.text);
        assert_eq!(a.text, "ok");
    }
    let v = get(&anon, "/version").await?;
    assert_eq!(v.code, 200, "{}", v.text);
    assert!(
        v.body["gitVersion"]
            .as_str()
            .is_some_and(|g| g.starts_with("v1.")),
        "{}",
        v.text
    );

    // The authenticated client is unaffected.
    let a = post_json(&c, CM, &configmap("admin")).await?;
    assert_eq!(a.code, 201, "{}", a.text);
    still_serving(&c).await
}
