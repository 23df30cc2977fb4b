//! The release cache at the fast tier: the sample core provider fetching from a local
//! GitHub-compatible server, with cache ConfigMaps someone else wrote in its namespace.

use std::sync::Arc;

use capi_decide::reason;
use capi_fake_remotes::{FakeServer, ReleaseTree};
use capi_operator_api::{CoreProvider, FINALIZER, HANDED_OVER_VERSION_ANNOTATION};
use capi_release::Release;
use serde_json::{Value, json};

use super::{COMPONENTS, EVENTS, METADATA, NS, PROVIDER, applied_status};
use kube::runtime::controller::Action;

use crate::controller::testing::fake_api::FakeApi;
use crate::controller::{
    context::Ctx,
    options::Options,
    reconcile,
    source::{RELEASE_CACHE_LABEL, RELEASE_SOURCE_ANNOTATION, release_digest},
};

type TestResult = Result<(), Box<dyn std::error::Error>>;

const REPO: &str = "kubernetes-sigs/cluster-api";
const CACHE: &str = "/api/v1/namespaces/capi-system/configmaps";
const FORGED: &str = "apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: forged-admin}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n- {kind: ServiceAccount, name: intruder, namespace: capi-system}\n";

/// A GitHub-compatible server holding the sample release at each of `versions`.
async fn github(
    versions: &[&str],
) -> Result<(FakeServer, ReleaseTree), Box<dyn std::error::Error>> {
    let tree = ReleaseTree::new()?;
    for v in versions {
        tree.add("core", v, "metadata.yaml", METADATA)?;
        tree.add("core", v, "core-components.yaml", COMPONENTS)?;
    }
    let server = FakeServer::start(tree.path(), &[(REPO, &["core"])]).await?;
    Ok((server, tree))
}

fn genuine(version: &str) -> Release {
    Release {
        version: version.into(),
        metadata: METADATA.into(),
        components: COMPONENTS.into(),
    }
}

/// The sample core provider fetching `version` from GitHub, with `status`.
fn provider(version: &str, status: Value) -> Value {
    json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": NS, "uid": "u-1", "generation": 3,
                     "resourceVersion": "7", "finalizers": [FINALIZER],
                     "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"version": version,
                 "fetchConfig": {"url": format!("https://github.com/{REPO}/releases")}},
        "status": status,
    })
}

fn key(gh: &FakeServer) -> String {
    format!("github {} {REPO} core-components.yaml", gh.url())
}

/// A cache entry of `version` as the operator writes it (label, source, owner `uid`).
fn entry(gh: &FakeServer, version: &str, components: &str, uid: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": format!("core-cluster-api-{version}"), "namespace": NS,
                        "labels": {RELEASE_CACHE_LABEL: "true"},
                        "annotations": {RELEASE_SOURCE_ANNOTATION: key(gh)},
                        "ownerReferences": [{"apiVersion": "management.cluster.x-k8s.io/v1alpha1",
                            "kind": "CoreProvider", "name": "cluster-api", "uid": uid}]},
           "data": {"metadata": METADATA, "components": components}})
}

/// The scenarios' context, fetching from `gh`.
fn github_ctx(fake: &Arc<FakeApi>, gh: &FakeServer) -> Result<Arc<Ctx>, &'static str> {
    let mut ctx = Arc::into_inner(super::ctx(fake, vec![])).ok_or("ctx shared")?;
    ctx.opts = Options {
        github_api_url: Some(gh.url().to_string()),
        ..ctx.opts
    };
    Ok(Arc::new(ctx))
}

async fn reconcile_in(
    fake: &Arc<FakeApi>,
    ctx: &Arc<Ctx>,
    obj: Value,
) -> Result<Action, Box<dyn std::error::Error>> {
    fake.put(PROVIDER, obj.clone());
    let p: CoreProvider = serde_json::from_value(obj)?;
    Ok(reconcile::reconcile(Arc::new(p), ctx.clone()).await?)
}

async fn reconcile_with(fake: &Arc<FakeApi>, gh: &FakeServer, obj: Value) -> TestResult {
    reconcile_in(fake, &github_ctx(fake, gh)?, obj).await?;
    Ok(())
}

/// Reasons of the events the reconcile published.
fn event_reasons(fake: &FakeApi) -> Vec<String> {
    fake.writes()
        .iter()
        .filter(|w| w.method == "POST" && w.path == EVENTS)
        .filter_map(|w| w.body["reason"].as_str().map(str::to_string))
        .collect()
}

#[tokio::test]
async fn a_forged_cache_entry_is_fetched_again_and_never_applied() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    let path = format!("{CACHE}/core-cluster-api-v1.0.0");
    // Right name, label and source; content swapped for a cluster-admin binding.
    fake.put(
        &path,
        entry(&gh, "v1.0.0", &format!("{COMPONENTS}---\n{FORGED}"), "u-1"),
    );
    let recorded = json!({"installedVersion": "v1.0.0",
                          "releaseDigests": {"v1.0.0": release_digest(&genuine("v1.0.0"))}});
    reconcile_with(&fake, &gh, provider("v1.0.0", recorded)).await?;

    assert!(
        gh.count("/releases") > 0,
        "the release was not fetched again"
    );
    let writes = fake.writes();
    assert!(
        !writes
            .iter()
            .any(|w| w.body.to_string().contains("forged-admin")),
        "the forged object was applied: {writes:#?}"
    );
    assert!(
        event_reasons(&fake).contains(&reason::RELEASE_CACHE_MISMATCH.to_string()),
        "{:?}",
        event_reasons(&fake)
    );
    // The entry holds the fetched release again.
    let cm = fake.get(&path).ok_or("entry gone")?;
    assert_eq!(cm["data"]["components"], COMPONENTS);
    let status = applied_status(&fake)?;
    assert_eq!(status["installedVersion"], "v1.0.0");
    Ok(())
}

#[tokio::test]
async fn an_entry_whose_digest_matches_is_used_without_fetching() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    fake.put(
        &format!("{CACHE}/core-cluster-api-v1.0.0"),
        entry(&gh, "v1.0.0", COMPONENTS, "u-1"),
    );
    let recorded = json!({"releaseDigests": {"v1.0.0": release_digest(&genuine("v1.0.0"))}});
    reconcile_with(&fake, &gh, provider("v1.0.0", recorded)).await?;
    assert_eq!(gh.requests().len(), 0, "fetched although cached");
    assert_eq!(applied_status(&fake)?["installedVersion"], "v1.0.0");
    Ok(())
}

#[tokio::test]
async fn an_entry_without_a_recorded_digest_is_not_trusted() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    let path = format!("{CACHE}/core-cluster-api-v1.0.0");
    fake.put(&path, entry(&gh, "v1.0.0", FORGED, "u-1"));
    reconcile_with(&fake, &gh, provider("v1.0.0", json!({}))).await?;
    assert!(gh.count("/releases") > 0, "the planted entry was used");
    assert!(
        !fake
            .writes()
            .iter()
            .any(|w| w.method == "PATCH" && w.body.to_string().contains("forged-admin"))
    );
    // Its digest is recorded now, so the next reconcile reads the rewritten entry.
    let status = applied_status(&fake)?;
    assert_eq!(
        status["releaseDigests"]["v1.0.0"],
        release_digest(&genuine("v1.0.0"))
    );
    assert_eq!(
        fake.get(&path).ok_or("entry gone")?["data"]["components"],
        COMPONENTS
    );
    Ok(())
}

#[tokio::test]
async fn a_digest_the_status_in_hand_lacks_is_read_again_not_fetched() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    fake.put(
        &format!("{CACHE}/core-cluster-api-v1.0.0"),
        entry(&gh, "v1.0.0", COMPONENTS, "u-1"),
    );
    // The API server has the status the previous reconcile wrote; this reconcile is handed a
    // copy from before that write (woken by an installed object before the provider's watch
    // brought the write).
    let recorded = json!({"releaseDigests": {"v1.0.0": release_digest(&genuine("v1.0.0"))}});
    fake.put(PROVIDER, provider("v1.0.0", recorded));
    let stale: CoreProvider = serde_json::from_value(provider("v1.0.0", json!({})))?;
    reconcile::reconcile(Arc::new(stale), github_ctx(&fake, &gh)?).await?;
    assert_eq!(
        gh.requests().len(),
        0,
        "fetched although cached and recorded"
    );
    let status = applied_status(&fake)?;
    assert_eq!(status["installedVersion"], "v1.0.0");
    assert_eq!(
        status["releaseDigests"]["v1.0.0"],
        release_digest(&genuine("v1.0.0"))
    );
    Ok(())
}

#[tokio::test]
async fn a_configmap_that_is_not_a_cache_entry_is_never_overwritten() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    let path = format!("{CACHE}/core-cluster-api-v1.0.0");
    let users = json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": "core-cluster-api-v1.0.0", "namespace": NS},
                       "data": {"settings": "mine"}});
    fake.put(&path, users);
    reconcile_with(&fake, &gh, provider("v1.0.0", json!({}))).await?;
    let writes = fake.writes();
    assert!(
        !writes.iter().any(|w| w.path == path),
        "the user's ConfigMap was written: {writes:#?}"
    );
    assert_eq!(
        fake.get(&path).ok_or("gone")?["data"],
        json!({"settings": "mine"})
    );
    // The release is installed all the same, and the event says it is not cached.
    assert_eq!(applied_status(&fake)?["installedVersion"], "v1.0.0");
    assert!(event_reasons(&fake).contains(&reason::RELEASE_NOT_CACHED.to_string()));
    Ok(())
}

#[tokio::test]
async fn old_entries_are_pruned_keeping_the_installed_and_previous_versions() -> TestResult {
    let (gh, _tree) = github(&["v1.0.2"]).await?;
    let fake = FakeApi::new();
    let digests: serde_json::Map<String, Value> = ["v0.9.0", "v1.0.0", "v1.0.1"]
        .iter()
        .map(|v| (v.to_string(), json!(release_digest(&genuine(v)))))
        .collect();
    for v in ["v0.9.0", "v1.0.0", "v1.0.1"] {
        fake.put(
            &format!("{CACHE}/core-cluster-api-{v}"),
            entry(&gh, v, COMPONENTS, "u-1"),
        );
    }
    // Another object's entry, and a ConfigMap that is no entry at all: left alone.
    let foreign = format!("{CACHE}/core-cluster-api-v0.8.0");
    fake.put(&foreign, entry(&gh, "v0.8.0", COMPONENTS, "u-other"));
    let status = json!({"installedVersion": "v1.0.1", "releaseDigests": digests});
    reconcile_with(&fake, &gh, provider("v1.0.2", status)).await?;

    let deleted: Vec<String> = fake
        .writes()
        .iter()
        .filter(|w| w.method == "DELETE")
        .map(|w| w.path.clone())
        .collect();
    assert_eq!(deleted, vec![format!("{CACHE}/core-cluster-api-v0.9.0")]);
    for v in ["v1.0.0", "v1.0.1", "v1.0.2"] {
        assert!(
            fake.get(&format!("{CACHE}/core-cluster-api-{v}")).is_some(),
            "{v}"
        );
    }
    assert!(fake.get(&foreign).is_some());
    let status = applied_status(&fake)?;
    let kept: Vec<&String> = status["releaseDigests"]
        .as_object()
        .ok_or("no digests")?
        .keys()
        .collect();
    assert_eq!(kept, ["v1.0.0", "v1.0.1", "v1.0.2"]);
    Ok(())
}

#[tokio::test]
async fn a_release_that_cannot_be_cached_is_fetched_again_only_after_the_backoff() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    // The entry's name is taken by a user's ConfigMap: the release cannot be cached.
    fake.put(
        &format!("{CACHE}/core-cluster-api-v1.0.0"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "core-cluster-api-v1.0.0", "namespace": NS},
               "data": {"settings": "mine"}}),
    );
    let ctx = github_ctx(&fake, &gh)?;
    reconcile_in(&fake, &ctx, provider("v1.0.0", json!({}))).await?;
    let fetched = gh.requests().len();
    assert!(fetched > 0);
    assert!(event_reasons(&fake).contains(&reason::RELEASE_NOT_CACHED.to_string()));
    // At once again: the back-off holds the fetch back, and the reconcile says why.
    let again = reconcile_in(&fake, &ctx, provider("v1.0.0", json!({}))).await;
    assert_eq!(
        gh.requests().len(),
        fetched,
        "fetched again within the back-off"
    );
    let err = again.err().ok_or("the held-back fetch was not reported")?;
    assert!(
        err.to_string()
            .contains("cannot be kept in the release cache"),
        "{err}"
    );
    Ok(())
}

/// cluster-api-operator's release ConfigMap of v1.0.0, created at `created`, holding `components`.
fn go_release(created: &str, components: &str) -> Value {
    let labels = capi_operator_api::v1alpha2::release_configmap_labels(
        capi_operator_api::ProviderType::Core,
        "cluster-api",
        "v1.0.0",
        false,
    );
    json!({"apiVersion": "v1", "kind": "ConfigMap",
           "metadata": {"name": "core-cluster-api-v1.0.0", "namespace": NS,
                        "labels": labels, "creationTimestamp": created},
           "data": {"metadata": METADATA, "components": components}})
}

/// `p` as `migrate --from cluster-api-operator --convert` writes it: annotated with the version
/// cluster-api-operator installed.
fn converted(mut p: Value) -> Value {
    let version = p["spec"]["version"].clone();
    p["metadata"]["annotations"] = json!({HANDED_OVER_VERSION_ANNOTATION: version});
    p
}

/// A release planted under cluster-api-operator's name and labels: its objects create
/// `kube-system/pwned` and bind it to cluster-admin.
const PWNED: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: pwned, namespace: kube-system}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {name: pwned}\nroleRef: {apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}\nsubjects:\n- {kind: ServiceAccount, name: pwned, namespace: kube-system}\n";

#[tokio::test]
async fn a_planted_go_release_is_never_taken_over_for_a_provider_declared_fresh() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let path = format!("{CACHE}/core-cluster-api-v1.0.0");
    // Planted before the provider is declared (a first install, a re-declaration after an
    // orphaning delete, a GitOps re-create, a move target): it looks like a handover by its
    // name, labels and age, but nothing handed this provider over.
    for status in [json!({}), json!({"installedVersion": "v1.0.0"})] {
        let fake = FakeApi::new();
        fake.put(&path, go_release("2025-06-01T00:00:00Z", PWNED));
        reconcile_with(&fake, &gh, provider("v1.0.0", status.clone())).await?;
        let writes = fake.writes();
        assert!(
            !writes
                .iter()
                .any(|w| w.path.contains("pwned") || w.body.to_string().contains("pwned")),
            "the planted release was applied (status {status}): {writes:#?}"
        );
        assert!(
            gh.count("/releases") > 0,
            "the genuine release was not fetched"
        );
        assert!(
            writes
                .iter()
                .any(|w| w.path.contains("sample-controller") && w.method == "PATCH"),
            "the genuine release was not installed (status {status})"
        );
        assert_eq!(
            applied_status(&fake)?["releaseDigests"]["v1.0.0"],
            release_digest(&genuine("v1.0.0"))
        );
    }
    Ok(())
}

#[tokio::test]
async fn the_other_operators_release_is_taken_over_only_at_a_handover() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let path = format!("{CACHE}/core-cluster-api-v1.0.0");

    // Written before the provider object existed, for a provider `migrate` handed over with
    // no digest yet: nothing is fetched and its digest is recorded.
    let fake = FakeApi::new();
    fake.put(&path, go_release("2025-06-01T00:00:00Z", COMPONENTS));
    reconcile_with(&fake, &gh, converted(provider("v1.0.0", json!({})))).await?;
    assert_eq!(gh.requests().len(), 0, "fetched although handed over");
    let status = applied_status(&fake)?;
    assert_eq!(
        status["releaseDigests"]["v1.0.0"],
        release_digest(&genuine("v1.0.0"))
    );

    // Planted after the provider object was created: fetched instead, never applied.
    let fake = FakeApi::new();
    fake.put(&path, go_release("2026-02-01T00:00:00Z", FORGED));
    reconcile_with(&fake, &gh, provider("v1.0.0", json!({}))).await?;
    assert!(gh.count("/releases") > 0);
    assert!(
        !fake
            .writes()
            .iter()
            .any(|w| w.method == "PATCH" && w.body.to_string().contains("forged-admin"))
    );

    // Once this operator recorded a release of the provider, no such ConfigMap is read.
    let fake = FakeApi::new();
    let before = gh.requests().len();
    fake.put(&path, go_release("2025-06-01T00:00:00Z", FORGED));
    let recorded = json!({"installedVersion": "v0.9.0",
                          "releaseDigests": {"v0.9.0": "0".repeat(64)}});
    reconcile_with(&fake, &gh, provider("v1.0.0", recorded)).await?;
    assert!(
        gh.requests().len() > before,
        "the other operator's ConfigMap was used"
    );
    assert!(
        !fake
            .writes()
            .iter()
            .any(|w| w.method == "PATCH" && w.body.to_string().contains("forged-admin"))
    );
    Ok(())
}

#[tokio::test]
async fn the_release_resolved_as_latest_is_recorded_and_not_fetched_again() -> TestResult {
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    let mut unversioned = provider("", json!({}));
    unversioned["spec"]
        .as_object_mut()
        .ok_or("spec")?
        .remove("version");
    reconcile_with(&fake, &gh, unversioned).await?;
    let fetched = gh.requests().len();
    assert!(fetched > 0);
    // The digest goes into the status with the resolved version, so the cached entry is
    // trusted by the next reconcile.
    let status = fake
        .get(PROVIDER)
        .ok_or("no provider")?
        .get("status")
        .cloned()
        .ok_or("no status written")?;
    assert_eq!(
        status["releaseDigests"]["v1.0.0"],
        release_digest(&genuine("v1.0.0"))
    );
    reconcile_with(&fake, &gh, provider("v1.0.0", status)).await?;
    assert_eq!(gh.requests().len(), fetched, "fetched again");
    Ok(())
}

/// The scenarios' context, fetching from `gh`, with the release memory `budget`.
fn budget_ctx(
    fake: &Arc<FakeApi>,
    gh: &FakeServer,
    budget: Arc<crate::controller::budget::Budget>,
) -> Result<Arc<Ctx>, &'static str> {
    let mut ctx = Arc::into_inner(github_ctx(fake, gh)?).ok_or("ctx shared")?;
    ctx.opts.memory_budget = budget;
    Ok(Arc::new(ctx))
}

#[tokio::test]
async fn resolving_the_latest_release_fetches_within_a_share_of_the_memory_budget() -> TestResult {
    const MIB: u64 = 1024 * 1024;
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    let budget = Arc::new(crate::controller::budget::Budget::new(64 * MIB));
    let ctx = budget_ctx(&fake, &gh, budget.clone())?;
    // Other passes hold the whole budget: the fetch of the latest release must wait.
    let held = budget.acquire(64 * MIB).await;
    let mut unversioned = provider("", json!({}));
    unversioned["spec"]
        .as_object_mut()
        .ok_or("spec")?
        .remove("version");
    let pass = tokio::spawn({
        let (fake, ctx) = (fake.clone(), ctx.clone());
        async move {
            reconcile_in(&fake, &ctx, unversioned)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        gh.requests().len(),
        0,
        "the latest release was fetched outside the memory budget"
    );
    drop(held);
    tokio::time::timeout(std::time::Duration::from_secs(10), pass).await???;
    assert!(
        !gh.requests().is_empty(),
        "not fetched once the budget was free"
    );
    assert_eq!(budget.available(), 64 * MIB, "the share was not given back");
    Ok(())
}

#[tokio::test]
async fn a_release_costing_more_than_the_whole_budget_is_refused_not_rendered() -> TestResult {
    const MIB: u64 = 1024 * 1024;
    let (gh, _tree) = github(&["v1.0.0"]).await?;
    let fake = FakeApi::new();
    // Less than any release is charged (the allowances for substitution alone are more).
    let budget = Arc::new(crate::controller::budget::Budget::new(8 * MIB));
    let ctx = budget_ctx(&fake, &gh, budget)?;
    reconcile_in(&fake, &ctx, provider("v1.0.0", json!({}))).await?;
    let status = applied_status(&fake)?;
    let installed = status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "ProviderInstalled"))
        .ok_or("no ProviderInstalled condition")?;
    assert_eq!(installed["status"], "False");
    assert_eq!(installed["reason"], reason::RENDER_FAILED);
    let message = installed["message"].as_str().unwrap_or_default();
    assert!(message.contains("is not rendered"), "{message}");
    assert!(
        !fake
            .writes()
            .iter()
            .any(|w| w.path.contains("sample-controller")),
        "rendered and applied anyway"
    );
    Ok(())
}
