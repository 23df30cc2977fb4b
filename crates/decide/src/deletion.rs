//! What a deletion does next, by the provider's `spec.deletionPolicy`. Each pass of a deletion
//! gathers the facts afresh and takes one step, so the policy may change between passes (an
//! admin lets a blocked deletion go with Orphan, or asks for Purge after it started) and an
//! operator that stopped half-way resumes where the cluster is.
//!
//! * Block: wait while [`Facts::blockers`] exist, remove the components, keep CRDs and the
//!   namespace, release the finalizer.
//! * Orphan: release the finalizer at once, removing nothing; the objects keep their owner
//!   labels, so a later provider object of the same kind, namespace and name adopts them.
//! * Purge: as Block; then, with no blocker left and nothing in the namespace the provider did
//!   not install (see [`foreign`]), remove its CRDs and namespace and release the finalizer.
//!   Nothing irreversible happens before every check passed, and a custom resource blocks it
//!   like any deletion, so a CRD is never removed with custom resources in it. What the
//!   provider reads in that namespace (its variables Secret, additional manifests, release
//!   ConfigMaps) goes with it, so another provider reading one of them blocks it too
//!   ([`shared`]); and the last look for custom resources is made with new ones refused
//!   ([`rechecked`]), so none created meanwhile is destroyed with its CRD.

use std::collections::BTreeMap;

use capi_operator_api::{AnyProvider, DeletionPolicy, conditions::DELETING, owner::owned_by};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::{Note, conditions::Desired, reason};

/// What a pass of a deletion found.
#[derive(Debug, Default)]
pub struct Facts<'a> {
    /// The policy as the object says now.
    pub policy: DeletionPolicy,
    /// What keeps the components from being removed: custom resources of the provider's CRDs
    /// and, for the only core provider, the other providers. Not looked for under Orphan.
    pub blockers: &'a [String],
    /// Installed objects left other than the CRDs and the namespace.
    pub components: usize,
    /// The CRDs the provider installed that are left, by name.
    pub crds: &'a [String],
    /// The namespace the provider installed, when it is left.
    pub namespace: Option<&'a str>,
    /// What [`foreign`] found in that namespace; `None` until looked at (see [`must_look`]).
    pub foreign: Option<&'a [String]>,
    /// What [`shared`] found in that namespace: the provider's inputs other providers read.
    pub shared: &'a [String],
}

/// The step a pass takes.
#[derive(Debug, PartialEq)]
pub enum Step {
    /// Orphan: release the finalizer now, leaving everything; the note says what stays.
    Orphan(Note),
    /// Wait with this Deleting condition, looking again later (backing off).
    Wait(Desired),
    /// Remove the components, with this Deleting condition; their removal brings the next pass.
    Remove(Desired),
    /// Purge: remove `crds` and then `namespace`, then release the finalizer; the note says so.
    Purge {
        /// The CRDs to remove.
        crds: Vec<String>,
        /// The namespace to remove.
        namespace: Option<String>,
        /// The event.
        note: Note,
    },
    /// Release the finalizer: nothing (more) to remove.
    Release,
}

/// Whether the blockers (custom resources, other providers) are looked for: not under Orphan,
/// which removes nothing they could lose.
pub fn looks_for_blockers(policy: DeletionPolicy) -> bool {
    policy != DeletionPolicy::Orphan
}

/// The namespace to look into for [`foreign`] objects: under Purge, once nothing else is left
/// to wait for or remove (the look lists every namespaced kind, so it is made only then).
pub fn must_look<'a>(f: &Facts<'a>) -> Option<&'a str> {
    (f.policy == DeletionPolicy::Purge && f.blockers.is_empty() && f.components == 0)
        .then_some(f.namespace)
        .flatten()
}

/// The step a deletion takes, given what this pass found.
pub fn next(p: &AnyProvider, f: &Facts<'_>) -> Step {
    if f.policy == DeletionPolicy::Orphan {
        return Step::Orphan(orphaned(p));
    }
    if !f.blockers.is_empty() {
        let message = format!(
            "deletion waits until these are gone: {}",
            f.blockers.join(", ")
        );
        return Step::Wait(Desired::failed(DELETING, reason::DELETION_BLOCKED, message));
    }
    if f.components > 0 {
        let kept = match f.policy {
            DeletionPolicy::Purge => "the CRDs and the namespace follow once nothing is left",
            _ => "CRDs and the namespace are kept",
        };
        let message = format!("removing {} installed objects ({kept})", f.components);
        return Step::Remove(Desired::ok(DELETING, reason::DELETING, message));
    }
    if f.policy != DeletionPolicy::Purge || (f.crds.is_empty() && f.namespace.is_none()) {
        return Step::Release;
    }
    match (f.namespace, f.foreign) {
        (Some(ns), Some(left)) if !left.is_empty() || !f.shared.is_empty() => {
            Step::Wait(purge_blocked(ns, left, f.shared))
        }
        // Not looked at yet: the reconciler looks (see must_look) before asking again.
        (Some(ns), None) => Step::Wait(purge_blocked(ns, &["(not looked at yet)".into()], &[])),
        _ => Step::Purge {
            crds: f.crds.to_vec(),
            namespace: f.namespace.map(str::to_string),
            note: purged(f.crds, f.namespace),
        },
    }
}

fn purge_blocked(ns: &str, left: &[String], shared: &[String]) -> Desired {
    let mut waits = Vec::new();
    if !left.is_empty() {
        waits.push(format!(
            "namespace {ns} holds objects the provider did not install: {}; delete them",
            left.join(", ")
        ));
    }
    if !shared.is_empty() {
        waits.push(format!(
            "removing namespace {ns} would delete what other providers read: {}; point them elsewhere or delete them",
            shared.join(", ")
        ));
    }
    let message = format!(
        "deletionPolicy Purge waits: {}, or set deletionPolicy to Block to keep the CRDs and the namespace",
        waits.join("; ")
    );
    Desired::failed(DELETING, reason::PURGE_BLOCKED, message)
}

/// The Deleting condition when the last look for custom resources, made while new ones are
/// refused just before the CRDs are removed, still finds `left` (created between the first
/// look and the refusal); `None` when nothing is left and the CRDs may go. Reported as
/// PurgeBlocked: nothing was removed, and the next pass waits for them like any blocker.
pub fn rechecked(left: &[String]) -> Option<Desired> {
    (!left.is_empty()).then(|| {
        let message = format!(
            "deletionPolicy Purge waits: the last look before removing the CRDs found custom resources created meanwhile: {}; nothing was removed",
            left.join(", ")
        );
        Desired::failed(DELETING, reason::PURGE_BLOCKED, message)
    })
}

fn orphaned(p: &AnyProvider) -> Note {
    Note::normal(
        reason::ORPHANED,
        format!(
            "deletionPolicy Orphan: everything the provider installed (its Deployments, CRDs, namespace and clusterctl inventory entry) is left running; a new {} named {} in namespace {} adopts it without restarting the managers",
            p.provider_type.kind(),
            p.name(),
            p.namespace()
        ),
    )
}

fn purged(crds: &[String], namespace: Option<&str>) -> Note {
    let mut parts = Vec::new();
    if !crds.is_empty() {
        parts.push(format!("CRDs {}", crds.join(", ")));
    }
    if let Some(ns) = namespace {
        parts.push(format!("namespace {ns}"));
    }
    Note::normal(
        reason::PURGED,
        format!(
            "deletionPolicy Purge: no custom resource was left; removed {}",
            parts.join(" and ")
        ),
    )
}

/// An object found in the namespace Purge would remove.
pub struct Found<'a> {
    /// API group ("" for the core group).
    pub group: &'a str,
    /// Kind.
    pub kind: &'a str,
    /// Its metadata (name, labels, annotations, owner references).
    pub meta: &'a ObjectMeta,
}

/// The groups of the provider kinds (this operator's API and the v1alpha2 one).
const PROVIDER_GROUPS: [&str; 2] = ["management.cluster.x-k8s.io", "operator.cluster.x-k8s.io"];

/// Kinds that are runtime state of whatever runs in a namespace, never someone's declaration:
/// events, the endpoints of Services, the managers' leader-election Leases.
const RUNTIME_KINDS: [(&str, &str); 4] = [
    ("", "Event"),
    ("events.k8s.io", "Event"),
    ("", "Endpoints"),
    ("coordination.k8s.io", "Lease"),
];

/// The objects of `found` (in namespace `ns`) that removing the namespace would destroy
/// although the provider `p` did not install them, as "Kind namespace/name". Not counted:
/// objects with the provider's owner labels (its own, on their way out); objects with an
/// owner reference (they go with their owner: Pods, ReplicaSets, the release cache); what
/// Kubernetes puts in every namespace (the `kube-root-ca.crt` ConfigMap, the `default`
/// ServiceAccount) and runtime state (events, endpoints, leases); Secrets cert-manager issued
/// for a Certificate; the provider object itself and what it reads: its variables Secret and
/// additional-manifests ConfigMap, and the ConfigMaps its `fetchConfig.selector` selects
/// (`selected`). Anything else — a user's ConfigMap, another provider object, another
/// provider's Deployment — is foreign.
pub fn foreign<'a>(
    p: &AnyProvider,
    ns: &str,
    found: impl IntoIterator<Item = Found<'a>>,
    selected: impl Fn(&BTreeMap<String, String>) -> bool,
) -> Vec<String> {
    found
        .into_iter()
        .filter(|o| !belongs(p, ns, o, &selected))
        .map(|o| {
            format!(
                "{} {ns}/{}",
                o.kind,
                o.meta.name.as_deref().unwrap_or_default()
            )
        })
        .collect()
}

/// The provider's inputs in `ns` (see [`foreign`]) that removing the namespace would delete
/// while another provider object of `others` (any kind, namespace or API) reads them too, as
/// "Kind ns/name (read by Kind ns/name, …)". `selected(q, labels)` tells whether provider `q`'s
/// `fetchConfig.selector` selects a ConfigMap. A reader being deleted does not count: it never
/// reads its inputs again, and two deleting providers must not wait for each other.
pub fn shared<'a>(
    p: &AnyProvider,
    ns: &str,
    found: impl IntoIterator<Item = Found<'a>>,
    others: &[AnyProvider],
    selected: impl Fn(&AnyProvider, &BTreeMap<String, String>) -> bool,
) -> Vec<String> {
    let readers_of = |o: &Found<'_>| -> Vec<String> {
        others
            .iter()
            .filter(|q| !super::preflight::same(q, p) && q.metadata.deletion_timestamp.is_none())
            .filter(|q| input(q, ns, o, &|l: &BTreeMap<String, String>| selected(q, l)))
            .map(|q| format!("{} {}/{}", q.provider_type.kind(), q.namespace(), q.name()))
            .collect()
    };
    found
        .into_iter()
        .filter(|o| input(p, ns, o, &|l: &BTreeMap<String, String>| selected(p, l)))
        .filter_map(|o| {
            let readers = readers_of(&o);
            (!readers.is_empty()).then(|| {
                format!(
                    "{} {ns}/{} (read by {})",
                    o.kind,
                    o.meta.name.as_deref().unwrap_or_default(),
                    readers.join(", ")
                )
            })
        })
        .collect()
}

fn belongs(
    p: &AnyProvider,
    ns: &str,
    o: &Found<'_>,
    selected: &impl Fn(&BTreeMap<String, String>) -> bool,
) -> bool {
    let name = o.meta.name.as_deref().unwrap_or_default();
    let empty = BTreeMap::new();
    let labels = o.meta.labels.as_ref().unwrap_or(&empty);
    let owned = owned_by(labels, p);
    let derived = o
        .meta
        .owner_references
        .as_ref()
        .is_some_and(|r| !r.is_empty());
    let everywhere = matches!(
        (o.group, o.kind, name),
        ("", "ConfigMap", "kube-root-ca.crt") | ("", "ServiceAccount", "default")
    );
    let runtime = RUNTIME_KINDS.contains(&(o.group, o.kind));
    let issued = o.group.is_empty()
        && o.kind == "Secret"
        && o.meta
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key("cert-manager.io/certificate-name"));
    let itself = PROVIDER_GROUPS.contains(&o.group)
        && o.kind == p.provider_type.kind()
        && ns == p.namespace()
        && name == p.name();
    owned || derived || everywhere || runtime || issued || itself || input(p, ns, o, selected)
}

// What the provider reads in `ns`: its variables Secret, its additional manifests, the
// ConfigMaps of its fetchConfig selector.
fn input(
    p: &AnyProvider,
    ns: &str,
    o: &Found<'_>,
    selected: &impl Fn(&BTreeMap<String, String>) -> bool,
) -> bool {
    let name = o.meta.name.as_deref().unwrap_or_default();
    let here = |other: Option<&String>| other.map_or(p.namespace(), String::as_str) == ns;
    match (o.group, o.kind) {
        ("", "Secret") => {
            p.spec.secret_name.as_deref() == Some(name) && here(p.spec.secret_namespace.as_ref())
        }
        ("", "ConfigMap") => {
            let extra = p
                .spec
                .additional_manifests
                .as_ref()
                .is_some_and(|r| r.name == name && here(r.namespace.as_ref()));
            let release = ns == p.namespace()
                && p.spec
                    .fetch_config
                    .as_ref()
                    .is_some_and(|f| f.selector.is_some())
                && selected(o.meta.labels.as_ref().unwrap_or(&BTreeMap::new()));
            extra || release
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::{
        ConfigMapReference, FetchConfiguration, OWNER_KIND_LABEL, OWNER_NAME_LABEL,
        OWNER_NAMESPACE_LABEL, ProviderSpec, ProviderType, conditions::reason as r,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    fn provider(policy: DeletionPolicy) -> AnyProvider {
        AnyProvider {
            api: Default::default(),
            provider_type: ProviderType::Infrastructure,
            metadata: ObjectMeta {
                name: Some("sample".into()),
                namespace: Some("infra-system".into()),
                ..Default::default()
            },
            spec: ProviderSpec {
                deletion_policy: policy,
                secret_name: Some("vars".into()),
                additional_manifests: Some(ConfigMapReference {
                    name: "extra".into(),
                    namespace: None,
                }),
                fetch_config: Some(FetchConfiguration {
                    selector: Some(Default::default()),
                    ..Default::default()
                }),
                ..Default::default()
            },
            status: None,
        }
    }

    fn facts(policy: DeletionPolicy, blockers: &[String], components: usize) -> Facts<'_> {
        Facts {
            policy,
            blockers,
            components,
            crds: &[],
            namespace: None,
            foreign: None,
            shared: &[],
        }
    }

    fn reason_of(s: &Step) -> Option<&str> {
        match s {
            Step::Wait(d) | Step::Remove(d) => Some(&d.reason),
            Step::Orphan(n) | Step::Purge { note: n, .. } => Some(n.reason),
            Step::Release => None,
        }
    }

    #[test]
    fn orphan_releases_at_once_whatever_is_left() {
        let p = provider(DeletionPolicy::Orphan);
        assert!(!looks_for_blockers(DeletionPolicy::Orphan));
        let blockers = ["SampleMachine default/m".to_string()];
        let f = Facts {
            crds: &["a.example".into()],
            namespace: Some("infra-system"),
            ..facts(DeletionPolicy::Orphan, &blockers, 7)
        };
        let step = next(&p, &f);
        assert_eq!(reason_of(&step), Some(r::ORPHANED));
        let Step::Orphan(note) = step else {
            panic!("not an orphan step")
        };
        assert!(note.ok);
        assert!(
            note.message
                .contains("a new InfrastructureProvider named sample in namespace infra-system"),
            "{}",
            note.message
        );
        assert_eq!(must_look(&f), None);
    }

    #[test]
    fn block_waits_removes_then_releases_keeping_crds_and_namespace() {
        let p = provider(DeletionPolicy::Block);
        assert!(looks_for_blockers(DeletionPolicy::Block));
        let blockers = ["SampleMachine default/m".to_string()];
        let step = next(&p, &facts(DeletionPolicy::Block, &blockers, 3));
        let Step::Wait(d) = &step else {
            panic!("{step:?}")
        };
        assert_eq!(d.reason, r::DELETION_BLOCKED);
        assert!(!d.ok);
        assert_eq!(
            d.message,
            "deletion waits until these are gone: SampleMachine default/m"
        );
        let step = next(&p, &facts(DeletionPolicy::Block, &[], 3));
        let Step::Remove(d) = &step else {
            panic!("{step:?}")
        };
        assert_eq!(
            d.message,
            "removing 3 installed objects (CRDs and the namespace are kept)"
        );
        let f = Facts {
            crds: &["a.example".into()],
            namespace: Some("infra-system"),
            ..facts(DeletionPolicy::Block, &[], 0)
        };
        assert_eq!(must_look(&f), None);
        assert_eq!(next(&p, &f), Step::Release);
    }

    #[test]
    fn purge_waits_for_custom_resources_and_foreign_objects_before_removing_anything() {
        let p = provider(DeletionPolicy::Purge);
        let crds = ["a.example".to_string(), "b.example".to_string()];
        let blockers = ["SampleMachine default/m".to_string()];
        let base = |blockers, components| Facts {
            crds: &crds,
            namespace: Some("infra-system"),
            ..facts(DeletionPolicy::Purge, blockers, components)
        };
        // A custom resource: the same wait as Block, nothing looked at in the namespace.
        let f = base(&blockers, 0);
        assert_eq!(must_look(&f), None);
        assert_eq!(reason_of(&next(&p, &f)), Some(r::DELETION_BLOCKED));
        // Components first.
        let f = base(&[], 2);
        assert_eq!(must_look(&f), None);
        assert_eq!(reason_of(&next(&p, &f)), Some(r::DELETING));
        // Then the namespace is looked at, and a foreign object waits.
        let f = base(&[], 0);
        assert_eq!(must_look(&f), Some("infra-system"));
        assert_eq!(reason_of(&next(&p, &f)), Some(r::PURGE_BLOCKED));
        let left = ["ConfigMap infra-system/mine".to_string()];
        let f = Facts {
            foreign: Some(&left),
            ..base(&[], 0)
        };
        let step = next(&p, &f);
        let Step::Wait(d) = &step else {
            panic!("{step:?}")
        };
        assert_eq!(d.reason, r::PURGE_BLOCKED);
        assert!(
            d.message.contains(
                "namespace infra-system holds objects the provider did not install: ConfigMap infra-system/mine"
            ),
            "{}",
            d.message
        );
        // Nothing foreign: CRDs then the namespace.
        let f = Facts {
            foreign: Some(&[]),
            ..base(&[], 0)
        };
        let Step::Purge {
            crds: c,
            namespace,
            note,
        } = next(&p, &f)
        else {
            panic!("no purge")
        };
        assert_eq!(c, crds);
        assert_eq!(namespace.as_deref(), Some("infra-system"));
        assert_eq!(
            note.message,
            "deletionPolicy Purge: no custom resource was left; removed CRDs a.example, b.example and namespace infra-system"
        );
    }

    #[test]
    fn purge_resumes_where_the_cluster_is() {
        let p = provider(DeletionPolicy::Purge);
        // Stopped after the CRDs went: the namespace alone is left.
        let f = Facts {
            namespace: Some("infra-system"),
            foreign: Some(&[]),
            ..facts(DeletionPolicy::Purge, &[], 0)
        };
        let Step::Purge {
            crds, namespace, ..
        } = next(&p, &f)
        else {
            panic!("no purge")
        };
        assert!(crds.is_empty());
        assert_eq!(namespace.as_deref(), Some("infra-system"));
        // A release without a namespace of its own: CRDs only, nothing to look at.
        let f = Facts {
            crds: &["a.example".into()],
            ..facts(DeletionPolicy::Purge, &[], 0)
        };
        assert_eq!(must_look(&f), None);
        assert!(matches!(
            next(&p, &f),
            Step::Purge {
                namespace: None,
                ..
            }
        ));
        // Everything gone.
        assert_eq!(
            next(&p, &facts(DeletionPolicy::Purge, &[], 0)),
            Step::Release
        );
    }

    #[test]
    fn the_policy_may_change_while_a_deletion_waits() {
        let blockers = ["SampleMachine default/m".to_string()];
        let crds = ["a.example".to_string()];
        let at = |policy, blockers| Facts {
            crds: &crds,
            namespace: Some("infra-system"),
            foreign: Some(&[]),
            ..facts(policy, blockers, 0)
        };
        // A Block deletion waiting for a custom resource lets go at once under Orphan.
        let p = provider(DeletionPolicy::Block);
        assert_eq!(
            reason_of(&next(&p, &at(DeletionPolicy::Block, &blockers))),
            Some(r::DELETION_BLOCKED)
        );
        assert_eq!(
            reason_of(&next(&p, &at(DeletionPolicy::Orphan, &blockers))),
            Some(r::ORPHANED)
        );
        // Block done with the components releases; Purge asked for then removes CRDs and
        // namespace; Block asked for during a Purge keeps them.
        assert_eq!(next(&p, &at(DeletionPolicy::Block, &[])), Step::Release);
        assert!(matches!(
            next(&p, &at(DeletionPolicy::Purge, &[])),
            Step::Purge { .. }
        ));
        // A Purge never skips the custom-resource wait, whatever came before.
        assert_eq!(
            reason_of(&next(&p, &at(DeletionPolicy::Purge, &blockers))),
            Some(r::DELETION_BLOCKED)
        );
    }

    fn meta(name: &str) -> ObjectMeta {
        ObjectMeta {
            name: Some(name.into()),
            namespace: Some("infra-system".into()),
            ..Default::default()
        }
    }

    fn labelled(name: &str, pairs: &[(&str, &str)]) -> ObjectMeta {
        ObjectMeta {
            labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            ..meta(name)
        }
    }

    fn owned_by(name: &str) -> ObjectMeta {
        labelled(
            "manager",
            &[
                (OWNER_KIND_LABEL, "InfrastructureProvider"),
                (OWNER_NAMESPACE_LABEL, "infra-system"),
                (OWNER_NAME_LABEL, name),
            ],
        )
    }

    #[test]
    fn foreign_objects_are_what_the_provider_neither_installed_nor_reads() {
        let p = provider(DeletionPolicy::Purge);
        let (ours, others) = (owned_by("sample"), owned_by("other"));
        let pod = ObjectMeta {
            owner_references: Some(vec![OwnerReference {
                kind: "ReplicaSet".into(),
                name: "m-1".into(),
                ..Default::default()
            }]),
            ..meta("m-1-x")
        };
        let issued = ObjectMeta {
            annotations: Some(
                [("cert-manager.io/certificate-name".to_string(), "c".into())].into(),
            ),
            ..meta("webhook-cert")
        };
        let release = labelled("sample-v0.1.0", &[("provider.cluster.x-k8s.io/name", "s")]);
        let (user, vars, extra, root, sa, lease, mine, sibling, user_secret) = (
            meta("mine"),
            meta("vars"),
            meta("extra"),
            meta("kube-root-ca.crt"),
            meta("default"),
            meta("leader"),
            meta("sample"),
            meta("other"),
            meta("token"),
        );
        let found = [
            ("apps", "Deployment", &ours),
            ("apps", "Deployment", &others),
            ("", "Pod", &pod),
            ("", "Secret", &issued),
            ("", "Secret", &vars),
            ("", "Secret", &user_secret),
            ("", "ConfigMap", &extra),
            ("", "ConfigMap", &release),
            ("", "ConfigMap", &root),
            ("", "ConfigMap", &user),
            ("", "ServiceAccount", &sa),
            ("coordination.k8s.io", "Lease", &lease),
            (
                "management.cluster.x-k8s.io",
                "InfrastructureProvider",
                &mine,
            ),
            (
                "management.cluster.x-k8s.io",
                "InfrastructureProvider",
                &sibling,
            ),
        ]
        .map(|(group, kind, meta)| Found { group, kind, meta });
        let selected =
            |l: &BTreeMap<String, String>| l.contains_key("provider.cluster.x-k8s.io/name");
        assert_eq!(
            foreign(&p, "infra-system", found, selected),
            [
                "Deployment infra-system/manager",
                "Secret infra-system/token",
                "ConfigMap infra-system/mine",
                "InfrastructureProvider infra-system/other",
            ]
        );
        // In another namespace the provider's inputs are someone else's objects.
        let found = [("", "Secret", &vars), ("", "ConfigMap", &release)]
            .map(|(group, kind, meta)| Found { group, kind, meta });
        assert_eq!(
            foreign(&p, "elsewhere", found, selected),
            ["Secret elsewhere/vars", "ConfigMap elsewhere/sample-v0.1.0"]
        );
    }

    #[test]
    fn an_input_another_provider_reads_blocks_the_purge_naming_the_reader() {
        let p = provider(DeletionPolicy::Purge);
        let reader = |name: &str, ns: &str, spec: ProviderSpec| AnyProvider {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                ..Default::default()
            },
            spec,
            provider_type: ProviderType::Core,
            ..provider(DeletionPolicy::Block)
        };
        // Reads the variables Secret from another namespace.
        let vars_reader = reader(
            "core",
            "capi-system",
            ProviderSpec {
                secret_name: Some("vars".into()),
                secret_namespace: Some("infra-system".into()),
                ..Default::default()
            },
        );
        // Reads the additional manifests from another namespace.
        let extra_reader = reader(
            "other",
            "elsewhere",
            ProviderSpec {
                additional_manifests: Some(ConfigMapReference {
                    name: "extra".into(),
                    namespace: Some("infra-system".into()),
                }),
                ..Default::default()
            },
        );
        // Reads a Secret of the same name in its own namespace: not the same object.
        let namesake = reader(
            "namesake",
            "elsewhere",
            ProviderSpec {
                secret_name: Some("vars".into()),
                ..Default::default()
            },
        );
        // On its way out: it never reads again.
        let mut leaving = vars_reader.clone();
        leaving.metadata.name = Some("leaving".into());
        leaving.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        let (vars, extra, user) = (meta("vars"), meta("extra"), meta("mine"));
        let found = || {
            [
                ("", "Secret", &vars),
                ("", "ConfigMap", &extra),
                ("", "ConfigMap", &user),
            ]
            .map(|(group, kind, meta)| Found { group, kind, meta })
        };
        let none = |_: &AnyProvider, _: &BTreeMap<String, String>| false;
        // The provider itself is not a reader of its own inputs.
        let alone = [p.clone(), namesake.clone(), leaving.clone()];
        assert!(shared(&p, "infra-system", found(), &alone, none).is_empty());
        let others = [p.clone(), vars_reader, extra_reader, namesake, leaving];
        assert_eq!(
            shared(&p, "infra-system", found(), &others, none),
            [
                "Secret infra-system/vars (read by CoreProvider capi-system/core)",
                "ConfigMap infra-system/extra (read by CoreProvider elsewhere/other)",
            ]
        );
    }

    #[test]
    fn shared_inputs_make_the_purge_wait_until_their_readers_are_gone() {
        let p = provider(DeletionPolicy::Purge);
        let shared = [
            "Secret infra-system/vars (read by CoreProvider capi-system/core)".to_string(),
            "ConfigMap infra-system/extra (read by CoreProvider elsewhere/other)".to_string(),
        ];
        // Nothing foreign, but shared inputs: the purge waits, removing nothing, and says why.
        let crds = ["a.example".to_string()];
        let f = Facts {
            crds: &crds,
            namespace: Some("infra-system"),
            foreign: Some(&[]),
            shared: &shared,
            ..facts(DeletionPolicy::Purge, &[], 0)
        };
        let step = next(&p, &f);
        let Step::Wait(d) = &step else {
            panic!("{step:?}")
        };
        assert_eq!(d.reason, r::PURGE_BLOCKED);
        assert!(!d.ok);
        assert_eq!(
            d.message,
            "deletionPolicy Purge waits: removing namespace infra-system would delete what other providers read: Secret infra-system/vars (read by CoreProvider capi-system/core), ConfigMap infra-system/extra (read by CoreProvider elsewhere/other); point them elsewhere or delete them, or set deletionPolicy to Block to keep the CRDs and the namespace"
        );
        // Once the readers are gone, the purge goes on.
        let f = Facts { shared: &[], ..f };
        assert!(matches!(next(&p, &f), Step::Purge { .. }));
    }

    #[test]
    fn a_custom_resource_found_by_the_last_look_blocks_the_purge() {
        assert_eq!(rechecked(&[]), None);
        let d = rechecked(&["SampleMachine default/late".into()]).expect("blocked");
        assert_eq!(d.reason, r::PURGE_BLOCKED);
        assert!(!d.ok);
        assert!(
            d.message.contains("SampleMachine default/late"),
            "{}",
            d.message
        );
    }
}
