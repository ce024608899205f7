//! Reading `x-kubernetes-group-version-kind` from a schema.

use serde_json::Value;

/// Name of the extension that ties a schema to its group/version/kinds.
pub(crate) const GVK_EXTENSION: &str = "x-kubernetes-group-version-kind";

/// The (group, version, kind) entries of a schema's extension; malformed entries are skipped.
pub(crate) fn gvks(schema: &Value) -> impl Iterator<Item = (&str, &str, &str)> {
    schema
        .get(GVK_EXTENSION)
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|g| {
            Some((
                g.get("group")?.as_str()?,
                g.get("version")?.as_str()?,
                g.get("kind")?.as_str()?,
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn reads_entries_and_skips_malformed() {
        let schema = json!({GVK_EXTENSION: [
            {"group": "", "kind": "Pod", "version": "v1"},
            {"group": "x", "kind": 3, "version": "v1"}
        ]});
        let got: Vec<_> = gvks(&schema).collect();
        assert_eq!(got, [("", "v1", "Pod")]);
        assert_eq!(gvks(&json!({})).count(), 0);
    }
}
