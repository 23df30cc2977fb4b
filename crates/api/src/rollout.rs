//! When a Deployment counts as rolled out, shared by the operator's Ready condition and the
//! kubectl plugin's waits, so both judge a provider's (or cert-manager's) managers alike.

use k8s_openapi::api::apps::v1::Deployment;

/// Whether `d` is Available and completely rolled out, as `kubectl rollout status` judges it:
/// every replica updated and available and no old replica left. An old manager that keeps
/// serving while its replacement crash-loops must not make the provider Ready. `Err` says why.
pub fn availability(d: &Deployment) -> Result<(), String> {
    let st = d.status.as_ref();
    let available = st
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Available"));
    let Some(available) = available.filter(|c| c.status == "True") else {
        return Err(available
            .and_then(|c| c.message.clone())
            .unwrap_or_else(|| "rollout in progress".into()));
    };
    let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
    let Some(s) = st else {
        return Err(available.message.clone().unwrap_or_default());
    };
    let (updated, total) = (s.updated_replicas.unwrap_or(0), s.replicas.unwrap_or(0));
    let ready = s.available_replicas.unwrap_or(0);
    if s.observed_generation.unwrap_or(0) < d.metadata.generation.unwrap_or(0) {
        return Err("rollout in progress: the new spec is not observed yet".into());
    }
    if updated < want {
        return Err(format!(
            "rollout in progress: {updated} of {want} replicas updated"
        ));
    }
    if total > updated {
        return Err(format!(
            "rollout in progress: {} old replicas pending termination",
            total - updated
        ));
    }
    if ready < updated {
        return Err(format!(
            "rollout in progress: {ready} of {updated} updated replicas available"
        ));
    }
    Ok(())
}
