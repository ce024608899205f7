//! `fabrik login` (the kubectl exec credential plugin) and `fabrik kubeconfig --oidc`, as real
//! processes against a real OpenID Provider (`e2e/oidc/provider.mjs`), the test playing the
//! browser: the authorization code flow and the device grant print a verified ExecCredential;
//! the cache answers without the issuer; an expired ID token is refreshed (also across a
//! signing key rotation); a failed refresh falls back to a login; bad settings fail clearly.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result};
use e2e::oidc::{
    jwt_part, login_with_plugin, run_login, LoginProcess, OidcOptions, OidcProvider, User, ALICE,
    BOB,
};

const EXIT: Duration = Duration::from_secs(60);

/// `provider.login_args()` plus a cache directory, no browser, any loopback port.
fn plugin_args(provider: &OidcProvider, cache: &Path) -> Vec<String> {
    let mut args = provider.login_args();
    args.extend(
        [
            "--no-browser",
            "--listen",
            "127.0.0.1:0",
            "--cache-dir",
            &cache.display().to_string(),
        ]
        .map(String::from),
    );
    args
}

/// Checks an ExecCredential: its shape, and that its token is `user`'s, verified by the issuer.
fn check_credential(
    provider: &OidcProvider,
    cred: &serde_json::Value,
    api_version: &str,
    user: &User,
) -> Result<String> {
    assert_eq!(cred["kind"], "ExecCredential");
    assert_eq!(cred["apiVersion"], api_version);
    let token = cred["status"]["token"]
        .as_str()
        .context("no status.token")?
        .to_string();
    let claims = provider.verify_id_token(&token)?;
    assert_eq!(claims["iss"], provider.issuer());
    let aud_ok = claims["aud"] == provider.client_id()
        || claims["aud"]
            .as_array()
            .is_some_and(|a| a.iter().any(|v| v == provider.client_id()));
    assert!(aud_ok, "aud {} lacks the client id", claims["aud"]);
    assert_eq!(claims["sub"], user.name);
    assert_eq!(claims["email"], user.email());
    let groups: Vec<&str> = claims["groups"]
        .as_array()
        .context("no groups claim in the ID token")?
        .iter()
        .filter_map(|g| g.as_str())
        .collect();
    assert_eq!(groups, user.groups);
    // expirationTimestamp is the token's exp.
    let exp = claims["exp"].as_i64().context("no exp")?;
    let stamp = cred["status"]["expirationTimestamp"]
        .as_str()
        .context("no expirationTimestamp")?;
    let parsed = chrono::DateTime::parse_from_rfc3339(stamp)?.timestamp();
    assert!(stamp.ends_with('Z'), "not UTC: {stamp}");
    assert_eq!(parsed, exp, "expirationTimestamp {stamp} is not exp {exp}");
    Ok(token)
}

fn cache_files(cache: &Path) -> Result<Vec<std::path::PathBuf>> {
    let mut files: Vec<_> = std::fs::read_dir(cache)?
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

#[cfg(unix)]
fn mode(path: &Path) -> Result<u32> {
    use std::os::unix::fs::PermissionsExt;
    Ok(std::fs::metadata(path)?.permissions().mode() & 0o777)
}

#[test]
fn auth_code_flow_prints_a_verified_credential_then_answers_from_the_cache() -> Result<()> {
    let provider = OidcProvider::start_default()?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("oidc");
    let args = plugin_args(&provider, &cache);

    let plugin = LoginProcess::spawn(&args, &[])?;
    let url = plugin.auth_url()?;
    assert!(
        url.starts_with(&format!("{}/auth?", provider.issuer())),
        "{url}"
    );
    assert!(url.contains("code_challenge_method=S256"), "no PKCE: {url}");
    let page = provider.complete_auth_code_login(&url, &ALICE)?;
    assert!(page.contains("You can close this window"), "{page}");
    let out = plugin.finish(EXIT)?;
    assert_eq!(
        out.stdout.trim().lines().count(),
        1,
        "stdout: {:?}",
        out.stdout
    );
    let token = check_credential(
        &provider,
        &out.exec_credential()?,
        "client.authentication.k8s.io/v1",
        &ALICE,
    )?;

    // One cache file, private.
    let files = cache_files(&cache)?;
    assert_eq!(files.len(), 1, "{files:?}");
    #[cfg(unix)]
    {
        assert_eq!(mode(&files[0])?, 0o600);
        assert_eq!(mode(&cache)?, 0o700);
    }
    let entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0])?)?;
    assert_eq!(entry["id_token"], token.as_str());
    assert!(
        entry["refresh_token"].is_string(),
        "no refresh token cached"
    );

    // With the issuer gone, the cache still answers, in the version kubectl asks for.
    drop(provider);
    let info = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","spec":{"interactive":false}}"#;
    let again = run_login(&args, &[("KUBERNETES_EXEC_INFO", info)], EXIT)?;
    let cred = again.exec_credential()?;
    assert_eq!(cred["apiVersion"], "client.authentication.k8s.io/v1beta1");
    assert_eq!(cred["status"]["token"], token.as_str());
    assert!(
        !again.stderr.contains("https://"),
        "a cached login must not ask for a browser: {}",
        again.stderr
    );
    Ok(())
}

#[test]
fn device_flow_prints_a_verified_credential() -> Result<()> {
    let provider = OidcProvider::start_default()?;
    let tmp = tempfile::tempdir()?;
    let mut args = plugin_args(&provider, tmp.path());
    args.extend(["--flow".to_string(), "device".into()]);
    let plugin = LoginProcess::spawn(&args, &[])?;
    let (uri, code) = plugin.device_prompt()?;
    assert!(uri.starts_with(provider.issuer()), "{uri}");
    let page = provider.approve_device_login(&uri, &code, &BOB)?;
    assert!(page.contains("Sign-in Success"), "{page}");
    let out = plugin.finish(EXIT)?;
    check_credential(
        &provider,
        &out.exec_credential()?,
        "client.authentication.k8s.io/v1",
        &BOB,
    )?;
    let files = cache_files(tmp.path())?;
    assert_eq!(files.len(), 1, "{files:?}");
    let entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&files[0])?)?;
    assert!(
        entry["refresh_token"].is_string(),
        "no refresh token cached"
    );
    Ok(())
}

#[test]
fn an_expiring_token_is_refreshed_and_a_failed_refresh_logs_in_again() -> Result<()> {
    // 5 s tokens are always inside the plugin's 60 s refresh margin.
    let provider = OidcProvider::start(OidcOptions {
        id_token_ttl: Duration::from_secs(5),
        ..OidcOptions::default()
    })?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("oidc");
    let first = login_with_plugin(&provider, &ALICE, &cache)?;
    let first_token =
        check_credential(&provider, &first, "client.authentication.k8s.io/v1", &ALICE)?;
    let args = plugin_args(&provider, &cache);

    // No browser is driven: only the refresh token can produce a new token.
    std::thread::sleep(Duration::from_millis(1100));
    let out = run_login(&args, &[], EXIT)?;
    let second_token = check_credential(
        &provider,
        &out.exec_credential()?,
        "client.authentication.k8s.io/v1",
        &ALICE,
    )?;
    assert_ne!(
        first_token, second_token,
        "the expiring token was handed out again"
    );
    let file = cache_files(&cache)?
        .into_iter()
        .next()
        .context("no cache file")?;
    let entry: serde_json::Value = serde_json::from_slice(&std::fs::read(&file)?)?;
    assert_eq!(entry["id_token"], second_token.as_str());

    // A refresh token the issuer does not know: the plugin says so and logs in again.
    let mut broken = entry.clone();
    broken["refresh_token"] = "not-a-refresh-token".into();
    std::fs::write(&file, serde_json::to_vec(&broken)?)?;
    let plugin = LoginProcess::spawn(&args, &[])?;
    let url = plugin.auth_url()?;
    assert!(
        plugin.stderr().contains("could not refresh"),
        "{}",
        plugin.stderr()
    );
    provider.complete_auth_code_login(&url, &ALICE)?;
    let out = plugin.finish(EXIT)?;
    check_credential(
        &provider,
        &out.exec_credential()?,
        "client.authentication.k8s.io/v1",
        &ALICE,
    )?;
    Ok(())
}

#[test]
fn a_refresh_after_signing_key_rotation_verifies_against_the_new_key() -> Result<()> {
    let provider = OidcProvider::start(OidcOptions {
        id_token_ttl: Duration::from_secs(5),
        ..OidcOptions::default()
    })?;
    let tmp = tempfile::tempdir()?;
    let first = login_with_plugin(&provider, &ALICE, tmp.path())?;
    let old_kid = jwt_part(first["status"]["token"].as_str().unwrap_or_default(), 0)?["kid"]
        .as_str()
        .map(str::to_string)
        .context("no kid")?;
    assert_eq!(old_kid, provider.signing_kid()?);

    let new_kid = provider.rotate_key_retiring_old()?;
    assert_ne!(new_kid, old_kid);
    let out = run_login(&plugin_args(&provider, tmp.path()), &[], EXIT)?;
    let token = check_credential(
        &provider,
        &out.exec_credential()?,
        "client.authentication.k8s.io/v1",
        &ALICE,
    )?;
    assert_eq!(jwt_part(&token, 0)?["kid"], new_kid.as_str());
    // The old key is no longer published: the first token no longer verifies.
    let old_token = first["status"]["token"].as_str().unwrap_or_default();
    assert!(provider.verify_id_token(old_token).is_err());
    Ok(())
}

#[test]
fn the_harness_mints_tokens_without_the_plugin() -> Result<()> {
    let provider = OidcProvider::start_default()?;
    let tokens = provider.mint_tokens(&BOB)?;
    let claims = provider.verify_id_token(&tokens.id_token)?;
    assert_eq!(claims["sub"], "bob");
    assert_eq!(claims["groups"], serde_json::json!(["finance"]));
    assert!(tokens.refresh_token.is_some());
    // Rotation keeps the previous key published, so tokens it signed still verify.
    let kid = provider.rotate_key()?;
    assert!(provider.verify_id_token(&tokens.id_token).is_ok());
    let fresh = provider.mint_id_token(&ALICE)?;
    assert_eq!(jwt_part(&fresh, 0)?["kid"], kid.as_str());
    Ok(())
}

/// Runs a login that must fail; returns its stderr.
fn failing(args: &[String]) -> Result<String> {
    let out = run_login(args, &[], EXIT)?;
    assert!(
        !out.status.success(),
        "expected a failure; stdout: {}",
        out.stdout
    );
    assert!(
        out.stdout.is_empty(),
        "stdout must stay empty: {:?}",
        out.stdout
    );
    Ok(out.stderr)
}

#[test]
fn bad_settings_fail_with_clear_errors() -> Result<()> {
    let provider = OidcProvider::start_default()?;
    let tmp = tempfile::tempdir()?;
    let base = plugin_args(&provider, tmp.path());
    let with = |flag: &str, value: &str| -> Vec<String> {
        let mut a = base.clone();
        if let Some(i) = a.iter().position(|x| x == flag) {
            a[i + 1] = value.to_string();
        }
        a
    };

    let err = failing(&with("--issuer-url", "not a url"))?;
    assert!(err.contains("invalid --issuer-url"), "{err}");

    let err = failing(&with("--issuer-url", "https://127.0.0.1:1"))?;
    assert!(
        err.contains("cannot fetch the OpenID configuration of https://127.0.0.1:1"),
        "{err}"
    );

    // The issuer's CA is not trusted without --ca-file.
    let mut untrusted = base.clone();
    if let Some(i) = untrusted.iter().position(|x| x == "--ca-file") {
        untrusted.drain(i..i + 2);
    }
    let err = failing(&untrusted)?;
    assert!(err.contains("--ca-file"), "{err}");

    let err = failing(&with("--ca-file", "/nonexistent/ca.pem"))?;
    assert!(
        err.contains("cannot read --ca-file /nonexistent/ca.pem"),
        "{err}"
    );

    // A wrong secret: the device authorization request is refused at once.
    let mut device = with("--client-secret", "wrong");
    device.extend(["--flow".to_string(), "device".into()]);
    let err = failing(&device)?;
    assert!(err.contains("invalid_client"), "{err}");
    assert!(err.contains("--client-secret"), "{err}");

    // ... and in the browser flow, the browser is told too.
    let plugin = LoginProcess::spawn(&with("--client-secret", "wrong"), &[])?;
    let url = plugin.auth_url()?;
    let page = provider.complete_auth_code_login(&url, &ALICE)?;
    assert!(page.contains("Login failed"), "{page}");
    let out = plugin.finish(EXIT)?;
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    assert!(out.stderr.contains("invalid_client"), "{}", out.stderr);

    // Nothing was cached by the failures.
    assert!(cache_files(tmp.path())
        .map(|f| f.is_empty())
        .unwrap_or(true));
    Ok(())
}

#[test]
fn kubeconfig_oidc_runs_the_plugin_with_the_forwarded_flags() -> Result<()> {
    let provider = OidcProvider::start_default()?;
    let tmp = tempfile::tempdir()?;
    let cache = tmp.path().join("cache");
    // A `fabrik up` tenant kubeconfig, as the tenant manager writes it.
    let data = tmp.path().join("data");
    std::fs::create_dir_all(data.join("tenants"))?;
    let ca_b64 = {
        use base64::Engine;
        base64::engine::general_purpose::STANDARD.encode("TENANT-CA-PEM")
    };
    std::fs::write(
        data.join("tenants").join("acme.kubeconfig"),
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fabrik-acme\n  cluster:\n    \
             server: https://127.0.0.1:6443/clusters/acme\n    certificate-authority-data: \
             {ca_b64}\nusers:\n- name: fabrik-acme-admin\n  user:\n    client-certificate-data: \
             eA==\n    client-key-data: eA==\ncontexts:\n- name: fabrik-acme\n  context:\n    \
             cluster: fabrik-acme\n    user: fabrik-acme-admin\ncurrent-context: fabrik-acme\n"
        ),
    )?;
    let out_file = tmp.path().join("acme-oidc.kubeconfig");
    let bin = e2e::fabrik_bin();
    let mut args: Vec<String> = [
        "kubeconfig",
        "--oidc",
        "--tenant",
        "acme",
        "--data-dir",
        &data.display().to_string(),
        "--exec-command",
        &bin.display().to_string(),
        "--out",
        &out_file.display().to_string(),
    ]
    .map(String::from)
    .to_vec();
    args.extend(plugin_args(&provider, &cache));
    let out = std::process::Command::new(&bin).args(&args).output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    #[cfg(unix)]
    assert_eq!(mode(&out_file)?, 0o600);
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&std::fs::read(&out_file)?)?;
    let cluster = &doc["clusters"][0]["cluster"];
    assert_eq!(cluster["server"], "https://127.0.0.1:6443/clusters/acme");
    assert_eq!(cluster["certificate-authority-data"], ca_b64.as_str());
    let exec = &doc["users"][0]["user"]["exec"];
    assert_eq!(exec["apiVersion"], "client.authentication.k8s.io/v1");
    assert_eq!(exec["interactiveMode"], "IfAvailable");
    assert_eq!(exec["command"], bin.display().to_string().as_str());
    let exec_args: Vec<String> = exec["args"]
        .as_array()
        .context("no exec args")?
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect();
    assert_eq!(exec_args[0], "login");

    // Run the exec section as kubectl would: first with a login in the browser, then again
    // from the cache; both print the ExecCredential kubectl asked for.
    let plugin = LoginProcess::spawn(&exec_args[1..], &[])?;
    provider.complete_auth_code_login(&plugin.auth_url()?, &ALICE)?;
    let first = plugin.finish(EXIT)?.exec_credential()?;
    check_credential(&provider, &first, "client.authentication.k8s.io/v1", &ALICE)?;
    let info = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","spec":{"interactive":false}}"#;
    let again = std::process::Command::new(exec["command"].as_str().unwrap_or_default())
        .args(&exec_args)
        .env("KUBERNETES_EXEC_INFO", info)
        .output()?;
    let cred: serde_json::Value = serde_json::from_slice(&again.stdout)?;
    assert_eq!(cred["status"]["token"], first["status"]["token"]);

    // A server given directly, printed on stdout.
    let ca = tmp.path().join("server-ca.pem");
    std::fs::write(&ca, "SERVER-CA")?;
    let out = std::process::Command::new(&bin)
        .args([
            "kubeconfig",
            "--oidc",
            "--server",
            "https://fabrik.example:6443",
        ])
        .arg("--certificate-authority")
        .arg(&ca)
        .args(["--cluster-name", "prod"])
        .args(provider.login_args())
        .output()?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_yaml_ng::from_slice(&out.stdout)?;
    assert_eq!(doc["current-context"], "prod");
    assert_eq!(doc["users"][0]["user"]["exec"]["command"], "fabrik");

    // Without --oidc the command refuses, pointing at the admin kubeconfig command.
    let out = std::process::Command::new(&bin)
        .args(["kubeconfig", "--server", "https://x"])
        .args(provider.login_args())
        .output()?;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--oidc"));
    Ok(())
}
