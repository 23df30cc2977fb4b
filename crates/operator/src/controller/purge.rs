//! The API side of `deletionPolicy: Purge`: what a provider's namespace holds, for
//! [`capi_decide::deletion::foreign`] to tell the provider's own objects from everyone
//! else's (and [`capi_decide::deletion::shared`] the inputs other providers read) before
//! the namespace is removed; and the guard that refuses new custom resources of the CRDs
//! being removed between the last look for them and their removal.

use std::time::Duration;

use capi_decide::deletion::{self, Found};
use capi_operator_api::AnyProvider;
use k8s_openapi::api::{
    admissionregistration::v1::{
        MatchResources, NamedRuleWithOperations, ValidatingAdmissionPolicy,
        ValidatingAdmissionPolicyBinding, ValidatingAdmissionPolicyBindingSpec,
        ValidatingAdmissionPolicySpec, Validation,
    },
    core::v1::ConfigMap,
};
use kube::{
    Api,
    api::{
        ApiResource, DeleteParams, DynamicObject, ListParams, ObjectMeta, PartialObjectMeta, Patch,
        PatchParams, PostParams,
    },
    discovery::{Discovery, Scope, verbs},
};
use sha2::{Digest, Sha256};
use tracing::{debug, info, warn};

use super::{
    apply::{FIELD_MANAGER, ObjKey},
    context::Ctx,
    labels,
};

/// What [`look_into`] found in the namespace Purge would remove.
#[derive(Debug, Default)]
pub struct Look {
    /// Objects the provider did not install (see [`deletion::foreign`]).
    pub foreign: Vec<String>,
    /// The provider's inputs other providers read too (see [`deletion::shared`]).
    pub shared: Vec<String>,
}

/// What removing `ns` would destroy that is not only `p`'s: the objects `p` did not install
/// (see [`deletion::foreign`]), every namespaced kind the cluster serves looked at (the
/// operator may list every kind), and `p`'s inputs another provider object reads (see
/// [`deletion::shared`]). A kind that cannot be listed is named too: what it holds is unknown,
/// so the namespace must not go.
pub async fn look_into(ctx: &Ctx, p: &AnyProvider, ns: &str) -> Result<Look, kube::Error> {
    let discovery = match Discovery::new(ctx.client.clone()).run_aggregated().await {
        Ok(d) => d,
        Err(e) => {
            debug!(error = %e, "aggregated discovery unavailable; discovering group by group");
            Discovery::new(ctx.client.clone()).run().await?
        }
    };
    let mut found = Vec::new();
    let mut unlisted = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.scope != Scope::Namespaced || !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: Api<PartialObjectMeta<DynamicObject>> =
                Api::namespaced_with(ctx.client.clone(), ns, &ar);
            match api.list_metadata(&ListParams::default()).await {
                Ok(list) => found.extend(
                    list.items
                        .into_iter()
                        .map(|o| (ar.group.clone(), ar.kind.clone(), o.metadata)),
                ),
                Err(e) => unlisted.push(format!("{} (cannot be listed: {e})", ar.kind)),
            }
        }
    }
    let selector = p
        .spec
        .fetch_config
        .as_ref()
        .and_then(|f| f.selector.clone())
        .unwrap_or_default();
    let objects = found
        .iter()
        .map(|(group, kind, meta)| Found { group, kind, meta });
    let mut foreign = deletion::foreign(p, ns, objects.clone(), |l| labels::matches(&selector, l));
    foreign.extend(unlisted);
    let others = ctx.world.all_providers();
    let shared = deletion::shared(p, ns, objects, &others, |q, l| {
        q.spec
            .fetch_config
            .as_ref()
            .and_then(|f| f.selector.as_ref())
            .is_some_and(|s| labels::matches(s, l))
    });
    Ok(Look { foreign, shared })
}

/// The label on the guards, so that a start of the operator finds those a stopped one left.
const GUARD_LABEL: &str = "management.cluster.x-k8s.io/purge-guard";
/// How long a new guard may take to be enforced by the API server before the pass gives up
/// (and a later one tries again).
const GUARD_ENFORCED_WITHIN: Duration = Duration::from_secs(10);

/// The name of `p`'s guard (policy and binding alike): the same at every pass and after a
/// restart, so a left-over one is found and replaced rather than added to.
pub fn guard_name(p: &AnyProvider) -> String {
    let who = format!(
        "{:?}/{}/{}/{}",
        p.api,
        p.provider_type.kind(),
        p.namespace(),
        p.name()
    );
    let hash = format!("{:x}", Sha256::digest(who.as_bytes()));
    format!("{GUARD_PREFIX}{}", &hash[..16])
}

/// What every guard's name starts with: the sweep removes only objects named so (a label alone
/// could be put on anyone's policy).
const GUARD_PREFIX: &str = "capi-provider-purge-";

/// Puts up `p`'s guard: a ValidatingAdmissionPolicy (and its binding) refusing to create
/// objects of `crds`, so that the last look for custom resources stays true until the CRDs
/// are removed. `Ok(true)` once the API server enforces it (a dry-run create the policy also
/// matches is refused), `Ok(false)` when it did not within [`GUARD_ENFORCED_WITHIN`]; either
/// way the caller removes it with [`unguard`].
pub async fn guard(
    ctx: &Ctx,
    p: &AnyProvider,
    crds: &[(ObjKey, ApiResource, bool)],
) -> Result<bool, kube::Error> {
    let name = guard_name(p);
    let (policy, binding) = guard_objects(p, &name, crds);
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
        .patch(&name, &pp, &Patch::Apply(&policy))
        .await?;
    Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
        .patch(&name, &pp, &Patch::Apply(&binding))
        .await?;
    if !enforced(ctx, p, &name).await? {
        warn!(guard = %name, "the API server did not enforce the purge guard in time; trying again later");
        return Ok(false);
    }
    info!(guard = %name, "new custom resources refused for the last look");
    hold_for_tests().await;
    Ok(true)
}

/// The guard's policy and binding, both named `name`: CREATE of the resources of `crds`
/// refused (any version), and of a ConfigMap named `name` (the probe of [`enforced`]).
fn guard_objects(
    p: &AnyProvider,
    name: &str,
    crds: &[(ObjKey, ApiResource, bool)],
) -> (ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding) {
    let who = format!("{} {}/{}", p.provider_type.kind(), p.namespace(), p.name());
    let meta = || ObjectMeta {
        name: Some(name.to_string()),
        labels: Some(
            [
                (GUARD_LABEL.to_string(), "true".to_string()),
                (
                    "app.kubernetes.io/managed-by".to_string(),
                    FIELD_MANAGER.to_string(),
                ),
            ]
            .into(),
        ),
        annotations: Some(
            [(
                "management.cluster.x-k8s.io/purging".to_string(),
                who.clone(),
            )]
            .into(),
        ),
        ..Default::default()
    };
    let rule = |group: &str, resource: &str, names: Option<Vec<String>>| NamedRuleWithOperations {
        api_groups: Some(vec![group.to_string()]),
        api_versions: Some(vec!["*".into()]),
        operations: Some(vec!["CREATE".into()]),
        resources: Some(vec![resource.to_string()]),
        resource_names: names,
        scope: None,
    };
    // A CRD is named <plural>.<group>.
    let mut rules: Vec<_> = crds
        .iter()
        .filter_map(|(k, _, _)| k.name.split_once('.'))
        .map(|(plural, group)| rule(group, plural, None))
        .collect();
    rules.push(rule("", "configmaps", Some(vec![name.to_string()])));
    let names: Vec<&str> = crds.iter().map(|(k, _, _)| k.name.as_str()).collect();
    let policy = ValidatingAdmissionPolicy {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicySpec {
            failure_policy: Some("Fail".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(rules),
                ..Default::default()
            }),
            validations: Some(vec![Validation {
                expression: "false".into(),
                message: Some(format!(
                    "deletionPolicy Purge of {who} is removing the CRDs {}: no new object of them may be created",
                    names.join(", ")
                )),
                reason: Some("Forbidden".into()),
                ..Default::default()
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let binding = ValidatingAdmissionPolicyBinding {
        metadata: meta(),
        spec: Some(ValidatingAdmissionPolicyBindingSpec {
            policy_name: Some(name.to_string()),
            validation_actions: Some(vec!["Deny".into()]),
            ..Default::default()
        }),
    };
    (policy, binding)
}

/// Whether the API server enforces the guard `name`, within [`GUARD_ENFORCED_WITHIN`]: a new
/// policy is enforced a moment after it is written, and a dry-run create of the probe
/// ConfigMap (in `p`'s namespace, which exists while `p` does) is refused once it is.
async fn enforced(ctx: &Ctx, p: &AnyProvider, name: &str) -> Result<bool, kube::Error> {
    let probe = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        ..Default::default()
    };
    let configmaps: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), p.namespace());
    let dry_run = PostParams {
        dry_run: true,
        field_manager: Some(FIELD_MANAGER.into()),
    };
    let deadline = tokio::time::Instant::now() + GUARD_ENFORCED_WITHIN;
    loop {
        match configmaps.create(&dry_run, &probe).await {
            Err(kube::Error::Api(s)) if s.message.contains(name) => return Ok(true),
            // Not enforced yet (a ConfigMap of that name would answer 409 then).
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e),
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(false);
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Debug builds only (never a release image): a pause with the guard up, as long as
/// `CAPI_OPERATOR_DEBUG_PURGE_HOLD_MS` says, for a test to try creating a custom resource.
#[cfg(debug_assertions)]
async fn hold_for_tests() {
    if let Some(ms) = std::env::var("CAPI_OPERATOR_DEBUG_PURGE_HOLD_MS")
        .ok()
        .and_then(|v| v.parse::<u64>().ok())
    {
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

#[cfg(not(debug_assertions))]
async fn hold_for_tests() {}

/// Removes `p`'s guard (binding first, then policy); gone already is fine.
pub async fn unguard(ctx: &Ctx, p: &AnyProvider) -> Result<(), kube::Error> {
    remove_guard(ctx, &guard_name(p)).await
}

async fn remove_guard(ctx: &Ctx, name: &str) -> Result<(), kube::Error> {
    let dp = DeleteParams::default();
    let gone = |r: Result<_, kube::Error>| match r {
        Ok(()) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e),
    };
    gone(
        Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    )?;
    gone(
        Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
            .delete(name, &dp)
            .await
            .map(|_| ()),
    )
}

/// At the start of leading, removes every guard: a pass puts one up and removes it itself, so
/// any found now was left by a stopped operator, maybe for a provider gone since.
pub async fn sweep(ctx: &Ctx) {
    let lp = ListParams::default().labels(&format!("{GUARD_LABEL}=true"));
    let mut names: Vec<String> = Vec::new();
    match Api::<ValidatingAdmissionPolicy>::all(ctx.client.clone())
        .list_metadata(&lp)
        .await
    {
        Ok(l) => names.extend(l.items.into_iter().filter_map(|o| o.metadata.name)),
        Err(e) => warn!(error = %e, "listing left-over purge guards"),
    }
    match Api::<ValidatingAdmissionPolicyBinding>::all(ctx.client.clone())
        .list_metadata(&lp)
        .await
    {
        Ok(l) => names.extend(l.items.into_iter().filter_map(|o| o.metadata.name)),
        Err(e) => warn!(error = %e, "listing left-over purge guard bindings"),
    }
    names.retain(|n| n.starts_with(GUARD_PREFIX));
    names.sort();
    names.dedup();
    for name in names {
        match remove_guard(ctx, &name).await {
            Ok(()) => info!(guard = %name, "removed a purge guard a stopped operator left"),
            Err(e) => warn!(guard = %name, error = %e, "removing a left-over purge guard"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capi_operator_api::ProviderType;

    #[test]
    fn a_guard_is_named_for_its_provider_and_refuses_creating_objects_of_its_crds() {
        let mut p = AnyProvider {
            api: Default::default(),
            provider_type: ProviderType::Infrastructure,
            metadata: ObjectMeta {
                name: Some("sample".into()),
                namespace: Some("infra-system".into()),
                ..Default::default()
            },
            spec: Default::default(),
            status: None,
        };
        let name = guard_name(&p);
        assert_eq!(name, guard_name(&p.clone()), "not deterministic");
        assert!(
            name.starts_with("capi-provider-purge-") && name.len() <= 63,
            "{name}"
        );
        p.metadata.name = Some("other".into());
        assert_ne!(guard_name(&p), name);
        let crd = ObjKey {
            group: "apiextensions.k8s.io".into(),
            kind: "CustomResourceDefinition".into(),
            namespace: String::new(),
            name: "samplemachines.infrastructure.example".into(),
        };
        let ar = ApiResource::erase::<ConfigMap>(&());
        let (policy, binding) = guard_objects(&p, &name, &[(crd, ar, false)]);
        let spec = policy.spec.unwrap_or_default();
        let rules = spec
            .match_constraints
            .and_then(|m| m.resource_rules)
            .unwrap_or_default();
        let first = &rules[0];
        assert_eq!(
            first.api_groups.as_deref(),
            Some(&["infrastructure.example".to_string()][..])
        );
        assert_eq!(
            first.resources.as_deref(),
            Some(&["samplemachines".to_string()][..])
        );
        assert_eq!(
            first.operations.as_deref(),
            Some(&["CREATE".to_string()][..])
        );
        assert_eq!(
            rules[1].resource_names.as_deref(),
            Some(&[name.clone()][..])
        );
        assert_eq!(spec.failure_policy.as_deref(), Some("Fail"));
        let b = binding.spec.unwrap_or_default();
        assert_eq!(b.policy_name.as_deref(), Some(name.as_str()));
        assert_eq!(
            b.validation_actions.as_deref(),
            Some(&["Deny".to_string()][..])
        );
        for meta in [&policy.metadata, &binding.metadata] {
            assert_eq!(
                meta.labels
                    .as_ref()
                    .and_then(|l| l.get(GUARD_LABEL))
                    .map(String::as_str),
                Some("true")
            );
        }
    }
}
