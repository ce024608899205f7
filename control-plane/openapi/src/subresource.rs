//! The subresources a built-in kind can serve, with the schema and verbs of each.

use crate::resource::SubresourceDoc;

/// A subresource a resource serves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Subresource {
    /// `/status`: writes change only `.status`.
    Status,
    /// `/scale`: an `autoscaling/v1 Scale` view of `spec.replicas`.
    Scale,
    /// `pods/binding`: assigns a node.
    Binding,
    /// `pods/eviction`: deletion that respects disruption budgets.
    Eviction,
    /// `namespaces/finalize`: writes change only `spec.finalizers`.
    Finalize,
    /// `serviceaccounts/token`: a TokenRequest for a signed service-account token.
    Token,
    /// `pods/log`.
    Log,
    /// `pods/exec`.
    Exec,
    /// `pods/attach`.
    Attach,
    /// `pods/portforward`.
    PortForward,
}

impl Subresource {
    /// Every subresource.
    pub const ALL: [Subresource; 10] = [
        Subresource::Status,
        Subresource::Scale,
        Subresource::Binding,
        Subresource::Eviction,
        Subresource::Finalize,
        Subresource::Token,
        Subresource::Log,
        Subresource::Exec,
        Subresource::Attach,
        Subresource::PortForward,
    ];

    /// The path segment.
    pub fn name(self) -> &'static str {
        match self {
            Subresource::Status => "status",
            Subresource::Scale => "scale",
            Subresource::Binding => "binding",
            Subresource::Eviction => "eviction",
            Subresource::Finalize => "finalize",
            Subresource::Token => "token",
            Subresource::Log => "log",
            Subresource::Exec => "exec",
            Subresource::Attach => "attach",
            Subresource::PortForward => "portforward",
        }
    }

    /// Parses a path segment.
    pub fn parse(s: &str) -> Option<Subresource> {
        Subresource::ALL.into_iter().find(|sub| sub.name() == s)
    }

    /// The definition of the request and response body, for a kind whose own definition is
    /// `kind_definition`: a fixed one for `scale`, `binding`, `eviction` and `token`, the
    /// kind's own otherwise.
    pub fn body(self, kind_definition: &str) -> &str {
        match self {
            Subresource::Scale => "io.k8s.api.autoscaling.v1.Scale",
            Subresource::Binding => "io.k8s.api.core.v1.Binding",
            Subresource::Eviction => "io.k8s.api.policy.v1.Eviction",
            Subresource::Token => "io.k8s.api.authentication.v1.TokenRequest",
            Subresource::Status
            | Subresource::Finalize
            | Subresource::Log
            | Subresource::Exec
            | Subresource::Attach
            | Subresource::PortForward => kind_definition,
        }
    }

    /// The verbs it serves.
    pub fn verbs(self) -> &'static [&'static str] {
        match self {
            Subresource::Status | Subresource::Scale => &["get", "patch", "update"],
            Subresource::Binding | Subresource::Eviction | Subresource::Token => &["create"],
            Subresource::Finalize => &["update"],
            Subresource::Log => &["get"],
            Subresource::Exec | Subresource::Attach | Subresource::PortForward => {
                &["create", "get"]
            }
        }
    }

    /// Its description for the OpenAPI documents, under a kind whose definition is
    /// `kind_definition`.
    pub fn doc(self, kind_definition: &str) -> SubresourceDoc {
        SubresourceDoc {
            name: self.name().to_owned(),
            definition: self.body(kind_definition).to_owned(),
            verbs: self.verbs().iter().map(|v| (*v).to_owned()).collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for sub in Subresource::ALL {
            assert_eq!(Subresource::parse(sub.name()), Some(sub));
        }
        assert_eq!(Subresource::parse("Status"), None);
        assert_eq!(Subresource::parse(""), None);
    }

    #[test]
    fn fixed_bodies_do_not_depend_on_the_kind() {
        let pod = "io.k8s.api.core.v1.Pod";
        assert_eq!(Subresource::Status.body(pod), pod);
        assert_eq!(
            Subresource::Scale.body(pod),
            "io.k8s.api.autoscaling.v1.Scale"
        );
        let doc = Subresource::Eviction.doc(pod);
        assert_eq!(doc.name, "eviction");
        assert_eq!(doc.definition, "io.k8s.api.policy.v1.Eviction");
        assert_eq!(doc.verbs, ["create"]);
    }
}
