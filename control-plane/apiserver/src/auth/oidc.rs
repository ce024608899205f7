//! OIDC ID tokens as bearer tokens, the equivalent of kube-apiserver's `--oidc-*` flags and its
//! structured `AuthenticationConfiguration` (several JWT issuers). Verification is the
//! `openidconnect` crate's (signature against the issuer's JWKS, issuer, expiry, allowed
//! algorithms); this module adds discovery and a JWKS cache that is refreshed when a token names
//! an unknown key (the provider rotated its keys), audiences, required claims, and the mapping
//! of claims to a user name, groups and UID with prefixes.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use openidconnect::core::{
    CoreIdToken, CoreIdTokenVerifier, CoreJsonWebKeySet, CoreJwsSigningAlgorithm,
    CoreProviderMetadata,
};
use openidconnect::{
    ClaimsVerificationError, ClientId, IssuerUrl, JsonWebKeySetUrl, Nonce,
    SignatureVerificationError,
};
use serde::Deserialize;
use serde_json::Value;
use tokio::sync::{Mutex, RwLock};

use super::jwt;
use super::UserInfo;

/// The shortest pause between two JWKS fetches of one issuer triggered by unknown keys (a
/// stream of forged `kid`s must not turn into a stream of requests to the provider).
const MIN_REFRESH_INTERVAL: Duration = Duration::from_millis(500);

/// Errors of the OIDC configuration.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The file.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The file is not a valid AuthenticationConfiguration.
    #[error("invalid authentication configuration: {0}")]
    Invalid(String),
}

/// Why an ID token is refused.
#[derive(Debug, thiserror::Error)]
pub enum OidcError {
    /// The issuer's discovery document or keys could not be fetched.
    #[error("cannot reach issuer {issuer}: {reason}")]
    Unreachable {
        /// The issuer.
        issuer: String,
        /// What failed.
        reason: String,
    },
    /// Signature, issuer, expiry, algorithm.
    #[error("invalid ID token: {0}")]
    Verification(String),
    /// No configured audience.
    #[error("ID token audience not accepted")]
    Audience,
    /// A required claim is missing or has another value.
    #[error("ID token claim {0:?} missing or not the required value")]
    RequiredClaim(String),
    /// The user name claim is missing.
    #[error("ID token has no usable {0:?} claim")]
    Username(String),
}

/// One claim → attribute mapping.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMapping {
    /// The claim.
    #[serde(default)]
    pub claim: String,
    /// A prefix put before every value (None: the upstream default for the claim).
    #[serde(default)]
    pub prefix: Option<String>,
    /// CEL expressions are not supported: named here so that a configuration using one is
    /// refused with a clear message rather than silently ignored.
    #[serde(default)]
    pub expression: Option<String>,
}

/// `claimMappings`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimMappings {
    /// The user name.
    #[serde(default)]
    pub username: ClaimMapping,
    /// The groups (a string or a list of strings).
    #[serde(default)]
    pub groups: Option<ClaimMapping>,
    /// The UID.
    #[serde(default)]
    pub uid: Option<ClaimMapping>,
}

/// `claimValidationRules[]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClaimRule {
    /// The claim.
    #[serde(default)]
    pub claim: String,
    /// Its required value.
    #[serde(default)]
    pub required_value: String,
    /// Unsupported (see [`ClaimMapping::expression`]).
    #[serde(default)]
    pub expression: Option<String>,
    /// Message for an expression rule.
    #[serde(default)]
    pub message: Option<String>,
}

/// `jwt[].issuer`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct IssuerSpec {
    /// The issuer URL (`iss`), https.
    pub url: String,
    /// Where to fetch discovery from, when not `<url>/.well-known/openid-configuration`.
    #[serde(default, rename = "discoveryURL")]
    pub discovery_url: Option<String>,
    /// PEM CA bundle trusted for the issuer's TLS.
    #[serde(default)]
    pub certificate_authority: Option<String>,
    /// Accepted audiences (any of them).
    pub audiences: Vec<String>,
    /// `MatchAny` (the only policy).
    #[serde(default)]
    pub audience_match_policy: Option<String>,
}

/// One `jwt[]` entry: an issuer and how its tokens map to users.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct JwtAuthenticator {
    /// The issuer.
    pub issuer: IssuerSpec,
    /// Rules every token must satisfy.
    #[serde(default)]
    pub claim_validation_rules: Vec<ClaimRule>,
    /// Claim mappings.
    #[serde(default)]
    pub claim_mappings: ClaimMappings,
    /// Unsupported (CEL rules on the user).
    #[serde(default)]
    pub user_validation_rules: Option<Value>,
}

/// `AuthenticationConfiguration` (apiserver.config.k8s.io v1beta1 / v1alpha1 / v1), the JWT part.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuthenticationConfiguration {
    /// `apiVersion`.
    #[serde(default)]
    pub api_version: String,
    /// `kind`.
    #[serde(default)]
    pub kind: String,
    /// The issuers.
    #[serde(default)]
    pub jwt: Vec<JwtAuthenticator>,
    /// Anonymous access (only `enabled: false` is supported).
    #[serde(default)]
    pub anonymous: Option<Value>,
}

/// The equivalent of kube-apiserver's `--oidc-*` flags.
#[derive(Clone, Debug, Default)]
pub struct OidcFlags {
    /// `--oidc-issuer-url`.
    pub issuer_url: String,
    /// `--oidc-client-id` (the audience).
    pub client_id: String,
    /// `--oidc-username-claim` (default `sub`).
    pub username_claim: Option<String>,
    /// `--oidc-username-prefix` (default: `<issuer>#` unless the claim is `email`; `-` for none).
    pub username_prefix: Option<String>,
    /// `--oidc-groups-claim`.
    pub groups_claim: Option<String>,
    /// `--oidc-groups-prefix`.
    pub groups_prefix: Option<String>,
    /// `--oidc-ca-file` contents.
    pub ca_pem: Option<String>,
    /// `--oidc-required-claim key=value`.
    pub required_claims: Vec<(String, String)>,
}

impl OidcFlags {
    /// The flags as one structured-configuration entry.
    pub fn to_authenticator(&self) -> JwtAuthenticator {
        let claim = self.username_claim.clone().unwrap_or_else(|| "sub".into());
        let prefix = match self.username_prefix.as_deref() {
            Some("-") => Some(String::new()),
            Some(p) => Some(p.to_string()),
            None if claim == "email" => Some(String::new()),
            None => Some(format!("{}#", self.issuer_url)),
        };
        JwtAuthenticator {
            issuer: IssuerSpec {
                url: self.issuer_url.clone(),
                discovery_url: None,
                certificate_authority: self.ca_pem.clone(),
                audiences: vec![self.client_id.clone()],
                audience_match_policy: None,
            },
            claim_validation_rules: self
                .required_claims
                .iter()
                .map(|(c, v)| ClaimRule {
                    claim: c.clone(),
                    required_value: v.clone(),
                    expression: None,
                    message: None,
                })
                .collect(),
            claim_mappings: ClaimMappings {
                username: ClaimMapping {
                    claim,
                    prefix,
                    expression: None,
                },
                groups: self.groups_claim.as_ref().map(|g| ClaimMapping {
                    claim: g.clone(),
                    prefix: Some(self.groups_prefix.clone().unwrap_or_default()),
                    expression: None,
                }),
                uid: None,
            },
            user_validation_rules: None,
        }
    }
}

impl AuthenticationConfiguration {
    /// Reads a configuration file (YAML or JSON).
    pub fn load(path: &Path) -> Result<AuthenticationConfiguration, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        AuthenticationConfiguration::parse(&text)
    }

    /// Parses and checks a configuration.
    pub fn parse(text: &str) -> Result<AuthenticationConfiguration, ConfigError> {
        let config: AuthenticationConfiguration =
            serde_yaml_ng::from_str(text).map_err(|e| ConfigError::Invalid(e.to_string()))?;
        if !config.kind.is_empty() && config.kind != "AuthenticationConfiguration" {
            return Err(ConfigError::Invalid(format!(
                "kind must be AuthenticationConfiguration, got {:?}",
                config.kind
            )));
        }
        if let Some(a) = &config.anonymous {
            if a["enabled"].as_bool() != Some(false) {
                return Err(ConfigError::Invalid(
                    "anonymous: only `enabled: false` is supported (anonymous requests are always refused)".into(),
                ));
            }
        }
        config.validate()?;
        Ok(config)
    }

    /// Checks every issuer (and that no issuer appears twice).
    pub fn validate(&self) -> Result<(), ConfigError> {
        let mut seen = std::collections::HashSet::new();
        for (i, j) in self.jwt.iter().enumerate() {
            j.check(&format!("jwt[{i}]"))?;
            if !seen.insert(j.issuer.url.clone()) {
                return Err(ConfigError::Invalid(format!(
                    "jwt[{i}].issuer.url: duplicate issuer {:?}",
                    j.issuer.url
                )));
            }
        }
        Ok(())
    }
}

impl JwtAuthenticator {
    fn check(&self, at: &str) -> Result<(), ConfigError> {
        let bad =
            |field: &str, why: &str| Err(ConfigError::Invalid(format!("{at}.{field}: {why}")));
        if !self.issuer.url.starts_with("https://") {
            return bad("issuer.url", "must be an https URL");
        }
        if self.issuer.audiences.is_empty() || self.issuer.audiences.iter().any(String::is_empty) {
            return bad(
                "issuer.audiences",
                "at least one non-empty audience is required",
            );
        }
        if let Some(p) = &self.issuer.audience_match_policy {
            if p != "MatchAny" {
                return bad("issuer.audienceMatchPolicy", "only MatchAny is supported");
            }
        }
        if self.claim_mappings.username.claim.is_empty() {
            return bad("claimMappings.username.claim", "required");
        }
        let mappings = [
            Some(&self.claim_mappings.username),
            self.claim_mappings.groups.as_ref(),
            self.claim_mappings.uid.as_ref(),
        ];
        if mappings.iter().flatten().any(|m| m.expression.is_some()) {
            return bad(
                "claimMappings",
                "CEL expressions are not supported; use claim and prefix",
            );
        }
        for (i, r) in self.claim_validation_rules.iter().enumerate() {
            if r.expression.is_some() || r.claim.is_empty() {
                return bad(
                    &format!("claimValidationRules[{i}]"),
                    "only claim + requiredValue rules are supported",
                );
            }
        }
        if self.user_validation_rules.is_some() {
            return bad("userValidationRules", "not supported");
        }
        if let Some(ca) = &self.issuer.certificate_authority {
            reqwest::Certificate::from_pem_bundle(ca.as_bytes()).map_err(|e| {
                ConfigError::Invalid(format!("{at}.issuer.certificateAuthority: {e}"))
            })?;
        }
        Ok(())
    }
}

/// The keys of one issuer, as last fetched.
struct Keys {
    jwks_uri: JsonWebKeySetUrl,
    set: CoreJsonWebKeySet,
    fetched: Instant,
}

/// One trusted issuer.
struct Issuer {
    spec: JwtAuthenticator,
    http: reqwest::Client,
    keys: RwLock<Option<Arc<Keys>>>,
    refresh: Mutex<()>,
}

/// Verifies ID tokens of every configured issuer.
pub struct OidcAuthenticator {
    issuers: Vec<Issuer>,
}

impl std::fmt::Debug for OidcAuthenticator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.issuers.iter().map(|i| &i.spec.issuer.url))
            .finish()
    }
}

fn algorithms() -> Vec<CoreJwsSigningAlgorithm> {
    use CoreJwsSigningAlgorithm as A;
    vec![
        A::RsaSsaPkcs1V15Sha256,
        A::RsaSsaPkcs1V15Sha384,
        A::RsaSsaPkcs1V15Sha512,
        A::RsaSsaPssSha256,
        A::RsaSsaPssSha384,
        A::RsaSsaPssSha512,
        A::EcdsaP256Sha256,
        A::EcdsaP384Sha384,
        A::EdDsa,
    ]
}

impl OidcAuthenticator {
    /// An authenticator for `config`'s issuers (keys are fetched on first use).
    pub fn new(config: &AuthenticationConfiguration) -> Result<OidcAuthenticator, ConfigError> {
        let mut issuers = Vec::new();
        for (i, spec) in config.jwt.iter().enumerate() {
            spec.check(&format!("jwt[{i}]"))?;
            let mut builder = reqwest::Client::builder()
                .timeout(Duration::from_secs(10))
                .redirect(reqwest::redirect::Policy::none());
            if let Some(ca) = &spec.issuer.certificate_authority {
                for cert in reqwest::Certificate::from_pem_bundle(ca.as_bytes()).map_err(|e| {
                    ConfigError::Invalid(format!("jwt[{i}].issuer.certificateAuthority: {e}"))
                })? {
                    builder = builder.add_root_certificate(cert);
                }
            }
            let http = builder
                .build()
                .map_err(|e| ConfigError::Invalid(format!("jwt[{i}]: HTTP client: {e}")))?;
            issuers.push(Issuer {
                spec: spec.clone(),
                http,
                keys: RwLock::new(None),
                refresh: Mutex::new(()),
            });
        }
        Ok(OidcAuthenticator { issuers })
    }

    /// Seeds an issuer's key cache with a JWKS document (as if fetched), for benchmarks that
    /// measure verification with a warm cache and no provider. Returns false for an unknown
    /// issuer or an invalid document.
    #[doc(hidden)]
    pub async fn preload_keys(&self, issuer: &str, jwks: &Value) -> bool {
        let Some(i) = self.issuers.iter().find(|i| i.spec.issuer.url == issuer) else {
            return false;
        };
        let (Ok(set), Ok(uri)) = (
            serde_json::from_value::<CoreJsonWebKeySet>(jwks.clone()),
            JsonWebKeySetUrl::new(format!("{issuer}/jwks")),
        ) else {
            return false;
        };
        *i.keys.write().await = Some(Arc::new(Keys {
            jwks_uri: uri,
            set,
            fetched: Instant::now(),
        }));
        true
    }

    /// Whether any issuer is configured.
    pub fn is_empty(&self) -> bool {
        self.issuers.is_empty()
    }

    /// Verifies `token` if its (unverified) issuer is one of ours: None when no configured
    /// issuer claims it.
    pub async fn authenticate(&self, token: &str) -> Option<Result<UserInfo, OidcError>> {
        let iss = jwt::peek_issuer(token)?;
        let issuer = self.issuers.iter().find(|i| i.spec.issuer.url == iss)?;
        Some(issuer.authenticate(token).await)
    }
}

impl Issuer {
    fn name(&self) -> &str {
        &self.spec.issuer.url
    }

    fn unreachable(&self, reason: impl std::fmt::Display) -> OidcError {
        OidcError::Unreachable {
            issuer: self.name().to_string(),
            reason: reason.to_string(),
        }
    }

    /// The cached keys, fetching discovery and the JWKS the first time.
    async fn keys(&self) -> Result<Arc<Keys>, OidcError> {
        if let Some(k) = self.keys.read().await.clone() {
            return Ok(k);
        }
        self.refresh(None).await
    }

    /// Fetches the JWKS again (discovery too, the first time). `stale`: the keys the caller
    /// found lacking — if another task already replaced them, those are used instead.
    async fn refresh(&self, stale: Option<&Arc<Keys>>) -> Result<Arc<Keys>, OidcError> {
        let _one_at_a_time = self.refresh.lock().await;
        let current = self.keys.read().await.clone();
        if let Some(cur) = &current {
            let replaced = stale.is_none_or(|s| !Arc::ptr_eq(s, cur));
            if replaced || cur.fetched.elapsed() < MIN_REFRESH_INTERVAL {
                return Ok(cur.clone());
            }
        }
        let jwks_uri = match &current {
            Some(k) => k.jwks_uri.clone(),
            None => {
                let discovery_base = self
                    .spec
                    .issuer
                    .discovery_url
                    .as_deref()
                    .map(|d| {
                        d.trim_end_matches("/.well-known/openid-configuration")
                            .to_string()
                    })
                    .unwrap_or_else(|| self.name().to_string());
                let url = IssuerUrl::new(discovery_base).map_err(|e| self.unreachable(e))?;
                let meta = CoreProviderMetadata::discover_async(url, &self.http)
                    .await
                    .map_err(|e| self.unreachable(error_chain(&e)))?;
                meta.jwks_uri().clone()
            }
        };
        let set = CoreJsonWebKeySet::fetch_async(&jwks_uri, &self.http)
            .await
            .map_err(|e| self.unreachable(error_chain(&e)))?;
        let keys = Arc::new(Keys {
            jwks_uri,
            set,
            fetched: Instant::now(),
        });
        *self.keys.write().await = Some(keys.clone());
        Ok(keys)
    }

    async fn authenticate(&self, token: &str) -> Result<UserInfo, OidcError> {
        let id_token: CoreIdToken = token
            .parse()
            .map_err(|e| OidcError::Verification(format!("malformed: {e}")))?;
        let mut keys = self.keys().await?;
        let mut refreshed = false;
        loop {
            match self.verify(&id_token, &keys) {
                Ok(()) => break,
                Err(ClaimsVerificationError::SignatureVerification(
                    SignatureVerificationError::NoMatchingKey,
                )) if !refreshed => {
                    // An unknown key: the provider may have rotated. Fetch once more.
                    keys = self.refresh(Some(&keys)).await?;
                    refreshed = true;
                }
                Err(e) => return Err(OidcError::Verification(e.to_string())),
            }
        }
        // The signature is valid: the payload is the issuer's. Map it.
        let claims = jwt::Parts::split(token)
            .map_err(|e| OidcError::Verification(e.to_string()))?
            .payload;
        self.map_claims(&claims)
    }

    fn verify(&self, token: &CoreIdToken, keys: &Keys) -> Result<(), ClaimsVerificationError> {
        let first_audience = self
            .spec
            .issuer
            .audiences
            .first()
            .cloned()
            .unwrap_or_default();
        let issuer = IssuerUrl::new(self.name().to_string())
            .map_err(|e| ClaimsVerificationError::Other(e.to_string()))?;
        let verifier = CoreIdTokenVerifier::new_public_client(
            ClientId::new(first_audience),
            issuer,
            keys.set.clone(),
        )
        .set_allowed_algs(algorithms())
        .require_audience_match(false);
        token
            .claims(&verifier, |_: Option<&Nonce>| Ok::<(), String>(()))
            .map(|_| ())
    }

    fn map_claims(&self, claims: &Value) -> Result<UserInfo, OidcError> {
        let auds: Vec<&str> = match &claims["aud"] {
            Value::String(s) => vec![s.as_str()],
            Value::Array(a) => a.iter().filter_map(Value::as_str).collect(),
            _ => Vec::new(),
        };
        if !auds
            .iter()
            .any(|a| self.spec.issuer.audiences.iter().any(|x| x == a))
        {
            return Err(OidcError::Audience);
        }
        for rule in &self.spec.claim_validation_rules {
            let ok = match &claims[&rule.claim] {
                Value::String(s) => *s == rule.required_value,
                Value::Array(a) => a.iter().any(|v| v.as_str() == Some(&rule.required_value)),
                _ => false,
            };
            if !ok {
                return Err(OidcError::RequiredClaim(rule.claim.clone()));
            }
        }
        let m = &self.spec.claim_mappings;
        let claim = &m.username.claim;
        if claim == "email" && claims["email_verified"] == Value::Bool(false) {
            return Err(OidcError::Username("email (not verified)".into()));
        }
        let raw = claims[claim]
            .as_str()
            .filter(|s| !s.is_empty())
            .ok_or_else(|| OidcError::Username(claim.clone()))?;
        let prefix = m.username.prefix.clone().unwrap_or_default();
        let name = format!("{prefix}{raw}");
        if name.starts_with("system:") {
            // Upstream refuses OIDC user names in the system namespace.
            return Err(OidcError::Username(format!(
                "{claim} (system: names are reserved)"
            )));
        }
        let mut groups = Vec::new();
        if let Some(g) = &m.groups {
            let prefix = g.prefix.clone().unwrap_or_default();
            match &claims[&g.claim] {
                Value::String(s) => groups.push(format!("{prefix}{s}")),
                Value::Array(a) => groups.extend(
                    a.iter()
                        .filter_map(Value::as_str)
                        .map(|s| format!("{prefix}{s}")),
                ),
                _ => {}
            }
        }
        let uid = m
            .uid
            .as_ref()
            .and_then(|u| claims[&u.claim].as_str())
            .unwrap_or("")
            .to_string();
        Ok(UserInfo {
            name,
            uid,
            groups,
            ..UserInfo::default()
        })
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut src = e.source();
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_upstream_prefix_defaults() {
        let flags = OidcFlags {
            issuer_url: "https://idp.test".into(),
            client_id: "fabrik".into(),
            groups_claim: Some("groups".into()),
            groups_prefix: Some("oidc:".into()),
            ..OidcFlags::default()
        };
        let a = flags.to_authenticator();
        assert_eq!(a.claim_mappings.username.claim, "sub");
        assert_eq!(
            a.claim_mappings.username.prefix.as_deref(),
            Some("https://idp.test#")
        );
        let email = OidcFlags {
            username_claim: Some("email".into()),
            ..flags.clone()
        };
        assert_eq!(
            email
                .to_authenticator()
                .claim_mappings
                .username
                .prefix
                .as_deref(),
            Some("")
        );
        let none = OidcFlags {
            username_prefix: Some("-".into()),
            ..flags
        };
        assert_eq!(
            none.to_authenticator()
                .claim_mappings
                .username
                .prefix
                .as_deref(),
            Some("")
        );
    }

    #[test]
    fn structured_configuration_is_checked() {
        let ok = r#"
apiVersion: apiserver.config.k8s.io/v1beta1
kind: AuthenticationConfiguration
jwt:
- issuer:
    url: https://idp.test
    audiences: [fabrik, other]
  claimMappings:
    username: {claim: email, prefix: ""}
    groups: {claim: groups, prefix: "oidc:"}
  claimValidationRules:
  - {claim: hd, requiredValue: example.com}
"#;
        let c = AuthenticationConfiguration::parse(ok).expect("valid");
        assert_eq!(c.jwt[0].issuer.audiences.len(), 2);
        for (bad, needle) in [
            (
                ok.replace("https://idp.test", "http://idp.test"),
                "issuer.url",
            ),
            (ok.replace("[fabrik, other]", "[]"), "audiences"),
            (
                ok.replace("{claim: email, prefix: \"\"}", "{expression: claims.email}"),
                "claimMappings",
            ),
            (
                ok.replace("claim: hd, requiredValue", "expression: x, requiredValue"),
                "claimValidationRules[0]",
            ),
            (ok.replace("audiences:", "audiencez:"), "unknown field"),
        ] {
            let err = AuthenticationConfiguration::parse(&bad)
                .expect_err(needle)
                .to_string();
            assert!(err.contains(needle), "{err}");
        }
    }

    #[test]
    fn claims_map_to_users_with_prefixes() {
        let config = AuthenticationConfiguration::parse(
            r#"
jwt:
- issuer: {url: "https://idp.test", audiences: [fabrik]}
  claimMappings:
    username: {claim: email, prefix: ""}
    groups: {claim: groups, prefix: "oidc:"}
  claimValidationRules: [{claim: tenant, requiredValue: a}]
"#,
        )
        .expect("config");
        let auth = OidcAuthenticator::new(&config).expect("authenticator");
        let issuer = &auth.issuers[0];
        let claims = serde_json::json!({
            "iss": "https://idp.test", "aud": ["fabrik"], "email": "alice@example.com",
            "groups": ["ml", "gpu"], "tenant": "a"
        });
        let user = issuer.map_claims(&claims).expect("user");
        assert_eq!(user.name, "alice@example.com");
        assert_eq!(user.groups, vec!["oidc:ml", "oidc:gpu"]);
        let mut other_aud = claims.clone();
        other_aud["aud"] = serde_json::json!("someone-else");
        assert!(matches!(
            issuer.map_claims(&other_aud),
            Err(OidcError::Audience)
        ));
        let mut wrong_tenant = claims.clone();
        wrong_tenant["tenant"] = serde_json::json!("b");
        assert!(matches!(
            issuer.map_claims(&wrong_tenant),
            Err(OidcError::RequiredClaim(_))
        ));
        let mut unverified = claims;
        unverified["email_verified"] = serde_json::json!(false);
        assert!(issuer.map_claims(&unverified).is_err());
    }
}
