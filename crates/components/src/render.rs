//! Renders a provider: its release through clusterctl's pipeline, then the operator's
//! customizations from the provider's spec, in the order the Go cluster-api-operator uses:
//! Deployment customizations (image overrides included), additional manifests, `patches` /
//! `manifestPatches`, clusterctl's labels, and the apply order.

use capi_operator_api::AnyProvider;
use serde_json::{Value, json};

use capi_release::Release;

use crate::{customize, metadata::Metadata, patch, pipeline};

/// Everything that can go wrong rendering; all are configuration or release problems.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RenderError {
    /// metadata.yaml is unusable or has no series for the version.
    #[error(transparent)]
    Metadata(#[from] crate::metadata::MetadataError),
    /// The components could not be processed.
    #[error(transparent)]
    Pipeline(#[from] pipeline::PipelineError),
    /// A customization could not be applied.
    #[error(transparent)]
    Customize(#[from] customize::CustomizeError),
    /// `spec.patches` or `spec.manifestPatches` is unusable or failed on an object.
    #[error(transparent)]
    Patch(#[from] patch::PatchError),
    /// The additional manifests (`spec.additionalManifests`) are unusable.
    #[error("spec.additionalManifests: {0}")]
    AdditionalManifests(String),
    /// The render did not finish (it ran on another thread that stopped: a bug, reported as a
    /// failed render rather than a crash).
    #[error("the render stopped unexpectedly: {0}")]
    Stopped(String),
}

/// Inputs of rendering that come neither from the release nor from the provider object itself.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RenderExtras {
    /// The `manifests` key of the ConfigMap named by `spec.additionalManifests`: extra objects,
    /// multi-document YAML, installed and removed with the provider.
    pub additional_manifests: Option<String>,
    /// The operator-wide image mirror: applied before the provider's own image overrides, which
    /// win, to the release's and the additional manifests' workloads.
    pub mirror: crate::mirror::ImageMirror,
    /// How much substituting and parsing the release (and the additional manifests) may build.
    pub limits: pipeline::RenderLimits,
}

impl RenderError {
    /// The condition reason of this failure.
    pub fn reason(&self) -> &'static str {
        use capi_operator_api::conditions::reason;
        match self {
            RenderError::Pipeline(pipeline::PipelineError::Substitution(
                capi_envsubst::Error::MissingVariables(_),
            )) => reason::MISSING_VARIABLES,
            RenderError::Metadata(_) => reason::INVALID_METADATA,
            RenderError::Patch(_) => reason::INVALID_PATCHES,
            RenderError::AdditionalManifests(_) => reason::ADDITIONAL_MANIFESTS,
            _ => reason::RENDER_FAILED,
        }
    }
}

/// The result of rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct Rendered {
    /// Objects in apply order.
    pub objects: Vec<Value>,
    /// Contract of the release.
    pub contract: String,
    /// Namespace the provider is installed in.
    pub namespace: String,
    /// Images of the provider's workloads, after overrides.
    pub images: Vec<String>,
    /// What became of the manager settings, one entry per Deployment that had any.
    pub managers: Vec<customize::ManagerReport>,
}

/// Renders `provider` from `release`, with variables from `lookup` and no extras.
pub fn render(
    provider: &AnyProvider,
    release: &Release,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Rendered, RenderError> {
    render_with(provider, release, lookup, &RenderExtras::default())
}

/// Renders `provider` from `release`, with variables from `lookup`, adding the objects of
/// `extra.additional_manifests`.
///
/// Additional manifests go through variable substitution with the same variables as the
/// release, because the Go operator appends them to the components text before clusterctl's
/// processing, which substitutes the whole text (`$$` escapes a literal `$`). Unlike that text,
/// they are taken as the user wrote them otherwise: a namespaced object without a namespace
/// gets the provider's, an explicit namespace is kept, nothing else is rewritten and Deployment
/// customizations do not touch them. They are appended before the patches, so `patches` and
/// `manifestPatches` can target them (as in Go), and they get the provider's labels like every
/// other object. An object that duplicates one of the release is refused.
pub fn render_with(
    provider: &AnyProvider,
    release: &Release,
    lookup: impl Fn(&str) -> Option<String>,
    extra: &RenderExtras,
) -> Result<Rendered, RenderError> {
    render_in(provider, release, None, lookup, extra)
}

/// The contract `release` follows, from its metadata.
pub fn release_contract(release: &Release) -> Result<String, RenderError> {
    let metadata = Metadata::parse(&release.metadata)?;
    Ok(metadata.contract_for(&release.version)?.to_string())
}

/// [`render_with`], given the release's `contract` when the caller has read it already (its
/// metadata is then not parsed again).
pub(crate) fn render_in(
    provider: &AnyProvider,
    release: &Release,
    contract: Option<&str>,
    lookup: impl Fn(&str) -> Option<String>,
    extra: &RenderExtras,
) -> Result<Rendered, RenderError> {
    let spec = provider.spec.normalized();
    // Read the patches first: a malformed patch is reported without the cost of rendering.
    let patches = patch::SpecPatches::parse(&spec.patches, &spec.manifest_patches)?;
    let contract = match contract {
        Some(c) => c.to_string(),
        None => release_contract(release)?,
    };
    let text = pipeline::substitute_within(&release.components, &lookup, &extra.limits)?;
    let mut objects = pipeline::parse_objects_within(&text, &extra.limits)?;
    drop(text);
    // The provider object's namespace is the target, as the operator installs each provider
    // where its object lives; the release's own namespace is used when the object has none.
    let own = pipeline::inspect_target_namespace(&objects)?;
    let target = provider
        .metadata
        .namespace
        .clone()
        .filter(|s| !s.is_empty())
        .or(own)
        .ok_or(pipeline::PipelineError::NoTargetNamespace)?;
    pipeline::fix_target_namespace(&mut objects, &target)?;
    let label = provider.provider_type.manifest_label(provider.name());
    extra.mirror.rewrite_images(&mut objects, &label);
    let managers = customize_deployments(&mut objects, &spec, &release.version)?;
    if let Some(text) = extra.additional_manifests.as_deref() {
        let mut more = additional_objects(text, &lookup, &target, &objects, &extra.limits)?;
        tracing::debug!(count = more.len(), "adding additional manifests");
        extra.mirror.rewrite_images(&mut more, &label);
        objects.extend(more);
    }
    extra.mirror.add_pull_secrets_to(&mut objects);
    patches.apply(&mut objects)?;
    // Labels after the patches, so a patch cannot drop the labels pruning relies on.
    pipeline::add_common_labels(&mut objects, &label)?;
    pipeline::sort_for_apply(&mut objects);
    let images = pipeline::inspect_images(&objects);
    Ok(Rendered {
        objects,
        contract,
        namespace: target,
        images,
        managers,
    })
}

/// Customizes every Deployment of the release; reports name the fields as
/// `spec.manager...` or `spec.additionalDeployments[NAME].manager...`.
fn customize_deployments(
    objects: &mut [Value],
    spec: &capi_operator_api::ProviderSpec,
    version: &str,
) -> Result<Vec<customize::ManagerReport>, RenderError> {
    let mut reports = Vec::new();
    for o in objects.iter_mut() {
        if o.get("kind").and_then(Value::as_str) != Some("Deployment") {
            continue;
        }
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        let (deployment, manager, prefix) = match spec.additional_deployments.get(&name) {
            Some(extra) => (
                extra.deployment.as_ref(),
                extra.manager.as_ref(),
                format!("spec.additionalDeployments[{name}]"),
            ),
            None => (
                spec.deployment.as_ref(),
                spec.manager.as_ref(),
                "spec".to_string(),
            ),
        };
        if let Some(mut r) = customize::customize_deployment(o, deployment, manager, version)? {
            for f in &mut r.findings {
                f.field = format!("{prefix}.{}", f.field);
            }
            reports.push(r);
        }
    }
    Ok(reports)
}

fn additional_objects(
    text: &str,
    lookup: impl Fn(&str) -> Option<String>,
    target: &str,
    rendered: &[Value],
    limits: &pipeline::RenderLimits,
) -> Result<Vec<Value>, RenderError> {
    let fail = |e: pipeline::PipelineError| RenderError::AdditionalManifests(e.to_string());
    let text = pipeline::substitute_within(text, lookup, limits).map_err(fail)?;
    let mut objects = pipeline::parse_objects_within(&text, limits).map_err(fail)?;
    let mut seen = patch::identities(rendered);
    for (i, o) in objects.iter_mut().enumerate() {
        let name = o.pointer("/metadata/name").and_then(Value::as_str);
        if name.is_none_or(str::is_empty) {
            return Err(RenderError::AdditionalManifests(format!(
                "document {} has no metadata.name",
                i + 1
            )));
        }
        let has_namespace = o
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty());
        let kind = o.get("kind").and_then(Value::as_str).unwrap_or("");
        if !has_namespace
            && is_namespaced(kind)
            && let Some(meta) = o.get_mut("metadata").and_then(Value::as_object_mut)
        {
            meta.insert("namespace".into(), json!(target));
        }
        if !seen.insert(patch::object_identity(o)) {
            return Err(RenderError::AdditionalManifests(format!(
                "{} is already part of the provider (the release or an earlier document); use patches to change release objects",
                patch::describe_object(o)
            )));
        }
    }
    Ok(objects)
}

/// Whether clusterctl treats `kind` as namespaced. Its list of cluster-scoped kinds is private
/// to the pipeline; asking `fix_target_namespace` on a probe keeps a single list.
fn is_namespaced(kind: &str) -> bool {
    let mut probe = vec![
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "probe"}}),
        json!({"apiVersion": "v1", "kind": kind, "metadata": {"name": "probe"}}),
    ];
    pipeline::fix_target_namespace(&mut probe, "probe").is_ok()
        && probe
            .get(1)
            .and_then(|o| o.pointer("/metadata/namespace"))
            .is_some()
}

#[cfg(test)]
mod tests {
    use super::*;

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    const COMPONENTS: &str = r#"
apiVersion: v1
kind: Namespace
metadata: {name: sample-system}
---
apiVersion: apps/v1
kind: Deployment
metadata: {name: sample-controller-manager, namespace: sample-system}
spec:
  replicas: 1
  template:
    spec:
      containers:
      - {name: manager, image: "registry.example/sample:${TAG:=v0.1.0}", args: [--leader-elect]}
---
apiVersion: v1
kind: ServiceAccount
metadata: {name: sample-manager, namespace: sample-system}
"#;

    fn release() -> Release {
        Release {
            version: "v0.1.0".into(),
            metadata: "releaseSeries:\n- {major: 0, minor: 1, contract: v1beta1}\n".into(),
            components: COMPONENTS.into(),
        }
    }

    fn provider(spec: Value) -> Result<AnyProvider, Box<dyn std::error::Error>> {
        Ok(AnyProvider::from_value(json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
            "kind": "InfrastructureProvider",
            "metadata": {"name": "sample", "namespace": "my-ns"},
            "spec": spec,
        }))?)
    }

    fn find<'a>(r: &'a Rendered, kind: &str, name: &str) -> Option<&'a Value> {
        r.objects
            .iter()
            .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
    }

    #[test]
    fn patches_run_after_customizations_and_before_labels() -> TestResult {
        let p = provider(json!({
            "version": "v0.1.0",
            "deployment": {"replicas": 2},
            "patches": [
                {"patch": "- {op: test, path: /spec/replicas, value: 2}\n- {op: replace, path: /spec/replicas, value: 3}\n",
                 "target": {"kind": "Deployment"}},
                {"patch": "metadata: {labels: null}", "target": {"group": "", "kind": "ServiceAccount"}}
            ]
        }))?;
        let r = render(&p, &release(), |_| None)?;
        let d = find(&r, "Deployment", "sample-controller-manager").ok_or("no Deployment")?;
        // The test operation saw the customized replica count.
        assert_eq!(d["spec"]["replicas"], 3);
        let sa = find(&r, "ServiceAccount", "sample-manager").ok_or("no ServiceAccount")?;
        assert_eq!(
            sa["metadata"]["labels"]["cluster.x-k8s.io/provider"],
            "infrastructure-sample"
        );
        Ok(())
    }

    #[test]
    fn patch_errors_are_render_errors() -> TestResult {
        let p = provider(json!({
            "version": "v0.1.0",
            "patches": [{"patch": "[{op: remove, path: /spec/missing}]", "target": {"kind": "Deployment"}}]
        }))?;
        assert_eq!(
            render(&p, &release(), |_| None).map_err(|e| e.to_string()),
            Err("spec.patches[0] on Deployment my-ns/sample-controller-manager: operation [0] (remove /spec/missing) failed: path not found".into())
        );
        let both = provider(json!({
            "version": "v0.1.0",
            "patches": [{"patch": "{a: 1}"}],
            "manifestPatches": ["kind: Deployment"]
        }))?;
        assert!(matches!(
            render(&both, &release(), |_| None),
            Err(RenderError::Patch(patch::PatchError::BothSet))
        ));
        Ok(())
    }

    #[test]
    fn additional_manifests_join_the_provider() -> TestResult {
        let p = provider(json!({
            "version": "v0.1.0",
            "manifestPatches": ["kind: ConfigMap\nmetadata: {name: extra}\ndata: {patched: \"yes\"}"]
        }))?;
        let extra = RenderExtras {
            additional_manifests: Some(
                "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: extra}\ndata: {tag: \"${TAG:=none}\", cost: \"$$5\"}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: elsewhere, namespace: other}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata: {name: extra-role}\nrules: []\n".into(),
            ),
            ..RenderExtras::default()
        };
        let vars = |k: &str| (k == "TAG").then(|| "v9".to_string());
        let r = render_with(&p, &release(), vars, &extra)?;
        let cm = find(&r, "ConfigMap", "extra").ok_or("no ConfigMap")?;
        assert_eq!(cm["metadata"]["namespace"], "my-ns");
        assert_eq!(cm["data"]["tag"], "v9");
        assert_eq!(cm["data"]["cost"], "$5");
        assert_eq!(cm["data"]["patched"], "yes");
        let other = find(&r, "ConfigMap", "elsewhere").ok_or("no ConfigMap elsewhere")?;
        assert_eq!(other["metadata"]["namespace"], "other");
        let role = find(&r, "ClusterRole", "extra-role").ok_or("no ClusterRole")?;
        assert!(role["metadata"].get("namespace").is_none());
        for o in &r.objects {
            assert_eq!(
                o["metadata"]["labels"]["cluster.x-k8s.io/provider"],
                "infrastructure-sample"
            );
            assert_eq!(o["metadata"]["labels"]["clusterctl.cluster.x-k8s.io"], "");
        }
        assert_eq!(r.objects.len(), 6);
        assert_eq!(r.objects[0]["kind"], "Namespace");
        Ok(())
    }

    #[test]
    fn unusable_additional_manifests_are_reported() -> TestResult {
        let p = provider(json!({"version": "v0.1.0"}))?;
        let msg = |text: &str| {
            let extra = RenderExtras {
                additional_manifests: Some(text.into()),
                ..RenderExtras::default()
            };
            render_with(&p, &release(), |_| None, &extra).map_err(|e| e.to_string())
        };
        assert_eq!(
            msg("apiVersion: v1\nkind: ServiceAccount\nmetadata: {name: sample-manager}\n").map(|_| ()),
            Err("spec.additionalManifests: ServiceAccount my-ns/sample-manager is already part of the provider (the release or an earlier document); use patches to change release objects".into())
        );
        assert_eq!(
            msg("apiVersion: v1\nkind: ConfigMap\nmetadata: {}\n").map(|_| ()),
            Err("spec.additionalManifests: document 1 has no metadata.name".into())
        );
        assert!(
            msg("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {a: ${NEEDED}}\n")
                .is_err_and(|e| e.starts_with("spec.additionalManifests: failed to perform variable substitution: value for variables [NEEDED]"))
        );
        assert!(
            msg("a: [1")
                .is_err_and(|e| e.starts_with("spec.additionalManifests: failed to parse yaml"))
        );
        // Empty text adds nothing.
        assert_eq!(msg("").map(|r| r.objects.len()), Ok(3));
        Ok(())
    }

    #[test]
    fn the_mirror_moves_images_and_the_spec_override_wins() -> TestResult {
        let mirror = crate::mirror::ImageMirror::parse(
            Some("all: {repository: mirror.example/capi}"),
            Some("[mirror-pull]"),
        )?;
        let extra = RenderExtras {
            mirror,
            additional_manifests: Some("apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: agent}\nspec: {template: {spec: {containers: [{name: a, image: r.io/agent:v1}]}}}\n".into()),
            ..RenderExtras::default()
        };
        let image = |r: &Rendered, kind: &str, name: &str| {
            find(r, kind, name)
                .map(|d| d["spec"]["template"]["spec"]["containers"][0]["image"].clone())
        };
        let plain = render_with(
            &provider(json!({"version": "v0.1.0"}))?,
            &release(),
            |_| None,
            &extra,
        )?;
        assert_eq!(
            plain.images,
            vec![
                "mirror.example/capi/sample:v0.1.0",
                "mirror.example/capi/agent:v1"
            ]
        );
        let d = find(&plain, "Deployment", "sample-controller-manager").ok_or("no Deployment")?;
        assert_eq!(
            d["spec"]["template"]["spec"]["imagePullSecrets"],
            json!([{"name": "mirror-pull"}])
        );
        let tag_only = provider(json!({"version": "v0.1.0", "deployment": {
            "imagePullSecrets": [{"name": "own"}],
            "containers": [{"name": "manager", "image": {"tag": "v0.1.1"}}]}}))?;
        let r = render_with(&tag_only, &release(), |_| None, &extra)?;
        assert_eq!(
            image(&r, "Deployment", "sample-controller-manager"),
            Some(json!("mirror.example/capi/sample:v0.1.1"))
        );
        let d = find(&r, "Deployment", "sample-controller-manager").ok_or("no Deployment")?;
        assert_eq!(
            d["spec"]["template"]["spec"]["imagePullSecrets"],
            json!([{"name": "own"}, {"name": "mirror-pull"}])
        );
        let whole = provider(json!({"version": "v0.1.0", "deployment": {
            "containers": [{"name": "manager", "image": "other.example/sample:v2"}]}}))?;
        let r = render_with(&whole, &release(), |_| None, &extra)?;
        assert_eq!(
            image(&r, "Deployment", "sample-controller-manager"),
            Some(json!("other.example/sample:v2"))
        );
        assert_eq!(
            image(&r, "DaemonSet", "agent"),
            Some(json!("mirror.example/capi/agent:v1"))
        );
        Ok(())
    }
}
