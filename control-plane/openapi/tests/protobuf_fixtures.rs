//! Request bodies captured from kubectl 1.35's typed `create` commands (sent as
//! `application/vnd.kubernetes.protobuf` to a loopback HTTP listener) decode to exactly the JSON
//! that the same command prints with `--dry-run=client -o json`.
//!
//! Fixtures and the commands that produced them:
//! - namespace-x.pb: `create namespace x`
//! - configmap-literal.pb: `create configmap app-config --from-literal=LOG_LEVEL=debug
//!   --from-literal=greeting='hello world'`
//! - configmap-binary.pb: `create configmap cb --from-literal=a=b --from-file=blob=<file>` where
//!   the file holds the bytes ff fe 00 62 69 6e (not UTF-8, so it lands in binaryData)
//! - secret-generic.pb: `create secret generic s --from-literal=user=admin
//!   --from-literal=pw='p@ss' --type=Opaque`
//! - deployment.pb: `create deployment d --image=nginx --port=80 --replicas=2`
//! - service-clusterip.pb: `create service clusterip web --tcp=80:8080`
//! - job.pb: `create job j --image=busybox -- echo hi`

use fabrik_openapi::{decode_k8s_protobuf, ProtobufDecodeError};
use serde_json::{json, Value};

fn decode(body: &[u8]) -> Value {
    match decode_k8s_protobuf(body) {
        Ok(v) => v,
        Err(e) => panic!("decode failed: {e}"),
    }
}

#[test]
fn namespace() {
    assert_eq!(
        decode(include_bytes!("fixtures/namespace-x.pb")),
        json!({"kind":"Namespace","apiVersion":"v1","metadata":{"name":"x"},"spec":{},"status":{}})
    );
}

#[test]
fn configmap_from_literals() {
    assert_eq!(
        decode(include_bytes!("fixtures/configmap-literal.pb")),
        json!({
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "app-config"},
            "data": {"LOG_LEVEL": "debug", "greeting": "hello world"},
        })
    );
}

#[test]
fn configmap_with_binary_data() {
    assert_eq!(
        decode(include_bytes!("fixtures/configmap-binary.pb")),
        json!({
            "kind": "ConfigMap",
            "apiVersion": "v1",
            "metadata": {"name": "cb"},
            "data": {"a": "b"},
            "binaryData": {"blob": "//4AYmlu"},
        })
    );
}

#[test]
fn secret_generic() {
    assert_eq!(
        decode(include_bytes!("fixtures/secret-generic.pb")),
        json!({
            "kind": "Secret",
            "apiVersion": "v1",
            "metadata": {"name": "s"},
            "data": {"pw": "cEBzcw==", "user": "YWRtaW4="},
            "type": "Opaque",
        })
    );
}

#[test]
fn deployment() {
    assert_eq!(
        decode(include_bytes!("fixtures/deployment.pb")),
        json!({
            "kind": "Deployment",
            "apiVersion": "apps/v1",
            "metadata": {"name": "d", "labels": {"app": "d"}},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [{
                        "name": "nginx",
                        "image": "nginx",
                        "ports": [{"containerPort": 80}],
                        "resources": {},
                    }]},
                },
                "strategy": {},
            },
            "status": {},
        })
    );
}

#[test]
fn service_clusterip() {
    assert_eq!(
        decode(include_bytes!("fixtures/service-clusterip.pb")),
        json!({
            "kind": "Service",
            "apiVersion": "v1",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "ports": [{"name": "80-8080", "protocol": "TCP", "port": 80, "targetPort": 8080}],
                "selector": {"app": "web"},
                "type": "ClusterIP",
            },
            "status": {"loadBalancer": {}},
        })
    );
}

#[test]
fn job() {
    assert_eq!(
        decode(include_bytes!("fixtures/job.pb")),
        json!({
            "kind": "Job",
            "apiVersion": "batch/v1",
            "metadata": {"name": "j"},
            "spec": {"template": {
                "metadata": {},
                "spec": {
                    "containers": [{
                        "name": "j",
                        "image": "busybox",
                        "command": ["echo", "hi"],
                        "resources": {},
                    }],
                    "restartPolicy": "Never",
                },
            }},
            "status": {},
        })
    );
}

#[test]
fn truncated_captures_fail_cleanly() {
    let body = include_bytes!("fixtures/deployment.pb");
    for cut in 0..body.len() {
        let result = decode_k8s_protobuf(&body[..cut]);
        if cut < 4 {
            assert_eq!(result, Err(ProtobufDecodeError::MissingMagic));
        }
    }
    assert!(matches!(
        decode_k8s_protobuf(&body[..body.len() - 1]),
        Err(ProtobufDecodeError::Truncated { .. })
    ));
}
