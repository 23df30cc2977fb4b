//! The flags the well-known provider managers accept, read from their sources, so that
//! `spec.manager` fields become flags the running binary really has.
//!
//! A manager is identified by the image name of the release's manager container (the last path
//! segment, e.g. `cluster-api-controller`) and the release version, not by the provider's name:
//! a provider object may carry any name and point at any release, but the image in the release
//! names the binary that will run. Image overrides in the provider spec do not change the
//! identity (a mirror carries the same binary); a release whose manager image is renamed is a
//! different binary and therefore unknown.
//!
//! Coverage: Cluster API v1.10 to v1.14 (`main.go` of the core — `core/main.go` from v1.14 on —,
//! kubeadm bootstrap and kubeadm control-plane managers, `util/flags.AddManagerOptions`,
//! component-base logging flags, `--feature-gates` and controller-runtime's `--kubeconfig`),
//! each checked against the built binary's `--help` (`tests/it/manager_flags_binaries.rs`). Patch releases are assumed to
//! have the flags of their minor. Another minor of the same major uses the nearest known
//! minor's set, and says so (`assumed`); another major, or any other image, is unknown.

use std::collections::BTreeSet;

use semver::Version;

/// Flags every Cluster API v1.10–v1.14 manager defines: component-base logging
/// (`logsv1.AddFlags`, JSON format registered), `flags.AddManagerOptions`, the feature gates,
/// controller-runtime's `--kubeconfig` (Go flag set), and the flags each `main.go` repeats.
const CAPI_COMMON: &[&str] = &[
    "logging-format",
    "log-flush-frequency",
    "v",
    "vmodule",
    "log-text-split-stream",
    "log-text-info-buffer-size",
    "log-json-split-stream",
    "log-json-info-buffer-size",
    "tls-min-version",
    "tls-cipher-suites",
    "diagnostics-address",
    "insecure-diagnostics",
    "feature-gates",
    "kubeconfig",
    "leader-elect",
    "leader-elect-lease-duration",
    "leader-elect-renew-deadline",
    "leader-elect-retry-period",
    "namespace",
    "watch-filter",
    "profiler-address",
    "contention-profiling",
    "sync-period",
    "kube-api-qps",
    "kube-api-burst",
    "clustercache-concurrency",
    "clustercache-client-qps",
    "clustercache-client-burst",
    "skip-crd-migration-phases",
    "webhook-port",
    "webhook-cert-dir",
    "webhook-cert-name",
    "webhook-key-name",
    "health-addr",
];

/// Core manager (`main.go` at the module root, `core/main.go` from v1.14), v1.10 to v1.14 alike.
const CAPI_CORE: &[&str] = &[
    "additional-sync-machine-annotations",
    "additional-sync-machine-labels",
    "cluster-concurrency",
    "clusterclass-concurrency",
    "clusterresourceset-concurrency",
    "clustertopology-concurrency",
    "extensionconfig-concurrency",
    "machine-concurrency",
    "machinedeployment-concurrency",
    "machinehealthcheck-concurrency",
    "machinepool-concurrency",
    "machineset-concurrency",
    "machineset-preflight-checks",
    "remote-conditions-grace-period",
    "remote-connection-grace-period",
    "runtime-extension-client-cert-file",
    "runtime-extension-client-key-file",
];

/// Kubeadm bootstrap manager (`bootstrap/kubeadm/main.go`), v1.10 to v1.14 alike.
const CAPI_KUBEADM_BOOTSTRAP: &[&str] = &["bootstrap-token-ttl", "kubeadmconfig-concurrency"];

/// The bootstrap manager of v1.10 to v1.12 still accepts `--cluster-concurrency` but marks it
/// deprecated ("has no function anymore"): hidden from `--help`, never set for
/// maxConcurrentReconciles. v1.13 removed it: the manager would exit at start on it.
const CAPI_KUBEADM_BOOTSTRAP_DEPRECATED: &[&str] = &["cluster-concurrency"];

/// Kubeadm control-plane manager (`controlplane/kubeadm/main.go`) of v1.10 and v1.11.
const CAPI_KUBEADM_CONTROL_PLANE_V1_11: &[&str] = &[
    "etcd-call-timeout-duration",
    "etcd-client-log-level",
    "etcd-dial-timeout-duration",
    "kubeadmcontrolplane-concurrency",
    "remote-conditions-grace-period",
];

/// v1.12 added the runtime extension client certificate flags to the control-plane manager (v1.13
/// and v1.14 alike).
const CAPI_KUBEADM_CONTROL_PLANE_V1_12: &[&str] = &[
    "etcd-call-timeout-duration",
    "etcd-client-log-level",
    "etcd-dial-timeout-duration",
    "kubeadmcontrolplane-concurrency",
    "remote-conditions-grace-period",
    "runtime-extension-client-cert-file",
    "runtime-extension-client-key-file",
];

/// Feature gates of Cluster API v1.10 and v1.11 (`feature/feature.go`; all three managers share
/// them), plus component-base's `AllAlpha` and `AllBeta`.
const CAPI_GATES_V1_11: &[&str] = &[
    "AllAlpha",
    "AllBeta",
    "ClusterResourceSet",
    "ClusterTopology",
    "KubeadmBootstrapFormatIgnition",
    "MachinePool",
    "MachineSetPreflightChecks",
    "MachineWaitForVolumeDetachConsiderVolumeAttachments",
    "PriorityQueue",
    "RuntimeSDK",
];

/// Feature gates of Cluster API v1.12 (v1.13 and v1.14 alike): ClusterResourceSet removed, three
/// added.
const CAPI_GATES_V1_12: &[&str] = &[
    "AllAlpha",
    "AllBeta",
    "ClusterTopology",
    "InPlaceUpdates",
    "KubeadmBootstrapFormatIgnition",
    "MachinePool",
    "MachineSetPreflightChecks",
    "MachineTaintPropagation",
    "MachineWaitForVolumeDetachConsiderVolumeAttachments",
    "PriorityQueue",
    "ReconcilerRateLimiting",
    "RuntimeSDK",
];

/// v1.14 added `--tls-curve-preferences` to `util/flags.AddManagerOptions`, so to every manager.
const CAPI_ADDED_V1_14: &[&str] = &["tls-curve-preferences"];

/// The flags of one minor release of a manager.
#[derive(Debug, Clone, Copy)]
pub struct MinorFlags {
    /// Major version.
    pub major: u64,
    /// Minor version.
    pub minor: u64,
    /// Flags besides the common ones.
    pub own: &'static [&'static str],
    /// Flags every manager of the project has.
    pub common: &'static [&'static str],
    /// Flags this minor added to the common ones.
    pub added: &'static [&'static str],
    /// Flags still accepted but deprecated without function (hidden from `--help`).
    pub deprecated: &'static [&'static str],
    /// Feature gate names `--feature-gates` accepts.
    pub gates: &'static [&'static str],
}

/// A manager binary the operator knows the flags of.
#[derive(Debug, Clone, Copy)]
pub struct KnownBinary {
    /// Image name of the release's manager container: the identity.
    pub image: &'static str,
    /// clusterctl name of the provider that ships it.
    pub provider: &'static str,
    /// The minor releases read from the sources.
    pub minors: &'static [MinorFlags],
}

const fn capi(
    own: &'static [&'static str],
    minor: u64,
    gates: &'static [&'static str],
) -> MinorFlags {
    MinorFlags {
        major: 1,
        minor,
        own,
        common: CAPI_COMMON,
        added: if minor >= 14 { CAPI_ADDED_V1_14 } else { &[] },
        deprecated: &[],
        gates,
    }
}

const fn capi_bootstrap(minor: u64, gates: &'static [&'static str]) -> MinorFlags {
    MinorFlags {
        deprecated: if minor <= 12 {
            CAPI_KUBEADM_BOOTSTRAP_DEPRECATED
        } else {
            &[]
        },
        ..capi(CAPI_KUBEADM_BOOTSTRAP, minor, gates)
    }
}

/// The table: every well-known manager and the minors whose flags were read.
pub const KNOWN_BINARIES: &[KnownBinary] = &[
    KnownBinary {
        image: "cluster-api-controller",
        provider: "cluster-api",
        minors: &[
            capi(CAPI_CORE, 10, CAPI_GATES_V1_11),
            capi(CAPI_CORE, 11, CAPI_GATES_V1_11),
            capi(CAPI_CORE, 12, CAPI_GATES_V1_12),
            capi(CAPI_CORE, 13, CAPI_GATES_V1_12),
            capi(CAPI_CORE, 14, CAPI_GATES_V1_12),
        ],
    },
    KnownBinary {
        image: "kubeadm-bootstrap-controller",
        provider: "bootstrap-kubeadm",
        minors: &[
            capi_bootstrap(10, CAPI_GATES_V1_11),
            capi_bootstrap(11, CAPI_GATES_V1_11),
            capi_bootstrap(12, CAPI_GATES_V1_12),
            capi_bootstrap(13, CAPI_GATES_V1_12),
            capi_bootstrap(14, CAPI_GATES_V1_12),
        ],
    },
    KnownBinary {
        image: "kubeadm-control-plane-controller",
        provider: "control-plane-kubeadm",
        minors: &[
            capi(CAPI_KUBEADM_CONTROL_PLANE_V1_11, 10, CAPI_GATES_V1_11),
            capi(CAPI_KUBEADM_CONTROL_PLANE_V1_11, 11, CAPI_GATES_V1_11),
            capi(CAPI_KUBEADM_CONTROL_PLANE_V1_12, 12, CAPI_GATES_V1_12),
            capi(CAPI_KUBEADM_CONTROL_PLANE_V1_12, 13, CAPI_GATES_V1_12),
            capi(CAPI_KUBEADM_CONTROL_PLANE_V1_12, 14, CAPI_GATES_V1_12),
        ],
    },
];

/// The flag set chosen for one manager container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerFlagSet {
    /// Image name of the binary.
    pub image: &'static str,
    /// clusterctl name of its provider.
    pub provider: &'static str,
    /// Version of the release being rendered.
    pub version: String,
    /// The minor whose flags are used, e.g. "v1.12".
    pub table_minor: String,
    /// Whether the version is not in the table and the nearest minor's flags are assumed.
    pub assumed: bool,
    /// Flag names `--help` shows, without dashes.
    pub flags: BTreeSet<&'static str>,
    /// Flags accepted but deprecated without function.
    pub deprecated: BTreeSet<&'static str>,
    /// Accepted feature gate names.
    pub gates: BTreeSet<&'static str>,
}

impl ManagerFlagSet {
    /// Whether the binary accepts `--name`. pflag normalizes `_` to `-` in these binaries.
    pub fn accepts(&self, name: &str) -> bool {
        let name = name.replace('_', "-");
        self.flags.contains(name.as_str()) || self.deprecated.contains(name.as_str())
    }

    /// Whether `--name` is accepted only to be ignored.
    pub fn is_deprecated(&self, name: &str) -> bool {
        self.deprecated.contains(name.replace('_', "-").as_str())
    }

    /// Every `--*-concurrency` flag, in name order.
    pub fn concurrency_flags(&self) -> impl Iterator<Item = &'static str> + '_ {
        self.flags
            .iter()
            .copied()
            .filter(|f| f.ends_with("-concurrency"))
    }

    /// "cluster-api v1.12.0", with the assumption spelled out when there is one.
    pub fn describe(&self) -> String {
        if self.assumed {
            format!(
                "{} {} (flags of {} assumed)",
                self.provider, self.version, self.table_minor
            )
        } else {
            format!("{} {}", self.provider, self.version)
        }
    }
}

/// The image name (last path segment, no tag or digest) of an image reference.
pub fn image_name(image: &str) -> String {
    capi_operator_api::image::split_reference(image)
        .name
        .unwrap_or_default()
}

/// The known flag set of the manager running `image` from release `version`, if any.
pub fn identify(image: &str, version: &str) -> Option<ManagerFlagSet> {
    let name = image_name(image);
    let binary = KNOWN_BINARIES.iter().find(|b| b.image == name)?;
    let v = capi_release::version::parse(version)?;
    let minor = nearest_minor(binary.minors, &v)?;
    Some(ManagerFlagSet {
        image: binary.image,
        provider: binary.provider,
        version: version.to_string(),
        table_minor: format!("v{}.{}", minor.major, minor.minor),
        assumed: minor.minor != v.minor,
        flags: minor
            .common
            .iter()
            .chain(minor.added)
            .chain(minor.own)
            .copied()
            .collect(),
        deprecated: minor.deprecated.iter().copied().collect(),
        gates: minor.gates.iter().copied().collect(),
    })
}

// Flags change between minors, rarely between patches; a different major may change
// everything, so only the same major borrows a neighbour's set.
fn nearest_minor<'a>(minors: &'a [MinorFlags], v: &Version) -> Option<&'a MinorFlags> {
    minors
        .iter()
        .filter(|m| m.major == v.major)
        .min_by_key(|m| m.minor.abs_diff(v.minor))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identified_by_image_name_and_minor() -> Result<(), String> {
        let core = identify(
            "mirror.local:5000/capi/cluster-api-controller:v1.12.0",
            "v1.12.0",
        )
        .ok_or("core not known")?;
        assert_eq!(core.describe(), "cluster-api v1.12.0");
        assert!(core.accepts("diagnostics-address") && core.accepts("leader_elect"));
        assert!(!core.accepts("metrics-bind-addr") && !core.accepts("webhook-host"));
        assert_eq!(core.concurrency_flags().count(), 11);
        let later = identify(
            "registry.k8s.io/cluster-api/cluster-api-controller:v1.15.2",
            "v1.15.2",
        )
        .ok_or("v1.15 not mapped")?;
        assert!(later.assumed);
        assert_eq!(
            later.describe(),
            "cluster-api v1.15.2 (flags of v1.14 assumed)"
        );
        assert!(identify("cluster-api-controller:v2.0.0", "v2.0.0").is_none());
        assert!(identify("capa-controller:v1.12.0", "v1.12.0").is_none());
        let kcp11 = identify("kubeadm-control-plane-controller:v1.11.0", "v1.11.0")
            .ok_or("kcp not known")?;
        assert!(!kcp11.accepts("runtime-extension-client-cert-file"));
        assert!(kcp11.gates.contains("ClusterResourceSet"));
        Ok(())
    }

    #[test]
    fn flags_added_and_removed_after_v1_12_follow_the_minor() -> Result<(), String> {
        let core14 = identify("cluster-api-controller:v1.14.2", "v1.14.2").ok_or("v1.14")?;
        let core13 = identify("cluster-api-controller:v1.13.6", "v1.13.6").ok_or("v1.13")?;
        assert!(!core14.assumed && !core13.assumed);
        assert!(core14.accepts("tls-curve-preferences"));
        assert!(!core13.accepts("tls-curve-preferences"));
        let boot12 = identify("kubeadm-bootstrap-controller:v1.12.0", "v1.12.0").ok_or("12")?;
        let boot13 = identify("kubeadm-bootstrap-controller:v1.13.6", "v1.13.6").ok_or("13")?;
        assert!(boot12.is_deprecated("cluster-concurrency"));
        assert!(!boot13.accepts("cluster-concurrency"));
        let kcp10 =
            identify("kubeadm-control-plane-controller:v1.10.10", "v1.10.10").ok_or("kcp v1.10")?;
        assert!(!kcp10.assumed && !kcp10.accepts("runtime-extension-client-cert-file"));
        Ok(())
    }
}
