//! `meta.k8s.io/v1 Table` and `PartialObjectMetadata` renderings of objects and lists.

use serde_json::{json, Value};

use crate::resources::ResourceDef;

/// `includeObject`: what each table row carries besides its cells.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum IncludeObject {
    /// Nothing.
    None,
    /// `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

impl IncludeObject {
    /// Parses the query parameter.
    pub fn parse(s: &str) -> Option<IncludeObject> {
        match s {
            "" | "Metadata" => Some(IncludeObject::Metadata),
            "None" => Some(IncludeObject::None),
            "Object" => Some(IncludeObject::Object),
            _ => None,
        }
    }
}

/// An object's metadata as `PartialObjectMetadata`.
pub fn partial_metadata(obj: &Value) -> Value {
    json!({
        "kind": "PartialObjectMetadata",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": obj["metadata"],
    })
}

/// A list of `PartialObjectMetadata`.
pub fn partial_metadata_list(items: &[Value], list_meta: Value) -> Value {
    json!({
        "kind": "PartialObjectMetadataList",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "items": items.iter().map(partial_metadata).collect::<Vec<_>>(),
    })
}

/// One Table row for `obj`.
pub fn row(def: &ResourceDef, obj: &Value, include: IncludeObject) -> Value {
    let mut row = json!({"cells": def.strategy.cells(obj)});
    match include {
        IncludeObject::None => {}
        IncludeObject::Metadata => row["object"] = partial_metadata(obj),
        IncludeObject::Object => row["object"] = obj.clone(),
    }
    row
}

/// A Table from rows made by [`row`].
pub fn from_rows(def: &ResourceDef, rows: Vec<Value>, list_meta: Value) -> Value {
    let columns: Vec<Value> = def.strategy.columns().iter().map(|c| c.to_json()).collect();
    json!({
        "kind": "Table",
        "apiVersion": "meta.k8s.io/v1",
        "metadata": list_meta,
        "columnDefinitions": columns,
        "rows": rows,
    })
}

/// A Table of `items` with the kind's columns.
pub fn table(
    def: &ResourceDef,
    items: &[Value],
    include: IncludeObject,
    list_meta: Value,
) -> Value {
    from_rows(
        def,
        items.iter().map(|o| row(def, o, include)).collect(),
        list_meta,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::Catalog;

    #[test]
    fn every_builtin_kind_has_a_cell_per_column() {
        let catalog = Catalog::builtin();
        for def in catalog.all() {
            let obj =
                json!({"metadata": {"name": "x", "creationTimestamp": "2026-01-01T00:00:00Z"}});
            let t = table(&def, &[obj], IncludeObject::Metadata, json!({}));
            let cols = t["columnDefinitions"].as_array().map_or(0, Vec::len);
            let cells = t["rows"][0]["cells"].as_array().map_or(0, Vec::len);
            assert_eq!(cols, cells, "{}", def.plural);
            assert_eq!(t["rows"][0]["object"]["kind"], "PartialObjectMetadata");
        }
    }
}
