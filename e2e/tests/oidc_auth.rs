//! OIDC users against a real OpenID Provider (`e2e/oidc/provider.mjs`): `fabrik up` trusts it
//! through `--oidc-*` flags and an AuthenticationConfiguration file; users log in through
//! `fabrik login` (kubectl's exec plugin) and act as themselves, their groups mapped to RBAC;
//! expired tokens, tokens for another audience and of unknown issuers are 401; a rotated
//! signing key is picked up from the JWKS.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use e2e::oidc::{login_with_plugin, OidcOptions, OidcProvider, ALICE, BOB};
use e2e::{kubectls, Fabrik, Kubectl};
use serde_json::{json, Value};

fn newest() -> Kubectl {
    kubectls()
        .pop()
        .expect("kubectl 1.35 (run scripts/install-test-deps.sh)")
}

fn cluster_of(f: &Fabrik, dir: &Path) -> Result<Value> {
    let text = std::fs::read_to_string(f.kubeconfig())?;
    let v: Value = serde_yaml_ng::from_str(&text)?;
    let cluster = &v["clusters"][0]["cluster"];
    let ca = base64::Engine::decode(
        &base64::engine::general_purpose::STANDARD,
        cluster["certificate-authority-data"]
            .as_str()
            .context("ca")?,
    )?;
    let ca_file = dir.join("cluster-ca.crt");
    std::fs::write(&ca_file, ca)?;
    Ok(json!({"server": cluster["server"], "certificate-authority": ca_file}))
}

fn kubeconfig(f: &Fabrik, dir: &Path, name: &str, user: Value) -> Result<PathBuf> {
    let path = dir.join(format!("{name}.kubeconfig"));
    let cfg = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster_of(f, dir)?}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "c",
    });
    std::fs::write(&path, serde_yaml_ng::to_string(&cfg)?)?;
    Ok(path)
}

fn kubectl_with(k: &Kubectl, cfg: &Path, args: &[&str]) -> Result<std::process::Output> {
    Ok(std::process::Command::new(&k.path)
        .args(args)
        .env("KUBECONFIG", cfg)
        .env("KUBECACHEDIR", cfg.with_extension("cache"))
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

fn whoami(k: &Kubectl, cfg: &Path) -> Result<Value> {
    let out = kubectl_with(k, cfg, &["auth", "whoami", "-o", "json"])?;
    if !out.status.success() {
        bail!("whoami failed: {}", text(&out));
    }
    Ok(serde_json::from_slice::<Value>(&out.stdout)?["status"]["userInfo"].clone())
}

#[test]
fn oidc_users_log_in_and_act_under_rbac() -> Result<()> {
    let main = OidcProvider::start_default()?;
    let short = OidcProvider::start(OidcOptions {
        id_token_ttl: Duration::from_secs(2),
        ..OidcOptions::default()
    })?;
    let other_app = OidcProvider::start(OidcOptions {
        client_id: "other-app".into(),
        ..OidcOptions::default()
    })?;
    let dir = tempfile::tempdir()?;
    // Two more issuers through the structured configuration; `other_app` issues tokens for
    // another audience than the one Fabrik accepts.
    let config = json!({
        "apiVersion": "apiserver.config.k8s.io/v1beta1",
        "kind": "AuthenticationConfiguration",
        "jwt": [
            {"issuer": {"url": short.issuer(), "audiences": ["fabrik"],
                        "certificateAuthority": short.ca_pem()},
             "claimMappings": {"username": {"claim": "email", "prefix": ""},
                               "groups": {"claim": "groups", "prefix": "oidc:"}}},
            {"issuer": {"url": other_app.issuer(), "audiences": ["fabrik"],
                        "certificateAuthority": other_app.ca_pem()},
             "claimMappings": {"username": {"claim": "email", "prefix": ""}}},
        ],
    });
    let config_file = dir.path().join("authn.yaml");
    std::fs::write(&config_file, serde_yaml_ng::to_string(&config)?)?;
    let ca_file = main.ca_file();
    let f = Fabrik::start_with(&[
        "--nodes",
        "0",
        "--oidc-issuer-url",
        main.issuer(),
        "--oidc-client-id",
        main.client_id(),
        "--oidc-username-claim",
        "email",
        "--oidc-groups-claim",
        "groups",
        "--oidc-groups-prefix",
        "oidc:",
        "--oidc-ca-file",
        ca_file.to_str().context("path")?,
        "--authentication-config",
        config_file.to_str().context("path")?,
    ])?;
    let k = newest();

    // Alice logs in through the plugin (the test plays her browser); kubectl then runs the
    // same plugin, which answers from its cache.
    let cache = dir.path().join("oidc-cache");
    let cred = login_with_plugin(&main, &ALICE, &cache)?;
    assert!(cred["status"]["token"].is_string());
    let mut args = vec!["login".to_string()];
    args.extend(main.login_args());
    args.extend(["--cache-dir".to_string(), cache.display().to_string()]);
    let alice = kubeconfig(
        &f,
        dir.path(),
        "alice",
        json!({"exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": e2e::fabrik_bin(),
            "args": args,
            "interactiveMode": "IfAvailable",
        }}),
    )?;
    let me = whoami(&k, &alice)?;
    assert_eq!(me["username"], "alice@example.com", "{me}");
    let groups = me["groups"].to_string();
    assert!(
        groups.contains("oidc:ml-team") && groups.contains("system:authenticated"),
        "{groups}"
    );

    // RBAC by group.
    let denied = kubectl_with(&k, &alice, &["get", "pods", "-A"])?;
    assert!(
        !denied.status.success() && text(&denied).contains("forbidden"),
        "{}",
        text(&denied)
    );
    f.kubectl_ok(
        &k,
        &[
            "create",
            "clusterrolebinding",
            "ml-view",
            "--clusterrole",
            "view",
            "--group",
            "oidc:ml-team",
        ],
    )?;
    let start = Instant::now();
    while !kubectl_with(&k, &alice, &["get", "pods", "-A"])?
        .status
        .success()
    {
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "binding not effective within 1 s"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let bob = kubeconfig(
        &f,
        dir.path(),
        "bob",
        json!({"token": main.mint_id_token(&BOB)?}),
    )?;
    assert_eq!(whoami(&k, &bob)?["username"], "bob@example.com");
    let out = kubectl_with(&k, &bob, &["get", "pods", "-A"])?;
    assert!(
        !out.status.success() && text(&out).contains("forbidden"),
        "{}",
        text(&out)
    );

    // Key rotation: a token signed with the provider's new key is accepted (JWKS refetched on
    // the unknown kid).
    let new_kid = main.rotate_key()?;
    let rotated = main.mint_id_token(&ALICE)?;
    let header = e2e::oidc::jwt_part(&rotated, 0)?;
    assert_eq!(header["kid"], new_kid);
    let alice_rotated = kubeconfig(&f, dir.path(), "alice-rotated", json!({"token": rotated}))?;
    assert_eq!(whoami(&k, &alice_rotated)?["username"], "alice@example.com");

    // The second issuer's tokens work until they expire, then 401.
    let brief = kubeconfig(
        &f,
        dir.path(),
        "brief",
        json!({"token": short.mint_id_token(&ALICE)?}),
    )?;
    assert_eq!(whoami(&k, &brief)?["username"], "alice@example.com");
    std::thread::sleep(Duration::from_secs(3));
    let out = kubectl_with(&k, &brief, &["auth", "whoami"])?;
    assert!(!out.status.success());
    assert!(text(&out).contains("Unauthorized"), "{}", text(&out));

    // Another audience, and an issuer Fabrik does not know.
    let wrong_aud = kubeconfig(
        &f,
        dir.path(),
        "aud",
        json!({"token": other_app.mint_id_token(&ALICE)?}),
    )?;
    let out = kubectl_with(&k, &wrong_aud, &["auth", "whoami"])?;
    assert!(text(&out).contains("Unauthorized"), "{}", text(&out));
    let stranger = OidcProvider::start_default()?;
    let unknown = kubeconfig(
        &f,
        dir.path(),
        "unknown",
        json!({"token": stranger.mint_id_token(&ALICE)?}),
    )?;
    let out = kubectl_with(&k, &unknown, &["auth", "whoami"])?;
    assert!(text(&out).contains("Unauthorized"), "{}", text(&out));
    Ok(())
}
