//! Service-account tokens: each cluster signs JWTs with its own key (issued through the
//! `serviceaccounts/token` TokenRequest) and verifies them on every request carrying one —
//! signature, issuer, audience, expiry, and that the service account (and the pod or secret the
//! token is bound to) still exists with the same UID. The public key is served at
//! `/.well-known/openid-configuration` and `/openid/v1/jwks` so that others can verify tokens.

use std::sync::Arc;

use serde_json::{json, Value};

use super::jwt::{JwtError, SigningKey};
use super::UserInfo;

/// Tokens expire after this by default (upstream: one hour).
pub const DEFAULT_EXPIRATION_SECS: i64 = 3600;
/// The shortest expiration a TokenRequest may ask for (upstream: ten minutes).
pub const MIN_EXPIRATION_SECS: i64 = 600;
/// The longest (upstream: 2^32 seconds).
pub const MAX_EXPIRATION_SECS: i64 = 1 << 32;
/// Clock skew tolerated on `nbf`/`exp`.
const LEEWAY_SECS: i64 = 60;

/// Why a service-account token is refused.
#[derive(Debug, thiserror::Error)]
pub enum TokenError {
    /// Signature or format.
    #[error(transparent)]
    Jwt(#[from] JwtError),
    /// Another issuer.
    #[error("token issued by {0:?}, not this cluster")]
    Issuer(String),
    /// No audience this cluster accepts.
    #[error("token audiences {0:?} are not accepted by this cluster")]
    Audience(Vec<String>),
    /// Expired or not yet valid.
    #[error("token is expired or not yet valid")]
    Expired,
    /// Missing or malformed Kubernetes claims.
    #[error("token has no valid service-account claims: {0}")]
    Claims(&'static str),
}

/// What a verified token says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceAccountClaims {
    /// Namespace of the service account.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// Its UID at issue time.
    pub uid: String,
    /// The bound object, if any: kind (`Pod` or `Secret`), name and UID.
    pub bound: Option<(String, String, String)>,
    /// The token's id.
    pub jti: String,
}

impl ServiceAccountClaims {
    /// The user a token of these claims authenticates as.
    pub fn user(&self) -> UserInfo {
        let mut user = UserInfo {
            name: format!("system:serviceaccount:{}:{}", self.namespace, self.name),
            uid: self.uid.clone(),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{}", self.namespace),
            ],
            ..UserInfo::default()
        };
        if let Some((kind, name, uid)) = &self.bound {
            if kind == "Pod" {
                user.extra.insert(
                    "authentication.kubernetes.io/pod-name".into(),
                    vec![name.clone()],
                );
                user.extra.insert(
                    "authentication.kubernetes.io/pod-uid".into(),
                    vec![uid.clone()],
                );
            }
        }
        if !self.jti.is_empty() {
            user.extra.insert(
                "authentication.kubernetes.io/credential-id".into(),
                vec![format!("JTI={}", self.jti)],
            );
        }
        user
    }
}

/// What a TokenRequest asks for.
#[derive(Clone, Debug, Default)]
pub struct TokenSpec {
    /// Namespace and name of the service account.
    pub namespace: String,
    /// The service account.
    pub name: String,
    /// Its UID.
    pub uid: String,
    /// Audiences (empty: the cluster's own).
    pub audiences: Vec<String>,
    /// Lifetime in seconds.
    pub expiration_secs: i64,
    /// Bound object: kind, name, UID.
    pub bound: Option<(String, String, String)>,
}

/// A cluster's issuer of service-account tokens.
#[derive(Debug, Clone)]
pub struct TokenAuthority {
    key: Arc<SigningKey>,
    issuer: String,
    audiences: Vec<String>,
}

impl TokenAuthority {
    /// An authority signing with `key` as `issuer`; tokens for the issuer itself are accepted
    /// (upstream's default `--api-audiences`).
    pub fn new(key: Arc<SigningKey>, issuer: &str) -> TokenAuthority {
        TokenAuthority {
            key,
            issuer: issuer.to_string(),
            audiences: vec![issuer.to_string()],
        }
    }

    /// The issuer (`iss`).
    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    /// The audiences this cluster accepts.
    pub fn audiences(&self) -> &[String] {
        &self.audiences
    }

    /// Signs a token; returns it with its expiry (seconds since the epoch).
    pub fn issue(&self, spec: &TokenSpec) -> Result<(String, i64), JwtError> {
        let now = chrono::Utc::now().timestamp();
        let exp = now + spec.expiration_secs;
        let audiences = if spec.audiences.is_empty() {
            self.audiences.clone()
        } else {
            spec.audiences.clone()
        };
        let mut k8s = json!({
            "namespace": spec.namespace,
            "serviceaccount": {"name": spec.name, "uid": spec.uid},
        });
        if let Some((kind, name, uid)) = &spec.bound {
            let field = if kind == "Pod" { "pod" } else { "secret" };
            k8s[field] = json!({"name": name, "uid": uid});
        }
        let claims = json!({
            "iss": self.issuer,
            "sub": format!("system:serviceaccount:{}:{}", spec.namespace, spec.name),
            "aud": audiences,
            "exp": exp,
            "iat": now,
            "nbf": now,
            "jti": uuid::Uuid::new_v4().to_string(),
            "kubernetes.io": k8s,
        });
        Ok((self.key.sign(&claims)?, exp))
    }

    /// Verifies a token's signature and claims (not yet whether its objects still exist).
    pub fn verify(&self, token: &str) -> Result<ServiceAccountClaims, TokenError> {
        let claims = self.key.verify(token)?;
        let iss = claims["iss"].as_str().unwrap_or("");
        if iss != self.issuer {
            return Err(TokenError::Issuer(iss.to_string()));
        }
        let auds: Vec<String> = match &claims["aud"] {
            Value::String(s) => vec![s.clone()],
            Value::Array(a) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect(),
            _ => Vec::new(),
        };
        if !auds.iter().any(|a| self.audiences.contains(a)) {
            return Err(TokenError::Audience(auds));
        }
        let now = chrono::Utc::now().timestamp();
        let exp = claims["exp"].as_i64().ok_or(TokenError::Claims("exp"))?;
        if now > exp + LEEWAY_SECS {
            return Err(TokenError::Expired);
        }
        if let Some(nbf) = claims["nbf"].as_i64() {
            if now + LEEWAY_SECS < nbf {
                return Err(TokenError::Expired);
            }
        }
        let k8s = &claims["kubernetes.io"];
        let text = |v: &Value, what: &'static str| {
            v.as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or(TokenError::Claims(what))
        };
        let bound = if k8s["pod"].is_object() {
            Some((
                "Pod".to_string(),
                text(&k8s["pod"]["name"], "pod name")?,
                text(&k8s["pod"]["uid"], "pod uid")?,
            ))
        } else if k8s["secret"].is_object() {
            Some((
                "Secret".to_string(),
                text(&k8s["secret"]["name"], "secret name")?,
                text(&k8s["secret"]["uid"], "secret uid")?,
            ))
        } else {
            None
        };
        Ok(ServiceAccountClaims {
            namespace: text(&k8s["namespace"], "namespace")?,
            name: text(&k8s["serviceaccount"]["name"], "service account name")?,
            uid: text(&k8s["serviceaccount"]["uid"], "service account uid")?,
            bound,
            jti: claims["jti"].as_str().unwrap_or("").to_string(),
        })
    }

    /// `/.well-known/openid-configuration`.
    pub fn discovery(&self) -> Value {
        json!({
            "issuer": self.issuer,
            "jwks_uri": format!("{}/openid/v1/jwks", self.issuer.trim_end_matches('/')),
            "response_types_supported": ["id_token"],
            "subject_types_supported": ["public"],
            "id_token_signing_alg_values_supported": ["ES256"],
        })
    }

    /// `/openid/v1/jwks`.
    pub fn jwks(&self) -> Value {
        json!({"keys": [self.key.jwk()]})
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn authority() -> TokenAuthority {
        TokenAuthority::new(
            Arc::new(SigningKey::generate().expect("key")),
            "https://fabrik.test/clusters/a",
        )
    }

    fn spec() -> TokenSpec {
        TokenSpec {
            namespace: "ns".into(),
            name: "robot".into(),
            uid: "u1".into(),
            audiences: Vec::new(),
            expiration_secs: 600,
            bound: Some(("Pod".into(), "p".into(), "pu".into())),
        }
    }

    #[test]
    fn issued_tokens_verify_with_their_claims() {
        let a = authority();
        let (token, exp) = a.issue(&spec()).expect("issue");
        assert!(exp > chrono::Utc::now().timestamp());
        let c = a.verify(&token).expect("verify");
        assert_eq!(c.namespace, "ns");
        assert_eq!(c.bound, Some(("Pod".into(), "p".into(), "pu".into())));
        let user = c.user();
        assert_eq!(user.name, "system:serviceaccount:ns:robot");
        assert!(user
            .groups
            .contains(&"system:serviceaccounts:ns".to_string()));
    }

    #[test]
    fn wrong_audience_expiry_and_issuer_are_refused() {
        let a = authority();
        let mut s = spec();
        s.audiences = vec!["vault".into()];
        let (token, _) = a.issue(&s).expect("issue");
        assert!(matches!(a.verify(&token), Err(TokenError::Audience(_))));

        let mut s = spec();
        s.expiration_secs = -3600;
        let (token, _) = a.issue(&s).expect("issue");
        assert!(matches!(a.verify(&token), Err(TokenError::Expired)));

        // Same key, another issuer name: refused.
        let other = TokenAuthority::new(a.key.clone(), "https://elsewhere");
        let (token, _) = other.issue(&spec()).expect("issue");
        assert!(matches!(a.verify(&token), Err(TokenError::Issuer(_))));
    }
}
