//! Element order of merged lists in strategic merge patch.
//!
//! Upstream (`normalizeElementOrder`) orders a merged list this way: elements named in the
//! patch (or in `$setElementOrder`) follow that order; elements only on the server keep their
//! live order; the two runs are then interleaved, a server-only element going before a patch
//! element only when both are in the live list and it comes first there. Elements are
//! identified by their merge-key value (lists of objects) or by value (lists of primitives).
//! These functions only reorder: they never drop or invent elements.

use serde_json::Value;

/// JSON equality where numbers compare by value (`80` equals `80.0`), as Go's decoded values do.
pub(super) fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || x.as_f64() == y.as_f64(),
        _ => a == b,
    }
}

/// Whether an element carries a `$patch` directive.
pub(super) fn has_directive(item: &Value) -> bool {
    item.as_object().is_some_and(|m| m.contains_key("$patch"))
}

/// Whether two elements are the same element: same merge-key value, or equal primitives.
pub(super) fn same_element(a: &Value, b: &Value, merge_key: Option<&str>) -> bool {
    match merge_key {
        Some(key) => match (a.get(key), b.get(key)) {
            (Some(x), Some(y)) => values_equal(x, y),
            _ => false,
        },
        None => values_equal(a, b),
    }
}

/// Where `item` is in `list` (ignoring elements that carry directives).
fn position(list: &[Value], item: &Value, merge_key: Option<&str>) -> Option<usize> {
    list.iter()
        .position(|e| !has_directive(e) && same_element(e, item, merge_key))
}

/// Splits `merged` into the elements present in `by` and the others, keeping their order.
pub(super) fn partition(
    merged: Vec<Value>,
    by: &[Value],
    merge_key: Option<&str>,
) -> (Vec<Value>, Vec<Value>) {
    merged
        .into_iter()
        .partition(|item| position(by, item, merge_key).is_some())
}

/// Stable sort by position in `order`; elements not in `order` go first.
fn sort_by_order(items: Vec<Value>, order: &[Value], merge_key: Option<&str>) -> Vec<Value> {
    let mut keyed: Vec<(Option<usize>, Value)> = items
        .into_iter()
        .map(|item| (position(order, &item, merge_key), item))
        .collect();
    keyed.sort_by_key(|(pos, _)| *pos);
    keyed.into_iter().map(|(_, item)| item).collect()
}

/// Orders `patch_items` by `patch_order` and `server_only` by `server_order`, then interleaves
/// them by their positions in `server_order`.
pub(super) fn normalize_element_order(
    patch_items: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    server_order: &[Value],
    merge_key: Option<&str>,
) -> Vec<Value> {
    let right = sort_by_order(patch_items, patch_order, merge_key);
    let left = sort_by_order(server_only, server_order, merge_key);
    let mut out = Vec::with_capacity(left.len() + right.len());
    let mut left = left.into_iter().peekable();
    let mut right = right.into_iter().peekable();
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!(
                (position(server_order, l, merge_key), position(server_order, r, merge_key)),
                (Some(li), Some(ri)) if li < ri
            ),
        };
        let next = if take_left { left.next() } else { right.next() };
        if let Some(item) = next {
            out.push(item);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn names(list: &[Value]) -> Vec<&str> {
        list.iter()
            .map(|v| v["name"].as_str().unwrap_or("?"))
            .collect()
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(values_equal(&json!(80), &json!(80.0)));
        assert!(!values_equal(&json!(80), &json!("80")));
    }

    #[test]
    fn interleaves_patch_and_server_items() {
        let server = vec![
            json!({"name": "a"}),
            json!({"name": "b"}),
            json!({"name": "c"}),
        ];
        // Patch names c then a; b is server-only and comes before c in the live list.
        let patch_order = vec![json!({"name": "c"}), json!({"name": "a"})];
        let merged = server.clone();
        let (p, s) = partition(merged, &patch_order, Some("name"));
        assert_eq!(names(&p), ["a", "c"]);
        assert_eq!(names(&s), ["b"]);
        let out = normalize_element_order(p, s, &patch_order, &server, Some("name"));
        assert_eq!(names(&out), ["b", "c", "a"]);
    }

    #[test]
    fn new_items_go_before_later_server_items() {
        let server = vec![json!("x"), json!("y")];
        let patch = vec![json!("z")];
        let merged = vec![json!("x"), json!("y"), json!("z")];
        let (p, s) = partition(merged, &patch, None);
        let out = normalize_element_order(p, s, &patch, &server, None);
        assert_eq!(out, vec![json!("z"), json!("x"), json!("y")]);
    }
}
