//! The one place where the shorthand forms of the specification's examples become canonical:
//! `manager.metricsAddress` → `manager.metrics.bindAddress`, an integer `syncPeriod` (seconds) →
//! a duration string, a container `image:` string → its pieces, integer container args → strings.
//! Everything downstream of the API reads only the normalized spec.

use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{
    AdditionalDeployment, ContainerImage, ControllerMetrics, DeploymentSpec, ManagerSpec,
    ProviderSpec,
};

impl ProviderSpec {
    /// The spec with every shorthand form replaced by its canonical form.
    pub fn normalized(&self) -> ProviderSpec {
        let mut spec = self.clone();
        if let Some(m) = spec.manager.as_mut() {
            normalize_manager(m);
        }
        if let Some(d) = spec.deployment.as_mut() {
            normalize_deployment(d);
        }
        for AdditionalDeployment {
            manager,
            deployment,
        } in spec.additional_deployments.values_mut()
        {
            if let Some(m) = manager.as_mut() {
                normalize_manager(m);
            }
            if let Some(d) = deployment.as_mut() {
                normalize_deployment(d);
            }
        }
        spec
    }
}

fn normalize_manager(m: &mut ManagerSpec) {
    if let Some(IntOrString::Int(secs)) = m.sync_period {
        m.sync_period = Some(IntOrString::String(format!("{secs}s")));
    }
    if let Some(addr) = m.metrics_address.take() {
        let metrics = m.metrics.get_or_insert_with(ControllerMetrics::default);
        if metrics.bind_address.is_none() {
            metrics.bind_address = Some(addr);
        }
    }
}

fn normalize_deployment(d: &mut DeploymentSpec) {
    for c in &mut d.containers {
        if let Some(image) = c.image.as_mut()
            && let ContainerImage::Reference(_) = image
        {
            *image = ContainerImage::Meta(image.to_meta());
        }
        if let Some(args) = c.args.as_mut() {
            for v in args.values_mut() {
                if let IntOrString::Int(i) = v {
                    *v = IntOrString::String(i.to_string());
                }
            }
        }
    }
}

/// A container arg value as the string the flag gets.
pub fn arg_value(v: &IntOrString) -> String {
    match v {
        IntOrString::Int(i) => i.to_string(),
        IntOrString::String(s) => s.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ContainerSpec, ImageMeta};
    use std::collections::BTreeMap;

    #[test]
    fn shorthand_forms_become_canonical() -> Result<(), serde_json::Error> {
        // The specification's first two examples, merged.
        let spec: ProviderSpec = serde_json::from_value(serde_json::json!({
            "version": "v0.6.0",
            "manager": { "metricsAddress": ":8181", "syncPeriod": 660 },
            "deployment": { "containers": [{
                "name": "manager",
                "image": "gcr.io/myregistry/capa-controller:v0.6.0-foo",
                "args": { "awscluster-concurrency": 12, "awsmachine-concurrency": "11" }
            }]}
        }))?;
        let n = spec.normalized();
        let m = n.manager.clone().unwrap_or_default();
        assert_eq!(m.sync_period, Some(IntOrString::String("660s".into())));
        assert_eq!(m.metrics_address, None);
        assert_eq!(
            m.metrics.and_then(|x| x.bind_address).as_deref(),
            Some(":8181")
        );
        let c = &n.deployment.clone().unwrap_or_default().containers[0];
        assert_eq!(
            c.image,
            Some(ContainerImage::Meta(ImageMeta {
                repository: Some("gcr.io/myregistry".into()),
                name: Some("capa-controller".into()),
                tag: Some("v0.6.0-foo".into()),
            }))
        );
        let args = c.args.clone().unwrap_or_default();
        assert_eq!(
            args["awscluster-concurrency"],
            IntOrString::String("12".into())
        );
        assert_eq!(
            args["awsmachine-concurrency"],
            IntOrString::String("11".into())
        );
        // Normalizing twice changes nothing more.
        assert_eq!(n.normalized(), n);
        Ok(())
    }

    #[test]
    fn explicit_bind_address_wins_over_shorthand() {
        let spec = ProviderSpec {
            manager: Some(ManagerSpec {
                metrics_address: Some(":1".into()),
                metrics: Some(ControllerMetrics {
                    bind_address: Some(":2".into()),
                    ..Default::default()
                }),
                sync_period: Some(IntOrString::String("5m".into())),
                ..Default::default()
            }),
            ..Default::default()
        };
        let m = spec.normalized().manager.unwrap_or_default();
        assert_eq!(
            m.metrics.and_then(|x| x.bind_address).as_deref(),
            Some(":2")
        );
        assert_eq!(m.sync_period, Some(IntOrString::String("5m".into())));
    }

    #[test]
    fn additional_deployments_are_normalized_too() {
        let mut extra = BTreeMap::new();
        extra.insert(
            "other".to_string(),
            AdditionalDeployment {
                manager: Some(ManagerSpec {
                    sync_period: Some(IntOrString::Int(30)),
                    ..Default::default()
                }),
                deployment: Some(DeploymentSpec {
                    containers: vec![ContainerSpec {
                        name: "c".into(),
                        image: Some(ContainerImage::Reference("r/x:1".into())),
                        ..Default::default()
                    }],
                    ..Default::default()
                }),
            },
        );
        let spec = ProviderSpec {
            additional_deployments: extra,
            ..Default::default()
        };
        let n = spec.normalized();
        let d = &n.additional_deployments["other"];
        assert_eq!(
            d.manager.as_ref().and_then(|m| m.sync_period.clone()),
            Some(IntOrString::String("30s".into()))
        );
        assert!(matches!(
            d.deployment.as_ref().map(|d| &d.containers[0].image),
            Some(Some(ContainerImage::Meta(_)))
        ));
    }
}
