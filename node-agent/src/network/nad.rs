//! The Multus `NetworkAttachmentDefinition` of a tenant's segment: a bridge CNI config on the
//! node's `br-<vni>` (made by [`super::vxlan`]), with cluster-wide IPAM over the tenant's
//! CIDR. A pure function; the tenant manager creates the object in the tenant's host
//! namespace `fabrik-<tenant>` only — a NetworkAttachmentDefinition is namespaced and pods can
//! reference only those of their own namespace, so no other tenant can attach to the segment.
//!
//! IPAM is `whereabouts` (cluster-wide: a segment spans nodes, so a per-node allocator such
//! as `host-local` would hand out the same address on two nodes). The first host address is
//! excluded (kept for a gateway on the segment); the MTU leaves room for the 50-byte VXLAN
//! header on a 1500-byte underlay.

use serde_json::{json, Value};

use super::segment::{check_tenant, host_namespace, InputError, Ipv4Cidr, Vni};

/// The name of every tenant's attachment (pods ask for it with the annotation
/// `k8s.v1.cni.cncf.io/networks: fabrik-tenant-net`).
pub const NAME: &str = "fabrik-tenant-net";

/// The MTU of a tenant segment: 1500 minus the VXLAN encapsulation.
pub const MTU: u32 = 1450;

/// The annotation that records the segment's VNI on the object.
pub const ANNOTATION_VNI: &str = "fabrik.dev/vni";

/// The tenant's NetworkAttachmentDefinition (`k8s.cni.cncf.io/v1`), in `fabrik-<tenant>`.
pub fn network_attachment(tenant: &str, vni: u64, cidr: &str) -> Result<Value, InputError> {
    check_tenant(tenant)?;
    let vni = Vni::new(vni)?;
    let cidr: Ipv4Cidr = cidr.parse()?;
    let config = json!({
        "cniVersion": "1.0.0",
        "name": format!("fabrik-{tenant}-vni-{vni}"),
        "type": "bridge",
        "bridge": vni.bridge_name(),
        "isGateway": false,
        "ipMasq": false,
        "hairpinMode": false,
        "mtu": MTU,
        "ipam": {
            "type": "whereabouts",
            "range": cidr.to_string(),
            "exclude": [format!("{}/32", cidr.first_host())],
        },
    });
    Ok(json!({
        "apiVersion": "k8s.cni.cncf.io/v1",
        "kind": "NetworkAttachmentDefinition",
        "metadata": {
            "name": NAME,
            "namespace": host_namespace(tenant),
            "labels": {
                fabrik_api::LABEL_TENANT: tenant,
            },
            "annotations": {
                ANNOTATION_VNI: vni.to_string(),
            },
        },
        "spec": {
            // Multus reads the CNI config as a JSON string.
            "config": config.to_string(),
        },
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attachment_names_the_tenant_bridge_and_range() {
        let nad = network_attachment("team-a", 100, "10.77.0.0/24").expect("nad");
        assert_eq!(nad["apiVersion"], "k8s.cni.cncf.io/v1");
        assert_eq!(nad["kind"], "NetworkAttachmentDefinition");
        assert_eq!(nad["metadata"]["namespace"], "fabrik-team-a");
        assert_eq!(nad["metadata"]["name"], NAME);
        assert_eq!(nad["metadata"]["labels"]["fabrik.dev/tenant"], "team-a");
        assert_eq!(nad["metadata"]["annotations"][ANNOTATION_VNI], "100");
        let config: Value =
            serde_json::from_str(nad["spec"]["config"].as_str().expect("string")).expect("json");
        assert_eq!(config["type"], "bridge");
        assert_eq!(config["bridge"], "br-100");
        assert_eq!(config["mtu"], 1450);
        assert_eq!(config["ipam"]["type"], "whereabouts");
        assert_eq!(config["ipam"]["range"], "10.77.0.0/24");
        assert_eq!(config["ipam"]["exclude"][0], "10.77.0.1/32");
        let other = network_attachment("team-b", 200, "10.77.0.0/24").expect("nad");
        assert_ne!(other["metadata"]["namespace"], nad["metadata"]["namespace"]);
        assert!(other["spec"]["config"]
            .as_str()
            .expect("string")
            .contains("\"br-200\""));
    }

    #[test]
    fn bad_input_is_refused_with_the_reason() {
        for (tenant, vni, cidr, want) in [
            ("t", 0, "10.0.0.0/24", "invalid VNI 0"),
            ("t", 16_777_216, "10.0.0.0/24", "invalid VNI 16777216"),
            ("t", 5, "10.0.0.0/33", "invalid CIDR"),
            ("t", 5, "banana", "invalid CIDR"),
            ("T!", 5, "10.0.0.0/24", "invalid tenant name"),
        ] {
            let e = network_attachment(tenant, vni, cidr).expect_err(want);
            assert!(e.to_string().contains(want), "{e}");
        }
    }
}
