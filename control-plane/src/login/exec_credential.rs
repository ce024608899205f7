//! The kubectl exec credential protocol: read `KUBERNETES_EXEC_INFO`, write an `ExecCredential`.
//!
//! kubectl (client-go) runs the plugin with `KUBERNETES_EXEC_INFO` set to an `ExecCredential`
//! whose `apiVersion` is the version it wants back; the plugin answers on stdout with an
//! `ExecCredential` of that version carrying `status.token` and `status.expirationTimestamp`.

use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::json;

/// The version written when kubectl does not say.
pub const V1: &str = "client.authentication.k8s.io/v1";
/// The older version kubectl 1.20–1.21 (and some tools) still ask for.
pub const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";

/// Errors reading what kubectl asked for.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `KUBERNETES_EXEC_INFO` is not JSON.
    #[error("KUBERNETES_EXEC_INFO is not an ExecCredential: {0}")]
    Decode(#[source] serde_json::Error),
    /// It asks for a version this plugin does not speak.
    #[error(
        "KUBERNETES_EXEC_INFO asks for apiVersion {0:?}; fabrik login writes {V1} or {V1BETA1} \
         (set `apiVersion: {V1}` in the kubeconfig's exec section)"
    )]
    Version(String),
}

/// Results of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What kubectl asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The `apiVersion` to answer with.
    pub api_version: &'static str,
    /// `spec.interactive`: whether kubectl gave the plugin the terminal.
    pub interactive: bool,
}

impl Request {
    /// Parses `KUBERNETES_EXEC_INFO` (or its absence: a plugin run by hand).
    pub fn parse(exec_info: Option<&str>) -> Result<Request> {
        let Some(text) = exec_info.filter(|s| !s.trim().is_empty()) else {
            return Ok(Request {
                api_version: V1,
                interactive: true,
            });
        };
        let doc: serde_json::Value = serde_json::from_str(text).map_err(Error::Decode)?;
        let api_version = match doc["apiVersion"].as_str() {
            None | Some(V1) => V1,
            Some(V1BETA1) => V1BETA1,
            Some(other) => return Err(Error::Version(other.to_string())),
        };
        Ok(Request {
            api_version,
            interactive: doc["spec"]["interactive"].as_bool().unwrap_or(true),
        })
    }

    /// From the environment of this process.
    pub fn from_env() -> Result<Request> {
        Request::parse(std::env::var("KUBERNETES_EXEC_INFO").ok().as_deref())
    }

    /// The `ExecCredential` carrying `token` until `expiry`, as one line of JSON.
    pub fn render(&self, token: &str, expiry: DateTime<Utc>) -> String {
        json!({
            "kind": "ExecCredential",
            "apiVersion": self.api_version,
            "spec": {"interactive": self.interactive},
            "status": {
                "token": token,
                "expirationTimestamp": expiry.to_rfc3339_opts(SecondsFormat::Secs, true),
            },
        })
        .to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_to_v1_without_exec_info() -> Result<()> {
        assert_eq!(Request::parse(None)?.api_version, V1);
        assert_eq!(Request::parse(Some(""))?.api_version, V1);
        Ok(())
    }

    #[test]
    fn honours_the_requested_version() -> Result<()> {
        let info = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","spec":{"interactive":false}}"#;
        let req = Request::parse(Some(info))?;
        assert_eq!(req.api_version, V1BETA1);
        assert!(!req.interactive);
        let out: serde_json::Value =
            serde_json::from_str(&req.render("tok", DateTime::<Utc>::UNIX_EPOCH))
                .map_err(Error::Decode)?;
        assert_eq!(out["apiVersion"], V1BETA1);
        assert_eq!(out["kind"], "ExecCredential");
        assert_eq!(out["status"]["token"], "tok");
        assert_eq!(out["status"]["expirationTimestamp"], "1970-01-01T00:00:00Z");
        Ok(())
    }

    #[test]
    fn rejects_unknown_versions_and_garbage() {
        let info = r#"{"apiVersion":"client.authentication.k8s.io/v2"}"#;
        assert!(matches!(Request::parse(Some(info)), Err(Error::Version(_))));
        assert!(matches!(
            Request::parse(Some("{nope")),
            Err(Error::Decode(_))
        ));
    }
}
