//! Descriptions of served resources, the input of the document builders.

/// One served resource, described for the OpenAPI documents.
#[derive(Clone, Debug)]
pub struct ResourceDoc {
    /// API group, `""` for the core group.
    pub group: String,
    /// API version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Pod`.
    pub kind: String,
    /// Plural resource name used in paths, e.g. `pods`.
    pub plural: String,
    /// Whether the resource lives in namespaces.
    pub namespaced: bool,
    /// Verbs: `create`, `delete`, `deletecollection`, `get`, `list`, `patch`, `update`, `watch`.
    pub verbs: Vec<String>,
    /// Subresources served under the item path.
    pub subresources: Vec<SubresourceDoc>,
    /// Schema name of the kind, e.g. `io.k8s.api.core.v1.Pod`.
    pub definition: String,
    /// Schema name of the list kind, e.g. `io.k8s.api.core.v1.PodList`.
    pub list_definition: String,
}

/// A subresource of a [`ResourceDoc`].
#[derive(Clone, Debug)]
pub struct SubresourceDoc {
    /// Name, e.g. `status`, `scale`, `binding`, `eviction`.
    pub name: String,
    /// Schema name of the request/response body, e.g. `io.k8s.api.autoscaling.v1.Scale`.
    pub definition: String,
    /// Verbs: `get`, `update`, `patch`, `create`.
    pub verbs: Vec<String>,
}

impl ResourceDoc {
    /// Whether `verb` is among the resource's verbs.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

impl SubresourceDoc {
    /// Whether `verb` is among the subresource's verbs.
    pub fn has_verb(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == verb)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verbs_are_matched_exactly() {
        let sub = SubresourceDoc {
            name: "status".into(),
            definition: "io.k8s.api.core.v1.Pod".into(),
            verbs: vec!["get".into(), "patch".into()],
        };
        assert!(sub.has_verb("patch"));
        assert!(!sub.has_verb("update"));
        assert!(!sub.has_verb("pat"));
    }
}
