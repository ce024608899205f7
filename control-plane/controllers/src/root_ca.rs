//! Root CA publisher: every namespace that is not terminating has a ConfigMap
//! `kube-root-ca.crt` whose `ca.crt` is the CA bundle that verifies the API server's serving
//! certificate — what upstream's root-ca-cert-publisher does, and what the `kube-api-access-*`
//! volume of every pod mounts.
//!
//! Woken by namespace changes and by changes to ConfigMaps of that name: a deleted one is
//! created again, and one whose data was changed gets exactly `{ca.crt: <bundle>}` back.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::api::{Api, ObjectMeta, PostParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::ResourceExt;

use crate::serviceaccount::wants_default;
use crate::shared::{shutdown, Context};

/// Name of the ConfigMap every namespace gets.
pub const NAME: &str = "kube-root-ca.crt";
/// Its key.
pub const KEY: &str = "ca.crt";
/// The annotation upstream puts on it.
const DESCRIPTION: &str = "kubernetes.io/description";
const DESCRIPTION_TEXT: &str = "Contains a CA bundle that can be used to verify the \
     kube-apiserver when using internal endpoints such as the internal service IP or \
     kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes \
     clusters.";

/// Errors of the root CA publisher.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading, creating or updating the ConfigMap failed.
    #[error("failed to {verb} ConfigMap {NAME}: {source}")]
    Write {
        /// What was tried.
        verb: &'static str,
        /// The cause.
        #[source]
        source: kube::Error,
    },
}

struct Publisher {
    ctx: Arc<Context>,
    bundle: String,
}

/// Runs the publisher of `bundle` until `shutdown` resolves.
pub async fn run(
    client: kube::Client,
    bundle: String,
    shutdown_signal: impl Future<Output = ()> + Send + 'static,
) {
    let publisher = Arc::new(Publisher {
        ctx: Context::new(client.clone(), "root-ca-cert-publisher"),
        bundle,
    });
    Controller::new(
        Api::<Namespace>::all(client.clone()),
        watcher::Config::default(),
    )
    .watches(
        Api::<ConfigMap>::all(client),
        watcher::Config::default().fields(&format!("metadata.name={NAME}")),
        |cm| cm.namespace().map(|ns| ObjectRef::new(&ns)),
    )
    .graceful_shutdown_on(shutdown(shutdown_signal))
    .run(
        reconcile,
        |ns, e, p: Arc<Publisher>| p.ctx.failed(ns.as_ref(), e),
        publisher,
    )
    .for_each(|_| async {})
    .await;
}

/// What the ConfigMap's data must be.
fn wanted(bundle: &str) -> BTreeMap<String, String> {
    BTreeMap::from([(KEY.to_string(), bundle.to_string())])
}

/// Whether an existing ConfigMap is what the publisher would write.
fn up_to_date(cm: &ConfigMap, bundle: &str) -> bool {
    cm.data.as_ref() == Some(&wanted(bundle))
        && cm.binary_data.as_ref().is_none_or(BTreeMap::is_empty)
        && cm.annotations().contains_key(DESCRIPTION)
}

async fn reconcile(ns: Arc<Namespace>, p: Arc<Publisher>) -> Result<Action, Error> {
    if !wants_default(&ns) {
        return Ok(Action::await_change());
    }
    let api: Api<ConfigMap> = Api::namespaced(p.ctx.client.clone(), &ns.name_any());
    let current = api.get_opt(NAME).await.map_err(|source| Error::Write {
        verb: "read",
        source,
    })?;
    match current {
        None => {
            let cm = ConfigMap {
                metadata: ObjectMeta {
                    name: Some(NAME.into()),
                    annotations: Some(BTreeMap::from([(
                        DESCRIPTION.to_string(),
                        DESCRIPTION_TEXT.to_string(),
                    )])),
                    ..ObjectMeta::default()
                },
                data: Some(wanted(&p.bundle)),
                ..ConfigMap::default()
            };
            match api.create(&PostParams::default(), &cm).await {
                Ok(_) => {}
                // Created meanwhile (its watch event brings us back), or the namespace began
                // terminating (403).
                Err(kube::Error::Api(s)) if s.code == 409 || s.code == 403 => {}
                Err(source) => {
                    return Err(Error::Write {
                        verb: "create",
                        source,
                    })
                }
            }
        }
        Some(cm) if up_to_date(&cm, &p.bundle) => {}
        Some(mut cm) => {
            // Someone changed it: the bundle, and only the bundle, goes back (the
            // resourceVersion read above makes a concurrent change a conflict, retried).
            cm.data = Some(wanted(&p.bundle));
            cm.binary_data = None;
            cm.annotations_mut()
                .insert(DESCRIPTION.to_string(), DESCRIPTION_TEXT.to_string());
            match api.replace(NAME, &PostParams::default(), &cm).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(source) => {
                    return Err(Error::Write {
                        verb: "update",
                        source,
                    })
                }
            }
        }
    }
    p.ctx.succeeded(ns.as_ref());
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_the_bundle_with_its_description_is_up_to_date() {
        let mut cm = ConfigMap {
            data: Some(wanted("PEM")),
            ..ConfigMap::default()
        };
        assert!(!up_to_date(&cm, "PEM"), "the description is missing");
        cm.annotations_mut()
            .insert(DESCRIPTION.into(), DESCRIPTION_TEXT.into());
        assert!(up_to_date(&cm, "PEM"));
        assert!(!up_to_date(&cm, "OTHER"));
        cm.data
            .get_or_insert_with(BTreeMap::new)
            .insert("extra".into(), "x".into());
        assert!(!up_to_date(&cm, "PEM"), "an extra key is removed");
        cm.data = Some(wanted("PEM"));
        cm.binary_data = Some(BTreeMap::from([(
            "b".to_string(),
            k8s_openapi::ByteString(vec![1]),
        )]));
        assert!(!up_to_date(&cm, "PEM"), "binary data is removed");
    }
}
