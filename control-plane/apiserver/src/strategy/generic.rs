//! Kinds without special behaviour.

use fabrik_machinery::validation;

use super::{NameValidator, Strategy};

/// A kind with upstream's plain behaviour: DNS-1123 subdomain names, NAME / CREATED AT.
pub(super) struct Generic;

impl Strategy for Generic {}

/// A kind whose names may be any valid path segment (RBAC roles and bindings).
pub(super) struct PathNamed;

impl Strategy for PathNamed {
    fn name_validator(&self) -> NameValidator {
        validation::path_segment_name
    }
}
