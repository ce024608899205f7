//! The node's DRA ResourceSlice (`resource.k8s.io/v1`): one slice, pool named after the node,
//! of the configured driver (NVIDIA's `gpu.nvidia.com` by default) and labelled
//! [`fabrik_api::LABEL_NODE_AGENT_SLICE`]; replaced whole when its devices change, with the
//! pool generation bumped so that consumers discard older slices. With it, the driver's
//! DeviceClasses ([`classes`]), as a DRA driver's installation provides them: created when
//! missing, never changed (an administrator may edit them).

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device, DeviceClass, ResourcePool, ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::PostParams;
use kube::{Api, Client};

use super::{api, Result};

/// The driver's DeviceClasses: name and the device `type` attribute it selects. For driver
/// `gpu.<domain>` (NVIDIA's `gpu.nvidia.com`): `gpu.<domain>` (whole GPUs), `mig.<domain>` (MIG
/// devices, NVIDIA's `mig.nvidia.com`) and `shared.<domain>` (shared slices); another name
/// `<driver>` gets `<driver>`, `mig.<driver>`, `shared.<driver>`. Time-sliced GPUs are in none.
pub fn classes(driver: &str) -> Vec<(String, &'static str)> {
    let domain = driver.strip_prefix("gpu.").unwrap_or(driver);
    vec![
        (driver.to_string(), "gpu"),
        (format!("mig.{domain}"), "mig"),
        (format!("shared.{domain}"), "shared"),
    ]
}

/// A DeviceClass of `driver` selecting devices of `type_`.
pub fn device_class(driver: &str, name: &str, type_: &str) -> DeviceClass {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": format!(
            "device.driver == '{driver}' && device.attributes['{driver}'].type == '{type_}'")}}]},
    }))
    .unwrap_or_default()
}

/// Creates the driver's DeviceClasses that do not exist.
async fn ensure_classes(client: &Client, driver: &str) -> Result<()> {
    let api_classes: Api<DeviceClass> = Api::all(client.clone());
    for (name, type_) in classes(driver) {
        if api_classes
            .get_opt(&name)
            .await
            .map_err(api("reading a DeviceClass"))?
            .is_some()
        {
            continue;
        }
        match api_classes
            .create(&PostParams::default(), &device_class(driver, &name, type_))
            .await
        {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(api("creating a DeviceClass")(e)),
        }
    }
    Ok(())
}

/// The slice's name for a node.
pub fn name(node: &str, driver: &str) -> String {
    format!("{node}-{driver}")
}

/// Creates or updates the node's slice of `driver` to hold exactly `devices`; does nothing when
/// it does.
pub async fn publish(
    client: &Client,
    driver: &str,
    node: &str,
    owner: Option<OwnerReference>,
    devices: Vec<Device>,
) -> Result<bool> {
    let slices: Api<ResourceSlice> = Api::all(client.clone());
    let slice_name = name(node, driver);
    let existing = match slices.get_opt(&slice_name).await {
        Ok(existing) => existing,
        // A host that does not serve `resource.k8s.io/v1` (Kubernetes before 1.34) answers
        // 404 without a NotFound Status: no DRA there; the Node's extended resources remain.
        Err(kube::Error::Api(s)) if s.code == 404 => {
            tracing::debug!(
                node,
                "the host does not serve resource.k8s.io/v1 ResourceSlices"
            );
            return Ok(false);
        }
        Err(e) => return Err(api("reading the ResourceSlice")(e)),
    };
    let current_devices = existing
        .as_ref()
        .and_then(|s| s.spec.devices.clone())
        .unwrap_or_default();
    let labelled = existing.as_ref().is_some_and(|s| {
        s.metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(fabrik_api::LABEL_NODE_AGENT_SLICE))
    });
    if existing.is_some() && current_devices == devices && labelled {
        return Ok(false);
    }
    ensure_classes(client, driver).await?;
    let generation = existing
        .as_ref()
        .map(|s| s.spec.pool.generation + 1)
        .unwrap_or(1);
    let slice = ResourceSlice {
        metadata: ObjectMeta {
            name: Some(slice_name.clone()),
            resource_version: existing
                .as_ref()
                .and_then(|s| s.metadata.resource_version.clone()),
            owner_references: owner.map(|o| vec![o]),
            labels: Some(BTreeMap::from([(
                fabrik_api::LABEL_NODE_AGENT_SLICE.to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        spec: ResourceSliceSpec {
            driver: driver.into(),
            node_name: Some(node.into()),
            pool: ResourcePool {
                name: node.into(),
                generation,
                resource_slice_count: 1,
            },
            devices: Some(devices),
            ..Default::default()
        },
    };
    if existing.is_some() {
        slices
            .replace(&slice_name, &PostParams::default(), &slice)
            .await
            .map_err(api("updating the ResourceSlice"))?;
    } else {
        slices
            .create(&PostParams::default(), &slice)
            .await
            .map_err(api("creating the ResourceSlice"))?;
    }
    Ok(true)
}
