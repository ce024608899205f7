//! `continue` tokens: the revision a paged list is pinned to and the last key returned, encoded
//! like upstream (base64 of a small JSON document). Tokens come from clients, so decoding checks
//! everything and a token can never point outside the listed prefix.

use base64::Engine;
use serde::{Deserialize, Serialize};

use crate::error::ApiError;

#[derive(Serialize, Deserialize)]
struct Token {
    v: String,
    rv: u64,
    start: String,
}

const VERSION: &str = "meta.k8s.io/v1";

/// Encodes a token that resumes after `last_key` (relative to `prefix`) at revision `rv`.
pub fn encode(rv: u64, prefix: &str, last_key: &str) -> String {
    let start = last_key
        .strip_prefix(prefix)
        .unwrap_or(last_key)
        .to_string();
    let token = Token {
        v: VERSION.into(),
        rv,
        start,
    };
    let json = serde_json::to_vec(&token).unwrap_or_default();
    base64::engine::general_purpose::URL_SAFE.encode(json)
}

/// Decodes a token into (revision, full key to start after).
pub fn decode(token: &str, prefix: &str) -> Result<(u64, String), ApiError> {
    let bad = |why: &str| ApiError::BadRequest(format!("continue key is not valid: {why}"));
    let bytes = base64::engine::general_purpose::URL_SAFE
        .decode(token)
        .map_err(|_| bad("incorrect encoded start resourceVersion (version meta.k8s.io/v1)"))?;
    let token: Token = serde_json::from_slice(&bytes).map_err(|_| bad("incorrect encoding"))?;
    if token.v != VERSION {
        return Err(bad("incorrect version"));
    }
    if token.rv == 0 {
        return Err(bad(
            "incorrect encoded start resourceVersion (version meta.k8s.io/v1)",
        ));
    }
    if token.start.is_empty() {
        return Err(bad("continue key is empty"));
    }
    // Like upstream's `path.Clean` check: a start key that is not already clean (empty, `.` or
    // `..` segments) is refused rather than resolved.
    if token
        .start
        .split('/')
        .any(|seg| seg.is_empty() || seg == "." || seg == "..")
    {
        return Err(bad("continue key is not clean"));
    }
    Ok((token.rv, format!("{prefix}{}", token.start)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_garbage() {
        // The start is relative to the listed prefix: whatever a client puts in a token, the
        // key it resumes from stays under the prefix being listed.
        let t = encode(42, "/core/pods/", "/core/pods/ns/p1");
        assert_eq!(
            decode(&t, "/core/pods/").ok(),
            Some((42, "/core/pods/ns/p1".into()))
        );
        let t = encode(42, "/core/pods/ns/", "/core/pods/ns/p1");
        assert_eq!(
            decode(&t, "/core/pods/ns/").ok(),
            Some((42, "/core/pods/ns/p1".into()))
        );
        assert!(decode("!!!", "/x/").is_err());
        assert!(decode("e30=", "/x/").is_err());
        for start in ["../secrets/ns/s", "a//b", "./a", "a/"] {
            let t = encode(7, "/core/pods/", &format!("/core/pods/{start}"));
            assert!(decode(&t, "/core/pods/").is_err(), "{start}");
        }
    }
}
