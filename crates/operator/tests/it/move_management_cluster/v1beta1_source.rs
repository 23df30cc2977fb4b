//! `move` from a source whose Cluster API serves Clusters only as v1beta1 (Cluster API v1.10
//! and older), between two local control planes each with the operator running:
//!
//! - the source runs the sample core provider (its managers Running) with a variables Secret
//!   and a release selector of `matchExpressions` only, serves `clusters.cluster.x-k8s.io`
//!   only at v1beta1 (a hand-written CRD: no real Cluster API is needed to be listed) and holds
//!   one Cluster there, plus a Secret labelled `clusterctl.cluster.x-k8s.io/move` in a
//!   namespace without a Cluster and a ConfigMap the selector does not select;
//! - the target holds a same-named variables Secret with other data: `move` refuses, naming
//!   it (no value printed), and writes nothing on either side;
//! - `move --dry-run` plans a clusterctl move of both namespaces (the v1beta1 Cluster and the
//!   labelled Secret are seen), not only the retirement;
//! - `move` with a clusterctl that reports success but moves nothing declares the provider on
//!   the target (its Secret and the one release ConfigMap it reads, not the unrelated one),
//!   then lists the source again and refuses to retire: the source's provider object stays and
//!   its managers keep their replicas.

use crate::{
    move_management_cluster::{provider_objects, run_move},
    support,
};

use std::time::{Duration, Instant};

use capi_test_support::{private_cluster, second_private_cluster};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ConfigMap, Secret},
};
use kube::{Api, Client};
use support::*;

const CORE_NS: &str = "capi-system";
const MANAGER: &str = "sample-core-controller-manager";

/// Cluster API's Cluster kind as v1.10 and older serve it: v1beta1 only.
const CLUSTERS_V1BETA1: &str = "apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\nmetadata:\n  name: clusters.cluster.x-k8s.io\nspec:\n  group: cluster.x-k8s.io\n  scope: Namespaced\n  names: {kind: Cluster, listKind: ClusterList, plural: clusters, singular: cluster}\n  versions:\n  - name: v1beta1\n    served: true\n    storage: true\n    schema:\n      openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}\n";

/// The core provider with a variables Secret and a release selector of expressions only.
fn core_provider_with_inputs() -> String {
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: core-vars\n  namespace: {CORE_NS}\nstringData:\n  SAMPLE_GREETING: from-the-source\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: unrelated\n  namespace: {CORE_NS}\ndata:\n  note: not a release\n---\napiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {CORE_NS}\nspec:\n  version: v0.2.0\n  secretName: core-vars\n  fetchConfig:\n    selector:\n      matchExpressions:\n      - {{key: provider.cluster.x-k8s.io/name, operator: In, values: [sample-core]}}\n"
    )
}

/// A clusterctl that reports v1.12.0 and a successful move, and moves nothing.
fn clusterctl_moving_nothing() -> Result<std::path::PathBuf, Box<dyn std::error::Error>> {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("capi-move-v1beta1-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("clusterctl");
    std::fs::write(
        &path,
        "#!/bin/sh\nif [ \"$1\" = version ]; then echo v1.12.0; fi\nexit 0\n",
    )?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(path)
}

async fn replicas(client: &Client) -> Option<i32> {
    Api::<Deployment>::namespaced(client.clone(), CORE_NS)
        .get_opt(MANAGER)
        .await
        .ok()??
        .spec?
        .replicas
}

async fn configmap(client: &Client, name: &str) -> Option<ConfigMap> {
    Api::<ConfigMap>::namespaced(client.clone(), CORE_NS)
        .get_opt(name)
        .await
        .ok()?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_v1beta1_cluster_is_moved_before_anything_is_retired() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let started = Instant::now();
    let source = private_cluster()?;
    let target = second_private_cluster()?;
    source.install_crds()?;
    target.install_crds()?;
    let src = source.client().await?;
    let tgt = target.client().await?;
    load_core(source, &src, CORE_NS).await?;
    let _src_operator = start_operator(source, &[])?;
    let _tgt_operator = start_operator(target, &[])?;
    apply(source, &core_provider_with_inputs())?;
    wait_condition(
        &src,
        ("CoreProvider", CORE_NS, "cluster-api"),
        "Ready",
        "True",
        None,
        Duration::from_secs(180),
    )
    .await?;
    apply(source, CLUSTERS_V1BETA1)?;
    source.kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/clusters.cluster.x-k8s.io",
        "--timeout=60s",
    ])?;
    apply(
        source,
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: workload\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: credentials\n---\napiVersion: cluster.x-k8s.io/v1beta1\nkind: Cluster\nmetadata:\n  name: w1\n  namespace: workload\nspec: {}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: cloud\n  namespace: credentials\n  labels: {clusterctl.cluster.x-k8s.io/move: \"\"}\nstringData:\n  token: not-a-real-one\n",
    )?;
    let before = provider_objects(source)?;
    assert_eq!(before, ["CoreProvider capi-system/cluster-api"]);
    let running = replicas(&src).await;
    assert_eq!(running, Some(1));
    let clusterctl = clusterctl_moving_nothing()?;
    let set_up = started.elapsed();

    // A same-named Secret with other data on the target: refused, named, nothing written.
    apply(
        target,
        &format!(
            "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {CORE_NS}\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: core-vars\n  namespace: {CORE_NS}\nstringData:\n  SAMPLE_GREETING: the-targets-own\n"
        ),
    )?;
    let (ok, out) = run_move(source, target, &clusterctl, &[])?;
    assert!(
        !ok,
        "a differing Secret on the target was not refused:\n{out}"
    );
    assert!(
        out.contains("Secret capi-system/core-vars already exists on the target"),
        "{out}"
    );
    assert!(out.contains("nothing was changed"), "{out}");
    assert!(
        !out.contains("from-the-source") && !out.contains("the-targets-own"),
        "a Secret value was printed:\n{out}"
    );
    assert!(provider_objects(target)?.is_empty());
    assert!(configmap(&tgt, "sample-core-v0.2.0").await.is_none());
    let kept = Api::<Secret>::namespaced(tgt.clone(), CORE_NS)
        .get("core-vars")
        .await?;
    assert_eq!(
        kept.data
            .as_ref()
            .and_then(|d| d.get("SAMPLE_GREETING"))
            .map(|v| v.0.as_slice()),
        Some(&b"the-targets-own"[..]),
        "the target's Secret was overwritten"
    );
    target.kubectl_ok(&["delete", "secret", "core-vars", "-n", CORE_NS])?;

    // The dry run sees the v1beta1 Cluster and the labelled Secret.
    let (ok, out) = run_move(source, target, &clusterctl, &["--dry-run"])?;
    assert!(ok, "{out}");
    assert!(
        out.contains(
            "clusterctl move the Cluster API objects of namespace(s) credentials, workload"
        ),
        "the dry run plans no move of the v1beta1 Cluster and the labelled Secret:\n{out}"
    );
    assert!(provider_objects(target)?.is_empty(), "the dry run declared");

    // clusterctl says it moved, but the Cluster is still on the source: nothing is retired.
    let moving = Instant::now();
    let (ok, out) = run_move(source, target, &clusterctl, &[])?;
    let took = moving.elapsed();
    assert!(
        !ok,
        "move retired the source with its Cluster still there:\n{out}"
    );
    assert!(
        out.contains("not retiring")
            && out.contains("Cluster workload/w1")
            && out.contains("Secret credentials/cloud"),
        "{out}"
    );
    assert!(!out.contains("retired CoreProvider"), "{out}");
    assert_eq!(provider_objects(source)?, before);
    assert_eq!(
        replicas(&src).await,
        running,
        "the source's managers were scaled"
    );
    source.kubectl_ok(&[
        "get",
        "clusters.v1beta1.cluster.x-k8s.io",
        "w1",
        "-n",
        "workload",
    ])?;
    // The target got the provider with exactly what it reads.
    assert_eq!(provider_objects(target)?, before);
    assert!(configmap(&tgt, "sample-core-v0.2.0").await.is_some());
    assert!(
        configmap(&tgt, "unrelated").await.is_none(),
        "a ConfigMap the selector does not select was copied"
    );
    eprintln!(
        "MEASURED move (v1beta1 source): set-up {:.1} s, refused move {:.1} s, all {:.1} s",
        set_up.as_secs_f64(),
        took.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    Ok(())
}
