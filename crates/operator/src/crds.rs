//! `run --manage-crds`: the operator brings the CRDs of its seven kinds to its own schema at
//! startup. Helm installs a chart's `crds/` directory once and never upgrades it, so without
//! this a `helm upgrade` would run a new operator against old CRDs. Each CRD carries the
//! version of the operator that wrote it and a hash of its spec: an unchanged CRD is not
//! written (a restart costs no write), and a CRD written by a newer operator is left alone, so
//! a rollback never strips fields a newer schema added.
//!
//! A CRD this operator cannot take over is left exactly as it is and the operator runs on,
//! saying so in its log and in a Warning event on the CRD: cluster-api-operator's CRDs still
//! holding objects stored as `v1alpha1` (`status.storedVersions`) are refused by the API server
//! with this operator's schema, which serves `v1alpha2` only. Crash-looping on that — with the
//! previous owner's conversion webhook already removed — would stop every provider. Such a
//! CRD is taken over by `kubectl capi-providers migrate`, once its objects are stored as
//! `v1alpha2`.

use capi_operator_api::{
    ProviderApi, ProviderType,
    crd::{HASH_ANNOTATION, VERSION_ANNOTATION, crd},
    v1alpha2,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{Patch, PatchParams},
    runtime::events::{Event, EventType, Recorder, Reporter},
};
const FIELD_MANAGER: &str = "capi-provider-operator";

/// The reason of the Warning event on a CRD left as it is.
pub const CRD_NOT_TAKEN_OVER: &str = "CRDNotTakenOver";

/// What `ensure` did to one CRD.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Created or brought to this operator's schema.
    Applied,
    /// Already this operator's schema.
    Unchanged,
    /// Written by a newer operator (the version it names); left as is.
    Newer(String),
    /// Not this operator's to write now (why); left exactly as it is.
    Refused(String),
}

/// Failure to bring a CRD up to date.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The CRD could not be generated from the Rust types.
    #[error("generating the CRD of {kind}: {source}")]
    Generate {
        /// Kind whose CRD failed.
        kind: &'static str,
        /// Cause.
        source: capi_operator_api::crd::CrdError,
    },
    /// The API server refused a read or a write.
    #[error("CRD {name}: {source}")]
    Kube {
        /// CRD name.
        name: String,
        /// Cause.
        source: kube::Error,
    },
}

/// The decision for one CRD, from the annotations it carries now (pure, table-tested).
pub fn decide(existing: Option<(&str, &str)>, ours: &str, hash: &str) -> Outcome {
    let Some((version, existing_hash)) = existing else {
        return Outcome::Applied;
    };
    if existing_hash == hash {
        return Outcome::Unchanged;
    }
    match (semver_of(version), semver_of(ours)) {
        (Some(theirs), Some(mine)) if theirs > mine => Outcome::Newer(version.to_string()),
        _ => Outcome::Applied,
    }
}

fn semver_of(v: &str) -> Option<semver::Version> {
    semver::Version::parse(v.trim_start_matches('v')).ok()
}

/// The CRD of `t` in `api` as this operator writes it, and the hash of its spec (both from the
/// API crate's generator, which annotates every CRD it makes).
pub fn desired(
    api: ProviderApi,
    t: ProviderType,
) -> Result<(CustomResourceDefinition, String), Error> {
    let c = match api {
        ProviderApi::Management => crd(t),
        ProviderApi::ClusterApiOperator => v1alpha2::crd(t),
    }
    .map_err(|source| Error::Generate {
        kind: t.kind(),
        source,
    })?;
    let hash = c
        .annotations()
        .get(HASH_ANNOTATION)
        .cloned()
        .unwrap_or_default();
    Ok((c, hash))
}

/// Brings every provider CRD of `apis` to this operator's schema (server-side apply), logging
/// what it did; returns the outcome per CRD name. A CRD it may not write is left as it is
/// (`Outcome::Refused`, with a Warning event on it); only reads and transient failures are errors.
pub async fn ensure(
    client: &Client,
    apis: &[ProviderApi],
) -> Result<Vec<(String, Outcome)>, Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut done = Vec::new();
    let wanted = apis.iter().flat_map(|&a| ProviderType::ALL.map(|t| (a, t)));
    for (provider_api, t) in wanted {
        let (want, hash) = desired(provider_api, t)?;
        let name = want.name_any();
        let have = api.get_opt(&name).await.map_err(|source| Error::Kube {
            name: name.clone(),
            source,
        })?;
        let annotations = have.as_ref().map(kube::ResourceExt::annotations);
        let existing = annotations.map(|a| {
            let get = |k: &str| a.get(k).map(String::as_str).unwrap_or("");
            (get(VERSION_ANNOTATION), get(HASH_ANNOTATION))
        });
        let mut outcome = decide(existing, env!("CARGO_PKG_VERSION"), &hash);
        if outcome == Outcome::Applied {
            outcome = write(&api, have.as_ref(), &want).await?;
        }
        match &outcome {
            Outcome::Applied => {
                tracing::info!(crd = %name, "CRD brought to this operator's schema");
            }
            Outcome::Unchanged => tracing::debug!(crd = %name, "CRD up to date"),
            Outcome::Newer(v) => tracing::warn!(
                crd = %name,
                written_by = %v,
                "CRD written by a newer operator; left as is"
            ),
            Outcome::Refused(why) => {
                tracing::error!(crd = %name, reason = %why, "CRD left as it is; the operator runs on");
                if let Some(have) = &have {
                    warn_on(client, have, why).await;
                }
            }
        }
        done.push((name, outcome));
    }
    let count = |f: fn(&Outcome) -> bool| done.iter().filter(|(_, o)| f(o)).count();
    tracing::info!(
        applied = count(|o| *o == Outcome::Applied),
        unchanged = count(|o| *o == Outcome::Unchanged),
        newer = count(|o| matches!(o, Outcome::Newer(_))),
        refused = count(|o| matches!(o, Outcome::Refused(_))),
        "provider CRDs checked"
    );
    Ok(done)
}

/// Writes `want` over `have`: `Applied`, or `Refused` when the API server would (or did)
/// refuse it. The check comes before anything is changed, so a refused CRD keeps even the
/// conversion webhook of its previous owner.
async fn write(
    api: &Api<CustomResourceDefinition>,
    have: Option<&CustomResourceDefinition>,
    want: &CustomResourceDefinition,
) -> Result<Outcome, Error> {
    let name = want.name_any();
    let kube_err = |source| Error::Kube {
        name: name.clone(),
        source,
    };
    if let Some(why) = have.and_then(|h| blocked(h, want)) {
        return Ok(Outcome::Refused(why));
    }
    if have.is_some_and(converts_by_webhook) {
        // The webhook goes in a write of its own before the apply; ask the API server first
        // whether the CRD would take the whole change, so a refusal leaves the webhook too.
        let mut whole = serde_json::json!({"spec": want.spec});
        whole["spec"]["conversion"] = serde_json::json!({"strategy": "None", "webhook": null});
        let params = PatchParams {
            dry_run: true,
            field_manager: Some(FIELD_MANAGER.to_string()),
            ..PatchParams::default()
        };
        if let Some(refused) = refusal(api.patch(&name, &params, &Patch::Merge(&whole)).await) {
            return refused.map_err(kube_err);
        }
        drop_conversion_webhook(api, &name)
            .await
            .map_err(kube_err)?;
    }
    let params = PatchParams::apply(FIELD_MANAGER).force();
    match refusal(api.patch(&name, &params, &Patch::Apply(want)).await) {
        None => Ok(Outcome::Applied),
        Some(r) => r.map_err(kube_err),
    }
}

/// `None` when the write went through; else `Refused` when the API server refused it for what
/// the CRD is (restarting would not help), or the error of a passing failure.
fn refusal<T>(r: Result<T, kube::Error>) -> Option<Result<Outcome, kube::Error>> {
    match r {
        Ok(_) => None,
        Err(kube::Error::Api(s)) if (400..500).contains(&s.code) && s.code != 429 => {
            Some(Ok(Outcome::Refused(format!(
                "the API server refused this operator's schema: {}",
                s.message
            ))))
        }
        Err(e) => Some(Err(e)),
    }
}

/// Why `have` cannot become `want` (pure): versions it has stored objects in that `want` no
/// longer lists, which the API server refuses to drop until the objects are migrated.
pub fn blocked(have: &CustomResourceDefinition, want: &CustomResourceDefinition) -> Option<String> {
    let listed: Vec<&str> = want.spec.versions.iter().map(|v| v.name.as_str()).collect();
    let stored = have
        .status
        .as_ref()
        .and_then(|s| s.stored_versions.as_ref());
    let unlisted: Vec<&str> = stored
        .into_iter()
        .flatten()
        .map(String::as_str)
        .filter(|v| !listed.contains(v))
        .collect();
    (!unlisted.is_empty()).then(|| {
        format!(
            "status.storedVersions holds {} that this operator's schema does not serve; it can \
             be taken over (`kubectl capi-providers migrate --from cluster-api-operator`) once \
             its objects are stored as {} and storedVersions lists only that",
            unlisted.join(", "),
            listed.join(", ")
        )
    })
}

/// A Warning event on the CRD left as it is; failing to publish it is only logged, the log
/// line above already says the same.
async fn warn_on(client: &Client, crd: &CustomResourceDefinition, why: &str) {
    let reporter = Reporter {
        controller: FIELD_MANAGER.into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let event = Event {
        type_: EventType::Warning,
        reason: CRD_NOT_TAKEN_OVER.into(),
        note: Some(format!("left as it is: {why}")),
        action: "TakeOver".into(),
        secondary: None,
    };
    let recorder = Recorder::new(client.clone(), reporter);
    if let Err(e) = recorder.publish(&event, &crd.object_ref(&())).await {
        tracing::warn!(crd = %crd.name_any(), error = %e, "publishing the event failed");
    }
}

/// Whether a CRD names a conversion webhook (cluster-api-operator's CRDs do).
fn converts_by_webhook(c: &CustomResourceDefinition) -> bool {
    c.spec
        .conversion
        .as_ref()
        .is_some_and(|conv| conv.strategy == "Webhook")
}

/// Removes a CRD's conversion webhook before it is taken over: applying `strategy: None` alone
/// would leave the webhook settings of the CRD's previous owner in place, which the API server
/// refuses with that strategy.
async fn drop_conversion_webhook(
    api: &Api<CustomResourceDefinition>,
    name: &str,
) -> Result<(), kube::Error> {
    let patch = serde_json::json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    let params = PatchParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PatchParams::default()
    };
    api.patch(name, &params, &Patch::Merge(&patch)).await?;
    tracing::info!(crd = %name, "conversion webhook of the previous owner removed");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions() {
        let cases = [
            (None, "0.2.0", Outcome::Applied),
            (Some(("0.2.0", "h")), "0.2.0", Outcome::Unchanged),
            // Same hash from another version: nothing to write.
            (Some(("0.1.0", "h")), "0.2.0", Outcome::Unchanged),
            (Some(("0.1.0", "old")), "0.2.0", Outcome::Applied),
            (
                Some(("v0.3.0", "new")),
                "0.2.0",
                Outcome::Newer("v0.3.0".into()),
            ),
            // Written by hand or by Helm: no annotations.
            (Some(("", "")), "0.2.0", Outcome::Applied),
            (Some(("not-a-version", "x")), "0.2.0", Outcome::Applied),
        ];
        for (existing, ours, want) in cases {
            assert_eq!(decide(existing, ours, "h"), want, "{existing:?} vs {ours}");
        }
    }

    #[test]
    fn desired_carries_version_and_hash_of_its_spec() -> Result<(), Error> {
        let (c, hash) = desired(ProviderApi::Management, ProviderType::Core)?;
        let a = c.metadata.annotations.unwrap_or_default();
        assert_eq!(
            a.get(VERSION_ANNOTATION).map(String::as_str),
            Some(env!("CARGO_PKG_VERSION"))
        );
        assert_eq!(a.get(HASH_ANNOTATION), Some(&hash));
        assert_eq!(hash.len(), 64);
        let (_, other) = desired(ProviderApi::Management, ProviderType::Bootstrap)?;
        assert_ne!(hash, other, "kinds share a hash");
        Ok(())
    }

    #[test]
    fn stored_versions_the_schema_drops_block_the_take_over() -> Result<(), Error> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinitionStatus;
        let (want, _) = desired(ProviderApi::ClusterApiOperator, ProviderType::Core)?;
        let stored = |versions: &[&str]| {
            let mut have = want.clone();
            have.status = Some(CustomResourceDefinitionStatus {
                stored_versions: Some(
                    versions
                        .iter()
                        .map(std::string::ToString::to_string)
                        .collect(),
                ),
                ..CustomResourceDefinitionStatus::default()
            });
            have
        };
        assert_eq!(blocked(&want, &want), None, "no status yet");
        assert_eq!(blocked(&stored(&["v1alpha2"]), &want), None);
        let why = blocked(&stored(&["v1alpha1", "v1alpha2"]), &want).unwrap_or_default();
        assert!(
            why.starts_with("status.storedVersions holds v1alpha1 that this operator's schema"),
            "{why}"
        );
        assert!(why.contains("capi-providers migrate"), "{why}");
        Ok(())
    }
}
