//! Events about the Node (core/v1 Events in the `default` namespace), one per step the agent
//! takes: layout changes, health transitions, taint/cordon, evictions.

use k8s_openapi::api::core::v1::{Event, EventSource, Node, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};

use super::{api, Result};

/// Records Events about one Node.
#[derive(Clone)]
pub struct Recorder {
    api: Api<Event>,
    node: ObjectReference,
    host: String,
}

/// Event type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Routine.
    Normal,
    /// Something is wrong.
    Warning,
}

impl Recorder {
    /// A recorder for `node`.
    pub fn new(client: Client, node: &Node) -> Recorder {
        let name = node.metadata.name.clone().unwrap_or_default();
        Recorder {
            api: Api::namespaced(client, "default"),
            node: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(name.clone()),
                uid: node.metadata.uid.clone(),
                ..Default::default()
            },
            host: name,
        }
    }

    /// Records one Event.
    pub async fn record(&self, kind: Kind, reason: &str, message: &str) -> Result<()> {
        let now = Timestamp::now();
        let event = Event {
            metadata: ObjectMeta {
                name: Some(format!(
                    "{}.{:x}",
                    self.host,
                    now.as_nanosecond().unsigned_abs()
                )),
                namespace: Some("default".into()),
                ..Default::default()
            },
            involved_object: self.node.clone(),
            reason: Some(reason.into()),
            message: Some(message.into()),
            type_: Some(match kind {
                Kind::Normal => "Normal".into(),
                Kind::Warning => "Warning".into(),
            }),
            source: Some(EventSource {
                component: Some("fabrik-node-agent".into()),
                host: Some(self.host.clone()),
            }),
            first_timestamp: Some(Time(now)),
            last_timestamp: Some(Time(now)),
            count: Some(1),
            ..Default::default()
        };
        tracing::info!(reason, message, "event");
        self.api
            .create(&PostParams::default(), &event)
            .await
            .map_err(api(format!("recording event {reason}")))?;
        Ok(())
    }
}
