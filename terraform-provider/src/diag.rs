//! Diagnostics: the errors and warnings Terraform shows, each optionally pointing at an
//! attribute (`quota.gpu_sharing`), which Terraform turns into a source location.

use crate::proto::tfplugin6 as pb;

/// One step of an attribute path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// An attribute of an object.
    Attr(String),
    /// An element of a list, by index.
    Index(i64),
    /// An element of a map, by key.
    Key(String),
}

/// An attribute path, outermost first.
pub type Path = Vec<Step>;

/// A path of attribute names (`path(&["quota", "gpus"])`).
pub fn path(names: &[&str]) -> Path {
    names.iter().map(|n| Step::Attr((*n).to_string())).collect()
}

/// Shows a path the way Terraform users write it (`quota.gpus`, `owners[0]`).
pub fn display(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Attr(a) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(a);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
            Step::Key(k) => out.push_str(&format!("[{k:?}]")),
        }
    }
    out
}

/// An error or warning.
#[derive(Clone, Debug, PartialEq)]
pub struct Diag {
    /// Error (fails the operation) or warning.
    pub error: bool,
    /// One line.
    pub summary: String,
    /// More.
    pub detail: String,
    /// The attribute it is about, if any.
    pub path: Option<Path>,
}

impl Diag {
    /// An error about the whole operation.
    pub fn error(summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            error: true,
            summary: summary.into(),
            detail: detail.into(),
            path: None,
        }
    }

    /// An error about one attribute.
    pub fn attr(path: Path, summary: impl Into<String>, detail: impl Into<String>) -> Diag {
        Diag {
            error: true,
            summary: summary.into(),
            detail: detail.into(),
            path: Some(path),
        }
    }

    /// The protocol message.
    pub fn to_proto(&self) -> pb::Diagnostic {
        let severity = if self.error {
            pb::diagnostic::Severity::Error
        } else {
            pb::diagnostic::Severity::Warning
        };
        // Terraform shows the source of a top-level attribute, but for an attribute inside an
        // object value (`quota = { cpu = ... }`) only the resource: the path goes in the text.
        let detail = match &self.path {
            Some(p) if !p.is_empty() => format!("{}: {}", display(p), self.detail),
            _ => self.detail.clone(),
        };
        pb::Diagnostic {
            severity: severity as i32,
            summary: self.summary.clone(),
            detail,
            attribute: self.path.as_ref().map(|p| to_proto_path(p)),
        }
    }
}

/// A path as the protocol's `AttributePath`.
pub fn to_proto_path(path: &[Step]) -> pb::AttributePath {
    use pb::attribute_path::step::Selector;
    pb::AttributePath {
        steps: path
            .iter()
            .map(|s| pb::attribute_path::Step {
                selector: Some(match s {
                    Step::Attr(a) => Selector::AttributeName(a.clone()),
                    Step::Index(i) => Selector::ElementKeyInt(*i),
                    Step::Key(k) => Selector::ElementKeyString(k.clone()),
                }),
            })
            .collect(),
    }
}

/// Diagnostics as protocol messages.
pub fn to_proto(diags: &[Diag]) -> Vec<pb::Diagnostic> {
    diags.iter().map(Diag::to_proto).collect()
}

/// Whether any diagnostic is an error.
pub fn has_errors(diags: &[Diag]) -> bool {
    diags.iter().any(|d| d.error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_display_and_encode() {
        let mut p = path(&["quota", "gpus"]);
        assert_eq!(display(&p), "quota.gpus");
        p.push(Step::Index(2));
        assert_eq!(display(&p), "quota.gpus[2]");
        let d = Diag::attr(p, "bad", "worse").to_proto();
        let steps = d.attribute.expect("path").steps;
        assert_eq!(steps.len(), 3);
        assert_eq!(
            steps[0].selector,
            Some(pb::attribute_path::step::Selector::AttributeName(
                "quota".into()
            ))
        );
        assert_eq!(d.severity, pb::diagnostic::Severity::Error as i32);
        assert_eq!(d.detail, "quota.gpus[2]: worse");
    }
}
