//! What a stage answers: a status, a body and its content type, warnings, or an accepted
//! stream.

use super::*;

/// A response being built: status, body, content type, warnings.
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) body: Body,
    pub(super) content_type: &'static str,
    pub(super) warnings: Vec<String>,
    /// A stream accepted (status 101): its headers, and its session for an in-process caller.
    pub(super) upgrade: Option<(http::HeaderMap, crate::pod_streams::PendingSession)>,
}

pub(super) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed_unsync()
}

impl Reply {
    pub(super) fn json(status: StatusCode, value: &Value) -> Reply {
        Reply {
            status,
            body: full(serde_json::to_vec(value).unwrap_or_default()),
            content_type: "application/json",
            warnings: Vec::new(),
            upgrade: None,
        }
    }

    pub(super) fn encoded(status: StatusCode, value: &Value, output: Output) -> Reply {
        if output == Output::Yaml {
            let text = serde_yaml_ng::to_string(value).unwrap_or_default();
            return Reply {
                status,
                body: full(text),
                content_type: "application/yaml",
                warnings: Vec::new(),
                upgrade: None,
            };
        }
        Reply::json(status, value)
    }

    pub(super) fn text(status: StatusCode, text: String, content_type: &'static str) -> Reply {
        Reply {
            status,
            body: full(text),
            content_type,
            warnings: Vec::new(),
            upgrade: None,
        }
    }

    pub(super) fn with_warnings(mut self, warnings: Vec<String>) -> Reply {
        self.warnings = warnings;
        self
    }
}

pub(super) fn success_status() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
}
