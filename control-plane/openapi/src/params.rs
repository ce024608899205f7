//! The query and path parameters of Kubernetes API operations.

/// JSON type of a parameter's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ParamType {
    String,
    Integer,
    Boolean,
}

impl ParamType {
    /// The OpenAPI `type` keyword.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ParamType::String => "string",
            ParamType::Integer => "integer",
            ParamType::Boolean => "boolean",
        }
    }
}

/// A query parameter.
#[derive(Debug)]
pub(crate) struct QueryParam {
    pub(crate) name: &'static str,
    pub(crate) ty: ParamType,
    pub(crate) description: &'static str,
}

const fn q(name: &'static str, ty: ParamType, description: &'static str) -> QueryParam {
    QueryParam {
        name,
        ty,
        description,
    }
}

use ParamType::{Boolean, Integer, String as Str};

pub(crate) const ALLOW_WATCH_BOOKMARKS: QueryParam = q(
    "allowWatchBookmarks",
    Boolean,
    "Requests watch events of type BOOKMARK; servers may send them at their discretion.",
);
pub(crate) const CONTINUE: QueryParam = q(
    "continue",
    Str,
    "The continue token from a previous paginated list; the next page is served at the same resourceVersion.",
);
pub(crate) const DRY_RUN: QueryParam = q(
    "dryRun",
    Str,
    "When present, modifications are not persisted. Valid value: All.",
);
pub(crate) const FIELD_MANAGER: QueryParam = q(
    "fieldManager",
    Str,
    "Name of the actor making the change, recorded in managedFields.",
);
pub(crate) const FIELD_SELECTOR: QueryParam = q(
    "fieldSelector",
    Str,
    "A selector restricting the returned objects by their fields.",
);
pub(crate) const FIELD_VALIDATION: QueryParam = q(
    "fieldValidation",
    Str,
    "How to handle unknown or duplicate fields in the request: Ignore, Warn (default) or Strict.",
);
pub(crate) const FORCE: QueryParam = q(
    "force",
    Boolean,
    "Force an apply request, taking ownership of conflicting fields. Only for apply patches.",
);
pub(crate) const GRACE_PERIOD_SECONDS: QueryParam = q(
    "gracePeriodSeconds",
    Integer,
    "Seconds before the object is deleted; zero deletes immediately.",
);
pub(crate) const IGNORE_STORE_READ_ERROR: QueryParam = q(
    "ignoreStoreReadErrorWithClusterBreakingPotential",
    Boolean,
    "Deletes a corrupt object that cannot be read from storage. Dangerous.",
);
pub(crate) const LABEL_SELECTOR: QueryParam = q(
    "labelSelector",
    Str,
    "A selector restricting the returned objects by their labels.",
);
pub(crate) const LIMIT: QueryParam = q(
    "limit",
    Integer,
    "Maximum number of items in one list response; more are reached with continue.",
);
pub(crate) const ORPHAN_DEPENDENTS: QueryParam = q(
    "orphanDependents",
    Boolean,
    "Deprecated: use propagationPolicy. Whether dependents are orphaned.",
);
pub(crate) const PRETTY: QueryParam = q("pretty", Str, "If 'true', the output is pretty printed.");
pub(crate) const PROPAGATION_POLICY: QueryParam = q(
    "propagationPolicy",
    Str,
    "Garbage collection of dependents: Orphan, Background or Foreground.",
);
pub(crate) const RESOURCE_VERSION: QueryParam = q(
    "resourceVersion",
    Str,
    "Constrains which resource versions a request may be served from.",
);
pub(crate) const RESOURCE_VERSION_MATCH: QueryParam = q(
    "resourceVersionMatch",
    Str,
    "How resourceVersion applies to list calls: Exact or NotOlderThan.",
);
pub(crate) const SEND_INITIAL_EVENTS: QueryParam = q(
    "sendInitialEvents",
    Boolean,
    "With watch=true, start with synthetic ADDED events for the current state, ended by a BOOKMARK.",
);
pub(crate) const TIMEOUT_SECONDS: QueryParam = q(
    "timeoutSeconds",
    Integer,
    "Timeout for the list or watch call, regardless of activity.",
);
pub(crate) const WATCH: QueryParam = q(
    "watch",
    Boolean,
    "Watch for changes to the described resources and stream them as add, update and remove notifications.",
);

/// Parameters of a list (or watch through `?watch=true`) operation.
pub(crate) const LIST: &[&QueryParam] = &[
    &ALLOW_WATCH_BOOKMARKS,
    &CONTINUE,
    &FIELD_SELECTOR,
    &LABEL_SELECTOR,
    &LIMIT,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
    &WATCH,
];
/// Parameters of create and replace.
pub(crate) const WRITE: &[&QueryParam] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION];
/// Parameters of patch.
pub(crate) const PATCH: &[&QueryParam] = &[&DRY_RUN, &FIELD_MANAGER, &FIELD_VALIDATION, &FORCE];
/// Parameters of delete.
pub(crate) const DELETE: &[&QueryParam] = &[
    &DRY_RUN,
    &GRACE_PERIOD_SECONDS,
    &IGNORE_STORE_READ_ERROR,
    &ORPHAN_DEPENDENTS,
    &PROPAGATION_POLICY,
];
/// Parameters of deletecollection.
pub(crate) const DELETE_COLLECTION: &[&QueryParam] = &[
    &CONTINUE,
    &DRY_RUN,
    &FIELD_SELECTOR,
    &GRACE_PERIOD_SECONDS,
    &IGNORE_STORE_READ_ERROR,
    &LABEL_SELECTOR,
    &LIMIT,
    &ORPHAN_DEPENDENTS,
    &PROPAGATION_POLICY,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
];
/// Parameters of a read.
pub(crate) const READ: &[&QueryParam] = &[];
/// Parameters shared by every operation of a path.
pub(crate) const SHARED: &[&QueryParam] = &[&PRETTY];
/// Parameters of the deprecated watch paths, all given at path level.
pub(crate) const LIST_AND_SHARED: &[&QueryParam] = &[
    &ALLOW_WATCH_BOOKMARKS,
    &CONTINUE,
    &FIELD_SELECTOR,
    &LABEL_SELECTOR,
    &LIMIT,
    &PRETTY,
    &RESOURCE_VERSION,
    &RESOURCE_VERSION_MATCH,
    &SEND_INITIAL_EVENTS,
    &TIMEOUT_SECONDS,
    &WATCH,
];

#[cfg(test)]
mod tests {
    use super::*;

    fn names(ps: &[&QueryParam]) -> Vec<&'static str> {
        ps.iter().map(|p| p.name).collect()
    }

    #[test]
    fn groups_hold_what_clients_look_for() {
        assert!(names(PATCH).contains(&"fieldValidation"));
        assert!(names(PATCH).contains(&"force"));
        assert!(names(WRITE).contains(&"fieldValidation"));
        assert!(names(LIST).contains(&"sendInitialEvents"));
        assert!(names(DELETE).contains(&"propagationPolicy"));
        assert!(!names(READ).contains(&"watch"));
    }

    #[test]
    fn groups_are_sorted_without_duplicates() {
        for group in [LIST, WRITE, PATCH, DELETE, DELETE_COLLECTION] {
            let n = names(group);
            let mut sorted = n.clone();
            sorted.sort_unstable();
            sorted.dedup();
            assert_eq!(n, sorted);
        }
        assert_eq!(WATCH.ty.as_str(), "boolean");
        assert_eq!(LIMIT.ty.as_str(), "integer");
    }
}
