//! End-to-end: releases cluster-api-operator downloaded (its ConfigMaps `{type}-{name}-{version}`
//! with its labels, the core one gzip-compressed) are taken over as they are, so a handed-over
//! installation fetches nothing: the local GitHub-compatible server that holds the same
//! releases receives no request at all. The providers are declared as `migrate --convert`
//! writes them (annotated with the version handed over): one declared fresh never takes such a
//! ConfigMap over (the last test).

use crate::support;

use capi_fake_remotes::FakeServer;
use capi_operator_api::{ProviderType, v1alpha2};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Api;
use support::*;

const PROVIDERS: &str = r"
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: CoreProvider
metadata:
  name: cluster-api
  namespace: capi-system
  annotations:
    management.cluster.x-k8s.io/handed-over-version: v1.12.0
spec:
  version: v1.12.0
---
apiVersion: management.cluster.x-k8s.io/v1alpha1
kind: RuntimeExtensionProvider
metadata:
  name: sample
  namespace: sample-extension-system
  annotations:
    management.cluster.x-k8s.io/handed-over-version: v0.2.0
spec:
  version: v0.2.0
  fetchConfig:
    url: https://github.com/example-org/sample-extension/releases
";

/// Writes a release ConfigMap exactly as cluster-api-operator names and labels it.
async fn go_release(
    client: &kube::Client,
    t: ProviderType,
    provider: (&str, &str, &str),
    dir: &std::path::Path,
    components_file: &str,
) -> TestResult {
    let metadata = std::fs::read_to_string(dir.join("metadata.yaml"))?;
    let components = std::fs::read_to_string(dir.join(components_file))?;
    go_release_of(client, t, provider, &metadata, &components).await
}

/// Writes a ConfigMap of `metadata` and `components` named and labelled as
/// cluster-api-operator's release of the provider.
async fn go_release_of(
    client: &kube::Client,
    t: ProviderType,
    (namespace, name, version): (&str, &str, &str),
    metadata: &str,
    components: &str,
) -> TestResult {
    let labels = v1alpha2::release_configmap_labels(t, name, version, false);
    let labels: Vec<(&str, &str)> = labels
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    release_configmap(
        client,
        namespace,
        &v1alpha2::release_configmap_name(t, name, version),
        &labels,
        version,
        metadata,
        components,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn releases_downloaded_by_cluster_api_operator_are_not_fetched_again() -> TestResult {
    let providers = capi_test_support::releases()?;
    let _serial = capi_test_support::isolated(module_path!()).await;
    let (cluster, client) = cluster_with_crds().await?;
    let github = FakeServer::start(
        &providers,
        &[("kubernetes-sigs/cluster-api", &["cluster-api"])],
    )
    .await?;
    for ns in ["capi-system", "sample-extension-system"] {
        cluster.ensure_namespace(ns)?;
    }
    go_release(
        &client,
        ProviderType::Core,
        ("capi-system", "cluster-api", "v1.12.0"),
        &providers.join("cluster-api/v1.12.0"),
        "core-components.yaml",
    )
    .await?;
    go_release(
        &client,
        ProviderType::RuntimeExtension,
        ("sample-extension-system", "sample", "v0.2.0"),
        &samples().join("sample-infrastructure/v0.2.0"),
        "infrastructure-components.yaml",
    )
    .await?;
    // Without the check of newer releases, which asks the source by design: what is checked
    // here is that the releases themselves are not fetched, so GitHub is not asked at all.
    let operator = start_operator(
        cluster,
        &[
            "--github-api-url",
            github.url(),
            "--version-check-seconds=0",
        ],
    )?;
    apply(cluster, PROVIDERS)?;
    for (kind, ns, name, version) in [
        ("CoreProvider", "capi-system", "cluster-api", "v1.12.0"),
        (
            "RuntimeExtensionProvider",
            "sample-extension-system",
            "sample",
            "v0.2.0",
        ),
    ] {
        wait_installed(&client, (kind, ns, name), version, &operator).await?;
    }
    assert_eq!(github.count("/"), 0, "the local GitHub was asked");

    // Both are now entries of this operator's release cache, owned by the new provider objects:
    // the core one replaced in place (same name), the runtime extension one beside the other
    // operator's (its type word differs), so removing the other operator's objects loses nothing.
    for (ns, name, owner) in [
        ("capi-system", "core-cluster-api-v1.12.0", "cluster-api"),
        (
            "sample-extension-system",
            "runtime-extension-sample-v0.2.0",
            "sample",
        ),
    ] {
        let cm = Api::<ConfigMap>::namespaced(client.clone(), ns)
            .get(name)
            .await?;
        let labels = cm.metadata.labels.unwrap_or_default();
        assert!(
            labels.contains_key("management.cluster.x-k8s.io/release-cache"),
            "{name}: {labels:?}"
        );
        let owners = cm.metadata.owner_references.unwrap_or_default();
        assert!(
            owners.iter().any(|o| o.name == owner
                && o.api_version == "management.cluster.x-k8s.io/v1alpha1"),
            "{name}: {owners:?}"
        );
    }
    Ok(())
}

/// Components planted under cluster-api-operator's name and labels: they create
/// `kube-system/pwned` and bind it to cluster-admin.
const PWNED: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: pwned, namespace: kube-system}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: pwned}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n- {kind: ServiceAccount, name: pwned, namespace: kube-system}\n";

/// A ConfigMap planted with cluster-api-operator's name and labels before a provider is declared
/// fresh in this operator's API (a first install, a GitOps re-create, a move target) is never
/// taken over: the genuine release is fetched and installed, and nothing planted is applied.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planted_release_is_not_taken_over_for_a_provider_declared_fresh() -> TestResult {
    let providers = capi_test_support::releases()?;
    // An area of its own: a fresh cluster, without the providers of the test above.
    let _serial = capi_test_support::isolated(concat!(module_path!(), "::planted")).await;
    let (cluster, client) = cluster_with_crds().await?;
    let github = FakeServer::start(
        &providers,
        &[("kubernetes-sigs/cluster-api", &["cluster-api"])],
    )
    .await?;
    cluster.ensure_namespace("capi-system")?;
    let version = "v1.12.0";
    go_release_of(
        &client,
        ProviderType::Core,
        ("capi-system", "cluster-api", version),
        &std::fs::read_to_string(providers.join("cluster-api/v1.12.0/metadata.yaml"))?,
        PWNED,
    )
    .await?;
    let operator = start_operator(cluster, &["--github-api-url", github.url()])?;
    let fresh = PROVIDERS.split("---").next().ok_or("no core provider")?;
    let fresh = fresh.replace(
        "  annotations:\n    management.cluster.x-k8s.io/handed-over-version: v1.12.0\n",
        "",
    );
    assert!(!fresh.contains("handed-over"), "{fresh}");
    apply(cluster, &fresh)?;
    let key = ("CoreProvider", "capi-system", "cluster-api");
    wait_installed(&client, key, version, &operator).await?;
    assert!(github.count("/") > 0, "the genuine release was not fetched");
    let (found, ..) = cluster.kubectl(&["get", "serviceaccount", "-n", "kube-system", "pwned"])?;
    assert!(!found, "kube-system/pwned exists");
    let (found, ..) = cluster.kubectl(&["get", "clusterrolebinding", "pwned"])?;
    assert!(!found, "the pwned binding exists");
    // The genuine release's manager is what got installed.
    let deployments =
        Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "capi-system");
    deployments.get("capi-controller-manager").await?;
    Ok(())
}
