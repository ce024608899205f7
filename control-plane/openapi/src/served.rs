//! The built-in resources Fabrik serves, described as [`ResourceDoc`]s.
//!
//! Derived from [`builtin_kinds`], the table the API server builds its catalog from, so the
//! two describe the same resources with the same verbs and subresources.

use crate::kinds::{builtin_kinds, BuiltinKind};
use crate::resource::ResourceDoc;

/// The built-in resources with their verbs and subresources.
pub fn builtin_resources() -> Vec<ResourceDoc> {
    builtin_kinds().iter().map(BuiltinKind::doc).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Definitions;

    #[test]
    fn every_definition_exists() {
        let defs = Definitions::builtin();
        for res in builtin_resources() {
            assert!(defs.get(&res.definition).is_some(), "{}", res.definition);
            if res.has_verb("list") {
                assert!(
                    defs.get(&res.list_definition).is_some(),
                    "{}",
                    res.list_definition
                );
            }
            for sub in &res.subresources {
                assert!(defs.get(&sub.definition).is_some(), "{}", sub.definition);
            }
        }
    }

    #[test]
    fn one_resource_per_kind() {
        let resources = builtin_resources();
        assert_eq!(resources.len(), builtin_kinds().len());
        for (res, kind) in resources.iter().zip(builtin_kinds()) {
            assert_eq!(
                (res.group.as_str(), res.kind.as_str()),
                (kind.group, kind.kind)
            );
        }
    }
}
