//! Lists: selectors, paging and the encoding of a whole list (JSON, YAML, Table, metadata).

use super::*;

impl ApiServer {
    /// Lists, encoding each object as it is read: a large list is never held in memory as
    /// objects, only as its encoded bytes (JSON) or rows (Table).
    pub(super) async fn list(
        &self,
        def: &ResourceDef,
        ns: Option<&str>,
        params: &ListParams,
        output: Output,
        query: &Query,
    ) -> Result<Reply> {
        let list_meta = |m: &registry::ListMeta| {
            let mut meta = json!({"resourceVersion": m.resource_version.to_string()});
            if let Some(c) = &m.continue_token {
                meta["continue"] = json!(c);
            }
            if let Some(r) = m.remaining {
                meta["remainingItemCount"] = json!(r);
            }
            meta
        };
        match output {
            Output::Json => {
                let mut items: Vec<u8> = Vec::new();
                let meta = self
                    .registry
                    .list_each(def, ns, params, &mut |obj| {
                        if !items.is_empty() {
                            items.push(b',');
                        }
                        serde_json::to_writer(&mut items, &obj).map_err(|e| {
                            ApiError::Internal(format!("failed to encode an object: {e}"))
                        })
                    })
                    .await?;
                let head = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": list_meta(&meta),
                });
                let mut body = serde_json::to_vec(&head).unwrap_or_default();
                // Replace the closing brace with the items array.
                body.pop();
                body.extend_from_slice(b",\"items\":[");
                body.extend_from_slice(&items);
                body.extend_from_slice(b"]}");
                Ok(Reply {
                    status: StatusCode::OK,
                    body: full(body),
                    content_type: "application/json",
                    warnings: Vec::new(),
                    upgrade: None,
                })
            }
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                let mut rows = Vec::new();
                let meta = self
                    .registry
                    .list_each(def, ns, params, &mut |obj| {
                        rows.push(table::row(def, &obj, include));
                        Ok(())
                    })
                    .await?;
                Ok(Reply::json(
                    StatusCode::OK,
                    &table::from_rows(def, rows, list_meta(&meta)),
                ))
            }
            _ => {
                let page = self.registry.list(def, ns, params).await?;
                Ok(self.render_list(def, page, output, query))
            }
        }
    }

    pub(super) fn render_list(
        &self,
        def: &ResourceDef,
        page: registry::ListPage,
        output: Output,
        query: &Query,
    ) -> Reply {
        let mut meta = json!({"resourceVersion": page.resource_version.to_string()});
        if let Some(c) = &page.continue_token {
            meta["continue"] = json!(c);
        }
        if let Some(r) = page.remaining {
            meta["remainingItemCount"] = json!(r);
        }
        match output {
            Output::Table => {
                let include = IncludeObject::parse(query.get("includeObject").unwrap_or(""))
                    .unwrap_or_default();
                Reply::json(
                    StatusCode::OK,
                    &table::table(def, &page.items, include, meta),
                )
            }
            Output::Metadata => Reply::json(
                StatusCode::OK,
                &table::partial_metadata_list(&page.items, meta),
            ),
            other => {
                let mut list = json!({
                    "kind": format!("{}List", def.kind),
                    "apiVersion": def.api_version(),
                    "metadata": meta,
                });
                list["items"] = Value::Array(page.items);
                Reply::encoded(StatusCode::OK, &list, other)
            }
        }
    }
}
