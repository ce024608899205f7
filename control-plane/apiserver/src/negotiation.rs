//! Content negotiation: which representation a client asks for (`Accept`) and what a request
//! body is (`Content-Type`).

use crate::error::ApiError;

/// The representation of a response.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// Plain JSON objects.
    Json,
    /// YAML.
    Yaml,
    /// `meta.k8s.io/v1 Table` (kubectl get).
    Table,
    /// `PartialObjectMetadata` / `PartialObjectMetadataList`.
    Metadata,
    /// Aggregated discovery, `apidiscovery.k8s.io/v2` (or `v2beta1` when that is what was asked).
    Discovery(&'static str),
}

struct MediaType<'a> {
    essence: &'a str,
    params: Vec<(&'a str, &'a str)>,
}

fn parse_list(header: &str) -> Vec<MediaType<'_>> {
    header
        .split(',')
        .map(|part| {
            let mut pieces = part.split(';').map(str::trim);
            let essence = pieces.next().unwrap_or("");
            let params = pieces
                .filter_map(|p| p.split_once('='))
                .map(|(k, v)| (k.trim(), v.trim().trim_matches('"')))
                .collect();
            MediaType { essence, params }
        })
        .collect()
}

impl MediaType<'_> {
    fn param(&self, key: &str) -> Option<&str> {
        self.params.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }
}

/// Picks the first representation in `Accept` the server offers.
pub fn output(accept: Option<&str>) -> Result<Output, ApiError> {
    let Some(accept) = accept.filter(|a| !a.trim().is_empty()) else {
        return Ok(Output::Json);
    };
    for mt in parse_list(accept) {
        let json_like = matches!(mt.essence, "application/json" | "*/*" | "application/*");
        match (mt.param("as"), mt.param("g"), mt.param("v")) {
            (Some("Table"), Some("meta.k8s.io"), Some("v1" | "v1beta1")) if json_like => {
                return Ok(Output::Table)
            }
            (
                Some("PartialObjectMetadata" | "PartialObjectMetadataList"),
                Some("meta.k8s.io"),
                Some("v1" | "v1beta1"),
            ) if json_like => return Ok(Output::Metadata),
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2"))
                if json_like =>
            {
                return Ok(Output::Discovery("v2"))
            }
            (Some("APIGroupDiscoveryList"), Some("apidiscovery.k8s.io"), Some("v2beta1"))
                if json_like =>
            {
                return Ok(Output::Discovery("v2beta1"))
            }
            (Some(_), _, _) => continue,
            (None, _, _) => {}
        }
        if json_like {
            return Ok(Output::Json);
        }
        if matches!(
            mt.essence,
            "application/yaml" | "application/x-yaml" | "text/yaml"
        ) {
            return Ok(Output::Yaml);
        }
    }
    Err(ApiError::NotAcceptable(
        "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf (not served)".into(),
    ))
}

/// What a request body is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyType {
    /// JSON object.
    Json,
    /// YAML document.
    Yaml,
    /// RFC 6902 JSON patch.
    JsonPatch,
    /// RFC 7386 merge patch.
    MergePatch,
    /// Strategic merge patch.
    StrategicMergePatch,
    /// Server-side apply.
    ApplyPatch,
    /// Kubernetes protobuf (`application/vnd.kubernetes.protobuf`), what typed Go clients send.
    Protobuf,
}

/// Classifies `Content-Type`.
pub fn body_type(content_type: Option<&str>) -> Result<BodyType, ApiError> {
    let essence = content_type
        .and_then(|c| c.split(';').next())
        .map(|e| e.trim().to_ascii_lowercase())
        .unwrap_or_default();
    Ok(match essence.as_str() {
        "" | "application/json" => BodyType::Json,
        "application/yaml" | "application/x-yaml" | "text/yaml" => BodyType::Yaml,
        "application/json-patch+json" => BodyType::JsonPatch,
        "application/merge-patch+json" => BodyType::MergePatch,
        "application/strategic-merge-patch+json" => BodyType::StrategicMergePatch,
        "application/apply-patch+yaml" | "application/apply-patch+cbor" => BodyType::ApplyPatch,
        "application/vnd.kubernetes.protobuf" => BodyType::Protobuf,
        other => {
            return Err(ApiError::UnsupportedMediaType(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml, application/vnd.kubernetes.protobuf, application/json-patch+json, application/merge-patch+json, application/strategic-merge-patch+json (got {other:?})"
            )))
        }
    })
}

/// Decodes a JSON, YAML or protobuf body into a JSON value.
pub fn decode_body(bytes: &[u8], ty: BodyType) -> Result<serde_json::Value, ApiError> {
    match ty {
        BodyType::Protobuf => fabrik_openapi::decode_k8s_protobuf(bytes)
            .map_err(|e| ApiError::BadRequest(format!("failed to decode the protobuf body: {e}"))),
        BodyType::Yaml | BodyType::ApplyPatch => serde_yaml_ng::from_slice::<serde_json::Value>(bytes)
            .map_err(|e| ApiError::BadRequest(format!("error decoding YAML: {e}"))),
        _ => serde_json::from_slice(bytes).map_err(|e| {
            ApiError::BadRequest(format!(
                "the body of the request was in an unknown format - accepted media types include: application/json, application/yaml: {e}"
            ))
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubectl_accept_headers() {
        let table = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
        assert_eq!(output(Some(table)).ok(), Some(Output::Table));
        let disc = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json;g=apidiscovery.k8s.io;v=v2beta1;as=APIGroupDiscoveryList,application/json";
        assert_eq!(output(Some(disc)).ok(), Some(Output::Discovery("v2")));
        assert_eq!(
            output(Some("application/vnd.kubernetes.protobuf, */*")).ok(),
            Some(Output::Json)
        );
        assert_eq!(output(None).ok(), Some(Output::Json));
        assert!(output(Some("application/vnd.kubernetes.protobuf")).is_err());
        assert_eq!(
            output(Some(
                "application/json;as=Unknown;g=x;v=y, application/yaml"
            ))
            .ok(),
            Some(Output::Yaml)
        );
    }

    #[test]
    fn bodies() {
        assert_eq!(
            body_type(Some("application/merge-patch+json; charset=utf-8")).ok(),
            Some(BodyType::MergePatch)
        );
        assert!(body_type(Some("text/plain")).is_err());
        assert!(decode_body(b"{not json", BodyType::Json).is_err());
        assert_eq!(
            body_type(Some("application/vnd.kubernetes.protobuf")).ok(),
            Some(BodyType::Protobuf)
        );
        assert!(decode_body(b"k8s\0\x0a\xff", BodyType::Protobuf).is_err());
        assert!(decode_body(b"a: [", BodyType::Yaml).is_err());
        assert_eq!(
            decode_body(b"a: 1", BodyType::Yaml).ok(),
            Some(serde_json::json!({"a": 1}))
        );
    }
}
