//! The apply and prune phases: the rendered objects server-side applied (drift repaired,
//! privileged objects shown), then what the provider no longer renders deleted.

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use capi_cluster_io::provider_kind::ProviderKind;
use capi_cluster_io::redact::Redactor;
use capi_decide::{Note, reason};
use capi_operator_api::conditions::PROVIDER_INSTALLED;
use serde_json::Value;
use tracing::{info, warn};

use crate::controller::apply::{ApplyError, ApplyReport, key_of};
use crate::controller::context::provider_key;
use crate::controller::outcome::{Outcome, Reasoned};
use crate::controller::report::list_note;

use super::{Phase, State, end};

impl Reasoned for ApplyError {
    fn reason(&self) -> &'static str {
        ApplyError::reason(self)
    }
    fn transient(&self) -> bool {
        self.is_transient()
    }
}

/// Server-side applies the objects; shows, in an event, a release granting broad powers.
pub(super) async fn apply_objects<P: ProviderKind>(
    state: &mut State<'_, P>,
    objects: &[Value],
    vars: &BTreeMap<String, String>,
) -> Phase<ApplyReport> {
    let mut repaired = Vec::new();
    let applied = state
        .ctx
        .applier
        .apply_all(objects, |k| state.ctx.world.live(k), &mut repaired)
        .await;
    // Before a failure's end: the repairs made in a pass that then failed were made.
    if !repaired.is_empty() {
        warn!(provider = %provider_key(state.provider), objects = ?repaired, "restored objects changed outside the operator");
        let note = repaired_note(&repaired);
        state
            .notes
            .push(Note::warning(reason::DRIFT_REPAIRED, note));
    }
    let report = match applied {
        Ok(r) => r,
        // Redacted before it becomes a condition, an event or a log line.
        Err(e) => {
            let e = e.redacted(&Redactor::new(vars));
            return end(Outcome::failed(PROVIDER_INSTALLED, e));
        }
    };
    if report.applied > 0 {
        info!(provider = %provider_key(state.provider), applied = report.applied, unchanged = report.unchanged, "applied");
        // Applied as the release says, but shown: an admin should see a release that grants
        // cluster-admin or intercepts everything. Only when something was written, so an idle
        // cluster sees no event.
        let privileged = capi_components::privileged::privileged_objects(objects);
        if !privileged.is_empty() {
            warn!(provider = %provider_key(state.provider), objects = ?privileged, "the release holds privileged objects");
            let note = list_note(
                "the release holds privileged objects (applied as released): ",
                &privileged,
                "; ",
                "",
            );
            state
                .notes
                .push(Note::warning(reason::PRIVILEGED_OBJECTS, note));
        }
    }
    ControlFlow::Continue(report)
}

/// The event text of a drift repair: what was restored and who had changed it.
fn repaired_note(repaired: &[String]) -> String {
    list_note(
        "restored as declared, after changes made outside the operator: ",
        repaired,
        ", ",
        "; change the provider object instead (spec.version, spec.deployment, spec.manager)",
    )
}

/// Deletes what this provider installed before but no longer renders.
pub(super) async fn prune<P: ProviderKind>(
    state: &mut State<'_, P>,
    objects: &[&Value],
    paused: bool,
    upgrading: bool,
) -> Phase {
    let desired = objects.iter().filter_map(|o| key_of(o).ok()).collect();
    let stale = capi_cluster_io::installed::stale(
        state.ctx.world.installed(state.provider),
        &desired,
        |k| k.kind.as_str(),
        paused,
        upgrading,
    );
    if stale.is_empty() {
        return ControlFlow::Continue(());
    }
    match state.ctx.applier.delete_all(&stale).await {
        Ok(0) => ControlFlow::Continue(()),
        Ok(_) => {
            let names: Vec<String> = stale.iter().map(|(k, _, _)| k.to_string()).collect();
            let note = list_note("removed objects no longer rendered: ", &names, ", ", "");
            state.notes.push(Note::normal(reason::PRUNED, note));
            ControlFlow::Continue(())
        }
        Err(e) => end(Outcome::failed(PROVIDER_INSTALLED, e)),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use capi_cluster_io::installed::stale;
    use kube::api::{ApiResource, GroupVersionKind};

    use crate::controller::apply::ObjKey;

    fn key(kind: &str, name: &str) -> (ObjKey, ApiResource, bool) {
        let ar = ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind));
        let k = ObjKey {
            group: String::new(),
            kind: kind.into(),
            namespace: "ns".into(),
            name: name.into(),
        };
        (k, ar, true)
    }

    #[test]
    fn prune_keeps_desired_objects_crds_namespaces_and_a_paused_provider() {
        let installed = || {
            vec![
                key("ConfigMap", "kept"),
                key("ConfigMap", "gone"),
                key("CustomResourceDefinition", "old.crd"),
                key("Namespace", "old-ns"),
            ]
        };
        let desired: BTreeSet<ObjKey> = [key("ConfigMap", "kept").0].into();
        let names = |v: Vec<(ObjKey, ApiResource, bool)>| -> Vec<String> {
            v.into_iter().map(|(k, _, _)| k.name).collect()
        };
        // (paused, upgrading, pruned)
        let cases = [
            (false, false, vec!["gone"]),
            (false, true, vec!["gone"]),
            (true, true, vec!["gone"]),
            (true, false, vec![]),
        ];
        for (paused, upgrading, want) in cases {
            assert_eq!(
                names(stale(
                    installed(),
                    &desired,
                    |k| k.kind.as_str(),
                    paused,
                    upgrading
                )),
                want,
                "paused={paused} upgrading={upgrading}"
            );
        }
    }
}
