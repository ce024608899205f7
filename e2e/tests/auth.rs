//! Authentication, authorization and admission through real kubectl and raw HTTPS: service
//! account tokens from `kubectl create token`, RBAC decisions that follow binding changes at
//! once, escalation prevention, impersonation, forged credentials, and quota under concurrent
//! creators.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use e2e::{kubectls, Fabrik, Kubectl};
use serde_json::{json, Value};

fn newest() -> Kubectl {
    kubectls()
        .pop()
        .expect("kubectl 1.35 (run scripts/install-test-deps.sh)")
}

/// The host's server URL and CA (PEM) from the admin kubeconfig.
fn server_and_ca(f: &Fabrik) -> Result<(String, String)> {
    let text = std::fs::read_to_string(f.kubeconfig())?;
    let v: Value = serde_yaml_ng::from_str(&text)?;
    let cluster = &v["clusters"][0]["cluster"];
    let server = cluster["server"].as_str().context("server")?.to_string();
    let ca = base64::engine::general_purpose::STANDARD.decode(
        cluster["certificate-authority-data"]
            .as_str()
            .context("ca")?,
    )?;
    Ok((server, String::from_utf8(ca)?))
}

/// A kubeconfig that authenticates with a bearer token only.
fn token_kubeconfig(f: &Fabrik, dir: &Path, name: &str, token: &str) -> Result<PathBuf> {
    let (server, ca) = server_and_ca(f)?;
    let ca_file = dir.join("ca.crt");
    std::fs::write(&ca_file, ca)?;
    let path = dir.join(format!("{name}.kubeconfig"));
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca_file}}],
        "users": [{"name": "u", "user": {"token": token}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    });
    std::fs::write(&path, serde_yaml_ng::to_string(&cfg)?)?;
    Ok(path)
}

fn kubectl_as(k: &Kubectl, kubeconfig: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .env("KUBECACHEDIR", kubeconfig.with_extension("cache"))
        .stdin(std::process::Stdio::null())
        .output()?)
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// Polls `check` for up to `limit`; returns how long it took.
fn within(limit: Duration, mut check: impl FnMut() -> Result<bool>) -> Result<Duration> {
    let start = Instant::now();
    loop {
        if check()? {
            return Ok(start.elapsed());
        }
        if start.elapsed() > limit {
            bail!("condition not met within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn apply(f: &Fabrik, k: &Kubectl, dir: &Path, name: &str, manifest: &Value) -> Result<String> {
    let file = dir.join(format!("{name}.json"));
    std::fs::write(&file, serde_json::to_vec(manifest)?)?;
    f.kubectl_ok(k, &["apply", "-f", file.to_str().context("path")?])
}

#[test]
fn service_account_tokens_rbac_escalation_and_impersonation() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = newest();
    let dir = tempfile::tempdir()?;
    f.kubectl_ok(&k, &["create", "namespace", "team"])?;
    f.kubectl_ok(&k, &["create", "serviceaccount", "robot", "-n", "team"])?;
    let token = f.kubectl_ok(&k, &["create", "token", "robot", "-n", "team"])?;
    let token = token.trim();
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let robot = token_kubeconfig(&f, dir.path(), "robot", token)?;

    // Who am I, and what may I do before any binding?
    let who = kubectl_as(&k, &robot, &["auth", "whoami", "-o", "json"])?;
    let who_json: Value = serde_json::from_slice(&who.stdout).context(text(&who))?;
    assert_eq!(
        who_json["status"]["userInfo"]["username"],
        "system:serviceaccount:team:robot"
    );
    let groups = who_json["status"]["userInfo"]["groups"].to_string();
    assert!(
        groups.contains("system:serviceaccounts:team") && groups.contains("system:authenticated"),
        "{groups}"
    );
    let denied = kubectl_as(&k, &robot, &["get", "pods", "-n", "team"])?;
    assert!(!denied.status.success());
    let msg = text(&denied);
    assert!(
        msg.contains("forbidden") && msg.contains("cannot list resource \"pods\""),
        "{msg}"
    );
    let can = kubectl_as(&k, &robot, &["auth", "can-i", "list", "pods", "-n", "team"])?;
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "no");

    // A RoleBinding takes effect at once, and its removal too (target: within 1 s).
    apply(
        &f,
        &k,
        dir.path(),
        "role",
        &json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-reader", "namespace": "team"},
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles", "rolebindings"], "verbs": ["create", "get", "list"]}
            ]
        }),
    )?;
    f.kubectl_ok(
        &k,
        &[
            "create",
            "rolebinding",
            "robot-reads",
            "-n",
            "team",
            "--role",
            "pod-reader",
            "--serviceaccount",
            "team:robot",
        ],
    )?;
    let granted = within(Duration::from_secs(1), || {
        Ok(kubectl_as(&k, &robot, &["get", "pods", "-n", "team"])?
            .status
            .success())
    })?;
    eprintln!("binding effective after {granted:?}");
    let can = kubectl_as(&k, &robot, &["auth", "can-i", "list", "pods", "-n", "team"])?;
    assert_eq!(String::from_utf8_lossy(&can.stdout).trim(), "yes");
    let list = kubectl_as(&k, &robot, &["auth", "can-i", "--list", "-n", "team"])?;
    assert!(text(&list).contains("pods"), "{}", text(&list));
    // Impersonation by the admin: the same answers as the robot's own.
    let as_robot = f.kubectl(
        &k,
        &[
            "auth",
            "can-i",
            "list",
            "pods",
            "-n",
            "team",
            "--as",
            "system:serviceaccount:team:robot",
        ],
    )?;
    assert_eq!(String::from_utf8_lossy(&as_robot.stdout).trim(), "yes");
    let as_robot = f.kubectl(
        &k,
        &[
            "auth",
            "can-i",
            "delete",
            "pods",
            "-n",
            "team",
            "--as",
            "system:serviceaccount:team:robot",
        ],
    )?;
    assert_eq!(String::from_utf8_lossy(&as_robot.stdout).trim(), "no");

    // Escalation: the robot may create roles, but only with rules it holds.
    let escalate = dir.path().join("escalate.json");
    std::fs::write(
        &escalate,
        serde_json::to_vec(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "secret-reader", "namespace": "team"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]
        }))?,
    )?;
    let out = kubectl_as(
        &k,
        &robot,
        &["create", "-f", escalate.to_str().context("path")?],
    )?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("attempting to grant RBAC permissions not currently held"),
        "{}",
        text(&out)
    );
    let held = dir.path().join("held.json");
    std::fs::write(
        &held,
        serde_json::to_vec(&json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "pod-getter", "namespace": "team"},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]
        }))?,
    )?;
    let out = kubectl_as(
        &k,
        &robot,
        &["create", "-f", held.to_str().context("path")?],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    // Binding a more powerful role: refused.
    let out = kubectl_as(
        &k,
        &robot,
        &[
            "create",
            "rolebinding",
            "grab-admin",
            "-n",
            "team",
            "--clusterrole",
            "admin",
            "--serviceaccount",
            "team:robot",
        ],
    )?;
    assert!(!out.status.success());
    assert!(text(&out).contains("forbidden"), "{}", text(&out));
    let out = kubectl_as(
        &k,
        &robot,
        &[
            "create",
            "clusterrolebinding",
            "grab-all",
            "--clusterrole",
            "cluster-admin",
            "--serviceaccount",
            "team:robot",
        ],
    )?;
    assert!(!out.status.success());
    // Impersonation without the verb.
    let out = kubectl_as(
        &k,
        &robot,
        &["get", "pods", "-n", "team", "--as", "fabrik-admin"],
    )?;
    assert!(!out.status.success());
    assert!(text(&out).contains("cannot impersonate"), "{}", text(&out));

    f.kubectl_ok(&k, &["delete", "rolebinding", "robot-reads", "-n", "team"])?;
    let revoked = within(Duration::from_secs(1), || {
        Ok(!kubectl_as(&k, &robot, &["get", "pods", "-n", "team"])?
            .status
            .success())
    })?;
    eprintln!("binding removal effective after {revoked:?}");

    // The token dies with its service account.
    f.kubectl_ok(&k, &["delete", "serviceaccount", "robot", "-n", "team"])?;
    let out = kubectl_as(&k, &robot, &["auth", "whoami"])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("Unauthorized") || text(&out).contains("401"),
        "{}",
        text(&out)
    );
    Ok(())
}

/// Raw HTTPS requests with forged or foreign credentials.
fn https_client(ca_pem: &str, identity: Option<(&str, &str)>) -> Result<reqwest::blocking::Client> {
    let mut b = reqwest::blocking::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes())?)
        .timeout(Duration::from_secs(10));
    if let Some((cert, key)) = identity {
        b = b.identity(reqwest::Identity::from_pem(
            format!("{cert}\n{key}").as_bytes(),
        )?);
    }
    Ok(b.build()?)
}

fn forge(header: Value, payload: Value, sig: &[u8]) -> String {
    format!(
        "{}.{}.{}",
        URL_SAFE_NO_PAD.encode(header.to_string()),
        URL_SAFE_NO_PAD.encode(payload.to_string()),
        URL_SAFE_NO_PAD.encode(sig)
    )
}

#[test]
fn forged_tokens_and_foreign_certificates_are_refused() -> Result<()> {
    e2e::init_crypto();
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = newest();
    let (server, ca) = server_and_ca(&f)?;
    f.kubectl_ok(&k, &["create", "serviceaccount", "robot"])?;
    let real = f
        .kubectl_ok(&k, &["create", "token", "robot"])?
        .trim()
        .to_string();
    let http = https_client(&ca, None)?;
    let url = format!("{server}/api/v1/namespaces/default/pods");
    let status = |token: &str| -> Result<u16> {
        Ok(http.get(&url).bearer_auth(token).send()?.status().as_u16())
    };
    // The real token authenticates (and is then forbidden: no RBAC grant).
    assert_eq!(status(&real)?, 403);

    let parts: Vec<&str> = real.split('.').collect();
    let header: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0])?)?;
    let payload: Value = serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1])?)?;
    let jwks: Value = serde_json::from_str(
        &http
            .get(format!("{server}/openid/v1/jwks"))
            .send()?
            .text()?,
    )?;
    assert_eq!(jwks["keys"][0]["kid"], header["kid"], "{jwks}");
    let discovery: Value = serde_json::from_str(
        &http
            .get(format!("{server}/.well-known/openid-configuration"))
            .send()?
            .text()?,
    )?;
    assert_eq!(discovery["issuer"], payload["iss"]);

    let mut admin = payload.clone();
    admin["kubernetes.io"]["serviceaccount"]["name"] = json!("default");
    admin["sub"] = json!("system:serviceaccount:kube-system:default");
    let mut expired = payload.clone();
    expired["exp"] = json!(chrono::Utc::now().timestamp() - 7200);
    let mut other_iss = payload.clone();
    other_iss["iss"] = json!("https://evil.example");
    let mut other_aud = payload.clone();
    other_aud["aud"] = json!(["vault"]);
    let sig = URL_SAFE_NO_PAD.decode(parts[2])?;
    let cases = vec![
        (
            "alg none",
            forge(
                json!({"alg": "none", "kid": header["kid"]}),
                admin.clone(),
                b"",
            ),
        ),
        (
            "HS256 with the public key",
            forge(
                json!({"alg": "HS256", "kid": header["kid"]}),
                admin.clone(),
                jwks["keys"][0]["x"].as_str().unwrap_or("").as_bytes(),
            ),
        ),
        (
            "unknown kid",
            forge(
                json!({"alg": "ES256", "kid": "nope"}),
                payload.clone(),
                &sig,
            ),
        ),
        ("tampered payload", forge(header.clone(), admin, &sig)),
        ("expired", forge(header.clone(), expired, &sig)),
        ("wrong issuer", forge(header.clone(), other_iss, &sig)),
        ("wrong audience", forge(header.clone(), other_aud, &sig)),
        ("garbage", "not-a-jwt".to_string()),
        ("oversized", "a".repeat(40 * 1024)),
    ];
    for (what, token) in cases {
        assert_eq!(status(&token)?, 401, "{what}");
    }
    // No credentials at all.
    assert_eq!(http.get(&url).send()?.status().as_u16(), 401);
    // A huge header block is refused without harming the server.
    let huge = http
        .get(&url)
        .header("X-Filler", "b".repeat(2 * 1024 * 1024))
        .send();
    if let Ok(r) = huge {
        assert!(r.status().is_client_error(), "{}", r.status());
    }
    assert_eq!(status(&real)?, 403, "server still serving");

    // A certificate from another CA, and an expired one from the right CA, are 401.
    let other = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fabrik-admin");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    let self_signed = params.self_signed(&other)?;
    let foreign = https_client(&ca, Some((&self_signed.pem(), &other.serialize_pem())))?;
    assert_eq!(foreign.get(&url).send()?.status().as_u16(), 401);

    let pki = f.data_dir().join("pki");
    let ca_cert = std::fs::read_to_string(pki.join("ca.crt")).context("ca.crt")?;
    let ca_key = std::fs::read_to_string(pki.join("ca.key")).context("ca.key")?;
    let issuer_key = rcgen::KeyPair::from_pem(&ca_key)?;
    let issuer = rcgen::Issuer::from_ca_cert_pem(&ca_cert, issuer_key)?;
    let mut params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "fabrik-admin");
    params
        .distinguished_name
        .push(rcgen::DnType::OrganizationName, "system:masters");
    params.not_before = rcgen::date_time_ymd(2020, 1, 1);
    params.not_after = rcgen::date_time_ymd(2021, 1, 1);
    let key = rcgen::KeyPair::generate()?;
    let old = params.signed_by(&key, &issuer)?;
    let expired_client = https_client(&ca, Some((&old.pem(), &key.serialize_pem())))?;
    assert_eq!(expired_client.get(&url).send()?.status().as_u16(), 401);
    Ok(())
}

#[test]
fn quota_is_exact_under_32_concurrent_creators() -> Result<()> {
    e2e::init_crypto();
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = newest();
    f.kubectl_ok(&k, &["create", "namespace", "q"])?;
    f.kubectl_ok(
        &k,
        &[
            "create",
            "quota",
            "small",
            "-n",
            "q",
            "--hard=pods=5,requests.nvidia.com/gpu=3",
        ],
    )?;
    let rt = tokio::runtime::Runtime::new()?;
    let (created, refused, messages) = rt.block_on(async {
        let client = f.client().await?;
        let pods: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "q");
        let mut tasks = Vec::new();
        for i in 0..32 {
            let pods = pods.clone();
            tasks.push(tokio::spawn(async move {
                let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(json!({
                    "metadata": {"name": format!("p{i}")},
                    "spec": {"containers": [{"name": "c", "image": "busybox",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}
                }))?;
                anyhow::Ok(pods.create(&Default::default(), &pod).await)
            }));
        }
        let mut created = 0;
        let mut refused = 0;
        let mut messages = Vec::new();
        for t in tasks {
            match t.await?? {
                Ok(_) => created += 1,
                Err(kube::Error::Api(s)) if s.code == 403 => {
                    refused += 1;
                    messages.push(s.message);
                }
                Err(e) => bail!("unexpected error {e}"),
            }
        }
        anyhow::Ok((created, refused, messages))
    })?;
    // The GPU quota (3) binds before the pod count (5).
    assert_eq!(created, 3, "{messages:?}");
    assert_eq!(refused, 29);
    assert!(
        messages[0].contains("exceeded quota: small"),
        "{}",
        messages[0]
    );
    assert!(
        messages[0].contains("requests.nvidia.com/gpu"),
        "{}",
        messages[0]
    );
    let count = f.kubectl_ok(&k, &["get", "pods", "-n", "q", "-o", "name"])?;
    assert_eq!(count.lines().count(), 3, "{count}");
    Ok(())
}

#[test]
fn pod_security_limit_ranges_and_admission_policies() -> Result<()> {
    let f = Fabrik::start_with(&["--nodes", "0"])?;
    let k = newest();
    let dir = tempfile::tempdir()?;
    f.kubectl_ok(&k, &["create", "namespace", "secure"])?;
    f.kubectl_ok(
        &k,
        &[
            "label",
            "namespace",
            "secure",
            "pod-security.kubernetes.io/enforce=baseline",
            "pod-security.kubernetes.io/warn=restricted",
        ],
    )?;
    let privileged = dir.path().join("priv.json");
    std::fs::write(
        &privileged,
        serde_json::to_vec(&json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "root", "namespace": "secure"},
            "spec": {"hostNetwork": true, "containers": [{"name": "c", "image": "busybox", "securityContext": {"privileged": true}}]}
        }))?,
    )?;
    let out = f.kubectl(&k, &["create", "-f", privileged.to_str().context("path")?])?;
    assert!(!out.status.success());
    let msg = text(&out);
    assert!(
        msg.contains("violates PodSecurity \"baseline:latest\"") && msg.contains("privileged"),
        "{msg}"
    );
    let out = f.kubectl(&k, &["run", "plain", "-n", "secure", "--image", "busybox"])?;
    assert!(out.status.success(), "{}", text(&out));
    assert!(
        text(&out).contains("would violate PodSecurity \"restricted:latest\""),
        "{}",
        text(&out)
    );

    // LimitRange: defaults filled in, maxima enforced.
    apply(
        &f,
        &k,
        dir.path(),
        "limits",
        &json!({
            "apiVersion": "v1", "kind": "LimitRange", "metadata": {"name": "limits", "namespace": "secure"},
            "spec": {"limits": [{"type": "Container", "default": {"cpu": "500m"}, "defaultRequest": {"cpu": "100m"}, "max": {"cpu": "1"}}]}
        }),
    )?;
    f.kubectl_ok(
        &k,
        &["run", "defaulted", "-n", "secure", "--image", "busybox"],
    )?;
    let res = f.kubectl_ok(
        &k,
        &[
            "get",
            "pod",
            "defaulted",
            "-n",
            "secure",
            "-o",
            "jsonpath={.spec.containers[0].resources}",
        ],
    )?;
    let res: Value = serde_json::from_str(&res)?;
    assert_eq!(res["limits"]["cpu"], "500m", "{res}");
    assert_eq!(res["requests"]["cpu"], "100m", "{res}");
    let out = f.kubectl(&k, &["run", "greedy", "-n", "secure", "--image", "busybox", "--overrides",
        r#"{"spec":{"containers":[{"name":"greedy","image":"busybox","resources":{"limits":{"cpu":"2"}}}]}}"#])?;
    assert!(!out.status.success());
    assert!(
        text(&out).contains("maximum cpu usage per Container is 1, but limit is 2"),
        "{}",
        text(&out)
    );

    // A ValidatingAdmissionPolicy with a CEL rule, bound with Deny, and another with Warn.
    apply(
        &f,
        &k,
        dir.path(),
        "policy",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": "max-replicas"},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{"apiGroups": ["apps"], "apiVersions": ["v1"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["deployments"]}]},
                "validations": [{"expression": "object.spec.replicas <= 5", "message": "at most 5 replicas"}]
            }
        }),
    )?;
    apply(
        &f,
        &k,
        dir.path(),
        "binding",
        &json!({
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": "max-replicas-secure"},
            "spec": {"policyName": "max-replicas", "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "secure"}}}}
        }),
    )?;
    let out = f.kubectl(
        &k,
        &[
            "create",
            "deployment",
            "big",
            "-n",
            "secure",
            "--image",
            "busybox",
            "--replicas",
            "10",
        ],
    )?;
    assert!(!out.status.success());
    assert!(text(&out).contains("at most 5 replicas"), "{}", text(&out));
    let out = f.kubectl(
        &k,
        &[
            "create",
            "deployment",
            "small",
            "-n",
            "secure",
            "--image",
            "busybox",
            "--replicas",
            "2",
        ],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    // Elsewhere the binding does not apply.
    let out = f.kubectl(
        &k,
        &[
            "create",
            "deployment",
            "big",
            "-n",
            "default",
            "--image",
            "busybox",
            "--replicas",
            "10",
        ],
    )?;
    assert!(out.status.success(), "{}", text(&out));
    Ok(())
}
