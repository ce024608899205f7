//! How `fabrik up` (and later `fabrik serve`) authenticate users beyond client certificates:
//! OIDC issuers from kube-apiserver-style `--oidc-*` flags and/or a structured
//! `AuthenticationConfiguration` file, and the host's service-account signing key.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use clap::Args;
use fabrik_apiserver::auth::oidc::{AuthenticationConfiguration, OidcFlags};
use fabrik_apiserver::auth::{OidcAuthenticator, SigningKey};

/// Authentication flags.
#[derive(Args, Debug, Clone, Default)]
pub struct AuthArgs {
    /// A structured AuthenticationConfiguration file (apiserver.config.k8s.io): several JWT
    /// issuers with their audiences and claim mappings.
    #[arg(long, value_name = "FILE")]
    authentication_config: Option<PathBuf>,
    /// OIDC issuer whose ID tokens are accepted (https).
    #[arg(long, value_name = "URL")]
    oidc_issuer_url: Option<String>,
    /// The audience ID tokens must carry (the OIDC client ID).
    #[arg(long, value_name = "ID")]
    oidc_client_id: Option<String>,
    /// The claim used as the user name (default `sub`).
    #[arg(long, value_name = "CLAIM")]
    oidc_username_claim: Option<String>,
    /// Prefix of user names (default `<issuer>#` unless the claim is `email`; `-` for none).
    #[arg(long, value_name = "PREFIX")]
    oidc_username_prefix: Option<String>,
    /// The claim holding the user's groups.
    #[arg(long, value_name = "CLAIM")]
    oidc_groups_claim: Option<String>,
    /// Prefix of group names.
    #[arg(long, value_name = "PREFIX")]
    oidc_groups_prefix: Option<String>,
    /// CA bundle (PEM) that signed the issuer's TLS certificate.
    #[arg(long, value_name = "FILE")]
    oidc_ca_file: Option<PathBuf>,
    /// A claim every token must carry with this value (repeatable): `claim=value`.
    #[arg(long, value_name = "CLAIM=VALUE")]
    oidc_required_claim: Vec<String>,
}

impl AuthArgs {
    /// The OIDC authenticator these flags ask for, if any.
    pub fn oidc(&self) -> Result<Option<Arc<OidcAuthenticator>>> {
        let mut config = match &self.authentication_config {
            Some(path) => AuthenticationConfiguration::load(path)
                .with_context(|| format!("--authentication-config {}", path.display()))?,
            None => AuthenticationConfiguration::default(),
        };
        match (&self.oidc_issuer_url, &self.oidc_client_id) {
            (Some(url), Some(client)) => {
                let ca_pem =
                    match &self.oidc_ca_file {
                        Some(f) => Some(std::fs::read_to_string(f).with_context(|| {
                            format!("cannot read --oidc-ca-file {}", f.display())
                        })?),
                        None => None,
                    };
                let mut required = Vec::new();
                for r in &self.oidc_required_claim {
                    let Some((k, v)) = r.split_once('=') else {
                        bail!("--oidc-required-claim {r:?}: expected CLAIM=VALUE");
                    };
                    required.push((k.to_string(), v.to_string()));
                }
                let flags = OidcFlags {
                    issuer_url: url.clone(),
                    client_id: client.clone(),
                    username_claim: self.oidc_username_claim.clone(),
                    username_prefix: self.oidc_username_prefix.clone(),
                    groups_claim: self.oidc_groups_claim.clone(),
                    groups_prefix: self.oidc_groups_prefix.clone(),
                    ca_pem,
                    required_claims: required,
                };
                config.jwt.push(flags.to_authenticator());
            }
            (None, None) => {}
            _ => bail!("--oidc-issuer-url and --oidc-client-id go together"),
        }
        if config.jwt.is_empty() {
            return Ok(None);
        }
        // The flags' issuer must not repeat one of the file's.
        config
            .validate()
            .context("--oidc-* flags and --authentication-config")?;
        let oidc = OidcAuthenticator::new(&config).context("invalid OIDC configuration")?;
        Ok(Some(Arc::new(oidc)))
    }
}

/// The host's service-account signing key, created on first start under `DIR/pki/sa.key`.
pub fn host_signing_key(pki_dir: &Path) -> Result<Arc<SigningKey>> {
    let path = pki_dir.join("sa.key");
    if path.exists() {
        let pem = std::fs::read_to_string(&path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        return Ok(Arc::new(
            SigningKey::from_pem(&pem)
                .with_context(|| format!("invalid key in {}", path.display()))?,
        ));
    }
    let key = SigningKey::generate()?;
    std::fs::create_dir_all(pki_dir)?;
    fabrik_apiserver::pki::write_private(&path, key.to_pem().as_bytes())?;
    Ok(Arc::new(key))
}
