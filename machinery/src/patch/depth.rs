//! How deeply a JSON value nests, measured without recursion.
//!
//! JSON patch is the one patch type whose result can nest deeper than its inputs: `add` at a
//! deep path, and above all `copy` of a subtree into itself, double the depth with every
//! operation, so a patch of a few hundred kilobytes builds an object hundreds of thousands of
//! levels deep. Cloning, serializing or even dropping such a value recurses once per level and
//! overflows the stack, which aborts the whole process (every tenant's API server with it).
//! [`json_patch`](super::json_patch) therefore refuses, before applying it, any operation
//! that would nest the object deeper than [`MAX_PATCHED_DEPTH`].

use json_patch::PatchOperation;
use serde_json::Value;

use super::PatchError;

/// The deepest nesting of arrays and objects a patch may produce: the most the JSON decoder
/// reads back (`serde_json` refuses 128 nested containers), so a patched object is never one a
/// JSON request body could not have carried, and stays readable from the store.
pub const MAX_PATCHED_DEPTH: usize = 127;

/// The number of nested arrays and objects on the deepest path of `v` (a scalar: 0), counting
/// at most up to `limit + 1`: a deeper value is not walked further.
pub(crate) fn nesting_depth(v: &Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack: Vec<(&Value, usize)> = vec![(v, 1)];
    while let Some((value, depth)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &Value>> = match value {
            Value::Array(items) => Box::new(items.iter()),
            Value::Object(map) => Box::new(map.values()),
            _ => continue,
        };
        deepest = deepest.max(depth);
        if depth > limit {
            return depth;
        }
        stack.extend(children.map(|c| (c, depth + 1)));
    }
    deepest
}

/// The number of reference tokens of a JSON pointer: how many containers hold what it names
/// (`""`, the whole document: 0; `/a/0`: 2). Escaped tokens (`~1`) hold no `/`.
fn pointer_len(pointer: &str) -> usize {
    pointer.matches('/').count()
}

/// Tracks an upper bound of the depth of the document a JSON patch builds, and refuses the
/// operations that would take it past [`MAX_PATCHED_DEPTH`]. Costs no more than the operations
/// themselves: `add`/`replace` walk their value and `copy` its source, which the operation
/// clones anyway; `move` uses the bound (what moves was inside the document).
pub(crate) struct DepthGuard {
    bound: usize,
}

impl DepthGuard {
    /// A guard for patching `doc`.
    pub(crate) fn new(doc: &Value) -> DepthGuard {
        DepthGuard {
            bound: nesting_depth(doc, MAX_PATCHED_DEPTH),
        }
    }

    /// Whether `op`, applied to `doc` (the document as the earlier operations left it), keeps
    /// it within [`MAX_PATCHED_DEPTH`]; the bound then includes what `op` inserts.
    pub(crate) fn admit(&mut self, doc: &Value, op: &PatchOperation) -> Result<(), PatchError> {
        let (at, value_depth) = match op {
            PatchOperation::Add(o) => (
                pointer_len(o.path.as_str()),
                nesting_depth(&o.value, MAX_PATCHED_DEPTH),
            ),
            PatchOperation::Replace(o) => (
                pointer_len(o.path.as_str()),
                nesting_depth(&o.value, MAX_PATCHED_DEPTH),
            ),
            PatchOperation::Copy(o) => (
                pointer_len(o.path.as_str()),
                doc.pointer(o.from.as_str())
                    .map_or(0, |v| nesting_depth(v, MAX_PATCHED_DEPTH)),
            ),
            PatchOperation::Move(o) => (
                pointer_len(o.path.as_str()),
                self.bound.saturating_sub(pointer_len(o.from.as_str())),
            ),
            PatchOperation::Remove(_) | PatchOperation::Test(_) => return Ok(()),
        };
        let depth = at.saturating_add(value_depth);
        if depth > MAX_PATCHED_DEPTH {
            return Err(PatchError::OperationFailed(format!(
                "the patched object would nest {depth} levels deep; at most {MAX_PATCHED_DEPTH} are allowed"
            )));
        }
        self.bound = self.bound.max(depth);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn nested(levels: usize) -> Value {
        let mut v = json!(1);
        for _ in 0..levels {
            v = json!({ "a": v });
        }
        v
    }

    #[test]
    fn depth_counts_containers() {
        assert_eq!(nesting_depth(&json!(1), 10), 0);
        assert_eq!(nesting_depth(&json!([]), 10), 1);
        assert_eq!(nesting_depth(&json!({"a": [1, {"b": {}}], "c": 2}), 10), 4);
        assert_eq!(nesting_depth(&nested(50), 100), 50);
        // Stops walking past the limit.
        assert_eq!(nesting_depth(&nested(50), 10), 11);
    }

    #[test]
    fn pointers_count_their_tokens() {
        assert_eq!(pointer_len(""), 0);
        assert_eq!(pointer_len("/"), 1);
        assert_eq!(pointer_len("/a/0"), 2);
        assert_eq!(pointer_len("/a~1b/-"), 2);
    }

    #[test]
    fn copies_into_themselves_stop_at_the_limit() {
        // A chain 100 deep copied into its own innermost object doubles the depth each time:
        // seven such copies (26 KB of patch) made a value deep enough to overflow the stack of
        // the thread that cloned or dropped it, which aborted the process.
        let doc = json!({ "x": nested(100) });
        let mut ops = Vec::new();
        let mut chain = 100;
        for _ in 0..7 {
            let path = format!("/x{}", "/a".repeat(chain + 1));
            ops.push(json!({"op": "copy", "from": "/x", "path": path}));
            chain = 2 * chain + 1;
        }
        let result = super::super::json_patch(&doc, &Value::Array(ops));
        match result {
            Err(PatchError::OperationFailed(m)) => assert!(m.contains("levels deep"), "{m}"),
            other => panic!("expected a refusal, got {:?}", other.map(|_| ())),
        }
    }

    #[test]
    fn adds_and_moves_at_deep_paths_stop_at_the_limit() {
        let deep = |levels: usize| format!("/x{}", "/a".repeat(levels));
        // The value of an `add` at depth 100 (itself 100 deep) is refused.
        let doc = json!({ "x": nested(100) });
        let add = json!([{"op": "add", "path": deep(100), "value": nested(100)}]);
        assert!(super::super::json_patch(&doc, &add).is_err());
        // Up to the limit is fine, and the result reads back.
        let fits = json!([{"op": "add", "path": deep(100), "value": nested(20)}]);
        let out = super::super::json_patch(&doc, &fits).map_err(|e| e.to_string());
        let text = out.as_ref().map(|v| v.to_string()).unwrap_or_default();
        assert!(serde_json::from_str::<Value>(&text).is_ok(), "{out:?}");
        // A subtree moved down into a deeper place.
        let doc = json!({ "x": nested(100), "y": {"z": nested(100)} });
        let mv = json!([{"op": "move", "from": "/y/z", "path": deep(100)}]);
        assert!(super::super::json_patch(&doc, &mv).is_err());
        // Shallow operations on a deep document still apply.
        let shallow = json!([{"op": "add", "path": "/y/w", "value": {"k": [1]}},
                             {"op": "move", "from": "/y/w", "path": "/w"},
                             {"op": "copy", "from": "/w", "path": "/v"}]);
        assert!(super::super::json_patch(&doc, &shallow).is_ok());
    }

    #[test]
    fn the_limit_is_what_the_json_decoder_reads_back() {
        let at_limit = serde_json::to_string(&nested(MAX_PATCHED_DEPTH)).unwrap_or_default();
        assert!(serde_json::from_str::<Value>(&at_limit).is_ok());
        let over = serde_json::to_string(&nested(MAX_PATCHED_DEPTH + 1)).unwrap_or_default();
        assert!(serde_json::from_str::<Value>(&over).is_err());
    }
}
