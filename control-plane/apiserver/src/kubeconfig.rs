//! Kubeconfig files for clients: server, CA and a client certificate, embedded.

use base64::Engine;
use serde_json::json;

use crate::pki::CertPair;

/// Renders a kubeconfig with one cluster, user and context named `name`.
pub fn render(name: &str, server: &str, ca_pem: &str, client: &CertPair) -> String {
    let b64 = |s: &str| base64::engine::general_purpose::STANDARD.encode(s);
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)}}],
        "users": [{"name": format!("{name}-admin"), "user": {
            "client-certificate-data": b64(&client.cert_pem),
            "client-key-data": b64(&client.key_pem),
        }}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": format!("{name}-admin")}}],
        "current-context": name,
        "preferences": {},
    });
    serde_yaml_ng::to_string(&doc).unwrap_or_default()
}
