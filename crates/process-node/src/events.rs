//! Kubelet-like Events about a pod.

use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use kube::{Api, Client, api::PostParams};
use serde_json::json;

use crate::node::{MANAGER, now};

/// Records Events about one pod; sending never blocks the caller.
#[derive(Clone)]
pub struct Recorder {
    client: Client,
    node: String,
    object: ObjectReference,
}

impl Recorder {
    /// A recorder for `pod` on node `node`.
    pub fn new(client: Client, node: &str, pod: &Pod) -> Recorder {
        let object = ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        };
        Recorder {
            client,
            node: node.to_string(),
            object,
        }
    }

    /// A Normal event.
    pub fn normal(&self, reason: &str, message: impl Into<String>) {
        self.emit("Normal", reason, message.into());
    }

    /// A Warning event.
    pub fn warning(&self, reason: &str, message: impl Into<String>) {
        self.emit("Warning", reason, message.into());
    }

    fn emit(&self, kind: &str, reason: &str, message: String) {
        let ns = self
            .object
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into());
        let pod = self.object.name.clone().unwrap_or_default();
        let now = now();
        let event = json!({
            "metadata": {"generateName": format!("{pod}."), "namespace": ns},
            "involvedObject": self.object,
            "reason": reason,
            "message": message,
            "type": kind,
            "source": {"component": MANAGER, "host": self.node},
            "reportingComponent": MANAGER,
            "reportingInstance": self.node,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
        });
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        tokio::spawn(async move {
            let Ok(event) = serde_json::from_value::<Event>(event) else {
                return;
            };
            if let Err(e) = api.create(&PostParams::default(), &event).await {
                tracing::debug!(error = %e, "recording an event");
            }
        });
    }
}
