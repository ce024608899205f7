//! Dynamic resource allocation (`resource.k8s.io/v1`): DeviceClasses, ResourceClaims and
//! ResourceClaimTemplates, with upstream's validation of what a scheduler later evaluates —
//! requests named and counted within bounds, one of `exactly` / `firstAvailable`, and CEL
//! device selectors that compile, are at most 10 KiB and stay under upstream's cost limit
//! (so that no claim can make a scheduler spin) — a claim's spec immutable, and the
//! `kubectl get resourceclaims` STATE column.

use fabrik_machinery::validation::FieldError;
use serde_json::{json, Value};

use super::{age, forbidden, invalid, not_supported, required, Column, Strategy};
use crate::cel_limits;

/// Which kind of `resource.k8s.io`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DraKind {
    /// DeviceClass.
    DeviceClass,
    /// ResourceClaim.
    Claim,
    /// ResourceClaimTemplate.
    ClaimTemplate,
}

pub(super) struct DraStrategy(pub DraKind);

/// The longest selector expression (upstream's `CELSelectorExpressionMaxLength`).
pub const MAX_EXPRESSION_BYTES: usize = 10 * 1024;
/// The highest estimated cost of a selector (upstream's `CELSelectorExpressionMaxCost`).
pub const MAX_EXPRESSION_COST: f64 = 1_000_000.0;
/// Requests per claim, selectors per request, devices per request (upstream's limits).
const MAX_REQUESTS: usize = 32;
const MAX_SELECTORS: usize = 32;
const MAX_COUNT: i64 = 32;
/// Subrequests per `firstAvailable` (upstream's `FirstAvailableDeviceRequestMaxSize`).
const MAX_SUBREQUESTS: usize = 8;

fn selectors(list: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let Some(items) = list.as_array() else {
        return;
    };
    if items.len() > MAX_SELECTORS {
        errs.push(invalid(
            path,
            "",
            format!("must have at most {MAX_SELECTORS} items"),
        ));
    }
    for (i, s) in items.iter().enumerate() {
        let field = format!("{path}[{i}].cel.expression");
        let Some(expr) = s["cel"]["expression"].as_str() else {
            errs.push(required(format!("{path}[{i}].cel")));
            continue;
        };
        if expr.len() > MAX_EXPRESSION_BYTES {
            errs.push(invalid(
                &field,
                "<value omitted>",
                format!("may not be longer than {MAX_EXPRESSION_BYTES} bytes"),
            ));
            continue;
        }
        match cel_limits::expression_cost(expr) {
            None => errs.push(invalid(&field, expr, "compilation failed")),
            Some(cost) if cost > MAX_EXPRESSION_COST => errs.push(forbidden(
                &field,
                cel_limits::over_budget(cost, MAX_EXPRESSION_COST),
            )),
            Some(_) => {}
        }
    }
}

/// One request or subrequest's class, mode, count and selectors.
fn exact(r: &Value, path: &str, errs: &mut Vec<FieldError>) {
    if r["deviceClassName"].as_str().is_none_or(str::is_empty) {
        errs.push(required(format!("{path}.deviceClassName")));
    }
    let mode = r["allocationMode"].as_str().unwrap_or("ExactCount");
    match mode {
        "ExactCount" => {
            if let Some(n) = r["count"].as_i64() {
                if !(1..=MAX_COUNT).contains(&n) {
                    errs.push(invalid(
                        format!("{path}.count"),
                        &n.to_string(),
                        format!("must be between 1 and {MAX_COUNT}"),
                    ));
                }
            }
        }
        "All" => {
            if !r["count"].is_null() {
                errs.push(invalid(
                    format!("{path}.count"),
                    &r["count"].to_string(),
                    "must not be specified when allocationMode is All",
                ));
            }
        }
        other => errs.push(not_supported(
            format!("{path}.allocationMode"),
            other,
            &["All", "ExactCount"],
        )),
    }
    selectors(&r["selectors"], &format!("{path}.selectors"), errs);
}

/// `spec.devices` of a claim (or a template's claim spec) at `path`.
fn devices(devices: &Value, path: &str, errs: &mut Vec<FieldError>) {
    let requests = devices["requests"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default();
    if requests.len() > MAX_REQUESTS {
        errs.push(invalid(
            format!("{path}.requests"),
            "",
            format!("must have at most {MAX_REQUESTS} items"),
        ));
    }
    let mut names = std::collections::BTreeSet::new();
    for (i, r) in requests.iter().enumerate() {
        let rp = format!("{path}.requests[{i}]");
        match r["name"].as_str() {
            Some(n) if !n.is_empty() => {
                if !fabrik_machinery::validation::dns1123_label(n).is_empty() {
                    errs.push(invalid(format!("{rp}.name"), n, "must be a DNS label"));
                }
                if !names.insert(n.to_string()) {
                    errs.push(invalid(format!("{rp}.name"), n, "duplicate request name"));
                }
            }
            _ => errs.push(required(format!("{rp}.name"))),
        }
        match (r["exactly"].is_object(), r["firstAvailable"].as_array()) {
            (true, None) => exact(&r["exactly"], &format!("{rp}.exactly"), errs),
            (false, Some(subs)) if !subs.is_empty() => {
                if subs.len() > MAX_SUBREQUESTS {
                    errs.push(invalid(
                        format!("{rp}.firstAvailable"),
                        "",
                        format!("must have at most {MAX_SUBREQUESTS} items"),
                    ));
                }
                for (j, s) in subs.iter().enumerate() {
                    let sp = format!("{rp}.firstAvailable[{j}]");
                    if s["name"].as_str().is_none_or(str::is_empty) {
                        errs.push(required(format!("{sp}.name")));
                    }
                    exact(s, &sp, errs);
                }
            }
            (true, Some(_)) => errs.push(invalid(
                rp,
                "",
                "exactly one of `exactly` or `firstAvailable` is required, not both",
            )),
            _ => errs.push(required(format!("{rp}.exactly"))),
        }
    }
}

impl Strategy for DraStrategy {
    fn validate(&self, obj: &Value) -> Vec<FieldError> {
        let mut errs = Vec::new();
        match self.0 {
            DraKind::DeviceClass => {
                selectors(&obj["spec"]["selectors"], "spec.selectors", &mut errs)
            }
            DraKind::Claim => devices(&obj["spec"]["devices"], "spec.devices", &mut errs),
            DraKind::ClaimTemplate => devices(
                &obj["spec"]["spec"]["devices"],
                "spec.spec.devices",
                &mut errs,
            ),
        }
        errs
    }

    fn validate_update(&self, new: &Value, old: &Value) -> Vec<FieldError> {
        if self.0 != DraKind::DeviceClass && new["spec"] != old["spec"] {
            return vec![invalid("spec", "", "field is immutable")];
        }
        Vec::new()
    }

    fn columns(&self) -> Vec<Column> {
        if self.0 != DraKind::Claim {
            return vec![Column::NAME, Column::AGE];
        }
        vec![
            Column::NAME,
            Column::new(
                "State",
                "string",
                "Whether the claim is allocated and reserved.",
            ),
            Column::AGE,
        ]
    }

    fn cells(&self, obj: &Value) -> Vec<Value> {
        let name = json!(super::name_of(obj));
        if self.0 != DraKind::Claim {
            return vec![name, json!(age(obj))];
        }
        vec![name, json!(claim_state(obj)), json!(age(obj))]
    }
}

/// kubectl's STATE of a claim: `pending`, or `allocated` with `,reserved` and `,deleted`.
pub fn claim_state(obj: &Value) -> String {
    let status = &obj["status"];
    let mut state = if status["allocation"].is_object() {
        "allocated".to_string()
    } else {
        "pending".to_string()
    };
    if status["reservedFor"]
        .as_array()
        .is_some_and(|r| !r.is_empty())
    {
        state.push_str(",reserved");
    }
    if !obj["metadata"]["deletionTimestamp"].is_null() {
        state.push_str(",deleted");
    }
    state
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(errs: &[FieldError]) -> Vec<String> {
        errs.iter().map(|e| e.field.clone()).collect()
    }

    #[test]
    fn claims_are_checked_as_upstream() {
        let s = DraStrategy(DraKind::Claim);
        let ok = json!({"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": 2,
                "selectors": [{"cel": {"expression": "device.driver == 'gpu.nvidia.com'"}}]}},
            {"name": "any", "firstAvailable": [
                {"name": "a", "deviceClassName": "x", "allocationMode": "All"}]}]}}});
        assert!(s.validate(&ok).is_empty(), "{:?}", s.validate(&ok));
        let bad = json!({"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "", "count": 0,
                "selectors": [{"cel": {"expression": "device.driver =="}}]}},
            {"name": "gpu", "exactly": {"deviceClassName": "x", "allocationMode": "Some"}},
            {"name": "both", "exactly": {"deviceClassName": "x"},
                "firstAvailable": [{"name": "a", "deviceClassName": "x"}]}]}}});
        let f = fields(&s.validate(&bad));
        for want in [
            "spec.devices.requests[0].exactly.deviceClassName",
            "spec.devices.requests[0].exactly.count",
            "spec.devices.requests[0].exactly.selectors[0].cel.expression",
            "spec.devices.requests[1].name",
            "spec.devices.requests[1].exactly.allocationMode",
            "spec.devices.requests[2]",
        ] {
            assert!(f.contains(&want.to_string()), "{want} not in {f:?}");
        }
    }

    #[test]
    fn expensive_selectors_are_refused() {
        let s = DraStrategy(DraKind::DeviceClass);
        let costly = "[1,2,3,4,5,6,7,8,9,10].all(a, [1,2,3,4,5,6,7,8,9,10].all(b, \
            [1,2,3,4,5,6,7,8,9,10].all(c, [1,2,3,4,5,6,7,8,9,10].all(d, \
            [1,2,3,4,5,6,7,8,9,10].all(e, [1,2,3,4,5,6,7,8,9,10].all(f, a+b+c+d+e+f > 0))))))";
        let class = json!({"spec": {"selectors": [{"cel": {"expression": costly}}]}});
        let errs = s.validate(&class);
        assert_eq!(fields(&errs), vec!["spec.selectors[0].cel.expression"]);
        let long = json!({"spec": {"selectors": [{"cel": {"expression": "x".repeat(20_000)}}]}});
        assert_eq!(s.validate(&long).len(), 1);
    }

    #[test]
    fn claim_specs_are_immutable_and_states_shown() {
        let s = DraStrategy(DraKind::Claim);
        let a = json!({"spec": {"devices": {"requests": []}}});
        let b = json!({"spec": {"devices": {"requests": [{"name": "x"}]}}});
        assert_eq!(s.validate_update(&b, &a).len(), 1);
        assert!(s.validate_update(&a, &a).is_empty());
        assert_eq!(claim_state(&a), "pending");
        let reserved = json!({"status": {"allocation": {}, "reservedFor": [{"name": "p"}]}});
        assert_eq!(claim_state(&reserved), "allocated,reserved");
    }
}
