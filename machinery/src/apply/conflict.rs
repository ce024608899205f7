//! Apply conflicts and upstream's wording of them (the 409 message and its causes).

use super::managed::Operation;

/// A field an apply would change that another manager owns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conflict {
    /// The other manager's name.
    pub manager: String,
    /// The other manager's operation.
    pub operation: Operation,
    /// The apiVersion of the other manager's entry.
    pub api_version: String,
    /// The other manager's subresource.
    pub subresource: Option<String>,
    /// The field, upstream path format (`.spec.replicas`,
    /// `.spec.containers[name="nginx"].image`).
    pub field: String,
}

impl Conflict {
    /// The manager as upstream prints it: `"kubectl-client-side-apply" using apps/v1` for an
    /// Update manager, `"kubectl"` for an Apply one, with ` with subresource "status"` where
    /// it wrote a subresource.
    pub fn manager_description(&self) -> String {
        let mut s = format!("{:?}", self.manager);
        if let Some(sub) = &self.subresource {
            s.push_str(&format!(" with subresource {sub:?}"));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }

    /// The message of this conflict's `Status.details.causes` entry (type
    /// `FieldManagerConflict`, `field` = [`Conflict::field`]).
    pub fn cause_message(&self) -> String {
        format!("conflict with {}", self.manager_description())
    }

    fn manager_order(&self) -> (&str, Operation, &str, Option<&str>) {
        (
            &self.manager,
            self.operation,
            &self.api_version,
            self.subresource.as_deref(),
        )
    }
}

/// Upstream's 409 message for `conflicts`:
/// `Apply failed with 1 conflict: conflict with "m" using apps/v1: .spec.replicas`, or for
/// several, grouped by manager: `Apply failed with 2 conflicts: conflicts with "m" using
/// apps/v1:\n- .spec.replicas\n- .spec.paused`.
pub fn conflict_message(conflicts: &[Conflict]) -> String {
    if let [only] = conflicts {
        return format!(
            "Apply failed with 1 conflict: {}: {}",
            only.cause_message(),
            only.field
        );
    }
    let mut sorted: Vec<&Conflict> = conflicts.iter().collect();
    sorted.sort_by(|a, b| a.manager_order().cmp(&b.manager_order()));
    let mut lines: Vec<String> = Vec::new();
    let mut current: Option<&Conflict> = None;
    for c in sorted {
        if current.is_none_or(|p| p.manager_order() != c.manager_order()) {
            lines.push(format!("conflicts with {}:", c.manager_description()));
            current = Some(c);
        }
        lines.push(format!("- {}", c.field));
    }
    format!(
        "Apply failed with {} conflicts: {}",
        conflicts.len(),
        lines.join("\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conflict(manager: &str, op: Operation, field: &str) -> Conflict {
        Conflict {
            manager: manager.into(),
            operation: op,
            api_version: "apps/v1".into(),
            subresource: None,
            field: field.into(),
        }
    }

    #[test]
    fn one_conflict_message() {
        let c = conflict(
            "kubectl-client-side-apply",
            Operation::Update,
            ".spec.replicas",
        );
        assert_eq!(
            conflict_message(&[c]),
            r#"Apply failed with 1 conflict: conflict with "kubectl-client-side-apply" using apps/v1: .spec.replicas"#
        );
    }

    #[test]
    fn several_conflicts_grouped_by_manager() {
        let mut status = conflict("kubelet", Operation::Update, ".status.phase");
        status.subresource = Some("status".into());
        let cs = [
            conflict("zeta", Operation::Apply, ".spec.replicas"),
            conflict("alpha", Operation::Update, ".spec.paused"),
            conflict("zeta", Operation::Apply, ".spec.minReadySeconds"),
            status,
        ];
        assert_eq!(
            conflict_message(&cs),
            "Apply failed with 4 conflicts: conflicts with \"alpha\" using apps/v1:\n\
             - .spec.paused\n\
             conflicts with \"kubelet\" with subresource \"status\" using apps/v1:\n\
             - .status.phase\n\
             conflicts with \"zeta\":\n\
             - .spec.replicas\n\
             - .spec.minReadySeconds"
        );
    }
}
