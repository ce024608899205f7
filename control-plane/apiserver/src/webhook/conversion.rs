//! CRD conversion webhooks (`spec.conversion.strategy: Webhook`, ConversionReview
//! `apiextensions.k8s.io/v1`, or `v1beta1` when that is all the CRD lists): objects are stored
//! at the storage version and converted by the CRD's webhook whenever they are read or written
//! at another version (gets, lists, watches, writes). The answer is checked as upstream checks
//! it — one object per object sent, each at the desired version, the same kind, and metadata
//! unchanged but for labels and annotations — and a failed conversion fails the request with a
//! message naming the CRD; the stored object is never touched by a failed conversion.
//!
//! The webhook is called like an admission webhook ([`super::call::Caller`]: the cluster's
//! backends, a tenant's address rules); where its Service runs on simulated nodes, the
//! simulation converts as a webhook that changes nothing but `apiVersion`.

use std::time::Duration;

use serde_json::{json, Value};

use super::call::{Answer, Caller};
use crate::admission::Objects;
use crate::error::ApiError;
use crate::resources::ResourceDef;

/// How long one conversion may take (upstream's conversion webhook timeout).
pub const TIMEOUT: Duration = Duration::from_secs(30);

/// The ConversionReview versions the server sends, in preference order.
pub const REVIEW_VERSIONS: [&str; 2] = ["v1", "v1beta1"];

fn failed(def: &ResourceDef, why: impl std::fmt::Display) -> ApiError {
    ApiError::Internal(format!(
        "conversion webhook for {}, Kind={} failed: {why}",
        def.api_version(),
        def.kind
    ))
}

/// Converts `objects` to `desired` (`group/version`) with the CRD's `webhook`; objects already
/// at `desired` are not sent.
pub async fn convert(
    caller: &Caller,
    registry: &dyn Objects,
    def: &ResourceDef,
    webhook: &Value,
    mut objects: Vec<Value>,
    desired: &str,
) -> Result<Vec<Value>, ApiError> {
    let pending: Vec<usize> = (0..objects.len())
        .filter(|i| objects[*i]["apiVersion"].as_str() != Some(desired))
        .collect();
    if pending.is_empty() {
        return Ok(objects);
    }
    let version = REVIEW_VERSIONS
        .iter()
        .find(|v| {
            webhook["conversionReviewVersions"]
                .as_array()
                .is_some_and(|l| l.iter().any(|x| x == *v))
        })
        .copied()
        .unwrap_or("v1");
    let uid = uuid::Uuid::new_v4().to_string();
    let sent: Vec<Value> = pending.iter().map(|i| objects[*i].clone()).collect();
    let review = json!({
        "apiVersion": format!("apiextensions.k8s.io/{version}"),
        "kind": "ConversionReview",
        "request": {"uid": uid, "desiredAPIVersion": desired, "objects": sent},
    });
    let answer = caller
        .post(registry, &webhook["clientConfig"], &review, TIMEOUT)
        .await
        .map_err(|e| failed(def, e))?;
    let converted = match answer {
        // Simulated pods change nothing but the version.
        Answer::Simulated => sent
            .into_iter()
            .map(|mut o| {
                o["apiVersion"] = json!(desired);
                o
            })
            .collect(),
        Answer::Json(v) => {
            read_answer(&v, version, &uid, &sent, desired).map_err(|e| failed(def, e))?
        }
    };
    for (i, obj) in pending.into_iter().zip(converted) {
        objects[i] = obj;
    }
    Ok(objects)
}

/// Checks a ConversionReview answer against what was sent.
fn read_answer(
    v: &Value,
    version: &str,
    uid: &str,
    sent: &[Value],
    desired: &str,
) -> Result<Vec<Value>, String> {
    let r = &v["response"];
    if !r.is_object() {
        return Err("the answer has no response".into());
    }
    if version == "v1" && r["uid"].as_str() != Some(uid) {
        return Err(format!(
            "expected response uid {uid:?}, got {:?}",
            r["uid"].as_str().unwrap_or("")
        ));
    }
    if r["result"]["status"].as_str() != Some("Success") {
        let message = r["result"]["message"].as_str().unwrap_or("");
        return Err(if message.is_empty() {
            "the webhook did not succeed".to_string()
        } else {
            message.to_string()
        });
    }
    let out = r["convertedObjects"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    if out.len() != sent.len() {
        return Err(format!(
            "expected {} converted objects, got {}",
            sent.len(),
            out.len()
        ));
    }
    for (before, after) in sent.iter().zip(&out) {
        if after["apiVersion"].as_str() != Some(desired) {
            return Err(format!(
                "a converted object has apiVersion {:?}, expected {desired:?}",
                after["apiVersion"].as_str().unwrap_or("")
            ));
        }
        if after["kind"] != before["kind"] {
            return Err("a converted object changed its kind".into());
        }
        let (mut m0, mut m1) = (before["metadata"].clone(), after["metadata"].clone());
        for m in [&mut m0, &mut m1] {
            if let Some(o) = m.as_object_mut() {
                o.remove("labels");
                o.remove("annotations");
            }
        }
        if m0 != m1 {
            return Err(
                "a converted object changed metadata other than labels and annotations".into(),
            );
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sent() -> Vec<Value> {
        vec![
            json!({"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "a", "uid": "1"},
                    "spec": {"size": 1}}),
        ]
    }

    fn answer(objects: Value) -> Value {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
               "response": {"uid": "u", "result": {"status": "Success"},
                            "convertedObjects": objects}})
    }

    #[test]
    fn answers_are_checked_as_upstream() {
        let good = json!([{"apiVersion": "x.io/v2", "kind": "W",
                           "metadata": {"name": "a", "uid": "1", "labels": {"l": "v"}},
                           "spec": {"count": 1}}]);
        let out = read_answer(&answer(good), "v1", "u", &sent(), "x.io/v2").expect("converted");
        assert_eq!(out[0]["spec"]["count"], 1);
        for bad in [
            json!([]),
            json!([{"apiVersion": "x.io/v1", "kind": "W", "metadata": {"name": "a", "uid": "1"}}]),
            json!([{"apiVersion": "x.io/v2", "kind": "V", "metadata": {"name": "a", "uid": "1"}}]),
            json!([{"apiVersion": "x.io/v2", "kind": "W", "metadata": {"name": "b", "uid": "1"}}]),
        ] {
            assert!(
                read_answer(&answer(bad.clone()), "v1", "u", &sent(), "x.io/v2").is_err(),
                "{bad}"
            );
        }
        let mut refused = answer(json!([]));
        refused["response"]["result"] = json!({"status": "Failure", "message": "cannot"});
        assert_eq!(
            read_answer(&refused, "v1", "u", &sent(), "x.io/v2"),
            Err("cannot".to_string())
        );
        assert!(read_answer(&answer(json!([])), "v1", "other", &sent(), "x.io/v2").is_err());
    }
}
