//! Raw HTTP through a kube-rs client, for tests that must see exactly what the server answers
//! (codes, `Warning` headers, `Status` bodies) to hostile or malformed requests.

use anyhow::{Context, Result};
use http::{header, Request};
use kube::Client;
use serde_json::Value;

/// `Content-Type` of JSON bodies.
pub const JSON: &str = "application/json";
/// `Content-Type` of JSON merge patches.
pub const MERGE: &str = "application/merge-patch+json";
/// `Content-Type` of JSON patches.
pub const JSON_PATCH: &str = "application/json-patch+json";
/// `Content-Type` of server-side apply.
pub const APPLY: &str = "application/apply-patch+yaml";

/// One answer: HTTP code, `Warning` headers, body as text and (if it is JSON) as a value.
pub struct Answer {
    /// The HTTP status code.
    pub code: u16,
    /// The `Warning` headers.
    pub warnings: Vec<String>,
    /// The body as text.
    pub text: String,
    /// The body as JSON (`Null` when it is not JSON).
    pub body: Value,
}

/// Sends `method path` with an optional `Content-Type` and a body.
pub async fn send(
    client: &Client,
    method: &str,
    path: &str,
    content_type: Option<&str>,
    body: impl Into<Vec<u8>>,
) -> Result<Answer> {
    let mut builder = Request::builder().method(method).uri(path);
    if let Some(ct) = content_type {
        builder = builder.header(header::CONTENT_TYPE, ct);
    }
    let req = builder.body(body.into()).context("building the request")?;
    let resp = client
        .send(req.map(kube::client::Body::from))
        .await
        .with_context(|| format!("{method} {path}"))?;
    let code = resp.status().as_u16();
    let warnings = resp
        .headers()
        .get_all(header::WARNING)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect();
    let bytes = resp.into_body().collect_bytes().await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    Ok(Answer {
        code,
        warnings,
        text,
        body,
    })
}

/// `GET path`.
pub async fn get(client: &Client, path: &str) -> Result<Answer> {
    send(client, "GET", path, None, Vec::new()).await
}

/// Asserts `a` is a failure `Status` with `code` and `reason` in both the HTTP status line and
/// the body, with a message; returns the Status for further checks.
#[track_caller]
pub fn failure<'a>(a: &'a Answer, code: u16, reason: &str, what: &str) -> &'a Value {
    let head: String = a.text.chars().take(300).collect();
    assert_eq!(a.code, code, "{what}: HTTP code; body: {head}");
    let s = &a.body;
    assert_eq!(s["kind"], "Status", "{what}: not a Status: {head}");
    assert_eq!(s["apiVersion"], "v1", "{what}: {head}");
    assert_eq!(s["status"], "Failure", "{what}: {head}");
    assert_eq!(s["reason"], reason, "{what}: reason: {head}");
    assert_eq!(s["code"], code, "{what}: code in body: {head}");
    assert!(
        s["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{what}: a Status carries a message: {head}"
    );
    s
}
