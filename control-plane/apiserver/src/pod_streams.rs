//! The pod streaming subresources: `pods/log`, and `pods/exec`, `pods/attach`,
//! `pods/portforward`. What serves them depends on where the pod runs, so the API server asks
//! a [`PodStreams`] provider set by whoever runs the nodes: the simulated nodes of `fabrik up`
//! answer with what their kubelet stand-in recorded; a tenant's server asks the host for the
//! host pod's log. The handler does what is common: picking the container, `tailLines`,
//! `limitBytes`.

use serde_json::Value;

use crate::error::ApiError;

/// A provider of pod logs and streams.
#[async_trait::async_trait]
pub trait PodStreams: Send + Sync {
    /// The whole current log of `container` of `pod` (the handler trims it).
    async fn logs(&self, pod: &Value, container: &str, previous: bool) -> Result<String, ApiError>;

    /// `exec`, `attach` or `portforward` (`what`) on `pod`: a provider that cannot stream says
    /// why, as an error.
    async fn stream(&self, pod: &Value, what: &str) -> Result<(), ApiError>;
}

/// The container a log request means: the one named, or the pod's only one.
pub fn container_of(pod: &Value, asked: Option<&str>) -> Result<String, ApiError> {
    let name = pod["metadata"]["name"].as_str().unwrap_or("");
    let names: Vec<&str> = ["initContainers", "containers", "ephemeralContainers"]
        .iter()
        .flat_map(|k| pod["spec"][*k].as_array().into_iter().flatten())
        .filter_map(|c| c["name"].as_str())
        .collect();
    match asked.filter(|c| !c.is_empty()) {
        Some(c) if names.contains(&c) => Ok(c.to_string()),
        Some(c) => Err(ApiError::BadRequest(format!(
            "container {c} is not valid for pod {name}"
        ))),
        None => {
            let regular: Vec<&str> = pod["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|c| c["name"].as_str())
                .collect();
            match regular.as_slice() {
                [one] => Ok(one.to_string()),
                many => Err(ApiError::BadRequest(format!(
                    "a container name must be specified for pod {name}, choose one of: [{}]",
                    many.join(" ")
                ))),
            }
        }
    }
}

/// Applies `tailLines` and `limitBytes` to a log.
pub fn trim(text: &str, tail_lines: Option<usize>, limit_bytes: Option<usize>) -> String {
    let mut out = match tail_lines {
        Some(n) => {
            let lines: Vec<&str> = text.lines().collect();
            let start = lines.len().saturating_sub(n);
            lines[start..].iter().map(|l| format!("{l}\n")).collect()
        }
        None => text.to_string(),
    };
    if let Some(limit) = limit_bytes {
        if out.len() > limit {
            let mut cut = limit;
            while !out.is_char_boundary(cut) {
                cut -= 1;
            }
            out.truncate(cut);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn containers_and_trimming_follow_upstream() {
        let one = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "app"}]}});
        assert_eq!(container_of(&one, None).expect("only one"), "app");
        let two = json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "a"}, {"name": "b"}]}});
        let err = container_of(&two, None).expect_err("ambiguous").to_string();
        assert!(err.contains("choose one of: [a b]"), "{err}");
        assert!(container_of(&two, Some("c")).is_err());
        assert_eq!(trim("1\n2\n3\n", Some(2), None), "2\n3\n");
        assert_eq!(trim("abcdef", None, Some(3)), "abc");
    }
}
