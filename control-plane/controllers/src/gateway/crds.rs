//! The Gateway API CRDs this implementation installs when a cluster has none: the standard
//! channel's GatewayClass, Gateway, HTTPRoute, GRPCRoute (`gateway.networking.k8s.io/v1`) and
//! ReferenceGrant (`v1beta1`), labelled as bundle v1.2.0.
//!
//! Written for Fabrik (not upstream's files): structural schemas that type what routers and the
//! syncer read (parents, hostnames, matches, filters, backends, listeners, grants) with
//! upstream's names, defaults, enums and limits, and no CEL rules. Fields of the experimental
//! channel are pruned, as under upstream's standard CRDs.

use serde_json::Value;

/// The bundled CRDs' files, in the order they are installed.
const FILES: [(&str, &str); 5] = [
    ("gatewayclasses", include_str!("crds/gatewayclasses.json")),
    ("gateways", include_str!("crds/gateways.json")),
    ("httproutes", include_str!("crds/httproutes.json")),
    ("grpcroutes", include_str!("crds/grpcroutes.json")),
    ("referencegrants", include_str!("crds/referencegrants.json")),
];

/// The CRDs as `apiextensions.k8s.io/v1` objects. A file that does not parse is a bug of this
/// crate (the tests parse each); it is left out.
pub fn crds() -> Vec<Value> {
    FILES
        .iter()
        .filter_map(|(_, text)| serde_json::from_str(text).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;

    /// The path of every schema node that is neither typed nor preserves unknown fields.
    fn untyped(schema: &Value, at: &str, out: &mut Vec<String>) {
        let preserves = schema["x-kubernetes-preserve-unknown-fields"] == true
            || schema["x-kubernetes-int-or-string"] == true;
        if schema["type"].as_str().is_none_or(str::is_empty) && !preserves {
            out.push(at.to_string());
        }
        for (k, s) in schema["properties"].as_object().into_iter().flatten() {
            untyped(s, &format!("{at}.{k}"), out);
        }
        if let Some(items) = schema.get("items") {
            untyped(items, &format!("{at}[]"), out);
        }
        if let Some(extra) = schema.get("additionalProperties").filter(|a| a.is_object()) {
            untyped(extra, &format!("{at}{{}}"), out);
        }
        for key in ["allOf", "anyOf", "oneOf", "not", "$ref"] {
            assert!(schema.get(key).is_none(), "{at}: {key} is not used");
        }
    }

    #[test]
    fn every_crd_parses_is_structural_and_has_its_subresources() {
        let crds = crds();
        assert_eq!(crds.len(), FILES.len(), "every file parses");
        for (crd, (plural, _)) in crds.iter().zip(FILES) {
            let name = format!("{plural}.gateway.networking.k8s.io");
            assert_eq!(crd["metadata"]["name"], name.as_str());
            let typed: CustomResourceDefinition =
                serde_json::from_value(crd.clone()).expect("a CustomResourceDefinition");
            assert_eq!(typed.spec.names.plural, plural);
            assert_eq!(
                typed.spec.names.categories,
                Some(vec!["gateway-api".to_string()])
            );
            let annotations = &crd["metadata"]["annotations"];
            assert_eq!(
                annotations["gateway.networking.k8s.io/bundle-version"],
                "v1.2.0"
            );
            assert_eq!(annotations["gateway.networking.k8s.io/channel"], "standard");
            // A *.k8s.io group needs the approval annotation, or kube-apiserver refuses it.
            assert!(annotations["api-approved.kubernetes.io"]
                .as_str()
                .is_some_and(|u| u.starts_with("https://")));
            let versions = crd["spec"]["versions"].as_array().expect("versions");
            assert_eq!(
                versions.iter().filter(|v| v["storage"] == true).count(),
                1,
                "{name}: one storage version"
            );
            for v in versions {
                let want_version = if plural == "referencegrants" {
                    "v1beta1"
                } else {
                    "v1"
                };
                assert_eq!(v["name"], want_version, "{name}");
                let has_status = v["subresources"]["status"].is_object();
                assert_eq!(has_status, plural != "referencegrants", "{name}: status");
                let schema = &v["schema"]["openAPIV3Schema"];
                assert_eq!(schema["type"], "object");
                let mut bad = Vec::new();
                untyped(schema, "", &mut bad);
                assert!(bad.is_empty(), "{name}: untyped nodes {bad:?}");
                for c in v["additionalPrinterColumns"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    assert!(c["jsonPath"].as_str().is_some_and(|p| p.starts_with('.')));
                }
            }
        }
    }

    #[test]
    fn short_names_and_scopes_are_upstreams() {
        let crds = crds();
        let by_plural = |p: &str| {
            crds.iter()
                .find(|c| c["spec"]["names"]["plural"] == p)
                .expect("crd")
        };
        assert_eq!(by_plural("gatewayclasses")["spec"]["scope"], "Cluster");
        assert_eq!(
            by_plural("gatewayclasses")["spec"]["names"]["shortNames"],
            serde_json::json!(["gc"])
        );
        assert_eq!(by_plural("gateways")["spec"]["scope"], "Namespaced");
        assert_eq!(
            by_plural("gateways")["spec"]["names"]["shortNames"],
            serde_json::json!(["gtw"])
        );
        let route = &by_plural("httproutes")["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let backend = &route["properties"]["spec"]["properties"]["rules"]["items"]["properties"]
            ["backendRefs"]["items"];
        assert_eq!(backend["required"], serde_json::json!(["name"]));
        assert_eq!(backend["properties"]["weight"]["default"], 1);
        assert_eq!(backend["properties"]["port"]["maximum"], 65535);
        assert_eq!(
            route["properties"]["spec"]["properties"]["hostnames"]["maxItems"],
            16
        );
    }
}
