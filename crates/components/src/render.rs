//! Renders a provider: its release through clusterctl's pipeline, then the operator's
//! customizations from the provider's spec.

use capi_operator_api::AnyProvider;
use serde_json::Value;

use crate::{customize, metadata::Metadata, pipeline, source::Release};

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
}

/// Renders `provider` from `release`, with variables from `lookup`.
pub fn render(
    provider: &AnyProvider,
    release: &Release,
    lookup: impl Fn(&str) -> Option<String>,
) -> Result<Rendered, RenderError> {
    let metadata = Metadata::parse(&release.metadata)?;
    let contract = metadata.contract_for(&release.version)?.to_string();
    let text = pipeline::substitute(&release.components, lookup)?;
    let mut objects = pipeline::parse_objects(&text)?;
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
    let spec = provider.spec.normalized();
    let label = provider.provider_type.manifest_label(provider.name());
    for o in objects.iter_mut() {
        if o.get("kind").and_then(Value::as_str) != Some("Deployment") {
            continue;
        }
        let name = o
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_string();
        match spec.additional_deployments.get(&name) {
            Some(extra) => customize::customize_deployment(
                o,
                extra.deployment.as_ref(),
                extra.manager.as_ref(),
            )?,
            None => {
                customize::customize_deployment(o, spec.deployment.as_ref(), spec.manager.as_ref())?
            }
        }
    }
    pipeline::add_common_labels(&mut objects, &label)?;
    pipeline::sort_for_apply(&mut objects);
    let images = pipeline::inspect_images(&objects);
    Ok(Rendered {
        objects,
        contract,
        namespace: target,
        images,
    })
}
