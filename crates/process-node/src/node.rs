//! The Node object: registration, heartbeats, the node Lease and taints.

use std::{net::Ipv4Addr, time::Duration};

use k8s_openapi::{
    api::{coordination::v1::Lease, core::v1::Node},
    apimachinery::pkg::apis::meta::v1::{MicroTime, Time},
};
use kube::{
    Api, Client,
    api::{Patch, PatchParams},
};
use serde_json::{Value, json};

use crate::error::Result;

/// Field manager of everything the agent writes.
pub const MANAGER: &str = "capi-process-node";
/// The label and taint key that mark the process node.
pub const PROCESS_NODE_KEY: &str = "capi-provider-operator.dev/process-node";
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// How often kubelet's default node status update frequency refreshes the heartbeat.
pub const HEARTBEAT: Duration = Duration::from_secs(10);

/// What the Node says about itself.
#[derive(Debug, Clone)]
pub struct NodeInfo {
    /// The Node's name.
    pub name: String,
    /// Its InternalIP (the bridge's address).
    pub ip: Ipv4Addr,
    /// When the agent started: the Ready condition's transition time.
    pub started: Time,
}

/// Now, in Kubernetes' JSON time format.
pub fn now() -> Value {
    serde_json::to_value(Time(jiff::Timestamp::now())).unwrap_or(Value::Null)
}

fn kube_arch() -> &'static str {
    match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    }
}

/// Creates or updates the Node's labels and taint, and reports it Ready.
pub async fn register(client: &Client, info: &NodeInfo) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": info.name,
            "labels": {
                "kubernetes.io/hostname": info.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": kube_arch(),
                PROCESS_NODE_KEY: "true",
            },
        },
        "spec": {"taints": [{"key": PROCESS_NODE_KEY, "value": "true", "effect": "NoSchedule"}]},
    });
    nodes
        .patch(
            &info.name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&node),
        )
        .await?;
    heartbeat(client, info).await
}

/// Refreshes the Ready condition and the Lease, and lifts the not-ready taint that node
/// admission puts on new nodes (this cluster runs no node lifecycle controller to do it).
pub async fn heartbeat(client: &Client, info: &NodeInfo) -> Result<()> {
    let nodes: Api<Node> = Api::all(client.clone());
    nodes
        .patch_status(
            &info.name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(status(info)),
        )
        .await?;
    renew_lease(client, &info.name).await?;
    lift_not_ready_taint(&nodes, &info.name).await
}

fn status(info: &NodeInfo) -> Value {
    let now = now();
    let started = serde_json::to_value(&info.started).unwrap_or(Value::Null);
    let cond = |t: &str, s: &str, reason: &str, msg: &str| {
        json!({"type": t, "status": s, "reason": reason, "message": msg,
               "lastHeartbeatTime": now, "lastTransitionTime": started})
    };
    let resources =
        json!({"cpu": "32", "memory": "64Gi", "pods": "110", "ephemeral-storage": "100Gi"});
    json!({
        "apiVersion": "v1",
        "kind": "Node",
        "status": {
            "conditions": [
                cond("Ready", "True", "KubeletReady", "capi-process-node is posting ready status"),
                cond("MemoryPressure", "False", "KubeletHasSufficientMemory", "no memory pressure"),
                cond("DiskPressure", "False", "KubeletHasNoDiskPressure", "no disk pressure"),
                cond("PIDPressure", "False", "KubeletHasSufficientPID", "no PID pressure"),
            ],
            "addresses": [
                {"type": "InternalIP", "address": info.ip.to_string()},
                {"type": "Hostname", "address": info.name},
            ],
            "capacity": resources,
            "allocatable": resources,
            "nodeInfo": {
                "machineID": "", "systemUUID": "", "bootID": "",
                "kernelVersion": "", "osImage": "capi-process-node",
                "containerRuntimeVersion": "process://0.1.0",
                "kubeletVersion": "v1.34.0", "kubeProxyVersion": "",
                "operatingSystem": "linux", "architecture": kube_arch(),
            },
        },
    })
}

async fn renew_lease(client: &Client, name: &str) -> Result<()> {
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name},
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": 40,
            "renewTime": MicroTime(jiff::Timestamp::now()),
        },
    });
    leases
        .patch(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}

async fn lift_not_ready_taint(nodes: &Api<Node>, name: &str) -> Result<()> {
    let node = nodes.get(name).await?;
    let taints = node.spec.and_then(|s| s.taints).unwrap_or_default();
    if !taints.iter().any(|t| t.key == NOT_READY_TAINT) {
        return Ok(());
    }
    let kept: Vec<_> = taints
        .into_iter()
        .filter(|t| t.key != NOT_READY_TAINT)
        .collect();
    let patch = json!({"spec": {"taints": kept}});
    nodes
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}
