//! Compact JSON Web Signatures with ES256 (ECDSA P-256, SHA-256), the algorithm of the
//! service-account tokens a cluster issues. Only what the token authority needs: sign, and
//! verify against one known key — the header's `alg` must be exactly `ES256` and its `kid` the
//! key's, so `alg: none`, HMAC with the public key and unknown keys are refused by construction.

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, KeyPair};
use serde_json::{json, Value};

/// Errors of signing keys and tokens.
#[derive(Debug, thiserror::Error)]
pub enum JwtError {
    /// The token is not three base64url segments with JSON header and payload.
    #[error("malformed token: {0}")]
    Malformed(&'static str),
    /// The header names another algorithm than ES256.
    #[error("unsupported signing algorithm {0:?}")]
    Algorithm(String),
    /// The header names a key this authority does not have.
    #[error("unknown signing key {0:?}")]
    UnknownKey(String),
    /// The signature does not verify.
    #[error("invalid signature")]
    Signature,
    /// The private key could not be read or generated.
    #[error("invalid signing key: {0}")]
    Key(String),
}

/// An ES256 signing key and its key id (the SHA-256 of its public key, base64url).
pub struct SigningKey {
    pair: EcdsaKeyPair,
    pkcs8: Vec<u8>,
    kid: String,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("kid", &self.kid)
            .finish()
    }
}

const PEM_LABEL: &str = "PRIVATE KEY";

impl SigningKey {
    /// A new random key.
    pub fn generate() -> Result<SigningKey, JwtError> {
        let rng = SystemRandom::new();
        let doc = EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
            .map_err(|_| JwtError::Key("key generation failed".into()))?;
        SigningKey::from_pkcs8(doc.as_ref())
    }

    /// A key from its PKCS#8 DER encoding.
    pub fn from_pkcs8(der: &[u8]) -> Result<SigningKey, JwtError> {
        let rng = SystemRandom::new();
        let pair = EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
            .map_err(|e| JwtError::Key(format!("not a PKCS#8 P-256 key: {e}")))?;
        let digest = ring::digest::digest(&ring::digest::SHA256, pair.public_key().as_ref());
        Ok(SigningKey {
            kid: URL_SAFE_NO_PAD.encode(digest.as_ref()),
            pair,
            pkcs8: der.to_vec(),
        })
    }

    /// A key from a PEM `PRIVATE KEY` block.
    pub fn from_pem(pem: &str) -> Result<SigningKey, JwtError> {
        match rustls_pemfile::private_key(&mut pem.as_bytes()) {
            Ok(Some(rustls::pki_types::PrivateKeyDer::Pkcs8(k))) => {
                SigningKey::from_pkcs8(k.secret_pkcs8_der())
            }
            Ok(_) => Err(JwtError::Key("expected a PKCS#8 PRIVATE KEY block".into())),
            Err(e) => Err(JwtError::Key(e.to_string())),
        }
    }

    /// The key as a PEM `PRIVATE KEY` block.
    pub fn to_pem(&self) -> String {
        let b64 = base64::engine::general_purpose::STANDARD.encode(&self.pkcs8);
        let mut out = format!("-----BEGIN {PEM_LABEL}-----\n");
        for chunk in b64.as_bytes().chunks(64) {
            out.push_str(&String::from_utf8_lossy(chunk));
            out.push('\n');
        }
        out.push_str(&format!("-----END {PEM_LABEL}-----\n"));
        out
    }

    /// The key id.
    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JSON Web Key.
    pub fn jwk(&self) -> Value {
        // Uncompressed point: 0x04 || X (32 bytes) || Y (32 bytes).
        let point = self.pair.public_key().as_ref();
        let (x, y) = point
            .get(1..)
            .unwrap_or_default()
            .split_at(32.min(point.len().saturating_sub(1)));
        json!({
            "use": "sig",
            "kty": "EC",
            "crv": "P-256",
            "alg": "ES256",
            "kid": self.kid,
            "x": URL_SAFE_NO_PAD.encode(x),
            "y": URL_SAFE_NO_PAD.encode(y),
        })
    }

    /// Signs `claims` into a compact JWS.
    pub fn sign(&self, claims: &Value) -> Result<String, JwtError> {
        let header = json!({"alg": "ES256", "kid": self.kid, "typ": "JWT"});
        let signing_input = format!(
            "{}.{}",
            URL_SAFE_NO_PAD.encode(header.to_string()),
            URL_SAFE_NO_PAD.encode(claims.to_string())
        );
        let sig = self
            .pair
            .sign(&SystemRandom::new(), signing_input.as_bytes())
            .map_err(|_| JwtError::Key("signing failed".into()))?;
        Ok(format!(
            "{signing_input}.{}",
            URL_SAFE_NO_PAD.encode(sig.as_ref())
        ))
    }

    /// Verifies a compact JWS signed by this key and returns its claims.
    pub fn verify(&self, token: &str) -> Result<Value, JwtError> {
        let parts = Parts::split(token)?;
        let alg = parts.header["alg"].as_str().unwrap_or("");
        if alg != "ES256" {
            return Err(JwtError::Algorithm(alg.to_string()));
        }
        let kid = parts.header["kid"].as_str().unwrap_or("");
        if kid != self.kid {
            return Err(JwtError::UnknownKey(kid.to_string()));
        }
        let key = signature::UnparsedPublicKey::new(
            &signature::ECDSA_P256_SHA256_FIXED,
            self.pair.public_key().as_ref(),
        );
        key.verify(parts.signing_input.as_bytes(), &parts.signature)
            .map_err(|_| JwtError::Signature)?;
        Ok(parts.payload)
    }
}

/// A compact JWS split into its parts (nothing verified).
pub struct Parts<'a> {
    /// The decoded header.
    pub header: Value,
    /// The decoded payload.
    pub payload: Value,
    /// `header.payload` as sent.
    pub signing_input: &'a str,
    /// The signature bytes.
    pub signature: Vec<u8>,
}

/// Tokens longer than this are refused before decoding.
pub const MAX_TOKEN_BYTES: usize = 16 * 1024;

impl<'a> Parts<'a> {
    /// Splits and decodes a compact JWS.
    pub fn split(token: &'a str) -> Result<Parts<'a>, JwtError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(JwtError::Malformed("token too long"));
        }
        let (signing_input, sig) = token
            .rsplit_once('.')
            .ok_or(JwtError::Malformed("not a JWS"))?;
        let (h, p) = signing_input
            .split_once('.')
            .ok_or(JwtError::Malformed("not a JWS"))?;
        if p.contains('.') {
            return Err(JwtError::Malformed("too many segments"));
        }
        let decode = |s: &str| {
            URL_SAFE_NO_PAD
                .decode(s)
                .map_err(|_| JwtError::Malformed("invalid base64url"))
        };
        let header: Value = serde_json::from_slice(&decode(h)?)
            .map_err(|_| JwtError::Malformed("header is not JSON"))?;
        let payload: Value = serde_json::from_slice(&decode(p)?)
            .map_err(|_| JwtError::Malformed("payload is not JSON"))?;
        if !header.is_object() || !payload.is_object() {
            return Err(JwtError::Malformed("header and payload must be objects"));
        }
        Ok(Parts {
            header,
            payload,
            signing_input,
            signature: decode(sig)?,
        })
    }
}

/// The unverified `iss` claim of a token, to pick the authenticator that verifies it.
pub fn peek_issuer(token: &str) -> Option<String> {
    let payload = token.split('.').nth(1)?;
    let bytes = URL_SAFE_NO_PAD.decode(payload).ok()?;
    let v: Value = serde_json::from_slice(&bytes).ok()?;
    v["iss"].as_str().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signs_and_verifies_and_refuses_forgeries() {
        let key = SigningKey::generate().expect("key");
        let token = key.sign(&json!({"sub": "a", "iss": "me"})).expect("sign");
        assert_eq!(key.verify(&token).expect("verify")["sub"], "a");
        assert_eq!(peek_issuer(&token).as_deref(), Some("me"));

        // The same key round-trips through PEM.
        let again = SigningKey::from_pem(&key.to_pem()).expect("pem");
        assert_eq!(again.kid(), key.kid());
        assert!(again.verify(&token).is_ok());

        // Tampered payload.
        let mut segs: Vec<&str> = token.split('.').collect();
        let forged_payload =
            URL_SAFE_NO_PAD.encode(json!({"sub": "admin", "iss": "me"}).to_string());
        segs[1] = &forged_payload;
        assert!(matches!(
            key.verify(&segs.join(".")),
            Err(JwtError::Signature)
        ));

        // alg: none and HS256.
        for alg in ["none", "HS256"] {
            let h = URL_SAFE_NO_PAD.encode(json!({"alg": alg, "kid": key.kid()}).to_string());
            let p = URL_SAFE_NO_PAD.encode(json!({"sub": "admin"}).to_string());
            let forged = format!("{h}.{p}.");
            assert!(
                matches!(key.verify(&forged), Err(JwtError::Algorithm(_))),
                "{alg}"
            );
        }

        // Another key's token.
        let other = SigningKey::generate().expect("key");
        let t2 = other.sign(&json!({"sub": "a"})).expect("sign");
        assert!(matches!(key.verify(&t2), Err(JwtError::UnknownKey(_))));

        // Garbage.
        for bad in ["", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert!(key.verify(bad).is_err(), "{bad}");
        }
        let jwk = key.jwk();
        assert_eq!(jwk["kid"], key.kid());
        assert_eq!(
            URL_SAFE_NO_PAD
                .decode(jwk["x"].as_str().unwrap_or(""))
                .map(|v| v.len())
                .ok(),
            Some(32)
        );
    }
}
