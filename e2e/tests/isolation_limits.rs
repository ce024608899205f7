//! Hostile-tenant checks of the API server's limits (issue isolation-2, items 6, 7, 9 and the
//! second half of 10), against a real `fabrik up` and its first tenant (`demo`):
//!
//! - an object whose stored size would pass 1.5 MiB is refused with 413 on every write path
//!   (create, update, merge and JSON patch — judged on the patched result —, server-side
//!   apply, status), and nothing of it reaches the tenant's store or the host;
//! - label and field selectors past their limits are 400 BadRequest; watches per user are
//!   bounded (429 with `Retry-After`) and give their count back when they end;
//! - unauthenticated requests get the same answer from an existing tenant and from one that
//!   does not exist, on every path;
//! - a CEL rule too expensive for its budget is refused at creation (CRD) or stopped at
//!   evaluation (ValidatingAdmissionPolicy), quickly;
//! - while one tenant floods the API, another tenant's requests stay fast (fairness).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Result};
use e2e::raw::{failure, get, send, APPLY, JSON, JSON_PATCH, MERGE};
use e2e::{init_crypto, Fabrik};
use kube::Client;
use serde_json::{json, Value};

const CM: &str = "/api/v1/namespaces/default/configmaps";
const VAP: &str = "/apis/admissionregistration.k8s.io/v1";

/// Installs a ValidatingAdmissionPolicy (and its binding) over ConfigMaps whose expression is
/// cubic in the object's data: it cannot be estimated at creation, so evaluation stops at the
/// actual cost limit. Returns the policy as sent.
async fn install_cel_bomb(client: &Client) -> Result<Value> {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": "bomb"},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"], "resources": ["configmaps"]}]},
            "validations": [{"expression":
                "object.data.all(a, object.data.all(b, object.data.all(c, a + b + c != 'x')))"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": "bomb"},
        "spec": {"policyName": "bomb", "validationActions": ["Deny"]}});
    let r = send(
        client,
        "POST",
        &format!("{VAP}/validatingadmissionpolicies"),
        Some(JSON),
        policy.to_string(),
    )
    .await?;
    assert_eq!(r.code, 201, "{}", r.text);
    let r = send(
        client,
        "POST",
        &format!("{VAP}/validatingadmissionpolicybindings"),
        Some(JSON),
        binding.to_string(),
    )
    .await?;
    assert_eq!(r.code, 201, "{}", r.text);
    Ok(policy)
}

async fn client_of(path: &Path) -> Result<Client> {
    let kubeconfig = kube::config::Kubeconfig::read_from(path)?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    Ok(Client::try_from(config)?)
}

/// `fabrik up` and a client of its first tenant (once its kubeconfig is written).
async fn start(args: &[&str]) -> Result<(Fabrik, Client, Client, PathBuf)> {
    init_crypto();
    let f = Fabrik::start_with(args)?;
    let host = f.client().await?;
    let cfg = f.data_dir().join("tenants").join("demo.kubeconfig");
    let deadline = Instant::now() + Duration::from_secs(90);
    let demo = loop {
        if cfg.exists() {
            if let Ok(c) = client_of(&cfg).await {
                if get(&c, "/api/v1/namespaces/default")
                    .await
                    .is_ok_and(|a| a.code == 200)
                {
                    break c;
                }
            }
        }
        if Instant::now() > deadline {
            bail!("the demo tenant did not serve in time: {}", f.log());
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    Ok((f, host, demo, cfg))
}

const MIB: usize = 1024 * 1024;

const BLOBS: &str = "/apis/example.com/v1/namespaces/default/blobs";

fn blob(name: &str, bytes: usize) -> Value {
    json!({"apiVersion": "example.com/v1", "kind": "Blob", "metadata": {"name": name},
        "spec": {"data": "x".repeat(bytes)}})
}

#[tokio::test]
async fn objects_over_the_store_limit_are_refused_on_every_write_path() -> Result<()> {
    let (_f, _host, c, _) = start(&["--nodes", "0"]).await?;
    let big = 2 * MIB;
    // A kind without size limits of its own (ConfigMaps and Secrets stop at 1 MiB of data).
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "blobs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "blobs", "singular": "blob", "kind": "Blob"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}]}});
    let a = send(
        &c,
        "POST",
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
        Some(JSON),
        crd.to_string(),
    )
    .await?;
    assert_eq!(a.code, 201, "{}", a.text);
    let deadline = Instant::now() + Duration::from_secs(30);
    while get(&c, BLOBS).await?.code != 200 {
        if Instant::now() > deadline {
            bail!("blobs are not served");
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Create: a 2 MiB body is read (the body limit is 3 MiB) but not stored.
    let a = send(&c, "POST", BLOBS, Some(JSON), blob("big", big).to_string()).await?;
    failure(&a, 413, "RequestEntityTooLarge", "create of 2 MiB");
    assert!(a.text.contains("1572864"), "names the limit: {}", a.text);
    // Just under the limit is stored.
    let a = send(
        &c,
        "POST",
        BLOBS,
        Some(JSON),
        blob("fits", 1400 * 1024).to_string(),
    )
    .await?;
    assert_eq!(a.code, 201, "1.4 MiB: {}", &a.text[..a.text.len().min(300)]);

    // A small object, then each write path tries to make it large.
    let a = send(
        &c,
        "POST",
        BLOBS,
        Some(JSON),
        blob("grow", 1024).to_string(),
    )
    .await?;
    assert_eq!(a.code, 201, "{}", a.text);
    let path = format!("{BLOBS}/grow");
    let mut whole = blob("grow", big);
    whole["metadata"]["resourceVersion"] = a.body["metadata"]["resourceVersion"].clone();
    let a = send(&c, "PUT", &path, Some(JSON), whole.to_string()).await?;
    failure(&a, 413, "RequestEntityTooLarge", "update to 2 MiB");
    let merge = json!({"spec": {"more": "y".repeat(big)}});
    let a = send(&c, "PATCH", &path, Some(MERGE), merge.to_string()).await?;
    failure(&a, 413, "RequestEntityTooLarge", "merge patch to 2 MiB");
    // A small JSON patch whose result is large: 600 KiB copied twice.
    let seed = json!([{"op": "add", "path": "/spec/a", "value": "z".repeat(600 * 1024)},
        {"op": "copy", "from": "/spec/a", "path": "/spec/b"},
        {"op": "copy", "from": "/spec/a", "path": "/spec/c"}]);
    let a = send(&c, "PATCH", &path, Some(JSON_PATCH), seed.to_string()).await?;
    failure(
        &a,
        413,
        "RequestEntityTooLarge",
        "JSON patch whose result is 1.8 MiB",
    );
    // A JSON patch that doubles a value again and again is refused before it grows.
    let mut doubling = vec![json!({"op": "add", "path": "/spec/d", "value": ["q".repeat(1024)]})];
    for _ in 0..40 {
        doubling.push(json!({"op": "copy", "from": "/spec/d", "path": "/spec/d/0"}));
    }
    let started = Instant::now();
    let a = send(
        &c,
        "PATCH",
        &path,
        Some(JSON_PATCH),
        Value::Array(doubling).to_string(),
    )
    .await?;
    failure(&a, 422, "Invalid", "doubling JSON patch");
    assert!(started.elapsed() < Duration::from_secs(10));
    let apply = format!(
        "apiVersion: example.com/v1\nkind: Blob\nmetadata:\n  name: grow\nspec:\n  applied: {}\n",
        "w".repeat(big)
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{path}?fieldManager=hostile&force=true"),
        Some(APPLY),
        apply,
    )
    .await?;
    failure(
        &a,
        413,
        "RequestEntityTooLarge",
        "server-side apply of 2 MiB",
    );
    let apply_new = format!(
        "apiVersion: example.com/v1\nkind: Blob\nmetadata:\n  name: applied\nspec:\n  k: {}\n",
        "w".repeat(big)
    );
    let a = send(
        &c,
        "PATCH",
        &format!("{BLOBS}/applied?fieldManager=hostile"),
        Some(APPLY),
        apply_new,
    )
    .await?;
    failure(
        &a,
        413,
        "RequestEntityTooLarge",
        "server-side apply creating 2 MiB",
    );
    // Status.
    let status = json!({"status": {"message": "m".repeat(big)}});
    let a = send(
        &c,
        "PATCH",
        &format!("{path}/status"),
        Some(MERGE),
        status.to_string(),
    )
    .await?;
    failure(&a, 413, "RequestEntityTooLarge", "status of 2 MiB");

    // Nothing large was stored.
    let grow = get(&c, &path).await?;
    assert_eq!(grow.code, 200);
    assert!(
        grow.text.len() < 4096,
        "grow stayed small: {} bytes",
        grow.text.len()
    );
    assert_eq!(get(&c, &format!("{BLOBS}/big")).await?.code, 404);
    assert_eq!(get(&c, &format!("{BLOBS}/applied")).await?.code, 404);
    let list = get(&c, BLOBS).await?;
    assert!(
        list.text.len() < 1500 * 1024,
        "only what fits: {} bytes",
        list.text.len()
    );
    Ok(())
}

#[tokio::test]
async fn selectors_over_their_limits_are_bad_requests() -> Result<()> {
    let (_f, _host, c, _) = start(&["--nodes", "0"]).await?;
    let values: Vec<String> = (0..5000).map(|i| format!("value-{i:04}")).collect();
    let long = format!("app in ({})", values.join(","));
    assert!(long.len() > 30 * 1024);
    let q = |s: &str| -> String { form_urlencoded(s) };
    for (what, path) in [
        (
            "30 KiB label selector",
            format!("{CM}?labelSelector={}", q(&long)),
        ),
        (
            "101 label requirements",
            format!(
                "{CM}?labelSelector={}",
                q(&(0..101)
                    .map(|i| format!("k{i}=v"))
                    .collect::<Vec<_>>()
                    .join(","))
            ),
        ),
        (
            "5 KiB field selector",
            format!(
                "{CM}?fieldSelector={}",
                q(&format!("metadata.name={}", "n".repeat(5000)))
            ),
        ),
        (
            "33 field terms",
            format!(
                "{CM}?fieldSelector={}",
                q(&(0..33)
                    .map(|i| format!("metadata.name!=n{i}"))
                    .collect::<Vec<_>>()
                    .join(","))
            ),
        ),
        (
            "a long selector on a watch",
            format!("{CM}?watch=true&labelSelector={}", q(&long)),
        ),
    ] {
        let a = get(&c, &path).await?;
        failure(&a, 400, "BadRequest", what);
        let m = a.body["message"].as_str().unwrap_or("");
        assert!(
            m.contains("too long") || m.contains("too many"),
            "{what}: {m}"
        );
    }
    // Selectors within the limits work.
    let a = get(
        &c,
        &format!("{CM}?labelSelector={}", q("app in (a,b),tier!=x")),
    )
    .await?;
    assert_eq!(a.code, 200, "{}", a.text);

    // (The per-user watch limit and its 429 with Retry-After are tested beside the code:
    // `server::tests::watches_are_bounded_per_user_and_in_all_and_given_back_when_they_end`.)
    Ok(())
}

fn form_urlencoded(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(b as char)
            }
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    out
}

#[tokio::test]
async fn unauthenticated_callers_cannot_tell_which_tenants_exist() -> Result<()> {
    let (f, host, demo, _) = start(&["--nodes", "0"]).await?;
    // Trusts the server, presents no credentials.
    let kubeconfig = kube::config::Kubeconfig::read_from(f.kubeconfig())?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.auth_info = Default::default();
    let anon = Client::try_from(config)?;
    let paths = [
        ("GET", "/version"),
        ("GET", "/healthz"),
        ("GET", "/readyz"),
        ("GET", "/livez"),
        ("GET", "/api"),
        ("GET", "/apis"),
        ("GET", "/api/v1/namespaces"),
        ("GET", "/api/v1/namespaces/default/configmaps/x"),
        ("GET", "/openapi/v2"),
        ("GET", "/.well-known/openid-configuration"),
        ("GET", "/openid/v1/jwks"),
        ("GET", "/totally/unknown"),
        ("POST", "/api/v1/namespaces/default/configmaps"),
        ("DELETE", "/api/v1/namespaces/default"),
    ];
    for who in [("anonymous", &anon), ("the host admin", &host)] {
        for (method, p) in paths {
            let existing = send(
                who.1,
                method,
                &format!("/clusters/demo{p}"),
                Some(JSON),
                "{}",
            )
            .await?;
            let missing = send(
                who.1,
                method,
                &format!("/clusters/no-such-tenant{p}"),
                Some(JSON),
                "{}",
            )
            .await?;
            failure(
                &existing,
                401,
                "Unauthorized",
                &format!("{} {method} demo{p}", who.0),
            );
            assert_eq!(
                (existing.code, &existing.body),
                (missing.code, &missing.body),
                "{} {method} {p}: an existing and a missing tenant answer alike",
                who.0
            );
        }
    }
    // The tenant's own credentials are served as before.
    let v = get(&demo, "/version").await?;
    assert_eq!(v.code, 200, "{}", v.text);
    // The host's public paths are unchanged.
    assert_eq!(get(&anon, "/version").await?.code, 200);
    Ok(())
}

const RULE: &str = "self.items.all(a, self.items.all(b, self.items.all(c, a + b + c != 'x')))";

fn crd(max_items: Option<u64>) -> Value {
    let mut items = json!({"type": "array", "items": {"type": "string", "maxLength": 16}});
    if let Some(m) = max_items {
        items["maxItems"] = json!(m);
    }
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "bombs.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "bombs", "singular": "bomb", "kind": "Bomb"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {
                    "type": "object", "properties": {"items": items},
                    "x-kubernetes-validations": [{"rule": RULE}]}}}}}]}})
}

/// A client of its own (one kubeconfig, one connection kept warm) on a thread and runtime of
/// its own: what it measures is the server, not the test's runtime, busy with a flood's
/// client side.
struct Probe {
    asks: std::sync::mpsc::Sender<(usize, tokio::sync::oneshot::Sender<Result<Duration>>)>,
}

impl Probe {
    /// Connects and warms the connection with 20 requests.
    async fn start(kubeconfig: &Path) -> Result<Probe> {
        let kubeconfig = kubeconfig.to_path_buf();
        let (asks, questions) =
            std::sync::mpsc::channel::<(usize, tokio::sync::oneshot::Sender<Result<Duration>>)>();
        let (ready_tx, ready) = tokio::sync::oneshot::channel::<Result<()>>();
        std::thread::spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(r) => r,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.into()));
                    return;
                }
            };
            let client = runtime.block_on(async {
                let c = client_of(&kubeconfig).await?;
                p99(&c, 20).await?;
                anyhow::Ok(c)
            });
            let client = match client {
                Ok(c) => {
                    let _ = ready_tx.send(Ok(()));
                    c
                }
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            // Between measurements the connection is kept in use (a request every 100 ms),
            // as an active client's: what is measured is the server's answer on an open
            // connection, not a new connection's handshake among a flood of them.
            loop {
                match questions.recv_timeout(Duration::from_millis(100)) {
                    Ok((n, answer)) => {
                        let _ = answer.send(runtime.block_on(p99(&client, n)));
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                        let _ = runtime.block_on(get(&client, "/version"));
                    }
                    Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
                }
            }
        });
        ready.await??;
        Ok(Probe { asks })
    }

    /// [`p99`] of `n` requests.
    async fn p99(&self, n: usize) -> Result<Duration> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.asks
            .send((n, tx))
            .map_err(|_| anyhow::anyhow!("the probe's thread is gone"))?;
        rx.await?
    }
}

/// The time to the first answer of a new client of `kubeconfig` (a new connection: its TLS
/// handshake included), on a thread and runtime of its own.
async fn first_answer_apart(kubeconfig: &Path) -> Result<Duration> {
    let kubeconfig = kubeconfig.to_path_buf();
    let thread = std::thread::spawn(move || -> Result<Duration> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        runtime.block_on(async {
            let c = client_of(&kubeconfig).await?;
            let started = Instant::now();
            let a = get(&c, "/api/v1/namespaces").await?;
            if a.code != 200 {
                bail!("tenant b's list failed: {}", a.text);
            }
            Ok(started.elapsed())
        })
    });
    tokio::task::spawn_blocking(move || {
        thread
            .join()
            .map_err(|_| anyhow::anyhow!("the measuring thread panicked"))?
    })
    .await?
}

/// The p99 of `n` runs of `kubectl get ns` with `kubeconfig` (the newest kubectl), run on a
/// blocking thread; every run must succeed.
async fn kubectl_p99(kubeconfig: &Path, n: usize) -> Result<Duration> {
    let kubeconfig = kubeconfig.to_path_buf();
    tokio::task::spawn_blocking(move || {
        let k = e2e::kubectls()
            .pop()
            .ok_or_else(|| anyhow::anyhow!("no kubectl"))?;
        let mut times = Vec::with_capacity(n);
        for _ in 0..n {
            let started = Instant::now();
            e2e::kc_ok(&k, &kubeconfig, &["get", "ns"])?;
            times.push(started.elapsed());
        }
        times.sort();
        Ok(times[(n * 99 / 100).min(n - 1)])
    })
    .await?
}

/// The p99 (of `n` sequential requests) of `GET /api/v1/namespaces`.
async fn p99(c: &Client, n: usize) -> Result<Duration> {
    let mut times = Vec::with_capacity(n);
    for _ in 0..n {
        let started = Instant::now();
        let a = get(c, "/api/v1/namespaces").await?;
        times.push(started.elapsed());
        if a.code != 200 {
            bail!("tenant b's list failed: {}", a.text);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    times.sort();
    Ok(times[(n * 99 / 100).min(n - 1)])
}

#[tokio::test]
async fn expensive_cel_is_refused_at_creation_or_stopped_at_evaluation() -> Result<()> {
    let (_f, _host, a, _) = start(&["--nodes", "0"]).await?;
    let crds = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions";

    // (a) A rule three comprehensions deep over 150 (or unbounded) items is refused at creation,
    // naming the rule.
    for max in [Some(150), None] {
        let r = send(&a, "POST", crds, Some(JSON), crd(max).to_string()).await?;
        failure(&r, 422, "Invalid", &format!("CRD with maxItems {max:?}"));
        assert!(
            r.text.contains("x-kubernetes-validations[0].rule")
                && r.text.contains("exceeds budget"),
            "{}",
            r.text
        );
    }
    // The same rule over 10 items is cheap enough.
    let r = send(&a, "POST", crds, Some(JSON), crd(Some(10)).to_string()).await?;
    assert_eq!(r.code, 201, "{}", r.text);

    // (b) A policy over the objects it validates: it cannot be estimated (the objects have no
    // bounds), so evaluation stops at the actual cost limit and the request fails fast.
    let policy = install_cel_bomb(&a).await?;
    let vap = VAP;
    // A policy whose expression is a bomb by itself (literal lists) is refused at creation.
    let l = format!(
        "[{}]",
        (0..150)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
    );
    let mut literal = policy.clone();
    literal["metadata"]["name"] = json!("literal-bomb");
    literal["spec"]["validations"][0]["expression"] = json!(format!(
        "{l}.all(a, {l}.all(b, {l}.all(c, a + b + c >= 0)))"
    ));
    let r = send(
        &a,
        "POST",
        &format!("{vap}/validatingadmissionpolicies"),
        Some(JSON),
        literal.to_string(),
    )
    .await?;
    failure(&r, 422, "Invalid", "a literal CEL bomb");
    assert!(
        r.text.contains("spec.validations[0].expression"),
        "{}",
        r.text
    );

    let data: serde_json::Map<String, Value> =
        (0..150).map(|i| (format!("k{i:03}"), json!("v"))).collect();
    let bomb_cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bomb"}, "data": data});
    let started = Instant::now();
    let r = send(&a, "POST", CM, Some(JSON), bomb_cm.to_string()).await?;
    let took = started.elapsed();
    failure(&r, 422, "Invalid", "a ConfigMap the bomb policy evaluates");
    assert!(r.text.contains("cost"), "stopped by its cost: {}", r.text);
    // Seconds in a debug build on a loaded machine; a fraction of a second in a release build.
    assert!(took < Duration::from_secs(10), "the bomb took {took:?}");

    Ok(())
}

/// Issue isolation-2 item 7: while tenant `demo` floods the API (1,000 watches opened at once
/// on 200 Secrets of 8 KiB, lists of them in a loop, 900 KiB ConfigMap writes in a loop, a
/// 40 KiB label selector, the CEL bomb on every ConfigMap create), tenant `b` is never refused,
/// and the flood is: the watches past the per-user bound are answered 429 with `Retry-After`.
/// The flood's client does not retry (kube-rs's default client retries a 429 after its
/// `Retry-After`, up to 15 times: that hid every refusal from an earlier version of this test).
/// b's client runs on a thread and runtime of its own, so that what is measured is the server,
/// not this process's runtime busy with the flood's client side. b's p99 idle and under the
/// flood is printed — a benchmark's figure (docs/benchmarks.md, release build), not asserted.
/// The nextest config runs this test alone.
#[tokio::test]
async fn a_flood_of_one_tenant_never_refuses_another() -> Result<()> {
    let (f, _host, a, demo_cfg) = start(&["--nodes", "0"]).await?;
    install_cel_bomb(&a).await?;
    let b_cfg = f.data_dir().join("b.kubeconfig");
    let out = f.fabrik_cli(&[
        "tenant",
        "create",
        "b",
        "--wait",
        "--kubeconfig-out",
        &b_cfg.display().to_string(),
    ])?;
    if !out.status.success() {
        bail!("tenant create b: {}", String::from_utf8_lossy(&out.stderr));
    }
    let b = Probe::start(&b_cfg).await?;
    let idle = b.p99(100).await?;
    let idle_first = first_answer_apart(&b_cfg).await?;
    let idle_kubectl = kubectl_p99(&b_cfg, 20).await?;
    let flood = Flood::start(&demo_cfg).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let loaded = b.p99(100).await?;
    // A new connection of b under the flood: printed, with its error if it has one (its
    // handshake waits among the flood's 1,000; see docs/benchmarks.md).
    let loaded_first = first_answer_apart(&b_cfg).await;
    let loaded_kubectl = kubectl_p99(&b_cfg, 20).await?;
    let seen = flood.stop();
    eprintln!(
        "tenant b p99: idle {idle:?}, while tenant demo floods {loaded:?}; \
         b's first answer on a new connection: idle {idle_first:?}, under the flood \
         {loaded_first:?}; b's `kubectl get ns` p99: idle {idle_kubectl:?}, under the flood \
         {loaded_kubectl:?}; the flood: {seen:?}"
    );
    // Every one of b's requests succeeded (p99 fails on any other answer); the flood was
    // served and refused: one user holds at most 250 watches, the rest are told to come back.
    assert!(
        seen.writes + seen.lists > 0,
        "the flood was served: {seen:?}"
    );
    assert!(
        seen.watches <= 250,
        "watches past the per-user bound: {seen:?}"
    );
    assert!(
        seen.throttled >= 650,
        "the 750 watches past the bound are refused: {seen:?}"
    );
    Ok(())
}

/// What a flood's requests were answered.
#[derive(Debug, Default)]
struct Seen {
    /// Watches opened (200).
    watches: usize,
    /// Requests answered 429.
    throttled: usize,
    /// 900 KiB ConfigMap writes done.
    writes: usize,
    /// Lists of the Secrets answered.
    lists: usize,
}

#[derive(Default)]
struct Counters {
    watches: std::sync::atomic::AtomicUsize,
    throttled: std::sync::atomic::AtomicUsize,
    writes: std::sync::atomic::AtomicUsize,
    lists: std::sync::atomic::AtomicUsize,
}

/// Tenant `demo`'s flood, running until [`Flood::stop`].
struct Flood {
    tasks: Vec<tokio::task::JoinHandle<()>>,
    counters: std::sync::Arc<Counters>,
}

impl Flood {
    async fn start(kubeconfig: &Path) -> Result<Flood> {
        use std::sync::atomic::Ordering::Relaxed;
        let kubeconfig = kube::config::Kubeconfig::read_from(kubeconfig)?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
        config.default_retry = false;
        let a = Client::try_from(config)?;
        for i in 0..200 {
            let r = send(
                &a,
                "POST",
                "/api/v1/namespaces/default/secrets",
                Some(JSON),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s{i}")},
                    "stringData": {"k": "x".repeat(8 * 1024)}})
                .to_string(),
            )
            .await?;
            if r.code != 201 {
                bail!("secret s{i}: {}", r.text);
            }
        }
        let big = "x".repeat(900 * 1024);
        let big_cm = |name: &str, i: u64| {
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name},
                "data": {"k": big.as_str(), "i": i.to_string()}})
            .to_string()
        };
        for kind in [1, 5] {
            let name = format!("flood{kind}");
            let r = send(&a, "POST", CM, Some(JSON), big_cm(&name, 0)).await?;
            if r.code != 201 {
                bail!("configmap {name}: {}", r.text);
            }
        }
        let data: serde_json::Map<String, Value> =
            (0..150).map(|i| (format!("k{i:03}"), json!("v"))).collect();
        let bomb = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bomb"},
            "data": data})
        .to_string();
        let long = form_urlencoded(&format!(
            "app in ({})",
            (0..5000)
                .map(|i| format!("value-{i:04}"))
                .collect::<Vec<_>>()
                .join(",")
        ));

        let counters = std::sync::Arc::new(Counters::default());
        let mut tasks = Vec::new();
        for w in 0..1000 {
            let (a, counters) = (a.clone(), counters.clone());
            tasks.push(tokio::spawn(async move {
                // Only the status line is awaited; an open watch is held until the flood stops.
                let Ok(req) = http::Request::get(format!(
                    "/api/v1/namespaces/default/secrets?watch=true&timeoutSeconds=120&w={w}"
                ))
                .body(kube::client::Body::empty()) else {
                    return;
                };
                match a.send(req).await {
                    Ok(resp) if resp.status().as_u16() == 429 => {
                        counters.throttled.fetch_add(1, Relaxed);
                    }
                    Ok(resp) if resp.status().is_success() => {
                        counters.watches.fetch_add(1, Relaxed);
                        let _ = resp.into_body().collect_bytes().await;
                    }
                    _ => {}
                }
            }));
        }
        for kind in 0..8u64 {
            let (a, counters, long) = (a.clone(), counters.clone(), long.clone());
            let (name, bomb) = (format!("flood{kind}"), bomb.clone());
            let big = big_cm(&name, kind);
            tasks.push(tokio::spawn(async move {
                loop {
                    let answer = match kind % 4 {
                        0 => get(&a, "/api/v1/namespaces/default/secrets").await,
                        1 => {
                            send(&a, "PUT", &format!("{CM}/{name}"), Some(JSON), big.clone()).await
                        }
                        2 => get(&a, &format!("{CM}?labelSelector={long}")).await,
                        _ => send(&a, "POST", CM, Some(JSON), bomb.clone()).await,
                    };
                    match answer.map(|a| a.code) {
                        Ok(429) => {
                            counters.throttled.fetch_add(1, Relaxed);
                        }
                        Ok(200) if kind % 4 == 0 => {
                            counters.lists.fetch_add(1, Relaxed);
                        }
                        Ok(200) if kind % 4 == 1 => {
                            counters.writes.fetch_add(1, Relaxed);
                        }
                        _ => {}
                    }
                }
            }));
        }
        Ok(Flood { tasks, counters })
    }

    fn stop(self) -> Seen {
        use std::sync::atomic::Ordering::Relaxed;
        for t in &self.tasks {
            t.abort();
        }
        let c = &self.counters;
        Seen {
            watches: c.watches.load(Relaxed),
            throttled: c.throttled.load(Relaxed),
            writes: c.writes.load(Relaxed),
            lists: c.lists.load(Relaxed),
        }
    }
}
