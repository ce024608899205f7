//! `fabrik login`: the kubectl exec credential plugin for OIDC, and `fabrik kubeconfig --oidc`,
//! which writes a kubeconfig that runs it.
//!
//! `fabrik login` prints one `ExecCredential` on stdout (the ID token and its expiry) and
//! nothing else; progress and errors go to stderr. The token comes from, in order:
//!
//! 1. the [`cache`] entry for (issuer, client id, scopes), if it is good for another 60 s;
//! 2. the cached refresh token, if any (a failed refresh falls through, with a note);
//! 3. an interactive login: the authorization code flow with PKCE and a loopback redirect
//!    ([`flow`]), or the device authorization grant ([`device`]).
//!
//! Every token from the issuer is verified ([`issuer`]) before it is cached or printed.
//!
//! Modules: [`issuer`] (discovery, HTTPS, token checks), [`flow`] + [`loopback`] + [`browser`]
//! (authorization code), [`device`], [`cache`], [`exec_credential`], [`kubeconfig`].

mod browser;
mod cache;
mod device;
mod exec_credential;
mod flow;
mod issuer;
pub mod kubeconfig;
mod loopback;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use chrono::{DateTime, Utc};

/// Scopes requested by default.
pub const DEFAULT_SCOPES: &str = "openid,profile,email,groups,offline_access";
/// Redirect listener addresses tried by default, in order (as kubelogin does), before any port.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8000,127.0.0.1:18000";
/// Default time allowed for an interactive login, in seconds.
pub const DEFAULT_TIMEOUT_SECS: u64 = 300;
/// A cached ID token closer than this to its expiry is refreshed.
const EXPIRY_MARGIN_SECS: i64 = 60;

/// Errors of `fabrik login` and `fabrik kubeconfig`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `KUBERNETES_EXEC_INFO` is unusable.
    #[error(transparent)]
    ExecInfo(#[from] exec_credential::Error),
    /// The token cache directory cannot be determined.
    #[error(transparent)]
    Cache(#[from] cache::Error),
    /// Discovery, a token request or token verification failed.
    #[error(transparent)]
    Issuer(#[from] issuer::Error),
    /// The authorization code flow failed.
    #[error(transparent)]
    AuthCode(#[from] flow::Error),
    /// The device grant failed.
    #[error(transparent)]
    Device(#[from] device::Error),
    /// Writing the kubeconfig failed.
    #[error(transparent)]
    Kubeconfig(#[from] kubeconfig::Error),
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How to log in interactively.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Flow {
    /// Authorization code + PKCE, the browser coming back to a loopback listener.
    AuthCode,
    /// Device authorization grant: enter a code on any device's browser.
    Device,
}

/// The OIDC settings shared by `fabrik login` and `fabrik kubeconfig --oidc`.
#[derive(clap::Args, Clone, Debug)]
pub struct OidcArgs {
    /// The OpenID Provider's issuer URL (Keycloak: `https://HOST/realms/REALM`).
    #[arg(long)]
    pub issuer_url: String,
    /// The OIDC client id (the audience the API server expects).
    #[arg(long)]
    pub client_id: String,
    /// The client secret, for a confidential client.
    #[arg(long)]
    pub client_secret: Option<String>,
    /// Scopes to request, comma-separated (`offline_access` gets a refresh token).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_SCOPES)]
    pub scopes: Vec<String>,
    /// Extra trust roots (PEM) for the issuer's HTTPS certificate.
    #[arg(long, value_name = "FILE")]
    pub ca_file: Option<PathBuf>,
    /// How to log in when neither a cached nor a refreshed token is available.
    #[arg(long, value_enum, default_value_t = Flow::AuthCode)]
    pub flow: Flow,
    /// Loopback addresses for the login redirect, tried in order; any free port if all are
    /// busy (use 127.0.0.1:0 for any port at once).
    #[arg(long, value_delimiter = ',', default_value = DEFAULT_LISTEN)]
    pub listen: Vec<SocketAddr>,
    /// Do not start a browser: print the login URL on stderr only.
    #[arg(long)]
    pub no_browser: bool,
    /// Where tokens are cached (default: `~/.cache/fabrik/oidc`).
    #[arg(long, value_name = "DIR")]
    pub cache_dir: Option<PathBuf>,
    /// Seconds to wait for an interactive login.
    #[arg(long, value_name = "SECONDS", default_value_t = DEFAULT_TIMEOUT_SECS)]
    pub timeout: u64,
}

impl OidcArgs {
    /// The same settings with relative file paths made absolute (a kubeconfig's exec command
    /// runs in whatever directory kubectl runs in).
    pub fn absolute(&self) -> OidcArgs {
        let abs = |p: &PathBuf| std::path::absolute(p).unwrap_or_else(|_| p.clone());
        OidcArgs {
            ca_file: self.ca_file.as_ref().map(abs),
            cache_dir: self.cache_dir.as_ref().map(abs),
            ..self.clone()
        }
    }

    /// The `fabrik login …` arguments that reproduce these settings (defaults left out).
    pub fn forward_args(&self) -> Vec<String> {
        let mut out: Vec<String> = vec![
            "login".into(),
            "--issuer-url".into(),
            self.issuer_url.clone(),
            "--client-id".into(),
            self.client_id.clone(),
        ];
        let mut push = |flag: &str, value: String| {
            out.push(flag.to_string());
            out.push(value);
        };
        if let Some(s) = &self.client_secret {
            push("--client-secret", s.clone());
        }
        let scopes = self.scopes.join(",");
        if scopes != DEFAULT_SCOPES {
            push("--scopes", scopes);
        }
        if let Some(p) = &self.ca_file {
            push("--ca-file", p.display().to_string());
        }
        if self.flow == Flow::Device {
            push("--flow", "device".into());
        }
        let listen = self
            .listen
            .iter()
            .map(|a| a.to_string())
            .collect::<Vec<_>>()
            .join(",");
        if listen != DEFAULT_LISTEN {
            push("--listen", listen);
        }
        if let Some(p) = &self.cache_dir {
            push("--cache-dir", p.display().to_string());
        }
        if self.timeout != DEFAULT_TIMEOUT_SECS {
            push("--timeout", self.timeout.to_string());
        }
        if self.no_browser {
            out.push("--no-browser".into());
        }
        out
    }
}

/// `fabrik login`: log in with OIDC and print a kubectl `ExecCredential` (an exec credential
/// plugin: kubectl runs it from a kubeconfig's `users[].user.exec`).
#[derive(clap::Args, Clone, Debug)]
pub struct LoginArgs {
    /// The issuer, client and how to log in.
    #[command(flatten)]
    pub oidc: OidcArgs,
}

/// Runs `fabrik login`: prints an `ExecCredential` with a valid ID token on stdout.
pub async fn run(args: LoginArgs) -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let request = exec_credential::Request::from_env()?;
    let tokens = obtain(&args.oidc, Utc::now()).await?;
    println!("{}", request.render(&tokens.id_token, tokens.expiry));
    Ok(())
}

/// Runs `fabrik kubeconfig`.
pub fn run_kubeconfig(args: &kubeconfig::KubeconfigArgs) -> Result<()> {
    Ok(kubeconfig::run(args)?)
}

/// A valid ID token: cached, refreshed, or from an interactive login (then cached).
async fn obtain(args: &OidcArgs, now: DateTime<Utc>) -> Result<issuer::Tokens> {
    let key = cache::Key::new(&args.issuer_url, &args.client_id, &args.scopes);
    let cache = cache::Cache::new(args.cache_dir.as_deref())?;
    let cached = cache.load(&key).unwrap_or_else(|e| {
        eprintln!("fabrik login: ignoring the token cache: {e}");
        None
    });
    if let Some(entry) = &cached {
        if entry.fresh_at(now, chrono::Duration::seconds(EXPIRY_MARGIN_SECS)) {
            return Ok(entry.tokens());
        }
    }
    let issuer = issuer::Issuer::discover(&issuer::Settings {
        issuer_url: &args.issuer_url,
        client_id: &args.client_id,
        client_secret: args.client_secret.as_deref(),
        ca_file: args.ca_file.as_deref(),
    })
    .await?;
    if let Some(entry) = cached.as_ref().filter(|e| e.refresh_token.is_some()) {
        let refresh = entry.refresh_token.as_deref().unwrap_or_default();
        match issuer.refresh(refresh, entry.nonce.clone()).await {
            Ok(tokens) => {
                save(&cache, &key, &tokens);
                return Ok(tokens);
            }
            Err(e) => {
                eprintln!("fabrik login: could not refresh the ID token ({e}); logging in again")
            }
        }
    }
    let timeout = Duration::from_secs(args.timeout);
    let tokens = match args.flow {
        Flow::AuthCode => {
            flow::login(
                &issuer,
                &flow::Options {
                    scopes: &args.scopes,
                    listen: &args.listen,
                    no_browser: args.no_browser,
                    timeout,
                },
            )
            .await?
        }
        Flow::Device => device::login(&issuer, &args.scopes, args.no_browser, timeout).await?,
    };
    eprintln!("fabrik login: logged in to {}", issuer.url());
    save(&cache, &key, &tokens);
    Ok(tokens)
}

/// Caches `tokens`; a failure is reported but does not fail the login.
fn save(cache: &cache::Cache, key: &cache::Key, tokens: &issuer::Tokens) {
    if let Err(e) = cache.store(key, &cache::Entry::new(key, tokens)) {
        eprintln!("fabrik login: could not cache the token: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        oidc: OidcArgs,
    }

    #[test]
    fn defaults_and_forwarding() -> std::result::Result<(), clap::Error> {
        let cli = Cli::try_parse_from(["x", "--issuer-url", "https://idp", "--client-id", "c"])?;
        assert_eq!(cli.oidc.scopes.join(","), DEFAULT_SCOPES);
        assert_eq!(cli.oidc.listen.len(), 2);
        assert_eq!(cli.oidc.flow, Flow::AuthCode);
        assert_eq!(
            cli.oidc.forward_args(),
            vec!["login", "--issuer-url", "https://idp", "--client-id", "c"]
        );
        let cli = Cli::try_parse_from([
            "x",
            "--issuer-url",
            "https://idp",
            "--client-id",
            "c",
            "--flow",
            "device",
            "--scopes",
            "openid,email",
            "--listen",
            "127.0.0.1:0",
            "--no-browser",
            "--ca-file",
            "ca.pem",
        ])?;
        let forwarded = cli.oidc.absolute().forward_args();
        let joined = forwarded.join(" ");
        assert!(joined.contains("--flow device"));
        assert!(joined.contains("--scopes openid,email"));
        assert!(joined.contains("--listen 127.0.0.1:0"));
        assert!(joined.ends_with("--no-browser"));
        let ca = forwarded
            .iter()
            .position(|a| a == "--ca-file")
            .and_then(|i| forwarded.get(i + 1))
            .cloned()
            .unwrap_or_default();
        assert!(std::path::Path::new(&ca).is_absolute(), "{ca}");
        Ok(())
    }
}
