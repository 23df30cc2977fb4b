//! The fast tier: whole reconciles of a sample core provider against the mocked API server of
//! [`super::fake_api`], asserting the requests the reconciler sends. The end-to-end suites prove
//! the same behaviours against a real apiserver; these run in milliseconds (`make unit`).

mod cache;

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use capi_decide::{readiness::Rechecks, reason};
use capi_operator_api::{
    AnyProvider, CONFIGMAP_VERSION_LABEL, CoreProvider, FINALIZER, ORIGINAL_REPLICAS_ANNOTATION,
    OWNER_KIND_LABEL, OWNER_NAME_LABEL,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::runtime::{controller::Action, events::Reporter, watcher};
use serde_json::{Value, json};

use super::fake_api::{FakeApi, Recorded};
use crate::controller::{
    apply::{Applier, FIELD_MANAGER},
    context::Ctx,
    context::World,
    index::Index,
    options::Options,
    reconcile,
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
    fake_with_components(COMPONENTS)
}

/// A fake holding release v1.0.0 with `components`, in a ConfigMap.
fn fake_with_components(components: &str) -> Arc<FakeApi> {
    let fake = FakeApi::new();
    fake.put(
        &format!("/api/v1/namespaces/{NS}/configmaps/sample-v1.0.0"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "sample-v1.0.0", "namespace": NS,
                            "labels": {"sample": "core", CONFIGMAP_VERSION_LABEL: "v1.0.0"}},
               "data": {"metadata": METADATA, "components": components}}),
    );
    fake
}

/// The reconciler's context over the fake, with `others` in the provider caches.
fn ctx(fake: &Arc<FakeApi>, others: Vec<AnyProvider>) -> Arc<Ctx> {
    ctx_with(fake, others, Arc::default(), Rechecks::default())
}

/// [`ctx`] with a cache of installed Deployments and readiness rechecks on a chosen clock.
fn ctx_with(
    fake: &Arc<FakeApi>,
    others: Vec<AnyProvider>,
    index: Arc<Index>,
    rechecks: Rechecks,
) -> Arc<Ctx> {
    let client = fake.client();
    index.replace_providers(others);
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: None,
    };
    Arc::new(Ctx {
        recorder: crate::controller::events::Events::new(client.clone(), reporter),
        applier: Applier::new(client.clone()),
        client,
        world: World::new(index, crate::controller::owned::OwnedKinds::default()),
        opts: Options {
            config_retry: Duration::from_secs(60),
            ..Options::default()
        },
        inventory: false,
        failures: std::sync::Mutex::new(BTreeMap::new()),
        rechecks,
        uncached: std::sync::Mutex::new(BTreeMap::new()),
        inputs: crate::controller::inputs::InputWatches::inactive(),
        mirror: Arc::new(crate::controller::mirror::MirrorSetting::new(
            Default::default(),
            None,
        )),
        written: Default::default(),
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
    // A compare-and-swap on the object read, so a version set meanwhile is never overwritten.
    assert_eq!(
        spec[0].body,
        json!({"metadata": {"resourceVersion": "7"}, "spec": {"version": "v1.0.0"}})
    );
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
async fn a_version_the_user_set_meanwhile_is_never_overwritten()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    // The reconcile works on the object as read (resourceVersion 7, no version); the user has
    // set spec.version since (resourceVersion 8).
    let read = core(json!({}), &[FINALIZER]);
    let mut now = read.clone();
    now["spec"]["version"] = json!("v0.9.0");
    now["metadata"]["resourceVersion"] = json!("8");
    fake.put(PROVIDER, now);
    let p: CoreProvider = serde_json::from_value(read)?;
    reconcile::reconcile(Arc::new(p), ctx(&fake, vec![])).await?;
    let stored = fake.get(PROVIDER).ok_or("provider gone")?;
    assert_eq!(
        stored["spec"]["version"], "v0.9.0",
        "the user's version stands"
    );
    let writes = fake.writes();
    let spec = patches_of(&writes, PROVIDER);
    assert_eq!(
        spec.len(),
        1,
        "one conditional write, no retry over it: {writes:#?}"
    );
    assert_eq!(spec[0].body["metadata"]["resourceVersion"], "7");
    // Nothing is installed, and no event claims a resolved version.
    assert!(patches_of(&writes, DEPLOYMENT).is_empty());
    assert!(
        !writes
            .iter()
            .any(|w| w.path == EVENTS && w.body["reason"] == reason::VERSION_RESOLVED),
        "{writes:#?}"
    );
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
async fn a_release_of_many_privileged_objects_gets_an_event_the_api_accepts()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = FakeApi::new();
    let bindings: String = (0..120)
        .map(|i| format!("---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata: {{name: sample-admin-binding-{i:03}}}\nroleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}\nsubjects: [{{kind: ServiceAccount, name: sample-manager, namespace: sample-system}}]\n"))
        .collect();
    fake.put(
        &format!("/api/v1/namespaces/{NS}/configmaps/sample-v1.0.0"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "sample-v1.0.0", "namespace": NS,
                            "labels": {"sample": "core", CONFIGMAP_VERSION_LABEL: "v1.0.0"}},
               "data": {"metadata": METADATA, "components": format!("{COMPONENTS}{bindings}")}}),
    );
    reconcile(
        &fake,
        core(json!({"version": "v1.0.0"}), &[FINALIZER]),
        vec![],
    )
    .await?;
    let writes = fake.writes();
    let event = writes
        .iter()
        .find(|w| w.path == EVENTS && w.body["reason"] == reason::PRIVILEGED_OBJECTS)
        .ok_or("no PrivilegedObjects event")?;
    let note = event.body["note"].as_str().ok_or("no note")?;
    // events.k8s.io refuses a note over 1 KiB: the whole event would be lost.
    assert!(note.len() <= 1024, "{} bytes: {note}", note.len());
    assert!(
        note.contains("sample-admin-binding-000 binds cluster-admin"),
        "{note}"
    );
    assert!(
        note.contains(" more"),
        "what is left out is counted: {note}"
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
    // A Secret of another name is there: the message names it, never its data.
    fake.put(
        &format!("/api/v1/namespaces/{NS}/secrets/capi-variables"),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "capi-variables", "namespace": NS},
               "data": {"AWS_B64_ENCODED_CREDENTIALS": "czNjcjN0LXZhbHVl"}}),
    );
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
    let message = installed["message"].as_str().unwrap_or("");
    assert!(message.contains("capi-system/absent"), "{message}");
    assert!(
        message.ends_with("; Secrets in capi-system: capi-variables"),
        "{message}"
    );
    assert!(
        !message.contains("czNjcjN0") && !message.contains("s3cr3t"),
        "{message}"
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

/// A mirror ConfigMap of the watched name that the release did not write (no labels of its
/// own): refused on the provider (condition and Warning event), nothing applied.
#[tokio::test]
async fn a_mirror_configmap_not_of_the_release_is_a_condition_and_an_event()
-> Result<(), Box<dyn std::error::Error>> {
    use crate::controller::mirror::{MirrorSetting, wake_all_on_change};
    use k8s_openapi::api::core::v1::ConfigMap;
    let fake = fake_with_release();
    let mut c = Arc::try_unwrap(ctx(&fake, vec![])).map_err(|_| "the context is shared")?;
    let config = Some(("ops".to_string(), "capi-image-mirror".to_string()));
    let setting = MirrorSetting::new(Default::default(), config).owned_by(Some("capi".into()));
    c.mirror = Arc::new(setting);
    let claimed: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "capi-image-mirror", "namespace": "ops"},
        "data": {"images": "all: {repository: evil.example}"}}))?;
    let mut feed = wake_all_on_change(c.mirror.clone(), c.world.index().clone());
    feed(&watcher::Event::InitApply(claimed));
    feed(&watcher::Event::InitDone);
    fake.put(PROVIDER, core(json!({"version": "v1.0.0"}), &[FINALIZER]));
    let p: CoreProvider = serde_json::from_value(core(json!({"version": "v1.0.0"}), &[FINALIZER]))?;
    reconcile::reconcile(Arc::new(p), Arc::new(c)).await?;
    let status = applied_status(&fake)?;
    let stalled = condition(&status, "Stalled").ok_or("no Stalled")?;
    assert_eq!(
        (stalled["status"].as_str(), stalled["reason"].as_str()),
        (Some("True"), Some(reason::IMAGE_MIRROR_INVALID)),
        "{stalled}"
    );
    let message = stalled["message"].as_str().unwrap_or("");
    assert!(
        message.contains("ConfigMap ops/capi-image-mirror is not release capi's"),
        "{message}"
    );
    let writes = fake.writes();
    assert!(
        writes.iter().any(|w| w.path == EVENTS
            && w.body["reason"] == reason::IMAGE_MIRROR_INVALID
            && w.body["type"] == "Warning"),
        "{writes:#?}"
    );
    assert!(patches_of(&writes, DEPLOYMENT).is_empty());
    Ok(())
}

#[tokio::test]
async fn a_missing_secret_of_another_namespace_lists_no_names()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    // The provider's writer may not read this namespace: its Secret names stay unlisted.
    fake.put(
        "/api/v1/namespaces/kube-system/secrets/cloud-admin-token",
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "cloud-admin-token", "namespace": "kube-system"}}),
    );
    let obj = core(
        json!({"version": "v1.0.0", "secretName": "absent", "secretNamespace": "kube-system"}),
        &[FINALIZER],
    );
    reconcile(&fake, obj, vec![]).await?;
    let status = applied_status(&fake)?;
    let installed = condition(&status, "ProviderInstalled").ok_or("no ProviderInstalled")?;
    assert_eq!(installed["reason"], reason::SECRET_NOT_FOUND);
    let message = installed["message"].as_str().unwrap_or("");
    assert!(message.contains("kube-system/absent"), "{message}");
    assert!(!message.contains("cloud-admin-token"), "{message}");
    let events = fake.writes();
    assert!(
        events
            .iter()
            .filter(|w| w.path == EVENTS)
            .all(|w| !w.body.to_string().contains("cloud-admin-token")),
        "{events:#?}"
    );
    Ok(())
}

/// The Stalled message of a reconcile of `spec`, after checking its reason.
async fn stalled_message(
    fake: &Arc<FakeApi>,
    spec: Value,
    want: &str,
) -> Result<String, Box<dyn std::error::Error>> {
    reconcile(fake, core(spec, &[FINALIZER]), vec![]).await?;
    let status = applied_status(fake)?;
    let stalled = condition(&status, "Stalled").ok_or("no Stalled")?;
    assert_eq!(
        (stalled["status"].as_str(), stalled["reason"].as_str()),
        (Some("True"), Some(want)),
        "{stalled}"
    );
    Ok(stalled["message"].as_str().unwrap_or("").to_string())
}

#[tokio::test]
async fn a_missing_version_names_the_configmaps_the_selector_matched()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    // Named after the version, but labelled with another one: the label wins.
    fake.put(
        &format!("/api/v1/namespaces/{NS}/configmaps/sample-v1.0.1"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "sample-v1.0.1", "namespace": NS,
                            "labels": {"sample": "core", CONFIGMAP_VERSION_LABEL: "1.0.1"}},
               "data": {"metadata": METADATA, "components": COMPONENTS}}),
    );
    let m = stalled_message(&fake, json!({"version": "v1.0.1"}), reason::FETCH_FAILED).await?;
    assert!(
        m.starts_with("a ConfigMap for version v1.0.1 not found; the selector matched ConfigMaps "),
        "{m}"
    );
    assert!(m.contains("sample-v1.0.0 (version v1.0.0)"), "{m}");
    assert!(m.contains("sample-v1.0.1 (version 1.0.1)"), "{m}");
    Ok(())
}

#[tokio::test]
async fn missing_variables_name_the_keys_the_secret_has() -> Result<(), Box<dyn std::error::Error>>
{
    let components =
        COMPONENTS.replace("v1.0.0'}", "v1.0.0', args: ['--region=${SAMPLE_REGION}']}");
    let fake = fake_with_components(&components);
    fake.put(
        &format!("/api/v1/namespaces/{NS}/secrets/vars"),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "vars", "namespace": NS},
               "data": {"SAMPLE_REGON": "czNjcjN0LXZhbHVl"}}),
    );
    let spec = json!({"version": "v1.0.0", "secretName": "vars"});
    let m = stalled_message(&fake, spec, reason::MISSING_VARIABLES).await?;
    assert!(m.contains("[SAMPLE_REGION]"), "{m}");
    assert!(
        m.ends_with(
            "; Secret capi-system/vars (spec.configSecret) is read; it has keys SAMPLE_REGON"
        ),
        "{m}"
    );
    assert!(!m.contains("s3cr3t") && !m.contains("czNjcjN0"), "{m}");
    Ok(())
}

/// Log lines written while the test runs (this thread's), for checking what they leave out.
#[derive(Clone, Default)]
struct Logs(Arc<std::sync::Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn text(&self) -> String {
        String::from_utf8_lossy(
            &self
                .0
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
        .into_owned()
    }
}

#[tokio::test]
async fn a_refused_object_quoting_a_variable_hides_its_value_everywhere()
-> Result<(), Box<dyn std::error::Error>> {
    let logs = Logs::default();
    let writer = logs.clone();
    // Everything the operator may log, even with RUST_LOG=trace.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(crate::logging::filter(Some("trace")))
        .with_ansi(false)
        .with_writer(move || writer.clone())
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);
    // Another test's thread may have cached a callsite as disabled before this subscriber
    // existed.
    tracing::callsite::rebuild_interest_cache();
    // The Secret's value ends up in a label value, which the apiserver refuses and quotes.
    let components = COMPONENTS.replace(
        "metadata: {name: sample-controller, namespace: sample-system}",
        "metadata: {name: sample-controller, namespace: sample-system, labels: {token: '${SAMPLE_TOKEN}'}}",
    );
    let fake = fake_with_components(&components);
    fake.put(
        &format!("/api/v1/namespaces/{NS}/secrets/vars"),
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "vars", "namespace": NS},
               // s3cr3t/value!
               "data": {"SAMPLE_TOKEN": "czNjcjN0L3ZhbHVlIQ=="}}),
    );
    fake.refuse(
        DEPLOYMENT,
        "Deployment.apps \"sample-controller\" is invalid: metadata.labels: Invalid value: \"s3cr3t/value!\": a valid label must consist of alphanumeric characters",
    );
    let spec = json!({"version": "v1.0.0", "secretName": "vars"});
    let m = stalled_message(&fake, spec.clone(), reason::APPLY_FAILED).await?;
    // The operator logs the refusal at every failing pass. Another test's thread registering
    // a callsite at the moment this subscriber appears can leave that callsite's interest
    // cached as "never" (tracing's callsite registry is process-wide), which loses a pass's
    // lines: a pass is run again, after a rebuild, until its lines are there (at most 3).
    for _ in 0..3 {
        if logs.text().contains("metadata.labels") {
            break;
        }
        tracing::callsite::rebuild_interest_cache();
        reconcile(&fake, core(spec.clone(), &[FINALIZER]), vec![]).await?;
    }
    assert!(m.contains("metadata.labels: Invalid value"), "{m}");
    assert!(!m.contains("s3cr3t"), "{m}");
    let events: Vec<String> = fake
        .writes()
        .iter()
        .filter(|w| w.path == EVENTS)
        .map(|w| w.body.to_string())
        .collect();
    assert!(
        events.iter().any(|e| e.contains("metadata.labels")),
        "{events:#?}"
    );
    assert!(events.iter().all(|e| !e.contains("s3cr3t")), "{events:#?}");
    let log = logs.text();
    assert!(log.contains("metadata.labels"), "{log}");
    assert!(!log.contains("s3cr3t"), "{log}");
    Ok(())
}

#[tokio::test]
async fn a_missing_manifests_key_names_the_keys_there() -> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    fake.put(
        &format!("/api/v1/namespaces/{NS}/configmaps/extra"),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "extra", "namespace": NS},
               "data": {"manifest.yaml": "kind: X"}}),
    );
    let spec = json!({"version": "v1.0.0", "additionalManifests": {"name": "extra"}});
    let m = stalled_message(&fake, spec, reason::ADDITIONAL_MANIFESTS).await?;
    assert!(
        m.ends_with("has no key \"manifests\"; it has keys manifest.yaml"),
        "{m}"
    );
    let fake = fake_with_release();
    let spec = json!({"version": "v1.0.0", "additionalManifests": {"name": "absent"}});
    let m = stalled_message(&fake, spec, reason::ADDITIONAL_MANIFESTS).await?;
    assert!(
        m.ends_with("does not exist; ConfigMaps in capi-system: sample-v1.0.0"),
        "{m}"
    );
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
async fn a_blocked_deletion_is_looked_at_less_and_less_often()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    let bootstrap = AnyProvider::from_value(json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": "BootstrapProvider",
        "metadata": {"name": "kubeadm", "namespace": "kubeadm-system"}, "spec": {}}))?;
    let ctx = ctx(&fake, vec![bootstrap]);
    fake.put(PROVIDER, deleting(&[FINALIZER]));
    let mut delays = Vec::new();
    for _ in 0..6 {
        let action = reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
        delays.push(requeue_after(&action).ok_or("no requeue")?.as_secs());
    }
    // Workload clusters are not watched, so it polls, but not every 5 s for as long as they
    // stay (and never less often than once a minute).
    assert_eq!(delays, [5, 10, 20, 40, 60, 60]);
    Ok(())
}

#[tokio::test]
async fn a_provider_waiting_for_its_core_provider_looks_less_and_less_often()
-> Result<(), Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    let ctx = ctx(&fake, vec![]);
    let path = "/apis/management.cluster.x-k8s.io/v1alpha1/namespaces/capi-system/bootstrapproviders/kubeadm";
    let mut obj = core(json!({"version": "v1.0.0"}), &[FINALIZER]);
    obj["kind"] = json!("BootstrapProvider");
    obj["metadata"]["name"] = json!("kubeadm");
    fake.put(path, obj);
    let mut delays = Vec::new();
    for _ in 0..6 {
        let p: capi_operator_api::BootstrapProvider =
            serde_json::from_value(fake.get(path).ok_or("provider gone")?)?;
        let action = reconcile::reconcile(Arc::new(p), ctx.clone()).await?;
        delays.push(requeue_after(&action).ok_or("no requeue")?.as_secs());
    }
    let status = fake.get(path).ok_or("provider gone")?["status"].clone();
    let preflight = condition(&status, "PreflightCheckPassed").ok_or("no preflight")?;
    assert_eq!(preflight["reason"], reason::WAITING_FOR_CORE, "{status:#}");
    // A core provider appearing wakes it through its watch; the looks in between back off.
    assert_eq!(delays, [5, 10, 20, 40, 60, 60]);
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

#[tokio::test]
async fn the_event_memory_forgets_providers_that_are_gone() -> Result<(), Box<dyn std::error::Error>>
{
    let fake = fake_with_release();
    let ctx = ctx(&fake, vec![]);
    for i in 0..20 {
        let mut obj = deleting(&[FINALIZER]);
        obj["metadata"]["uid"] = json!(format!("u-{i}"));
        obj["spec"]["deletionPolicy"] = json!("Orphan");
        fake.put(PROVIDER, obj);
        reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    }
    // Each pass published its Orphan note and released the finalizer.
    let posted = fake
        .requests()
        .into_iter()
        .filter(|r| r.method == "POST" && r.path == EVENTS)
        .count();
    assert_eq!(posted, 20);
    assert_eq!(
        ctx.recorder.remembered(),
        0,
        "a provider gone must leave nothing behind in the event memory"
    );
    Ok(())
}

/// When the controller would reconcile again after `action` (None: on a change only). The
/// field is private to kube; its Debug form is `Action { requeue_after: Some(5s) }`.
fn requeue_after(action: &Action) -> Option<Duration> {
    let debug = format!("{action:?}");
    let d = debug
        .strip_prefix("Action { requeue_after: Some(")?
        .strip_suffix(") }")?;
    let (number, unit) = d.split_at(d.find(|c: char| c.is_alphabetic() || c == 'µ')?);
    let n: f64 = number.parse().ok()?;
    let scale = match unit {
        "s" => 1.0,
        "ms" => 1e-3,
        "µs" => 1e-6,
        "ns" => 1e-9,
        _ => return None,
    };
    Some(Duration::from_secs_f64(n * scale))
}

/// A clock the test moves.
#[derive(Clone)]
struct TestClock(Arc<std::sync::Mutex<std::time::Instant>>);

impl TestClock {
    fn new() -> TestClock {
        TestClock(Arc::new(std::sync::Mutex::new(std::time::Instant::now())))
    }

    fn rechecks(&self) -> Rechecks {
        let now = self.0.clone();
        Rechecks::with_clock(Arc::new(move || {
            *now.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
        }))
    }

    fn advance(&self, d: Duration) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += d;
    }
}

/// The provider as the fake stores it (its status included), as the controller's cache
/// would hand it over.
fn stored_provider(fake: &FakeApi) -> Result<Arc<CoreProvider>, Box<dyn std::error::Error>> {
    let obj = fake.get(PROVIDER).ok_or("provider gone")?;
    Ok(Arc::new(serde_json::from_value(obj)?))
}

/// The Deployment the install applied, with a status saying whether it is available, put
/// into the Deployment cache as its watch would.
fn cache_deployment(
    fake: &FakeApi,
    writer: &Index,
    available: bool,
) -> Result<(), Box<dyn std::error::Error>> {
    let mut d = fake.get(DEPLOYMENT).ok_or("no Deployment applied")?;
    d["metadata"]["namespace"] = json!(NS);
    d["metadata"]["generation"] = json!(1);
    let condition = if available {
        json!({"type": "Available", "status": "True"})
    } else {
        json!({"type": "Available", "status": "False", "message": "Deployment does not have minimum availability."})
    };
    d["status"] = json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 2,
        "availableReplicas": if available { 2 } else { 0 }, "conditions": [condition]});
    let d: Deployment = serde_json::from_value(d)?;
    writer.feed_deployment(&watcher::Event::Apply(d));
    Ok(())
}

type Setup = (Arc<FakeApi>, Arc<Ctx>, TestClock, Arc<Index>);

/// An installed provider whose Deployment is not available, after the full pass its Deployment
/// appearing brought: Ready=False (NotAvailable).
async fn unready_provider() -> Result<Setup, Box<dyn std::error::Error>> {
    let fake = fake_with_release();
    let clock = TestClock::new();
    let writer = Arc::<Index>::default();
    let ctx = ctx_with(&fake, vec![], writer.clone(), clock.rechecks());
    fake.put(PROVIDER, core(json!({"version": "v1.0.0"}), &[FINALIZER]));
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    cache_deployment(&fake, &writer, false)?;
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    let status = fake.get(PROVIDER).ok_or("provider gone")?["status"].clone();
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    assert_eq!(ready["reason"], reason::NOT_AVAILABLE, "{status:#}");
    Ok((fake, ctx, clock, writer))
}

/// Runs the controller's requeues for `span` of (test) time from the last pass's `first`
/// delay, the way its scheduler would: each reconcile when the previous one asked.
async fn run_requeues(
    fake: &FakeApi,
    ctx: &Arc<Ctx>,
    clock: &TestClock,
    mut next: Duration,
    span: Duration,
) -> Result<usize, Box<dyn std::error::Error>> {
    let mut elapsed = Duration::ZERO;
    let mut passes = 0;
    while elapsed + next <= span {
        clock.advance(next);
        elapsed += next;
        let action = reconcile::reconcile(stored_provider(fake)?, ctx.clone()).await?;
        passes += 1;
        next = requeue_after(&action).ok_or("no requeue")?;
    }
    Ok(passes)
}

#[tokio::test]
async fn an_unready_provider_rechecks_only_its_pods_and_backs_off()
-> Result<(), Box<dyn std::error::Error>> {
    let (fake, ctx, clock, _writer) = unready_provider().await?;
    let before = fake.requests().len();
    let passes = run_requeues(
        &fake,
        &ctx,
        &clock,
        Duration::from_secs(5),
        Duration::from_secs(60),
    )
    .await?;
    let requests: Vec<Recorded> = fake.requests().split_off(before);
    // 5 s, then 10 s, 20 s: three looks in the first minute (every 5 s would be twelve).
    assert_eq!(passes, 3, "{requests:#?}");
    // Each look lists the Pods and nothing else: no release read, no render, no apply, and
    // no status write while nothing changes.
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    assert!(
        requests.iter().all(|r| r.method == "GET" && r.path == pods),
        "{requests:#?}"
    );
    assert_eq!(requests.len(), 3, "{requests:#?}");
    Ok(())
}

#[tokio::test]
async fn rechecks_give_way_to_an_available_deployment_and_to_a_changed_spec()
-> Result<(), Box<dyn std::error::Error>> {
    let (fake, ctx, clock, writer) = unready_provider().await?;
    let configmaps = format!("/api/v1/namespaces/{NS}/configmaps");
    let full_passes = |from: usize| {
        fake.requests()[from..]
            .iter()
            .filter(|r| r.method == "GET" && r.path == configmaps)
            .count()
    };
    // A spec change before the recheck is due (its watch event wakes the provider): a full pass.
    let mut changed = fake.get(PROVIDER).ok_or("provider gone")?;
    changed["metadata"]["generation"] = json!(4);
    fake.put(PROVIDER, changed);
    clock.advance(Duration::from_secs(1));
    let before = fake.requests().len();
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(full_passes(before), 1, "a changed spec runs the pipeline");
    // A spec change that lands just when a recheck is due: a full pass too.
    let mut changed = fake.get(PROVIDER).ok_or("provider gone")?;
    changed["metadata"]["generation"] = json!(5);
    fake.put(PROVIDER, changed);
    clock.advance(Duration::from_secs(5));
    let before = fake.requests().len();
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(full_passes(before), 1, "a changed spec runs the pipeline");
    // The Deployment turns Available; its watch wakes the provider at once: Ready.
    cache_deployment(&fake, &writer, true)?;
    clock.advance(Duration::from_millis(100));
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    let status = fake.get(PROVIDER).ok_or("provider gone")?["status"].clone();
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some(reason::AVAILABLE)),
        "{status:#}"
    );
    Ok(())
}

#[tokio::test]
async fn a_recheck_that_finds_the_deployment_available_reports_ready()
-> Result<(), Box<dyn std::error::Error>> {
    let (fake, ctx, clock, writer) = unready_provider().await?;
    // Available, but the wake was missed (or merged with the due recheck).
    cache_deployment(&fake, &writer, true)?;
    clock.advance(Duration::from_secs(5));
    let before = fake.requests().len();
    let action = reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    let status = fake.get(PROVIDER).ok_or("provider gone")?["status"].clone();
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    assert_eq!(ready["status"], "True", "{status:#}");
    assert_eq!(
        condition(&status, "Reconciling").ok_or("no Reconciling")?["status"],
        "False"
    );
    // The recheck wrote the status and nothing else of the pipeline ran.
    let writes: Vec<Recorded> = fake.requests()[before..]
        .iter()
        .filter(|r| r.method != "GET")
        .cloned()
        .collect();
    assert!(
        writes
            .iter()
            .all(|w| w.path == format!("{PROVIDER}/status") || w.path == EVENTS),
        "{writes:#?}"
    );
    assert_eq!(requeue_after(&action), Some(Duration::from_secs(1800)));
    Ok(())
}

/// Ready's status and reason as the fake apiserver holds them.
fn server_ready(fake: &FakeApi) -> Result<(String, String), Box<dyn std::error::Error>> {
    let status = fake.get(PROVIDER).ok_or("provider gone")?["status"].clone();
    let ready = condition(&status, "Ready").ok_or("no Ready")?;
    let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
    Ok((text(&ready["status"]), text(&ready["reason"])))
}

/// [`unready_provider`] after its Deployment turned available and a pass wrote Ready=True.
async fn ready_provider() -> Result<Setup, Box<dyn std::error::Error>> {
    let (fake, ctx, clock, writer) = unready_provider().await?;
    cache_deployment(&fake, &writer, true)?;
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(server_ready(&fake)?.0, "True");
    Ok((fake, ctx, clock, writer))
}

#[tokio::test]
async fn a_pass_reading_a_cache_behind_the_last_status_write_still_writes_ready()
-> Result<(), Box<dyn std::error::Error>> {
    // Pass A: the Deployment is available, Ready=True is written; the cache keeps that copy.
    let (fake, ctx, _clock, writer) = ready_provider().await?;
    let behind = stored_provider(&fake)?;
    // Pass B: a rollout makes it unavailable; Ready=False is written.
    cache_deployment(&fake, &writer, false)?;
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(server_ready(&fake)?.0, "False");
    // Pass C: available again, but handed the copy of pass A (the cache has not seen B's
    // write). Its Ready=True equals that copy; the server holds False, so it must be written.
    cache_deployment(&fake, &writer, true)?;
    let action = reconcile::reconcile(behind, ctx.clone()).await?;
    assert_eq!(
        server_ready(&fake)?,
        ("True".to_string(), reason::AVAILABLE.to_string()),
        "left unready on the server, next look in {:?}",
        requeue_after(&action)
    );
    Ok(())
}

#[tokio::test]
async fn a_pass_reading_a_cache_behind_its_own_status_write_does_not_write_it_again()
-> Result<(), Box<dyn std::error::Error>> {
    let (fake, ctx, _clock, writer) = unready_provider().await?;
    // The copy a lagging cache still hands out: Ready=False.
    let behind = stored_provider(&fake)?;
    cache_deployment(&fake, &writer, true)?;
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(server_ready(&fake)?.0, "True");
    let status = format!("{PROVIDER}/status");
    let status_writes = || {
        fake.writes()
            .iter()
            .filter(|r| r.is_patch_of(&status))
            .count()
    };
    let before = status_writes();
    // Events of the transition to Ready (the harness's cache also reports drift every pass).
    let events = || {
        let ready =
            |r: &&Recorded| r.path.contains("/events") && r.body["reason"] == reason::AVAILABLE;
        fake.writes().iter().filter(ready).count()
    };
    let events_before = events();
    // The same finding from the copy before that write: the server holds it already, and its
    // transition to Ready was published.
    reconcile::reconcile(behind.clone(), ctx.clone()).await?;
    assert_eq!(status_writes(), before, "the status was written again");
    assert_eq!(
        events(),
        events_before,
        "the transition was published again"
    );
    assert_eq!(server_ready(&fake)?.0, "True");
    // Someone else wrote the status since (neither this write nor one before it): written.
    let mut edited = fake.get(PROVIDER).ok_or("provider gone")?;
    edited["status"]["conditions"] = json!([]);
    fake.put(PROVIDER, edited);
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    assert_eq!(status_writes(), before + 1);
    assert_eq!(server_ready(&fake)?.0, "True");
    Ok(())
}

#[tokio::test]
async fn a_pass_that_changes_the_deployment_does_not_report_ready_from_the_old_copy()
-> Result<(), Box<dyn std::error::Error>> {
    let (fake, ctx, _clock, _writer) = ready_provider().await?;
    // A manager setting changes the Deployment's args: a new generation on the server, while
    // the cache still holds the available copy of generation 1.
    let mut changed = fake.get(PROVIDER).ok_or("provider gone")?;
    changed["spec"]["manager"] = json!({"verbosity": 5});
    changed["metadata"]["generation"] = json!(4);
    fake.put(PROVIDER, changed);
    reconcile::reconcile(stored_provider(&fake)?, ctx.clone()).await?;
    let applied = fake.get(DEPLOYMENT).ok_or("no Deployment")?;
    assert!(
        applied["metadata"]["generation"].as_i64() > Some(1),
        "the pass should have changed the Deployment: {applied:#}"
    );
    let (status, reason) = server_ready(&fake)?;
    assert_eq!(
        status, "False",
        "Ready from the copy before the apply ({reason})"
    );
    Ok(())
}
