//! The in-process client: a `kube::Client` whose transport is a tower service that hands each
//! request to the cluster's API server directly — no socket, no TLS, the same pipeline as a
//! request from the network (ARCHITECTURE decision 3). Controllers inside the process use it,
//! so they are written exactly like controllers against a remote cluster.

use std::sync::Arc;

use http::Request;
use http_body_util::{BodyExt, Full};

use crate::auth::{Caller, UserInfo};
use crate::server::ApiServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A client that acts as `user` against `server`.
///
/// Must be called inside a tokio runtime (the client's request buffer spawns a task).
pub fn in_process_client(server: Arc<ApiServer>, user: UserInfo) -> kube::Client {
    // The default field manager of a write is the User-Agent's first word; name the caller.
    let agent = http::HeaderValue::from_str(&format!(
        "{}/{}",
        user.name.rsplit(':').next().unwrap_or("fabrik"),
        env!("CARGO_PKG_VERSION")
    ))
    .unwrap_or_else(|_| http::HeaderValue::from_static("fabrik"));
    let service = tower::service_fn(move |req: Request<kube::client::Body>| {
        let server = server.clone();
        let user = user.clone();
        let agent = agent.clone();
        async move {
            let (mut parts, body) = req.into_parts();
            parts
                .headers
                .entry(http::header::USER_AGENT)
                .or_insert(agent);
            let bytes = body
                .collect()
                .await
                .map_err(|e| Box::new(e) as BoxError)?
                .to_bytes();
            let body = Full::new(bytes).map_err(|never| match never {}).boxed();
            Ok::<_, BoxError>(
                server
                    .handle(Request::from_parts(parts, body), Caller::Trusted(user))
                    .await,
            )
        }
    });
    kube::Client::new(service, "default")
}

/// The identity controllers inside the process act as.
pub fn controller_identity(name: &str) -> UserInfo {
    UserInfo {
        name: format!("system:fabrik:{name}"),
        groups: vec!["system:masters".into(), crate::auth::AUTHENTICATED.into()],
        ..UserInfo::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;
    use crate::resources::Catalog;
    use crate::server::Settings;
    use fabrik_store::{SledBackend, SledConfig, Store};
    use futures::{StreamExt, TryStreamExt};
    use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
    use kube::api::{Api, ListParams, PostParams, WatchEvent, WatchParams};

    #[tokio::test]
    async fn kube_client_talks_to_the_server_without_a_socket() {
        let dir = tempfile::tempdir().expect("tempdir");
        let backend = SledBackend::open(SledConfig::new(dir.path().join("db"))).expect("open");
        let store: Arc<dyn Store> = Arc::new(backend.keyspace("t").expect("keyspace"));
        let registry = Arc::new(Registry::new(store, Arc::new(Catalog::builtin())));
        crate::cluster::bootstrap(&registry)
            .await
            .expect("bootstrap");
        let (_stop, stop_rx) = tokio::sync::watch::channel(false);
        let server = ApiServer::new(registry, Default::default(), Settings::default(), stop_rx)
            .expect("server");
        let client = in_process_client(server, controller_identity("test"));

        let namespaces: Api<Namespace> = Api::all(client.clone());
        let names: Vec<String> = namespaces
            .list(&ListParams::default())
            .await
            .expect("list")
            .items
            .into_iter()
            .filter_map(|n| n.metadata.name)
            .collect();
        assert!(names.contains(&"kube-system".to_string()), "{names:?}");

        let cms: Api<ConfigMap> = Api::namespaced(client, "default");
        let rv = cms
            .list(&ListParams::default())
            .await
            .expect("list")
            .metadata
            .resource_version
            .expect("rv");
        let mut events = cms
            .watch(&WatchParams::default(), &rv)
            .await
            .expect("watch")
            .boxed();
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some("through-tower".into());
        cms.create(&PostParams::default(), &cm)
            .await
            .expect("create");
        match events.try_next().await.expect("event") {
            Some(WatchEvent::Added(obj)) => {
                assert_eq!(obj.metadata.name.as_deref(), Some("through-tower"))
            }
            other => panic!("unexpected {other:?}"),
        }
        let err = cms
            .create(&PostParams::default(), &cm)
            .await
            .expect_err("duplicate");
        assert!(
            matches!(err, kube::Error::Api(ref s) if s.code == 409),
            "{err:?}"
        );
    }
}
