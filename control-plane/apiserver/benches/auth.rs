//! What authentication, authorization and admission add to a request, measured in one run:
//!
//! - the same GET served to an in-process caller (no authentication, `system:masters`) and to
//!   a network caller with a service-account token authorized by RBAC among 1,000 Roles and
//!   1,000 RoleBindings (p50/p99 of each and of the difference);
//! - authentication alone (service-account JWT; OIDC ID token with a warm JWKS cache) and the
//!   RBAC decision alone;
//! - pod creates by 32 concurrent creators with and without a ResourceQuota in the namespace.
//!
//! `cargo bench -p fabrik-apiserver --bench auth`

use std::sync::Arc;
use std::time::{Duration, Instant};

use fabrik_apiserver::auth::oidc::{AuthenticationConfiguration, OidcFlags};
use fabrik_apiserver::auth::serviceaccount::TokenSpec;
use fabrik_apiserver::auth::{AuthSettings, Caller, OidcAuthenticator, SigningKey, UserInfo};
use fabrik_apiserver::pki::Ca;
use fabrik_apiserver::rbac::Attributes;
use fabrik_apiserver::registry::WriteOptions;
use fabrik_apiserver::{Cluster, Settings};
use fabrik_store::{SledBackend, SledConfig, Store};
use http::Request;
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

type Body =
    http_body_util::combinators::BoxBody<bytes::Bytes, Box<dyn std::error::Error + Send + Sync>>;

fn request(path: &str, token: Option<&str>) -> Request<Body> {
    let mut b = Request::get(path);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b.body(
        Full::new(bytes::Bytes::new())
            .map_err(|never| match never {})
            .boxed(),
    )
    .expect("request")
}

fn percentiles(mut v: Vec<Duration>) -> (Duration, Duration) {
    v.sort();
    let at = |q: f64| v[((v.len() as f64 * q) as usize).min(v.len() - 1)];
    (at(0.5), at(0.99))
}

fn us(d: Duration) -> String {
    format!("{:.1} µs", d.as_secs_f64() * 1e6)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = tempfile::tempdir().expect("tempdir");
    let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("sled");
    let store: Arc<dyn Store> = Arc::new(backend.keyspace("bench").expect("keyspace"));
    let ca = Ca::generate("bench-ca").expect("ca");
    let sa_key = Arc::new(SigningKey::generate().expect("key"));
    let oidc_key = SigningKey::generate().expect("key");
    let issuer = "https://idp.bench";
    let mut config = AuthenticationConfiguration::default();
    config.jwt.push(
        OidcFlags {
            issuer_url: issuer.into(),
            client_id: "fabrik".into(),
            username_claim: Some("email".into()),
            groups_claim: Some("groups".into()),
            ..OidcFlags::default()
        }
        .to_authenticator(),
    );
    let oidc = Arc::new(OidcAuthenticator::new(&config).expect("oidc"));
    assert!(
        oidc.preload_keys(issuer, &json!({"keys": [oidc_key.jwk()]}))
            .await
    );
    let settings = Settings {
        auth: AuthSettings {
            service_account_key: Some(sa_key),
            service_account_issuer: "https://fabrik.bench".into(),
            oidc: Some(oidc.clone()),
            ..AuthSettings::default()
        },
        ..Settings::default()
    };
    let cluster = Cluster::start(store, ca, settings).await.expect("cluster");
    let server = cluster.server.clone();
    let reg = server.registry().clone();
    let def = |g: &str, p: &str| reg.resource(g, "v1", p).expect("resource");
    let (ns_def, role_def, rb_def, sa_def, cm_def) = (
        def("", "namespaces"),
        def("rbac.authorization.k8s.io", "roles"),
        def("rbac.authorization.k8s.io", "rolebindings"),
        def("", "serviceaccounts"),
        def("", "configmaps"),
    );
    let w = WriteOptions::default();
    // 100 namespaces × 10 Roles and 10 RoleBindings = 1,000 of each.
    for n in 0..100 {
        let ns = format!("ns-{n}");
        reg.create(&ns_def, None, json!({"metadata": {"name": ns}}), &w)
            .await
            .expect("ns");
        for r in 0..10 {
            reg.create(&role_def, Some(&ns), json!({"metadata": {"name": format!("role-{r}")},
                "rules": [{"apiGroups": [""], "resources": [format!("things{r}"), "configmaps"], "verbs": ["get", "list"]}]}), &w)
                .await.expect("role");
            reg.create(&rb_def, Some(&ns), json!({"metadata": {"name": format!("rb-{r}")},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": format!("role-{r}")},
                "subjects": [{"kind": "User", "name": format!("user-{n}-{r}")}, {"kind": "ServiceAccount", "name": "robot", "namespace": ns}]}), &w)
                .await.expect("binding");
        }
    }
    let sa = reg
        .create(
            &sa_def,
            Some("ns-42"),
            json!({"metadata": {"name": "robot"}}),
            &w,
        )
        .await
        .expect("sa");
    reg.create(
        &cm_def,
        Some("ns-42"),
        json!({"metadata": {"name": "cfg"}, "data": {"a": "b"}}),
        &w,
    )
    .await
    .expect("cm");
    // Let the RBAC cache catch up with the writes.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (token, _) = server
        .authenticator()
        .tokens()
        .issue(&TokenSpec {
            namespace: "ns-42".into(),
            name: "robot".into(),
            uid: sa.object["metadata"]["uid"].as_str().unwrap_or("").into(),
            audiences: Vec::new(),
            expiration_secs: 3600,
            bound: None,
        })
        .expect("token");
    let path = "/api/v1/namespaces/ns-42/configmaps/cfg";
    let master = UserInfo::new("bench", &["system:masters"]);
    const N: usize = 5000;
    let mut trusted = Vec::with_capacity(N);
    let mut network = Vec::with_capacity(N);
    for i in 0..N * 2 {
        // Interleave so that both see the same machine.
        let t = Instant::now();
        let resp = if i % 2 == 0 {
            server
                .clone()
                .handle(request(path, None), Caller::Trusted(master.clone()))
                .await
        } else {
            server
                .clone()
                .handle(request(path, Some(&token)), Caller::Network(None))
                .await
        };
        let d = t.elapsed();
        assert_eq!(resp.status(), 200, "request {i}");
        if i >= 200 {
            if i % 2 == 0 {
                trusted.push(d)
            } else {
                network.push(d)
            }
        }
    }
    let (tp50, tp99) = percentiles(trusted);
    let (np50, np99) = percentiles(network);
    println!(
        "GET configmap, in-process caller (no auth):      p50 {}  p99 {}",
        us(tp50),
        us(tp99)
    );
    println!(
        "GET configmap, SA token + RBAC (1k roles/bindings): p50 {}  p99 {}",
        us(np50),
        us(np99)
    );
    println!(
        "added by authentication + authorization:          p50 {}  p99 {}",
        us(np50.saturating_sub(tp50)),
        us(np99.saturating_sub(tp99))
    );

    // Pieces alone.
    let headers = request(path, Some(&token)).headers().clone();
    let mut sa_times = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let u = server
            .authenticator()
            .authenticate(&headers, None, &reg)
            .await
            .expect("auth");
        sa_times.push(t.elapsed());
        assert!(u.is_some());
    }
    let now = chrono::Utc::now().timestamp();
    let id_token = oidc_key
        .sign(
            &json!({"iss": issuer, "aud": "fabrik", "sub": "alice", "email": "alice@example.com",
            "groups": ["ml-team"], "iat": now, "exp": now + 3600}),
        )
        .expect("sign");
    let mut oidc_cold = Vec::with_capacity(N / 10);
    for _ in 0..N / 10 {
        let t = Instant::now();
        let u = oidc
            .authenticate(&id_token)
            .await
            .expect("ours")
            .expect("valid");
        oidc_cold.push(t.elapsed());
        assert_eq!(u.name, "alice@example.com");
    }
    let oidc_headers = request(path, Some(&id_token)).headers().clone();
    let mut oidc_times = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let u = server
            .authenticator()
            .authenticate(&oidc_headers, None, &reg)
            .await
            .expect("auth");
        oidc_times.push(t.elapsed());
        assert!(u.is_some_and(|u| u.name == "alice@example.com"));
    }
    let robot = UserInfo::new(
        "system:serviceaccount:ns-42:robot",
        &["system:serviceaccounts", "system:authenticated"],
    );
    let attrs = Attributes::resource("get", "", "configmaps", "", "ns-42", "cfg");
    let mut authz_times = Vec::with_capacity(N);
    for _ in 0..N {
        let t = Instant::now();
        let d = server.authorizer().authorize(&robot, &attrs);
        authz_times.push(t.elapsed());
        assert!(d.allowed());
    }
    let (a50, a99) = percentiles(sa_times);
    let (o50, o99) = percentiles(oidc_times);
    let (c50, c99) = percentiles(oidc_cold);
    let (z50, z99) = percentiles(authz_times);
    println!(
        "service-account JWT per request (+ SA lookup):     p50 {}  p99 {}",
        us(a50),
        us(a99)
    );
    println!(
        "OIDC ID token, signature check (warm JWKS):       p50 {}  p99 {}",
        us(c50),
        us(c99)
    );
    println!(
        "OIDC ID token per request (verified-token cache): p50 {}  p99 {}",
        us(o50),
        us(o99)
    );
    println!(
        "RBAC decision (1k roles, 1k bindings):            p50 {}  p99 {}",
        us(z50),
        us(z99)
    );

    // Quota admission throughput: 32 concurrent creators, with and without a quota.
    let pod_def = def("", "pods");
    let quota_def = def("", "resourcequotas");
    reg.create(&quota_def, Some("ns-1"), json!({"metadata": {"name": "q"}, "spec": {"hard": {"pods": "100000", "requests.cpu": "100000"}}}), &w)
        .await
        .expect("quota");
    let user = Arc::new(UserInfo::new("bench", &["system:masters"]));
    for (label, ns) in [("no quota", "ns-2"), ("with a quota", "ns-1")] {
        let per = 40;
        let t = Instant::now();
        let mut tasks = Vec::new();
        for c in 0..32 {
            let reg = reg.clone();
            let pod_def = pod_def.clone();
            let user = user.clone();
            tasks.push(tokio::spawn(async move {
                let opts = WriteOptions { user: Some(user), ..WriteOptions::default() };
                for i in 0..per {
                    let pod: Value = json!({"metadata": {"name": format!("p-{c}-{i}")},
                        "spec": {"containers": [{"name": "c", "image": "x", "resources": {"requests": {"cpu": "10m"}}}]}});
                    reg.create(&pod_def, Some(ns), pod, &opts).await.expect("create");
                }
            }));
        }
        for task in tasks {
            task.await.expect("task");
        }
        let secs = t.elapsed().as_secs_f64();
        println!(
            "pod creates, 32 concurrent creators, {label}: {:.0}/s ({} pods in {:.2} s)",
            (32 * per) as f64 / secs,
            32 * per,
            secs
        );
    }
    cluster.shutdown().await;
}
