//! The downward API: pod fields and container resources, for env and downwardAPI volumes.

use k8s_openapi::api::core::v1::{Container, Pod, ResourceFieldSelector};

/// Addresses known only to the agent (status may not be written yet).
#[derive(Debug, Clone)]
pub struct Addresses {
    /// The pod's IP.
    pub pod_ip: String,
    /// The node's IP.
    pub host_ip: String,
}

fn map_entry(map: Option<&std::collections::BTreeMap<String, String>>, key: &str) -> String {
    map.and_then(|m| m.get(key)).cloned().unwrap_or_default()
}

/// Lines `k="v"` sorted by key, as kubelet writes whole label/annotation maps.
fn map_lines(map: Option<&std::collections::BTreeMap<String, String>>) -> String {
    map.map(|m| {
        m.iter()
            .map(|(k, v)| format!("{k}={v:?}"))
            .collect::<Vec<_>>()
            .join("\n")
    })
    .unwrap_or_default()
}

/// The value of a `fieldRef.fieldPath`, or `None` for an unsupported path.
pub fn field(pod: &Pod, path: &str, addr: &Addresses) -> Option<String> {
    let m = &pod.metadata;
    let spec = pod.spec.as_ref();
    let bracketed = |prefix: &str| {
        path.strip_prefix(prefix)
            .and_then(|r| r.strip_suffix("']"))
            .map(str::to_string)
    };
    if let Some(k) = bracketed("metadata.labels['") {
        return Some(map_entry(m.labels.as_ref(), &k));
    }
    if let Some(k) = bracketed("metadata.annotations['") {
        return Some(map_entry(m.annotations.as_ref(), &k));
    }
    Some(match path {
        "metadata.name" => m.name.clone().unwrap_or_default(),
        "metadata.namespace" => m.namespace.clone().unwrap_or_default(),
        "metadata.uid" => m.uid.clone().unwrap_or_default(),
        "metadata.labels" => map_lines(m.labels.as_ref()),
        "metadata.annotations" => map_lines(m.annotations.as_ref()),
        "spec.nodeName" => spec.and_then(|s| s.node_name.clone()).unwrap_or_default(),
        "spec.serviceAccountName" => spec
            .and_then(|s| s.service_account_name.clone())
            .unwrap_or_default(),
        "status.podIP" | "status.podIPs" => addr.pod_ip.clone(),
        "status.hostIP" | "status.hostIPs" => addr.host_ip.clone(),
        _ => return None,
    })
}

/// A quantity as a number (enough of Kubernetes' suffixes for resource fields).
pub fn quantity(q: &str) -> Option<f64> {
    const SUFFIXES: [(&str, f64); 13] = [
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("Pi", 1125899906842624.0),
        ("Ei", 1152921504606846976.0),
        ("n", 1e-9),
        ("u", 1e-6),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
    ];
    for (s, f) in SUFFIXES {
        if let Some(n) = q.strip_suffix(s) {
            return n.parse::<f64>().ok().map(|v| v * f);
        }
    }
    q.parse().ok()
}

/// The value of a `resourceFieldRef`; unset limits fall back to the node's allocatable, as in
/// kubelet.
pub fn resource(container: &Container, sel: &ResourceFieldSelector) -> Option<String> {
    let (kind, name) = sel.resource.split_once('.')?;
    let res = container.resources.as_ref();
    let set = match kind {
        "limits" => res.and_then(|r| r.limits.as_ref()),
        "requests" => res.and_then(|r| r.requests.as_ref()),
        _ => return None,
    };
    let fallback = match (kind, name) {
        ("limits", "cpu") => "32",
        ("limits", "memory") => "64Gi",
        ("limits", "ephemeral-storage") => "100Gi",
        _ => "0",
    };
    let value = set
        .and_then(|m| m.get(name))
        .and_then(|q| quantity(&q.0))
        .or_else(|| quantity(fallback))?;
    let divisor = sel
        .divisor
        .as_ref()
        .and_then(|d| quantity(&d.0))
        .filter(|d| *d > 0.0)
        .unwrap_or(1.0);
    Some(format!("{}", (value / divisor).ceil() as i64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(quantity("64Gi"), Some(68719476736.0));
        assert_eq!(quantity("250m"), Some(0.25));
    }
}
