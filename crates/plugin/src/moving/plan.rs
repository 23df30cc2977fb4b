//! The decisions of `move`, free of any Kubernetes client: comparing the providers of the two
//! management clusters, refusing when they disagree, and planning the steps left to do. Each
//! step is derived from what the two clusters hold now, so running `move` again after an
//! interruption plans only what is still missing.

use std::fmt;

use capi_operator_api::ProviderType;

/// A provider object's identity: type, namespace and name (the same on both sides).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Key {
    /// Its type.
    pub provider_type: ProviderType,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}/{}",
            self.provider_type.kind(),
            self.namespace,
            self.name
        )
    }
}

/// What `move` needs to know of one provider object on one side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declared {
    /// Which provider.
    pub key: Key,
    /// `spec.version` (`None`: the latest release).
    pub version: Option<String>,
    /// `status.contract`, once installed.
    pub contract: Option<String>,
    /// `Ready=True` at its declared version.
    pub ready: bool,
    /// Deletion has started (a rerun after the object was deleted but not yet gone).
    pub deleting: bool,
}

/// One object of the source that `clusterctl move` takes: a Cluster, a ClusterClass, a
/// ClusterResourceSet or an object labelled `clusterctl.cluster.x-k8s.io/move`. While one is on
/// the source, its providers are still needed there.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Movable {
    /// Its kind (`Cluster`, `Secret`, ...).
    pub kind: String,
    /// Its namespace (`clusterctl move` works namespace by namespace).
    pub namespace: String,
    /// Its name.
    pub name: String,
}

impl fmt::Display for Movable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}/{}", self.kind, self.namespace, self.name)
    }
}

/// Splits the source's movable objects into those of the namespace moved (every namespace when
/// `namespace` is `None`) and those left outside it.
pub fn split(all: Vec<Movable>, namespace: Option<&str>) -> (Vec<Movable>, Vec<Movable>) {
    all.into_iter()
        .partition(|m| namespace.is_none_or(|ns| m.namespace == ns))
}

/// Whether the source may lose its providers: only when a fresh listing after `clusterctl move`
/// finds nothing `clusterctl move` should have taken. A move that reported success but left
/// objects behind (an older clusterctl, an object it skipped) keeps the providers running.
pub fn retire_allowed(still_on_source: &[Movable]) -> Result<(), String> {
    if still_on_source.is_empty() {
        return Ok(());
    }
    let names: Vec<String> = still_on_source.iter().map(ToString::to_string).collect();
    Err(format!(
        "the source still holds {}; its providers still manage them, so none was retired (move them, then run move again)",
        names.join(", ")
    ))
}

/// Everything the plan is made from.
#[derive(Debug, Clone, Default)]
pub struct Sides {
    /// The provider objects of the source.
    pub source: Vec<Declared>,
    /// The provider objects of the target.
    pub target: Vec<Declared>,
    /// Both kubeconfigs reach the same cluster (their kube-system namespaces are one).
    pub same_cluster: bool,
    /// The source's objects that this move takes (see [`Movable`]).
    pub to_move: Vec<Movable>,
    /// The source's movable objects outside the namespace moved: they keep its providers.
    pub left: Vec<Movable>,
}

/// Why `move` refuses to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Conflict {
    /// Source and target are one cluster: retiring the source would remove the target.
    SameCluster,
    /// The source has no provider objects of this operator.
    NothingDeclared,
    /// A provider is declared at different versions on the two sides.
    Version {
        /// Which provider.
        key: Key,
        /// Its version on the source.
        source: String,
        /// Its version on the target.
        target: String,
    },
    /// A provider follows different contracts on the two sides.
    Contract {
        /// Which provider.
        key: Key,
        /// Its contract on the source.
        source: String,
        /// Its contract on the target.
        target: String,
    },
    /// A source provider is not Ready: what runs there is not what is declared.
    SourceNotReady(Key),
}

fn shown(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "latest".into())
}

impl fmt::Display for Conflict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Conflict::SameCluster => f.write_str(
                "the source and the target are the same cluster (one kube-system namespace): moving would delete the providers it keeps",
            ),
            Conflict::NothingDeclared => {
                f.write_str("the source declares no provider objects: nothing to move")
            }
            Conflict::Version {
                key,
                source,
                target,
            } => write!(
                f,
                "{key}: version {source} on the source, {target} on the target; upgrade one side first (clusterctl move needs the same providers on both)"
            ),
            Conflict::Contract {
                key,
                source,
                target,
            } => write!(
                f,
                "{key}: contract {source} on the source, {target} on the target; the moved objects would be served at another API version"
            ),
            Conflict::SourceNotReady(key) => write!(
                f,
                "{key} is not Ready on the source; make it Ready (or finish its upgrade) before moving"
            ),
        }
    }
}

/// One step of a move, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Declare the provider on the target: its object, its variables Secret, its additional
    /// manifests and release ConfigMaps, as on the source.
    Declare(Key),
    /// Wait until these providers are Ready on the target.
    WaitReady(Vec<Key>),
    /// Run `clusterctl move` for these namespaces (each holds a [`Movable`]).
    Move(Vec<String>),
    /// Retire the source's provider: `deletionPolicy: Orphan`, delete the object, stop its
    /// managers (replicas 0), keeping CRDs, Secrets and inventory.
    Retire(Key),
}

impl fmt::Display for Step {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Step::Declare(k) => write!(f, "declare {k} on the target, with its inputs"),
            Step::WaitReady(keys) => write!(
                f,
                "wait until {} provider(s) are Ready on the target",
                keys.len()
            ),
            Step::Move(ns) => write!(
                f,
                "clusterctl move the Cluster API objects of namespace(s) {}",
                ns.join(", ")
            ),
            Step::Retire(k) => write!(
                f,
                "retire {k} on the source: deletionPolicy Orphan, delete the object, scale its managers to 0"
            ),
        }
    }
}

/// The plan: the steps left, and what is deliberately left undone.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    /// The steps, in order.
    pub steps: Vec<Step>,
    /// Why the source's providers stay (movable objects outside the namespace moved).
    pub kept: Option<String>,
}

/// Compares the two sides: every reason to refuse.
pub fn compare(sides: &Sides) -> Vec<Conflict> {
    let mut out = Vec::new();
    if sides.same_cluster {
        out.push(Conflict::SameCluster);
    }
    if sides.source.is_empty() && !sides.to_move.is_empty() {
        out.push(Conflict::NothingDeclared);
    }
    for s in &sides.source {
        if !s.ready && !s.deleting {
            out.push(Conflict::SourceNotReady(s.key.clone()));
        }
        let Some(t) = sides.target.iter().find(|t| t.key == s.key) else {
            continue;
        };
        if s.version != t.version {
            out.push(Conflict::Version {
                key: s.key.clone(),
                source: shown(&s.version),
                target: shown(&t.version),
            });
        }
        if let (Some(a), Some(b)) = (&s.contract, &t.contract)
            && a != b
        {
            out.push(Conflict::Contract {
                key: s.key.clone(),
                source: a.clone(),
                target: b.clone(),
            });
        }
    }
    out
}

/// The steps left to move what `sides` describes, or every reason to refuse.
pub fn plan(sides: &Sides) -> Result<Plan, Vec<Conflict>> {
    let conflicts = compare(sides);
    if !conflicts.is_empty() {
        return Err(conflicts);
    }
    let mut steps = Vec::new();
    let on_target = |k: &Key| sides.target.iter().find(|t| &t.key == k);
    let live: Vec<&Declared> = sides.source.iter().filter(|s| !s.deleting).collect();
    for s in &live {
        if on_target(&s.key).is_none() {
            steps.push(Step::Declare(s.key.clone()));
        }
    }
    let unready: Vec<Key> = live
        .iter()
        .filter(|s| !on_target(&s.key).is_some_and(|t| t.ready))
        .map(|s| s.key.clone())
        .collect();
    if !unready.is_empty() {
        steps.push(Step::WaitReady(unready));
    }
    if !sides.to_move.is_empty() {
        let mut namespaces: Vec<String> =
            sides.to_move.iter().map(|m| m.namespace.clone()).collect();
        namespaces.sort();
        namespaces.dedup();
        steps.push(Step::Move(namespaces));
    }
    if !sides.left.is_empty() {
        let left: Vec<String> = sides.left.iter().map(ToString::to_string).collect();
        let kept = format!(
            "the source's providers stay: they still manage {} outside the namespace moved",
            left.join(", ")
        );
        return Ok(Plan {
            steps,
            kept: Some(kept),
        });
    }
    // The core provider last: the others' objects may still need its CRDs' conversion.
    let mut retire: Vec<Key> = sides.source.iter().map(|s| s.key.clone()).collect();
    retire.sort_by_key(|k| (k.provider_type == ProviderType::Core, k.clone()));
    steps.extend(retire.into_iter().map(Step::Retire));
    Ok(Plan { steps, kept: None })
}

/// Whether `clusterctl` of `clusterctl_version` can move objects of a core provider at
/// `core_version`: clusterctl v1.12 or newer (the v1beta2 API), not older than the core
/// provider's minor (an older clusterctl does not know the objects' newest API).
pub fn clusterctl_fits(clusterctl_version: &str, core_version: Option<&str>) -> Result<(), String> {
    let parse = |v: &str| -> Option<(u64, u64)> {
        let mut it = v.trim().trim_start_matches('v').split(['.', '-', '+']);
        Some((it.next()?.parse().ok()?, it.next()?.parse().ok()?))
    };
    let have = parse(clusterctl_version)
        .ok_or_else(|| format!("clusterctl reports version {clusterctl_version:?}, not vX.Y.Z"))?;
    if have < (1, 12) {
        return Err(format!(
            "clusterctl {clusterctl_version} is older than v1.12; use clusterctl v1.12 or newer"
        ));
    }
    if let Some(core) = core_version.and_then(parse)
        && have < core
    {
        return Err(format!(
            "clusterctl {clusterctl_version} is older than the core provider (v{}.{}); use clusterctl v{}.{} or newer",
            core.0, core.1, core.0, core.1
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(t: ProviderType, ns: &str, name: &str) -> Key {
        Key {
            provider_type: t,
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn p(t: ProviderType, ns: &str, name: &str, v: &str) -> Declared {
        Declared {
            key: key(t, ns, name),
            version: Some(v.into()),
            contract: Some("v1beta2".into()),
            ready: true,
            deleting: false,
        }
    }

    fn source() -> Vec<Declared> {
        vec![
            p(ProviderType::Core, "capi-system", "cluster-api", "v1.12.0"),
            p(
                ProviderType::Infrastructure,
                "capd-system",
                "docker",
                "v1.12.0",
            ),
        ]
    }

    fn m(kind: &str, ns: &str, name: &str) -> Movable {
        Movable {
            kind: kind.into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn sides(target: Vec<Declared>) -> Sides {
        Sides {
            source: source(),
            target,
            to_move: vec![m("Cluster", "workload", "w1")],
            ..Sides::default()
        }
    }

    #[test]
    fn a_fresh_target_gets_everything_then_the_move_then_the_source_is_retired() {
        let plan = plan(&sides(Vec::new())).unwrap_or_default();
        let core = key(ProviderType::Core, "capi-system", "cluster-api");
        let infra = key(ProviderType::Infrastructure, "capd-system", "docker");
        assert_eq!(
            plan.steps,
            vec![
                Step::Declare(core.clone()),
                Step::Declare(infra.clone()),
                Step::WaitReady(vec![core.clone(), infra.clone()]),
                Step::Move(vec!["workload".into()]),
                Step::Retire(infra),
                Step::Retire(core),
            ]
        );
        assert_eq!(plan.kept, None);
    }

    #[test]
    fn a_rerun_continues_where_the_last_run_stopped() {
        // Declared and Ready on the target, Clusters moved, the infrastructure provider retired
        // (its object is going): only the core provider is left to retire.
        let mut s = sides(source());
        s.to_move.clear();
        s.source[1].deleting = true;
        s.source[1].ready = false;
        let plan = plan(&s).unwrap_or_default();
        assert_eq!(
            plan.steps,
            vec![
                Step::Retire(key(ProviderType::Infrastructure, "capd-system", "docker")),
                Step::Retire(key(ProviderType::Core, "capi-system", "cluster-api")),
            ]
        );
        // Everything done: nothing planned.
        let done = Sides {
            target: source(),
            ..Sides::default()
        };
        assert_eq!(super::plan(&done), Ok(Plan::default()));
    }

    #[test]
    fn a_declared_but_unready_target_is_waited_for_not_declared_again() {
        let mut target = source();
        target[1].ready = false;
        target[1].contract = None;
        let plan = plan(&sides(target)).unwrap_or_default();
        assert_eq!(
            plan.steps[0],
            Step::WaitReady(vec![key(
                ProviderType::Infrastructure,
                "capd-system",
                "docker"
            )])
        );
        assert!(!plan.steps.iter().any(|s| matches!(s, Step::Declare(_))));
    }

    #[test]
    fn versions_and_contracts_that_differ_are_refused_naming_both() {
        let mut target = source();
        target[0].version = Some("v1.11.0".into());
        target[1].contract = Some("v1beta1".into());
        let conflicts = plan(&sides(target)).err().unwrap_or_default();
        assert_eq!(conflicts.len(), 2, "{conflicts:?}");
        let text: Vec<String> = conflicts.iter().map(ToString::to_string).collect();
        assert!(
            text[0].contains("CoreProvider capi-system/cluster-api: version v1.12.0 on the source, v1.11.0 on the target"),
            "{text:?}"
        );
        assert!(
            text[1].contains("contract v1beta2 on the source, v1beta1 on the target"),
            "{text:?}"
        );
        // A target following "latest" differs from a pinned source.
        let mut target = source();
        target[0].version = None;
        assert!(matches!(
            compare(&sides(target)).as_slice(),
            [Conflict::Version { target, .. }] if target == "latest"
        ));
    }

    #[test]
    fn the_same_cluster_an_unready_source_or_no_providers_are_refused() {
        let mut s = sides(Vec::new());
        s.same_cluster = true;
        s.source[0].ready = false;
        assert_eq!(
            compare(&s),
            vec![
                Conflict::SameCluster,
                Conflict::SourceNotReady(key(ProviderType::Core, "capi-system", "cluster-api"))
            ]
        );
        let none = Sides {
            to_move: vec![m("Cluster", "workload", "w1")],
            ..Sides::default()
        };
        assert_eq!(compare(&none), vec![Conflict::NothingDeclared]);
    }

    #[test]
    fn clusters_left_outside_the_namespaces_moved_keep_the_source_providers() {
        let mut s = sides(source());
        s.to_move = vec![m("Cluster", "a", "w1"), m("Cluster", "a", "w2")];
        s.left = vec![m("Cluster", "b", "w3")];
        let plan = plan(&s).unwrap_or_default();
        assert_eq!(plan.steps, vec![Step::Move(vec!["a".into()])]);
        assert!(plan.kept.is_some_and(|k| k.contains("Cluster b/w3")));
    }

    #[test]
    fn objects_clusterctl_moves_give_their_namespace_a_move_step_even_without_a_cluster() {
        // A ClusterClass in one namespace and a Secret labelled clusterctl.cluster.x-k8s.io/move
        // in another, no Cluster at all: both namespaces are moved before anything is retired.
        let mut s = sides(source());
        s.to_move = vec![
            m("Secret", "credentials", "cloud"),
            m("ClusterClass", "classes", "quick-start"),
        ];
        let plan = plan(&s).unwrap_or_default();
        let infra = key(ProviderType::Infrastructure, "capd-system", "docker");
        let core = key(ProviderType::Core, "capi-system", "cluster-api");
        assert_eq!(
            plan.steps,
            vec![
                Step::Move(vec!["classes".into(), "credentials".into()]),
                Step::Retire(infra),
                Step::Retire(core),
            ]
        );
    }

    #[test]
    fn objects_left_outside_the_namespace_moved_keep_the_providers_like_clusters() {
        let all = vec![
            m("Cluster", "a", "w1"),
            m("ClusterResourceSet", "b", "cni"),
            m("ConfigMap", "a", "labelled"),
        ];
        let (to_move, left) = split(all.clone(), Some("a"));
        assert_eq!(
            to_move,
            vec![m("Cluster", "a", "w1"), m("ConfigMap", "a", "labelled")]
        );
        assert_eq!(left, vec![m("ClusterResourceSet", "b", "cni")]);
        let (everything, none) = split(all, None);
        assert_eq!((everything.len(), none.len()), (3, 0));
        let mut s = sides(source());
        (s.to_move, s.left) = (to_move, left);
        let plan = plan(&s).unwrap_or_default();
        assert!(!plan.steps.iter().any(|s| matches!(s, Step::Retire(_))));
        assert!(
            plan.kept
                .is_some_and(|k| k.contains("ClusterResourceSet b/cni")),
        );
    }

    #[test]
    fn nothing_is_retired_while_a_fresh_listing_finds_an_object_clusterctl_should_have_moved() {
        assert_eq!(retire_allowed(&[]), Ok(()));
        let err = retire_allowed(&[m("Cluster", "workload", "w1")]).err();
        assert!(
            err.as_deref().is_some_and(
                |e| e.contains("Cluster workload/w1") && e.contains("none was retired")
            ),
            "{err:?}"
        );
    }

    #[test]
    fn clusterctl_must_be_v1_12_and_not_older_than_the_core_provider() {
        assert_eq!(clusterctl_fits("v1.12.0", Some("v1.12.3")), Ok(()));
        assert_eq!(clusterctl_fits("v1.13.1", Some("v1.12.0")), Ok(()));
        assert!(clusterctl_fits("v1.11.4", None).is_err());
        assert!(clusterctl_fits("v1.12.0", Some("v1.13.0")).is_err());
        assert!(clusterctl_fits("dev", None).is_err());
    }
}
