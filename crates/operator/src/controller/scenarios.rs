//! The fast tier: whole reconciles of a sample core provider against the mocked API server of
//! [`super::fake_api`], asserting the requests the reconciler sends. The end-to-end suites prove
//! the same behaviours against a real apiserver; these run in milliseconds (`make unit`).

mod cache;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use capi_operator_api::{
    AnyProvider, CONFIGMAP_VERSION_LABEL, CoreProvider, FINALIZER, ORIGINAL_REPLICAS_ANNOTATION,
    OWNER_KIND_LABEL, OWNER_NAME_LABEL, ProviderType,
};
use kube::runtime::{
    events::{Recorder, Reporter},
    reflector,
};
use serde_json::{Value, json};

use super::{
    Ctx, FIELD_MANAGER, Lister, Options, World,
    apply::Applier,
    fake_api::{FakeApi, Recorded},
    reconcile::{self, reason},
};

const NS: &str = "capi-system";
const PROVIDER: &str =
    "/apis/management.cluster.x-k8s.io/v1alpha1/namespaces/capi-system/coreproviders/cluster-api";
const DEPLOYMENT: &str = "/apis/apps/v1/namespaces/capi-system/deployments/sample-controller";
const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/capi-system/events";

const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 0, contract: v1beta1}\n";
const COMPONENTS: &str = "apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sample-manager, namespace: sample-system}\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {name: sample-controller, namespace: sample-system}\nspec:\n  replicas: 2\n  selector: {matchLabels: {app: sample}}\n  template:\n    metadata: {labels: {app: sample}}\n    spec:\n      containers:\n      - {name: manager, image: 'example.org/sample-controller:v1.0.0'}\n";

/// The sample core provider, reading its release from ConfigMaps, with `spec` merged in.
fn core(spec: Value, finalizers: &[&str]) -> Value {
    let mut s = json!({"fetchConfig": {"selector": {"matchLabels": {"sample": "core"}}}});
    json_patch::merge(&mut s, &spec);
    json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": NS, "uid": "u-1", "generation": 3,
                     "resourceVersion": "7", "finalizers": finalizers},
        "spec": s,
    })
}

/// A fake apiserver holding the sample release v1.0.0 as a ConfigMap.
fn fake_with_release() -> Arc<FakeApi> {
    let fake = FakeApi::new();
    fake.put(
        &format!("/api/v1/namespaces/{NS}/configmaps/sample-v1.0.0"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "sample-v1.0.0", "namespace": NS,
                            "labels": {"sample": "core", CONFIGMAP_VERSION_LABEL: "v1.0.0"}},
               "data": {"metadata": METADATA, "components": COMPONENTS}}),
    );
    fake
}

/// The reconciler's context over the fake, with `others` in the provider caches.
fn ctx(fake: &Arc<FakeApi>, others: Vec<AnyProvider>) -> Arc<Ctx> {
    let client = fake.client();
    let mut providers: BTreeMap<ProviderType, Vec<Lister>> = BTreeMap::new();
    for t in ProviderType::ALL {
        let of_type: Vec<AnyProvider> = others
            .iter()
            .filter(|p| p.provider_type == t)
            .cloned()
            .collect();
        providers.insert(t, vec![Arc::new(move || of_type.clone())]);
    }
    let (deployments, _writer) = reflector::store();
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: None,
    };
    Arc::new(Ctx {
        recorder: Recorder::new(client.clone(), reporter),
        applier: Applier::new(client.clone()),
        client,
        world: World {
            providers,
            owned: Vec::new(),
            deployments,
        },
        opts: Options {
            config_retry: Duration::from_secs(60),
            ..Options::default()
        },
        inventory: false,
        failures: std::sync::Mutex::new(BTreeMap::new()),
        uncached: std::sync::Mutex::new(BTreeMap::new()),
        inputs: super::inputs::InputWatches::inactive(),
    })
}

async fn reconcile(
    fake: &Arc<FakeApi>,
    obj: Value,
    others: Vec<AnyProvider>,
) -> Result<(), Box<dyn std::error::Error>> {
    fake.put(PROVIDER, obj.clone());
    let p: CoreProvider = serde_json::from_value(obj)?;
    reconcile::reconcile(Arc::new(p), ctx(fake, others)).await?;
    Ok(())
}

fn patches_of<'a>(writes: &'a [Recorded], path: &str) -> Vec<&'a Recorded> {
    writes.iter().filter(|r| r.is_patch_of(path)).collect()
}

fn condition<'a>(status: &'a Value, type_: &str) -> Option<&'a Value> {
    status["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
}

/// The status the reconcile applied, after checking it went through the status subresource
/// with server-side apply under the operator's field manager.
fn applied_status(fake: &FakeApi) -> Result<Value, String> {
    let writes = fake.writes();
    let status_path = format!("{PROVIDER}/status");
    let [w] = patches_of(&writes, &status_path)[..] else {
        return Err(format!("expected one status write, got {writes:#?}"));
    };
    assert!(
        w.content_type.starts_with("application/apply-patch"),
        "{w:?}"
    );
    assert!(
        w.query.contains(&format!("fieldManager={FIELD_MANAGER}")),
        "{w:?}"
    );
    assert!(w.query.contains("force=true"), "{w:?}");
    Ok(w.body["status"].clone())
}

#[tokio::test]
async fn a_new_provider_gets_the_finalizer_and_nothing_else()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    reconcile(&fake, core(json!({"version": "v1.0.0"}), &[]), vec![]).await?;
    let writes = fake.writes();
    assert_eq!(writes.len(), 1, "{writes:#?}");
    assert!(writes[0].is_patch_of(PROVIDER));
    assert!(
        writes[0]
            .content_type
            .starts_with("application/merge-patch")
    );
    assert_eq!(writes[0].body["metadata"]["finalizers"], json!([FINALIZER]));
    // A compare-and-swap: a concurrent change of the finalizers conflicts instead of being lost.
    assert_eq!(writes[0].body["metadata"]["resourceVersion"], "7");
    Ok(())
}

#[tokio::test]
async fn an_empty_version_is_resolved_and_written_back() -> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    reconcile(&fake, core(json!({}), &[FINALIZER]), vec![]).await?;
    let writes = fake.writes();
    let spec = patches_of(&writes, PROVIDER);
    assert_eq!(spec.len(), 1, "{writes:#?}");
    assert_eq!(spec[0].body, json!({"spec": {"version": "v1.0.0"}}));
    assert!(
        writes
            .iter()
            .any(|w| w.path == EVENTS && w.body["reason"] == reason::VERSION_RESOLVED),
        "{writes:#?}"
    );
    // Nothing is installed before the version is on record.
    assert!(patches_of(&writes, DEPLOYMENT).is_empty());
    Ok(())
}

#[tokio::test]
async fn install_applies_owned_objects_and_the_status_once()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    reconcile(
        &fake,
        core(json!({"version": "v1.0.0"}), &[FINALIZER]),
        vec![],
    )
    .await?;
    let writes = fake.writes();
    let [d] = patches_of(&writes, DEPLOYMENT)[..] else {
        return Err(format!("expected one Deployment apply: {writes:#?}").into());
    };
    assert!(d.content_type.starts_with("application/apply-patch"));
    assert!(d.query.contains(&format!("fieldManager={FIELD_MANAGER}")));
    assert_eq!(
        d.body["metadata"]["labels"][OWNER_KIND_LABEL],
        "CoreProvider"
    );
    assert_eq!(
        d.body["metadata"]["labels"][OWNER_NAME_LABEL],
        "cluster-api"
    );
    assert_eq!(d.body["spec"]["replicas"], 2);
    let status = applied_status(&fake)?;
    assert_eq!(status["installedVersion"], "v1.0.0");
    assert_eq!(status["contract"], "v1beta1");
    assert_eq!(status["observedGeneration"], 3);
    let installed = condition(&status, "ProviderInstalled").ok_or("no ProviderInstalled")?;
    assert_eq!(
        (installed["status"].as_str(), installed["reason"].as_str()),
        (Some("True"), Some(reason::INSTALLED))
    );
    assert_eq!(installed["observedGeneration"], 3);
    // No Deployment in the caches yet: not Ready, and it says why.
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    assert_eq!(ready["reason"], reason::NO_DEPLOYMENT);
    // kstatus: still progressing, not stalled.
    let reconciling = condition(&status, "Reconciling").ok_or("no Reconciling")?;
    assert_eq!(
        (
            reconciling["status"].as_str(),
            reconciling["reason"].as_str()
        ),
        (Some("True"), Some(reason::NO_DEPLOYMENT))
    );
    assert_eq!(
        condition(&status, "Stalled").ok_or("no Stalled")?["status"],
        "False"
    );
    Ok(())
}

#[tokio::test]
async fn a_paused_provider_is_applied_at_zero_replicas() -> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    let obj = core(json!({"version": "v1.0.0", "paused": true}), &[FINALIZER]);
    reconcile(&fake, obj, vec![]).await?;
    let writes = fake.writes();
    let [d] = patches_of(&writes, DEPLOYMENT)[..] else {
        return Err(format!("expected one Deployment apply: {writes:#?}").into());
    };
    assert_eq!(d.body["spec"]["replicas"], 0);
    assert_eq!(
        d.body["metadata"]["annotations"][ORIGINAL_REPLICAS_ANNOTATION],
        "2"
    );
    let status = applied_status(&fake)?;
    let paused = condition(&status, "Paused").ok_or("no Paused")?;
    assert_eq!(
        (paused["status"].as_str(), paused["reason"].as_str()),
        (Some("True"), Some(reason::PAUSED))
    );
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some(reason::PAUSED))
    );
    Ok(())
}

#[tokio::test]
async fn a_missing_secret_is_a_condition_and_an_event_not_an_install()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    let obj = core(
        json!({"version": "v1.0.0", "secretName": "absent"}),
        &[FINALIZER],
    );
    reconcile(&fake, obj, vec![]).await?;
    let status = applied_status(&fake)?;
    let installed = condition(&status, "ProviderInstalled").ok_or("no ProviderInstalled")?;
    assert_eq!(installed["reason"], reason::SECRET_NOT_FOUND);
    let stalled = condition(&status, "Stalled").ok_or("no Stalled")?;
    assert_eq!(
        (stalled["status"].as_str(), stalled["reason"].as_str()),
        (Some("True"), Some(reason::SECRET_NOT_FOUND))
    );
    assert_eq!(
        condition(&status, "Reconciling").ok_or("no Reconciling")?["status"],
        "False"
    );
    assert!(
        installed["message"]
            .as_str()
            .unwrap_or("")
            .contains("capi-system/absent")
    );
    let writes = fake.writes();
    assert!(
        writes.iter().any(|w| w.path == EVENTS
            && w.body["reason"] == reason::SECRET_NOT_FOUND
            && w.body["type"] == "Warning"),
        "{writes:#?}"
    );
    assert!(patches_of(&writes, DEPLOYMENT).is_empty());
    Ok(())
}

fn deleting(finalizers: &[&str]) -> Value {
    let mut obj = core(json!({"version": "v1.0.0"}), finalizers);
    obj["metadata"]["deletionTimestamp"] = json!("2026-11-23T00:00:00Z");
    obj
}

#[tokio::test]
async fn deleting_the_core_provider_waits_for_the_others() -> Result<(), Box<dyn std::error::Error>>
{
    let fake = fake_with_release();
    let bootstrap = AnyProvider::from_value(json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": "BootstrapProvider",
        "metadata": {"name": "kubeadm", "namespace": "kubeadm-system"}, "spec": {}}))?;
    reconcile(&fake, deleting(&[FINALIZER]), vec![bootstrap]).await?;
    let status = applied_status(&fake)?;
    let d = condition(&status, "Deleting").ok_or("no Deleting")?;
    assert_eq!(d["reason"], reason::DELETION_BLOCKED);
    assert!(
        d["message"]
            .as_str()
            .unwrap_or("")
            .contains("BootstrapProvider kubeadm-system/kubeadm")
    );
    // The finalizer stays.
    assert!(patches_of(&fake.writes(), PROVIDER).is_empty());
    Ok(())
}

#[tokio::test]
async fn deletion_with_nothing_left_releases_only_our_finalizer()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    reconcile(&fake, deleting(&["example.org/keep", FINALIZER]), vec![]).await?;
    let writes = fake.writes();
    let [w] = patches_of(&writes, PROVIDER)[..] else {
        return Err(format!("expected one finalizer patch: {writes:#?}").into());
    };
    assert_eq!(
        w.body["metadata"]["finalizers"],
        json!(["example.org/keep"])
    );
    assert_eq!(w.body["metadata"]["resourceVersion"], "7");
    Ok(())
}
