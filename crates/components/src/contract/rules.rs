//! The Cluster API provider contracts as data: which CRDs of a provider type follow which
//! contract, and for each contract version the fields Cluster API reads from them (after the
//! Cluster API book's contract pages and the specification texts in `../shared/spec`).
//!
//! Adding a contract version is one more entry in a contract's `versions`; adding a contract,
//! one more entry in [`CONTRACTS`]. The engine that applies them is `fields.rs`.

use capi_operator_api::ProviderType;

/// The shape a field must have in the CRD's openAPI schema.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Shape {
    Bool,
    Str,
    Int,
    Object,
    /// An array of any items (e.g. conditions).
    List,
    /// An array of strings.
    StrList,
    /// `{host: string, port: integer}`.
    Endpoint,
    /// v1beta1 failure domains: a map of `{controlPlane, attributes}`.
    FailureDomainMap,
    /// v1beta2 failure domains: a list of `{name, controlPlane, attributes}`.
    FailureDomainList,
    /// A list of `{type, address}`.
    Addresses,
    /// The CRD version's scale subresource with `.spec.replicas`, `.status.replicas` and
    /// `.status.selector` (read from the CRD version, not the schema; `path` is ignored).
    Scale,
}

impl Shape {
    pub(super) fn describe(self) -> &'static str {
        match self {
            Shape::Bool => "boolean",
            Shape::Str => "string",
            Shape::Int => "integer",
            Shape::Object => "object",
            Shape::List => "list",
            Shape::StrList => "list of strings",
            Shape::Endpoint => "{host: string, port: integer}",
            Shape::FailureDomainMap => "map of failure domains {controlPlane, attributes}",
            Shape::FailureDomainList => "list of failure domains {name, controlPlane, attributes}",
            Shape::Addresses => "list of addresses {type, address}",
            Shape::Scale => {
                "scale subresource (.spec.replicas, .status.replicas, .status.selector)"
            }
        }
    }
}

/// Whether a field must be declared.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Need {
    /// Cluster API reads it from every such resource.
    Required,
    /// May be absent; when declared it must have the shape.
    Optional,
    /// Required when the field at this path is declared (e.g. the replica counters once
    /// `spec.replicas` is), as the contract's "mandatory if" rules say.
    When(&'static str),
}

/// One field rule.
#[derive(Debug, Clone, Copy)]
pub(super) struct Rule {
    /// Name of the finding.
    pub check: &'static str,
    /// Dotted path of property names from the schema's root.
    pub path: &'static str,
    pub shape: Shape,
    pub need: Need,
    /// A field the contract version still accepts in place of `path` (the v1beta2 contract
    /// reads the v1beta1 fields until its compatibility with v1beta1 ends).
    pub also: Option<(&'static str, Shape)>,
}

const fn rule(check: &'static str, path: &'static str, shape: Shape, need: Need) -> Rule {
    Rule {
        check,
        path,
        shape,
        need,
        also: None,
    }
}

const fn compat(check: &'static str, path: &'static str, shape: Shape, old: &'static str) -> Rule {
    Rule {
        check,
        path,
        shape,
        need: Need::Required,
        also: Some((old, shape)),
    }
}

/// The rules of one contract version.
#[derive(Debug)]
pub(super) struct Version {
    pub name: &'static str,
    pub rules: &'static [Rule],
}

/// Which CRDs of the provider type follow the contract.
#[derive(Debug, Clone, Copy)]
pub(super) enum Match {
    /// Kinds named `<Provider><suffix>` (`DockerCluster`); `<Provider><suffix>Template` is
    /// then the contract's template.
    Suffix(&'static str),
    /// One kind of one API group.
    Kind(&'static str, &'static str),
    /// Every CRD of the release (IPAM pools have no naming rule).
    Any,
}

/// Whether the release must hold a CRD of the contract, or of its template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Presence {
    Required,
    /// Needed for ClusterClass only: a missing one is a warning.
    ForClusterClass,
    Optional,
}

/// One provider contract.
#[derive(Debug)]
pub(super) struct Contract {
    /// Its name in the Cluster API book (`InfraCluster`).
    pub name: &'static str,
    /// Name of the findings about the CRD itself (presence, scope).
    pub check: &'static str,
    pub provider: ProviderType,
    pub matches: Match,
    pub namespaced: bool,
    pub presence: Presence,
    /// The `<Kind>Template` CRD: whether it must exist, and the name of its findings.
    pub template: (Presence, &'static str),
    /// One finding per CRD listing what fails, instead of one per field.
    pub summary: bool,
    pub versions: &'static [Version],
}

use Need::{Optional, Required, When};
use Shape::*;

/// The template rule every contract's `<Kind>Template` follows.
pub(super) const TEMPLATE_SPEC: Rule = rule("template", "spec.template.spec", Object, Required);

const INFRA_CLUSTER_V1BETA1: &[Rule] = &[
    // Required in ../shared/spec's InfraCluster text of the v1beta1 contract.
    rule(
        "infra-cluster-endpoint",
        "spec.controlPlaneEndpoint",
        Endpoint,
        Required,
    ),
    rule("infra-cluster-status", "status.ready", Bool, Required),
    rule(
        "infra-cluster-failure-domains",
        "status.failureDomains",
        FailureDomainMap,
        Optional,
    ),
    rule(
        "infra-cluster-failures",
        "status.failureReason",
        Str,
        Optional,
    ),
    rule(
        "infra-cluster-failures",
        "status.failureMessage",
        Str,
        Optional,
    ),
];

const INFRA_CLUSTER_V1BETA2: &[Rule] = &[
    // v1beta2: mandatory only when no one else provides the endpoint.
    rule(
        "infra-cluster-endpoint",
        "spec.controlPlaneEndpoint",
        Endpoint,
        Optional,
    ),
    compat(
        "infra-cluster-status",
        "status.initialization.provisioned",
        Bool,
        "status.ready",
    ),
    rule(
        "infra-cluster-failure-domains",
        "status.failureDomains",
        FailureDomainList,
        Optional,
    ),
];

const INFRA_MACHINE_V1BETA1: &[Rule] = &[
    rule(
        "infra-machine-provider-id",
        "spec.providerID",
        Str,
        Required,
    ),
    rule("infra-machine-status", "status.ready", Bool, Required),
    rule(
        "infra-machine-addresses",
        "status.addresses",
        Addresses,
        Optional,
    ),
    rule(
        "infra-machine-failure-domain",
        "spec.failureDomain",
        Str,
        Optional,
    ),
];

const INFRA_MACHINE_V1BETA2: &[Rule] = &[
    rule(
        "infra-machine-provider-id",
        "spec.providerID",
        Str,
        Required,
    ),
    compat(
        "infra-machine-status",
        "status.initialization.provisioned",
        Bool,
        "status.ready",
    ),
    rule(
        "infra-machine-addresses",
        "status.addresses",
        Addresses,
        Optional,
    ),
    rule(
        "infra-machine-failure-domain",
        "status.failureDomain",
        Str,
        Optional,
    ),
];

const INFRA_MACHINE_POOL_V1BETA1: &[Rule] = &[
    rule(
        "infra-machine-pool-provider-ids",
        "spec.providerIDList",
        StrList,
        Required,
    ),
    rule(
        "infra-machine-pool-replicas",
        "status.replicas",
        Int,
        Required,
    ),
    rule("infra-machine-pool-status", "status.ready", Bool, Required),
];

const INFRA_MACHINE_POOL_V1BETA2: &[Rule] = &[
    rule(
        "infra-machine-pool-provider-ids",
        "spec.providerIDList",
        StrList,
        Required,
    ),
    rule(
        "infra-machine-pool-replicas",
        "status.replicas",
        Int,
        Required,
    ),
    compat(
        "infra-machine-pool-status",
        "status.initialization.provisioned",
        Bool,
        "status.ready",
    ),
];

const BOOTSTRAP_V1BETA1: &[Rule] = &[
    rule(
        "bootstrap-config-data-secret",
        "status.dataSecretName",
        Str,
        Required,
    ),
    rule("bootstrap-config-status", "status.ready", Bool, Required),
];

const BOOTSTRAP_V1BETA2: &[Rule] = &[
    rule(
        "bootstrap-config-data-secret",
        "status.dataSecretName",
        Str,
        Required,
    ),
    compat(
        "bootstrap-config-status",
        "status.initialization.dataSecretCreated",
        Bool,
        "status.ready",
    ),
];

const REPLICAS: Need = When("spec.replicas");
const VERSION: Need = When("spec.version");
const MACHINES: Need = When("spec.machineTemplate");

const CONTROL_PLANE_V1BETA1: &[Rule] = &[
    rule(
        "control-plane-endpoint",
        "spec.controlPlaneEndpoint",
        Endpoint,
        Optional,
    ),
    rule("control-plane-replicas", "spec.replicas", Int, Optional),
    rule("control-plane-replicas", "status.selector", Str, REPLICAS),
    rule("control-plane-replicas", "status.replicas", Int, REPLICAS),
    rule(
        "control-plane-replicas",
        "status.updatedReplicas",
        Int,
        REPLICAS,
    ),
    rule(
        "control-plane-replicas",
        "status.readyReplicas",
        Int,
        REPLICAS,
    ),
    rule(
        "control-plane-replicas",
        "status.unavailableReplicas",
        Int,
        REPLICAS,
    ),
    rule("control-plane-scale", "subresources.scale", Scale, REPLICAS),
    rule("control-plane-version", "spec.version", Str, Optional),
    rule("control-plane-version", "status.version", Str, VERSION),
    rule(
        "control-plane-machines",
        "spec.machineTemplate",
        Object,
        Optional,
    ),
    rule(
        "control-plane-machines",
        "spec.machineTemplate.infrastructureRef",
        Object,
        MACHINES,
    ),
    rule("control-plane-status", "status.initialized", Bool, Required),
    rule("control-plane-status", "status.ready", Bool, Required),
];

const CONTROL_PLANE_V1BETA2: &[Rule] = &[
    rule(
        "control-plane-endpoint",
        "spec.controlPlaneEndpoint",
        Endpoint,
        Optional,
    ),
    rule("control-plane-replicas", "spec.replicas", Int, Optional),
    rule("control-plane-replicas", "status.selector", Str, REPLICAS),
    rule("control-plane-replicas", "status.replicas", Int, REPLICAS),
    rule(
        "control-plane-replicas",
        "status.readyReplicas",
        Int,
        REPLICAS,
    ),
    rule(
        "control-plane-replicas",
        "status.availableReplicas",
        Int,
        REPLICAS,
    ),
    rule(
        "control-plane-replicas",
        "status.upToDateReplicas",
        Int,
        REPLICAS,
    ),
    rule("control-plane-scale", "subresources.scale", Scale, REPLICAS),
    rule("control-plane-version", "spec.version", Str, Optional),
    Rule {
        also: Some(("status.versions", List)),
        ..rule("control-plane-version", "status.version", Str, VERSION)
    },
    rule(
        "control-plane-machines",
        "spec.machineTemplate",
        Object,
        Optional,
    ),
    rule(
        "control-plane-machines",
        "spec.machineTemplate.spec.infrastructureRef",
        Object,
        MACHINES,
    ),
    compat(
        "control-plane-status",
        "status.initialization.controlPlaneInitialized",
        Bool,
        "status.initialized",
    ),
];

/// IPAM pools: the contract names no field Cluster API reads; conditions are recommended.
const IPAM_POOL: &[Rule] = &[rule("ipam-pool", "status.conditions", List, Optional)];

/// The core's IPAddressClaim, as IPAM providers read it.
const IP_ADDRESS_CLAIM: &[Rule] = &[
    rule("ipam-claim", "spec.poolRef.name", Str, Required),
    rule("ipam-claim", "spec.poolRef.kind", Str, Required),
    rule("ipam-claim", "spec.poolRef.apiGroup", Str, Required),
    rule("ipam-claim", "spec.clusterName", Str, Optional),
    rule("ipam-claim", "status.addressRef.name", Str, Required),
];

/// The core's IPAddress, as IPAM providers write it.
const IP_ADDRESS: &[Rule] = &[
    rule("ipam-address", "spec.address", Str, Required),
    rule("ipam-address", "spec.prefix", Int, Required),
    rule("ipam-address", "spec.gateway", Str, Optional),
    rule("ipam-address", "spec.claimRef.name", Str, Required),
    rule("ipam-address", "spec.poolRef.name", Str, Required),
    rule("ipam-address", "spec.poolRef.kind", Str, Required),
];

/// What an external system managing an InfraCluster (`cluster.x-k8s.io/managed-by`) must be
/// able to set in its place: the endpoint, failure domains, readiness and (v1beta1) terminal
/// failures. A field the schema does not declare would be pruned by the apiserver.
const EXTERNALLY_MANAGED_V1BETA1: &[Rule] = &[
    rule("", "spec.controlPlaneEndpoint", Endpoint, Optional),
    rule("", "status.failureDomains", FailureDomainMap, Optional),
    rule("", "status.ready", Bool, Required),
    rule("", "status.failureReason", Str, Optional),
    rule("", "status.failureMessage", Str, Optional),
];

const EXTERNALLY_MANAGED_V1BETA2: &[Rule] = &[
    rule("", "spec.controlPlaneEndpoint", Endpoint, Optional),
    rule("", "status.failureDomains", FailureDomainList, Optional),
    compat(
        "",
        "status.initialization.provisioned",
        Bool,
        "status.ready",
    ),
];

const fn both(rules: &'static [Rule]) -> [Version; 2] {
    [
        Version {
            name: "v1beta1",
            rules,
        },
        Version {
            name: "v1beta2",
            rules,
        },
    ]
}

const fn versions(v1beta1: &'static [Rule], v1beta2: &'static [Rule]) -> [Version; 2] {
    [
        Version {
            name: "v1beta1",
            rules: v1beta1,
        },
        Version {
            name: "v1beta2",
            rules: v1beta2,
        },
    ]
}

/// The IPAM types of the core provider's `ipam.cluster.x-k8s.io` group.
pub(super) const IPAM_GROUP: &str = "ipam.cluster.x-k8s.io";

/// Every contract checked, in the order of the findings.
pub(super) const CONTRACTS: &[Contract] = &[
    Contract {
        name: "InfraCluster",
        check: "infra-cluster",
        provider: ProviderType::Infrastructure,
        matches: Match::Suffix("Cluster"),
        namespaced: true,
        presence: Presence::Required,
        template: (Presence::ForClusterClass, "infra-cluster-template"),
        summary: false,
        versions: &versions(INFRA_CLUSTER_V1BETA1, INFRA_CLUSTER_V1BETA2),
    },
    Contract {
        name: "externally managed InfraCluster",
        check: "externally-managed",
        provider: ProviderType::Infrastructure,
        matches: Match::Suffix("Cluster"),
        namespaced: true,
        presence: Presence::Optional,
        template: (Presence::Optional, ""),
        summary: true,
        versions: &versions(EXTERNALLY_MANAGED_V1BETA1, EXTERNALLY_MANAGED_V1BETA2),
    },
    Contract {
        name: "InfraMachine",
        check: "infra-machine",
        provider: ProviderType::Infrastructure,
        matches: Match::Suffix("Machine"),
        namespaced: true,
        presence: Presence::Required,
        template: (Presence::Required, "infra-machine-template"),
        summary: false,
        versions: &versions(INFRA_MACHINE_V1BETA1, INFRA_MACHINE_V1BETA2),
    },
    Contract {
        name: "InfraMachinePool",
        check: "infra-machine-pool",
        provider: ProviderType::Infrastructure,
        matches: Match::Suffix("MachinePool"),
        namespaced: true,
        presence: Presence::Optional,
        template: (Presence::ForClusterClass, "infra-machine-pool-template"),
        summary: false,
        versions: &versions(INFRA_MACHINE_POOL_V1BETA1, INFRA_MACHINE_POOL_V1BETA2),
    },
    Contract {
        name: "BootstrapConfig",
        check: "bootstrap-config",
        provider: ProviderType::Bootstrap,
        matches: Match::Suffix("Config"),
        namespaced: true,
        presence: Presence::Required,
        template: (Presence::Required, "bootstrap-config-template"),
        summary: false,
        versions: &versions(BOOTSTRAP_V1BETA1, BOOTSTRAP_V1BETA2),
    },
    Contract {
        name: "ControlPlane",
        check: "control-plane",
        provider: ProviderType::ControlPlane,
        matches: Match::Suffix("ControlPlane"),
        namespaced: true,
        presence: Presence::Required,
        template: (Presence::ForClusterClass, "control-plane-template"),
        summary: false,
        versions: &versions(CONTROL_PLANE_V1BETA1, CONTROL_PLANE_V1BETA2),
    },
    Contract {
        name: "IPAM pool",
        check: "ipam-pool",
        provider: ProviderType::Ipam,
        matches: Match::Any,
        // Global pools are cluster-scoped; the IPAM contract sets no scope.
        namespaced: false,
        presence: Presence::Required,
        template: (Presence::Optional, ""),
        summary: false,
        versions: &both(IPAM_POOL),
    },
    Contract {
        name: "IPAM IPAddressClaim",
        check: "ipam-claim",
        provider: ProviderType::Core,
        matches: Match::Kind(IPAM_GROUP, "IPAddressClaim"),
        namespaced: true,
        presence: Presence::Optional,
        template: (Presence::Optional, ""),
        summary: false,
        versions: &both(IP_ADDRESS_CLAIM),
    },
    Contract {
        name: "IPAM IPAddress",
        check: "ipam-address",
        provider: ProviderType::Core,
        matches: Match::Kind(IPAM_GROUP, "IPAddress"),
        namespaced: true,
        presence: Presence::Optional,
        template: (Presence::Optional, ""),
        summary: false,
        versions: &both(IP_ADDRESS),
    },
];

/// Whether `check` names findings of these tables.
pub(super) fn is_table_check(check: &str) -> bool {
    CONTRACTS.iter().any(|c| {
        c.check == check
            || c.template.1 == check
            || c.versions
                .iter()
                .any(|v| v.rules.iter().any(|r| r.check == check))
    })
}
