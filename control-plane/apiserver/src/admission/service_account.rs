//! ServiceAccount: a pod without a service account runs as `default`, and unless it (or its
//! service account) opts out with `automountServiceAccountToken: false`, it gets the projected
//! `kube-api-access-*` volume upstream gives every pod — a bound service-account token, the
//! cluster CA (`kube-root-ca.crt`) and the namespace — mounted in every container at
//! `/var/run/secrets/kubernetes.io/serviceaccount`.

use serde_json::{json, Value};

use super::{Admission, Operation, Request, Verdict};
use crate::error::ApiError;

/// Where the token volume is mounted.
pub const MOUNT_PATH: &str = "/var/run/secrets/kubernetes.io/serviceaccount";
/// Lifetime of the projected token (upstream's 3607 s).
const TOKEN_SECONDS: i64 = 3607;

/// The plugin.
pub struct ServiceAccount;

fn mounts_token(c: &Value) -> bool {
    c["volumeMounts"]
        .as_array()
        .is_some_and(|m| m.iter().any(|m| m["mountPath"] == MOUNT_PATH))
}

#[async_trait::async_trait]
impl Admission for ServiceAccount {
    fn name(&self) -> &'static str {
        "ServiceAccount"
    }

    async fn mutate(
        &self,
        req: &Request<'_>,
        pod: &mut Value,
        _old: Option<&Value>,
    ) -> Result<(), ApiError> {
        if req.op != Operation::Create || !req.is_core("pods") || req.subresource.is_some() {
            return Ok(());
        }
        let Some(spec) = pod.get_mut("spec").and_then(Value::as_object_mut) else {
            return Ok(());
        };
        let sa = spec
            .get("serviceAccountName")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .or_else(|| {
                spec.get("serviceAccount")
                    .and_then(Value::as_str)
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or("default")
            .to_string();
        spec.insert("serviceAccountName".into(), json!(sa));
        spec.insert("serviceAccount".into(), json!(sa));
        if spec.get("automountServiceAccountToken") == Some(&Value::Bool(false)) {
            return Ok(());
        }
        // The service account may opt out for all its pods.
        if let (Some(ns), Some(def)) = (
            req.namespace,
            req.objects.resource("", "v1", "serviceaccounts"),
        ) {
            if let Ok(obj) = req.objects.get(&def, Some(ns), &sa).await {
                if obj["automountServiceAccountToken"] == Value::Bool(false) {
                    return Ok(());
                }
            }
        }
        let containers = ["containers", "initContainers"];
        if containers.iter().any(|k| {
            spec.get(*k)
                .and_then(Value::as_array)
                .is_some_and(|cs| cs.iter().any(mounts_token))
        }) {
            return Ok(());
        }
        let name = format!("kube-api-access-{}", crate::object::random_suffix());
        let volume = json!({
            "name": name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": TOKEN_SECONDS, "path": "token"}},
                    {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"}}]}},
                ],
            },
        });
        match spec.get_mut("volumes").and_then(Value::as_array_mut) {
            Some(v) => v.push(volume),
            None => {
                spec.insert("volumes".into(), json!([volume]));
            }
        }
        for k in containers {
            for c in spec
                .get_mut(k)
                .and_then(Value::as_array_mut)
                .into_iter()
                .flatten()
            {
                let mount = json!({"name": name, "mountPath": MOUNT_PATH, "readOnly": true});
                match c.get_mut("volumeMounts").and_then(Value::as_array_mut) {
                    Some(m) => m.push(mount),
                    None => {
                        if let Some(o) = c.as_object_mut() {
                            o.insert("volumeMounts".into(), json!([mount]));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    async fn validate(
        &self,
        _req: &Request<'_>,
        _obj: &Value,
        _old: Option<&Value>,
    ) -> Result<Verdict, ApiError> {
        Ok(Verdict::ok())
    }
}
