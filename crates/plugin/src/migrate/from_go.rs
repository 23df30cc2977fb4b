//! `migrate --from cluster-api-operator`: hands the providers kubernetes-sigs/cluster-api-operator
//! manages over to this operator without restarting a controller.
//!
//! What that operator leaves in a cluster: its v1alpha2 provider objects, each with its
//! finalizer (`provider.cluster.x-k8s.io`), its status and an applied-spec hash; its release
//! ConfigMaps (`{type}-{name}-{version}`, labelled with the version, type and name); its CRDs,
//! which convert through its webhook; its admission webhooks for those objects; and its
//! Deployment. This operator leaves a v1alpha2 object alone while that finalizer is on it.
//!
//! Before writing anything, each provider's release (that operator's own ConfigMap when it has
//! one, so nothing is fetched) is rendered as this operator will, with the spec translated and
//! the variables of its config Secret, and the controller Deployments' pod templates are
//! compared with the installed ones: a difference would restart a controller, so the command
//! stops and says where, unless `--allow-restart`. Then it takes the CRDs over (conversion
//! webhook removed, kept on a Helm uninstall), removes that operator's admission webhooks for
//! the provider objects (nothing would answer them), scales that operator to zero, removes its
//! finalizer from each object (or, with `--convert`, replaces each object with the same
//! provider in this operator's API), waits until every provider is Ready under this operator,
//! and checks that no Deployment rolled out.

use std::collections::BTreeMap;

use anyhow::{Context, bail};
use capi_components::render;
use capi_operator_api::{
    AnyProvider, FetchConfiguration, HANDED_OVER_VERSION_ANNOTATION, ProviderApi, ProviderType,
    v1alpha2,
};
use k8s_openapi::{
    api::{
        apps::v1::{Deployment, ReplicaSet},
        core::v1::{Pod, Secret},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    apimachinery::pkg::apis::meta::v1::LabelSelector,
};
use kube::{
    Api,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
};
use serde_json::{Value, json};

use super::{Args, InventoryEntry, compare, generation};
use crate::{
    cluster::{Cluster, FIELD_MANAGER, provider_resource_of},
    init,
    progress::{self, Target, Want},
    providers::ProviderArg,
    release,
};

/// Annotation that keeps a CRD when the Helm release that installed it is uninstalled.
const HELM_KEEP: &str = "helm.sh/resource-policy";

/// One provider to hand over.
struct Handover {
    p: AnyProvider,
    version: String,
    source: String,
    /// (namespace, name, generation, ReplicaSets) of the release's Deployments.
    deployments: Vec<(String, String, Option<i64>, Vec<String>)>,
    restarts: Vec<String>,
    creates: Vec<String>,
    leftovers: Vec<String>,
}

/// A Deployment of cluster-api-operator: namespace, name, replicas, pod selector.
struct GoOperator {
    namespace: String,
    name: String,
    replicas: i32,
    selector: String,
}

fn merge_params() -> PatchParams {
    PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    }
}

fn held(p: &AnyProvider) -> bool {
    p.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == v1alpha2::FINALIZER)
}

fn key(p: &AnyProvider) -> String {
    format!("{} {}/{}", p.provider_type.kind(), p.namespace(), p.name())
}

/// Runs `migrate --from cluster-api-operator`.
pub async fn run(args: &Args, cluster: &Cluster) -> anyhow::Result<()> {
    let Some(objects) = cluster.go_providers().await? else {
        say!(
            "the cluster does not serve {} provider objects: nothing to migrate",
            v1alpha2::GROUP
        );
        return Ok(());
    };
    let plans = plan_all(args, cluster, objects).await?;
    if plans.is_empty() {
        say!("no provider held by cluster-api-operator: nothing to migrate");
        return Ok(());
    }
    let operators = go_operators(cluster, args.operator_deployment.as_deref()).await?;
    show(args, &plans, &operators);
    let restarts: usize = plans.iter().map(|h| h.restarts.len()).sum();
    if restarts > 0 && !args.allow_restart {
        bail!(
            "handing over would restart {restarts} controller Deployment(s): the spec renders differently here (see above), or accept the restart with --allow-restart"
        );
    }
    if args.dry_run {
        return Ok(());
    }
    if !args.skip_operator {
        init::install_operator(cluster, &args.operator_manifests).await?;
    }
    take_over_crds(cluster).await?;
    remove_webhooks(cluster).await?;
    for o in &operators {
        stop(cluster, o, args.timeout).await?;
    }
    for h in &plans {
        if args.convert {
            convert(cluster, &h.p).await?;
        } else {
            release_finalizer(cluster, &h.p).await?;
        }
    }
    let api = if args.convert {
        ProviderApi::Management
    } else {
        ProviderApi::ClusterApiOperator
    };
    let targets: Vec<Target> = plans
        .iter()
        .map(|h| Target {
            api,
            provider_type: h.p.provider_type,
            namespace: h.p.namespace().to_string(),
            name: h.p.name().to_string(),
            version: Some(h.version.clone()),
            want: Want::Ready,
        })
        .collect();
    progress::wait(
        cluster,
        &targets,
        args.timeout,
        "this operator to take the providers over",
    )
    .await?;
    report(cluster, &plans, &operators).await
}

/// What handing over each object cluster-api-operator holds means; objects it does not hold
/// are skipped. Fails naming every provider that cannot be handed over.
async fn plan_all(
    args: &Args,
    cluster: &Cluster,
    objects: Vec<(AnyProvider, Value)>,
) -> anyhow::Result<Vec<Handover>> {
    let mut plans = Vec::new();
    let mut problems = Vec::new();
    for (p, value) in objects {
        if !held(&p) {
            say!(
                "{}: not held by cluster-api-operator (no {} finalizer); skipped",
                key(&p),
                v1alpha2::FINALIZER
            );
            continue;
        }
        match plan(args, cluster, &p, value).await {
            Ok(h) => plans.push(h),
            Err(e) => problems.push(format!("{}: {e:#}", key(&p))),
        }
    }
    if !problems.is_empty() {
        bail!(
            "cannot hand these providers over:\n  {}",
            problems.join("\n  ")
        );
    }
    Ok(plans)
}

/// Reads what handing `p` over means: its release rendered as this operator will, compared
/// with what runs.
async fn plan(
    args: &Args,
    cluster: &Cluster,
    p: &AnyProvider,
    value: Value,
) -> anyhow::Result<Handover> {
    let (_, translated) = v1alpha2::view_value(value)?;
    translated.context("its spec has no counterpart in this operator")?;
    let status = p.status.clone().unwrap_or_default();
    let version = p
        .spec
        .version
        .clone()
        .filter(|v| !v.is_empty())
        .or(status.installed_version)
        .context("no spec.version and nothing installed")?;
    let (release, source) = release_of(args, cluster, p, &version).await?;
    let vars = variables(cluster, p).await?;
    let rendered = render::render(p, &release, |k| vars.get(k).cloned())
        .with_context(|| format!("rendering {version} as this operator will"))?;
    let entry = InventoryEntry {
        object: p.provider_type.manifest_label(p.name()),
        namespace: p.namespace().to_string(),
        provider_type: p.provider_type,
        name: p.name().to_string(),
        version: version.clone(),
    };
    let (deployments, restarts, creates, leftovers) =
        compare(cluster, &entry, &rendered.objects).await?;
    let mut with_sets = Vec::new();
    for (ns, name, generation) in deployments {
        let sets = replica_sets(cluster, &ns, &name).await?;
        with_sets.push((ns, name, generation, sets));
    }
    Ok(Handover {
        p: p.clone(),
        version,
        source,
        deployments: with_sets,
        restarts,
        creates,
        leftovers,
    })
}

/// The release of `version`: the ConfigMap cluster-api-operator keeps it in (or the ones its
/// fetchConfig.selector names), else its source.
async fn release_of(
    args: &Args,
    cluster: &Cluster,
    p: &AnyProvider,
    version: &str,
) -> anyhow::Result<(capi_release::Release, String)> {
    let (t, name, ns) = (p.provider_type, p.name(), p.namespace());
    let fetch = p.spec.fetch_config.clone().unwrap_or_default();
    let selector = fetch.selector.clone().unwrap_or_else(|| {
        let mut labels = v1alpha2::release_configmap_labels(t, name, version, false);
        labels.remove(v1alpha2::CONFIGMAP_VERSION_LABEL);
        LabelSelector {
            match_labels: Some(labels),
            ..LabelSelector::default()
        }
    });
    let configmaps = FetchConfiguration {
        selector: Some(selector),
        ..FetchConfiguration::default()
    };
    let located = release::locate_configmaps(&cluster.client, t, name, ns, &configmaps)?;
    match located.fetch(Some(version)).await {
        Ok(r) => return Ok((r, located.description)),
        Err(e) if fetch.selector.is_some() => return Err(e),
        Err(_) => {}
    }
    let arg = ProviderArg {
        provider_type: t,
        name: name.to_string(),
        namespace: Some(ns.to_string()),
        version: Some(version.to_string()),
        source: fetch
            .url
            .clone()
            .or(fetch.oci.clone().map(|o| format!("oci://{o}"))),
    };
    let located = release::locate_arg(&arg, &args.sources)?;
    let r = located.fetch(Some(version)).await?;
    Ok((r, located.description))
}

/// The variables of the provider's config Secret (values never printed).
async fn variables(cluster: &Cluster, p: &AnyProvider) -> anyhow::Result<BTreeMap<String, String>> {
    let Some(name) = p.spec.secret_name.as_deref() else {
        return Ok(BTreeMap::new());
    };
    let ns = p
        .spec
        .secret_namespace
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(p.namespace());
    let secrets: Api<Secret> = Api::namespaced(cluster.client.clone(), ns);
    let secret = secrets
        .get_opt(name)
        .await
        .with_context(|| format!("reading Secret {ns}/{name}"))?
        .with_context(|| format!("its config Secret {ns}/{name} does not exist"))?;
    let mut out = BTreeMap::new();
    for (k, v) in secret.data.unwrap_or_default() {
        let text = String::from_utf8(v.0)
            .map_err(|_| anyhow::anyhow!("Secret {ns}/{name}: key {k} is not UTF-8 text"))?;
        out.insert(k, text);
    }
    for (k, v) in secret.string_data.unwrap_or_default() {
        out.insert(k, v);
    }
    Ok(out)
}

/// The ReplicaSets a Deployment owns, by name (a rollout adds one).
async fn replica_sets(
    cluster: &Cluster,
    ns: &str,
    deployment: &str,
) -> anyhow::Result<Vec<String>> {
    let api: Api<ReplicaSet> = Api::namespaced(cluster.client.clone(), ns);
    let list = api.list(&ListParams::default()).await?;
    let mut names: Vec<String> = list
        .items
        .into_iter()
        .filter(|rs| {
            rs.metadata
                .owner_references
                .iter()
                .flatten()
                .any(|o| o.kind == "Deployment" && o.name == deployment)
        })
        .filter_map(|rs| rs.metadata.name)
        .collect();
    names.sort();
    Ok(names)
}

/// cluster-api-operator's Deployments: the one named, or those running its image.
async fn go_operators(cluster: &Cluster, named: Option<&str>) -> anyhow::Result<Vec<GoOperator>> {
    let all: Api<Deployment> = Api::all(cluster.client.clone());
    let found: Vec<Deployment> = match named {
        Some(n) => {
            let (ns, name) = n
                .split_once('/')
                .context("--operator-deployment takes NAMESPACE/NAME")?;
            let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), ns);
            vec![
                api.get_opt(name)
                    .await?
                    .with_context(|| format!("Deployment {n} does not exist"))?,
            ]
        }
        None => all
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(runs_go_operator)
            .collect(),
    };
    let mut out = Vec::new();
    for d in found {
        let spec = d.spec.clone().unwrap_or_default();
        let selector = spec
            .selector
            .match_labels
            .unwrap_or_default()
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        out.push(GoOperator {
            namespace: d.metadata.namespace.clone().unwrap_or_default(),
            name: d.metadata.name.clone().unwrap_or_default(),
            replicas: spec.replicas.unwrap_or(1),
            selector,
        });
    }
    Ok(out)
}

/// Whether a Deployment runs cluster-api-operator (its image's repository ends so).
fn runs_go_operator(d: &Deployment) -> bool {
    let containers = d
        .spec
        .as_ref()
        .and_then(|s| s.template.spec.as_ref())
        .map(|s| s.containers.clone())
        .unwrap_or_default();
    containers.iter().any(|c| {
        let image = c.image.as_deref().unwrap_or("");
        let repository = image.split(['@']).next().unwrap_or("");
        let repository = match repository.rsplit_once(':') {
            Some((r, tag)) if !tag.contains('/') => r,
            _ => repository,
        };
        repository.ends_with("/cluster-api-operator")
    })
}

fn show(args: &Args, plans: &[Handover], operators: &[GoOperator]) {
    let verb = if args.dry_run { "would" } else { "will" };
    if operators.is_empty() {
        say!(
            "no cluster-api-operator Deployment found (give --operator-deployment if it runs under another image)"
        );
    }
    for o in operators {
        say!(
            "cluster-api-operator Deployment {}/{} ({} replicas): {verb} be scaled to zero, and kept",
            o.namespace,
            o.name,
            o.replicas
        );
    }
    for h in plans {
        let how = if args.convert {
            "replaced by the same provider in management.cluster.x-k8s.io/v1alpha1"
        } else {
            "kept as it is"
        };
        say!(
            "{} {} from {} ({verb} be taken over; the object {how})",
            key(&h.p),
            h.version,
            h.source
        );
        for c in &h.creates {
            say!("  will be created (not installed now): {c}");
        }
        for l in &h.leftovers {
            say!("  installed but not in the release as rendered; left in place: {l}");
        }
        for r in &h.restarts {
            say!("  would restart: {r}");
        }
    }
}

/// Brings cluster-api-operator's CRDs to this operator's (conversion webhook removed) and
/// keeps them on a Helm uninstall of that operator's chart.
async fn take_over_crds(cluster: &Cluster) -> anyhow::Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(cluster.client.clone());
    let mut names = Vec::new();
    for t in ProviderType::ALL {
        let want = v1alpha2::crd(t)?;
        let name = want.metadata.name.clone().unwrap_or_default();
        if let Some(have) = api.get_opt(&name).await? {
            let webhook = have
                .spec
                .conversion
                .as_ref()
                .is_some_and(|c| c.strategy == "Webhook");
            if webhook {
                let patch = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
                api.patch(&name, &merge_params(), &Patch::Merge(&patch))
                    .await
                    .with_context(|| format!("removing the conversion webhook of {name}"))?;
            }
            let keep = json!({"metadata": {"annotations": {HELM_KEEP: "keep"}}});
            api.patch(&name, &merge_params(), &Patch::Merge(&keep))
                .await
                .with_context(|| format!("annotating {name}"))?;
        }
        cluster.apply(&serde_json::to_value(&want)?).await?;
        names.push(name);
    }
    cluster
        .wait_established(&names, std::time::Duration::from_secs(60))
        .await?;
    say!(
        "{} CRDs taken over: no conversion webhook, kept if cluster-api-operator's chart is uninstalled",
        v1alpha2::GROUP
    );
    Ok(())
}

/// Deletes cluster-api-operator's admission webhook configurations for the provider objects:
/// once it is stopped nothing answers them, and every write of a provider object would fail.
async fn remove_webhooks(cluster: &Cluster) -> anyhow::Result<()> {
    for kind in [
        "ValidatingWebhookConfiguration",
        "MutatingWebhookConfiguration",
    ] {
        let api = cluster
            .api("admissionregistration.k8s.io/v1", kind, None)
            .await?;
        for c in api.list(&ListParams::default()).await?.items {
            if !only_for_provider_objects(&c) {
                continue;
            }
            let name = c.metadata.name.clone().unwrap_or_default();
            api.delete(&name, &DeleteParams::default())
                .await
                .with_context(|| format!("deleting {kind} {name}"))?;
            say!("{kind} {name} deleted: its webhooks served only cluster-api-operator");
        }
    }
    Ok(())
}

/// Whether every webhook of a configuration is for objects of cluster-api-operator's group.
fn only_for_provider_objects(c: &DynamicObject) -> bool {
    let hooks = c.data.get("webhooks").and_then(Value::as_array);
    let Some(hooks) = hooks.filter(|h| !h.is_empty()) else {
        return false;
    };
    hooks.iter().all(|h| {
        let rules = h.get("rules").and_then(Value::as_array);
        rules.is_some_and(|rules| {
            !rules.is_empty()
                && rules.iter().all(|r| {
                    r.get("apiGroups")
                        .and_then(Value::as_array)
                        .is_some_and(|g| g.iter().all(|g| g == v1alpha2::GROUP))
                })
        })
    })
}

/// Scales cluster-api-operator to zero and waits until its pods are gone.
async fn stop(
    cluster: &Cluster,
    o: &GoOperator,
    timeout: std::time::Duration,
) -> anyhow::Result<()> {
    let api: Api<Deployment> = Api::namespaced(cluster.client.clone(), &o.namespace);
    api.patch(
        &o.name,
        &merge_params(),
        &Patch::Merge(&json!({"spec": {"replicas": 0}})),
    )
    .await
    .with_context(|| format!("scaling {}/{} to zero", o.namespace, o.name))?;
    let pods: Api<Pod> = Api::namespaced(cluster.client.clone(), &o.namespace);
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let left = pods
            .list(&ListParams::default().labels(&o.selector))
            .await?
            .items
            .len();
        if left == 0 {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "{left} pods of {}/{} are still running after {timeout:?}",
                o.namespace,
                o.name
            );
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    say!(
        "cluster-api-operator {}/{} stopped (was {} replicas)",
        o.namespace,
        o.name,
        o.replicas
    );
    Ok(())
}

/// The finalizers of `p` without cluster-api-operator's, written only if `p` did not change
/// meanwhile (its resourceVersion).
fn without_go_finalizer(p: &AnyProvider) -> Value {
    let kept: Vec<&String> = p
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| *f != v1alpha2::FINALIZER)
        .collect();
    json!({"metadata": {"finalizers": kept, "resourceVersion": p.metadata.resource_version}})
}

/// Removes cluster-api-operator's finalizer: this operator takes the object over.
async fn release_finalizer(cluster: &Cluster, p: &AnyProvider) -> anyhow::Result<()> {
    cluster.patch_provider(p, &without_go_finalizer(p)).await?;
    say!("{}: handed over", key(p));
    Ok(())
}

/// Replaces the v1alpha2 object with the same provider in this operator's API, annotated with
/// the version cluster-api-operator installed (so its release ConfigMap is taken over). The v1alpha2
/// object is deleted first (held by cluster-api-operator's finalizer, so nothing is
/// uninstalled and this operator leaves it alone), so the new object is no duplicate; then
/// the finalizer is removed and the old object goes.
async fn convert(cluster: &Cluster, p: &AnyProvider) -> anyhow::Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(
        cluster.client.clone(),
        p.namespace(),
        &provider_resource_of(ProviderApi::ClusterApiOperator, p.provider_type),
    );
    api.delete(p.name(), &DeleteParams::default())
        .await
        .with_context(|| format!("deleting the v1alpha2 {}", key(p)))?;
    let labels = p.metadata.labels.clone().unwrap_or_default();
    // The version cluster-api-operator installed: the operator may take that operator's
    // release ConfigMap of it over (it never does for a provider declared fresh).
    let installed = p.status.as_ref().and_then(|s| s.installed_version.clone());
    let annotations: BTreeMap<&str, String> = installed
        .map(|v| (HANDED_OVER_VERSION_ANNOTATION, v))
        .into_iter()
        .collect();
    let object = json!({
        "apiVersion": ProviderApi::Management.api_version(),
        "kind": p.provider_type.kind(),
        "metadata": {"name": p.name(), "namespace": p.namespace(), "labels": labels,
                     "annotations": annotations},
        "spec": p.spec,
    });
    cluster.apply(&object).await?;
    let deleting = api
        .get_opt(p.name())
        .await?
        .map(|o| serde_json::to_value(o).map(|v| v["metadata"]["resourceVersion"].clone()))
        .transpose()?;
    if let Some(rv) = deleting {
        let mut patch = without_go_finalizer(p);
        patch["metadata"]["resourceVersion"] = rv;
        api.patch(p.name(), &merge_params(), &Patch::Merge(&patch))
            .await
            .with_context(|| format!("releasing the v1alpha2 {}", key(p)))?;
    }
    say!(
        "{}: converted to management.cluster.x-k8s.io/v1alpha1",
        key(p)
    );
    Ok(())
}

/// Says whether any Deployment rolled out, and how to remove cluster-api-operator.
async fn report(
    cluster: &Cluster,
    plans: &[Handover],
    operators: &[GoOperator],
) -> anyhow::Result<()> {
    let mut rolled = Vec::new();
    for h in plans {
        for (ns, name, before, sets) in &h.deployments {
            let after = generation(cluster, ns, name).await?;
            let sets_after = replica_sets(cluster, ns, name).await?;
            if after != *before || sets_after != *sets {
                rolled.push(format!(
                    "Deployment {ns}/{name} (generation {} -> {}, ReplicaSets {} -> {})",
                    before.unwrap_or_default(),
                    after.unwrap_or_default(),
                    sets.len(),
                    sets_after.len()
                ));
            }
        }
    }
    if rolled.is_empty() {
        say!(
            "handed over {} providers; no Deployment was changed",
            plans.len()
        );
    } else {
        say!(
            "handed over {} providers; changed: {}",
            plans.len(),
            rolled.join(", ")
        );
    }
    for o in operators {
        say!(
            "cluster-api-operator is stopped but installed: remove it with `helm uninstall` of its release, or `kubectl delete deployment -n {} {}` (its CRDs are kept)",
            o.namespace,
            o.name
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn deployment(image: &str) -> Deployment {
        serde_json::from_value(json!({
            "metadata": {"name": "d", "namespace": "n"},
            "spec": {"selector": {}, "template": {"spec": {"containers": [
                {"name": "manager", "image": image}
            ]}}}
        }))
        .unwrap_or_default()
    }

    #[test]
    fn the_other_operator_is_known_by_its_image() {
        for image in [
            "registry.k8s.io/capi-operator/cluster-api-operator:v0.28.0",
            "localhost:5000/capi-operator/cluster-api-operator",
            "mirror.example/x/cluster-api-operator@sha256:0123",
        ] {
            assert!(runs_go_operator(&deployment(image)), "{image}");
        }
        for image in [
            "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0",
            "ghcr.io/capi-provider-operator/capi-provider-operator:v0.1.0",
            "example/cluster-api-operator-helper:v1",
        ] {
            assert!(!runs_go_operator(&deployment(image)), "{image}");
        }
    }

    #[test]
    fn only_webhooks_of_the_provider_objects_are_removed() {
        let config = |groups: Value| -> DynamicObject {
            serde_json::from_value(json!({
                "apiVersion": "admissionregistration.k8s.io/v1",
                "kind": "ValidatingWebhookConfiguration",
                "metadata": {"name": "c"},
                "webhooks": [{"name": "w", "rules": [{"apiGroups": groups}]}],
            }))
            .unwrap_or_else(|_| {
                DynamicObject::new("c", &kube::api::ApiResource::erase::<Secret>(&()))
            })
        };
        assert!(only_for_provider_objects(&config(json!([v1alpha2::GROUP]))));
        assert!(!only_for_provider_objects(&config(json!([
            v1alpha2::GROUP,
            "apps"
        ]))));
        assert!(!only_for_provider_objects(&config(json!([
            "cluster.x-k8s.io"
        ]))));
    }

    #[test]
    fn only_the_other_operators_finalizer_is_removed() -> anyhow::Result<()> {
        let p = AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "CoreProvider",
            "metadata": {"name": "cluster-api", "namespace": "capi-system", "resourceVersion": "7",
                "finalizers": [v1alpha2::FINALIZER, "example.com/keep"]},
        }))?;
        assert!(held(&p));
        assert_eq!(
            without_go_finalizer(&p),
            json!({"metadata": {"finalizers": ["example.com/keep"], "resourceVersion": "7"}})
        );
        Ok(())
    }
}
