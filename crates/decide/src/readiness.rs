//! The decisions behind the `Ready`, `ManagerConfigured` and `ContractVerified` conditions, as plain functions of
//! what the caches and the API returned, so they are testable without a cluster.
//!
//! Ready comes from the Deployments' Available condition. When a Deployment is not available,
//! its Pods say why in terms a user can act on: a manager in a crash loop (with the log tail
//! Kubernetes keeps as the termination message) or an image that cannot be pulled.
//!
//! [`Rechecks`] times the looks at a provider that is not Ready yet.

use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use capi_components::{
    contract::{self, Finding, Severity},
    customize::ManagerReport,
};
use capi_operator_api::conditions::{CONTRACT_VERIFIED, MANAGER_CONFIGURED, READY};
use k8s_openapi::api::{
    apps::v1::Deployment,
    core::v1::{ContainerStatus, Pod},
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::ResourceExt;

use super::{conditions::Desired, reason};

/// Waiting reasons of a container whose image cannot be pulled.
const IMAGE_PULL_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
];

/// How much of a termination message (the log tail) goes into the condition, in bytes.
const LOG_TAIL_BYTES: usize = 300;

pub use capi_operator_api::rollout::availability;

/// First delay of the readiness rechecks of an unready provider.
pub const RECHECK_FIRST: Duration = Duration::from_secs(5);
/// Longest delay between readiness rechecks.
pub const RECHECK_CAP: Duration = Duration::from_secs(300);
/// Longest delay between looks at a provider waiting for something it does not watch (a
/// deletion for the workload clusters that block it, a provider for its core provider):
/// shorter than [`RECHECK_CAP`], as a user who removed the last workload cluster waits.
pub const BLOCKED_CAP: Duration = Duration::from_secs(60);

/// The delay before the `n`-th consecutive look (from 0): [`RECHECK_FIRST`] doubling, at most
/// `cap`.
pub fn recheck_delay(n: u32, cap: Duration) -> Duration {
    RECHECK_FIRST.saturating_mul(1u32 << n.min(16)).min(cap)
}

/// Where "now" comes from: the real clock, or a test's.
pub type Clock = Arc<dyn Fn() -> Instant + Send + Sync>;

/// Readiness rechecks of installed providers that are not Ready. Pods are not watched, so a
/// crash loop is only seen by looking; but a look needs only the Deployment (cached) and its
/// Pods, not the whole install pipeline (release read, render, apply). After a full pass that
/// leaves a provider unready, the reconcile its requeue brings is a recheck, as long as it comes
/// when due and the provider object is unchanged; anything that wakes the provider earlier (its
/// spec, an installed object, an input, the core provider) brings a full pass, which starts the
/// back-off over. Rechecks back off from [`RECHECK_FIRST`] to [`RECHECK_CAP`]; a full pass
/// still comes at the resync.
pub struct Rechecks {
    clock: Clock,
    armed: Mutex<HashMap<String, Armed>>,
    blocked: Mutex<HashMap<String, u32>>,
}

struct Armed {
    /// What of the provider object the full pass saw ([`seen`]).
    seen: u64,
    /// When the requeue brings the next recheck.
    due: Instant,
    /// When the last full pass ran.
    full_pass: Instant,
    /// Rechecks since then.
    done: u32,
}

impl Default for Rechecks {
    fn default() -> Rechecks {
        Rechecks::with_clock(Arc::new(Instant::now))
    }
}

impl Rechecks {
    /// Rechecks timed by `clock`.
    pub fn with_clock(clock: Clock) -> Rechecks {
        Rechecks {
            clock,
            armed: Mutex::default(),
            blocked: Mutex::default(),
        }
    }

    fn armed(&self) -> std::sync::MutexGuard<'_, HashMap<String, Armed>> {
        self.armed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// After a full pass that left provider `key` unready: the delay of its first recheck.
    pub fn arm(&self, key: &str, seen: u64) -> Duration {
        let now = (self.clock)();
        let delay = recheck_delay(0, RECHECK_CAP);
        let armed = Armed {
            seen,
            due: now + delay,
            full_pass: now,
            done: 0,
        };
        self.armed().insert(key.to_string(), armed);
        delay
    }

    /// Whether this reconcile of `key` is its due recheck: armed, not earlier than due (an
    /// earlier one was woken by a change), the object unchanged, and the resync not reached.
    /// Otherwise a full pass follows, and the provider is no longer armed.
    pub fn due(&self, key: &str, seen: u64, resync: Duration) -> bool {
        let now = (self.clock)();
        let mut armed = self.armed();
        let due = armed.get(key).is_some_and(|a| {
            a.seen == seen && now >= a.due && now.duration_since(a.full_pass) < resync
        });
        if !due {
            armed.remove(key);
        }
        due
    }

    /// After a recheck that found `key` still unready: the (longer) delay of the next.
    pub fn again(&self, key: &str) -> Duration {
        let now = (self.clock)();
        let mut armed = self.armed();
        let Some(a) = armed.get_mut(key) else {
            return RECHECK_FIRST;
        };
        a.done = a.done.saturating_add(1);
        let delay = recheck_delay(a.done, RECHECK_CAP);
        a.due = now + delay;
        delay
    }

    /// No more rechecks of `key` (Ready, or something else needs a full pass).
    pub fn disarm(&self, key: &str) {
        self.armed().remove(key);
    }

    /// The delay before looking again at `key`, still blocked (its deletion, or its install
    /// waiting for the core provider).
    pub fn blocked(&self, key: &str) -> Duration {
        let mut blocked = self
            .blocked
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = blocked.entry(key.to_string()).or_insert(0);
        let delay = recheck_delay(*n, BLOCKED_CAP);
        *n = n.saturating_add(1);
        delay
    }

    /// `key` is no longer blocked.
    pub fn unblocked(&self, key: &str) {
        if let Ok(mut b) = self.blocked.lock() {
            b.remove(key);
        }
    }
}

/// What of a provider object, changed, calls for a full pass rather than a recheck: anything
/// but its status (which the operator writes itself).
pub fn seen(meta: &ObjectMeta) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    (
        &meta.uid,
        meta.generation,
        &meta.labels,
        &meta.annotations,
        &meta.finalizers,
        meta.deletion_timestamp.is_some(),
    )
        .hash(&mut h);
    h.finish()
}

/// Ready=False for Deployment `d`, which is not available (`why`), naming the first pod
/// (by name) whose manager crash-loops or cannot pull its image. Pods of the Deployment's
/// current template come first: after an image is changed, a pod of the previous template
/// can still be failing on the old image while the new one fails for another reason.
pub fn not_ready(d: &Deployment, why: &str, pods: &[Pod]) -> Desired {
    let deployment = format!("{}/{}", d.namespace().unwrap_or_default(), d.name_any());
    let wanted = template_images(d);
    let mut pods: Vec<&Pod> = pods.iter().collect();
    pods.sort_by_key(|p| (template_images(*p) != wanted, p.name_any()));
    for pod in pods {
        if let Some(found) = pod_problem(pod) {
            return found;
        }
    }
    Desired::failed(
        READY,
        reason::NOT_AVAILABLE,
        format!("Deployment {deployment} is not available: {why}"),
    )
}

/// The images of a pod template's (or a pod's) containers, init containers first.
fn template_images(o: &impl Images) -> Vec<&str> {
    o.containers()
        .map(|c| {
            c.init_containers
                .iter()
                .flatten()
                .chain(&c.containers)
                .filter_map(|c| c.image.as_deref())
                .collect()
        })
        .unwrap_or_default()
}

/// What holds a pod spec: a Deployment's template or a Pod.
trait Images {
    fn containers(&self) -> Option<&k8s_openapi::api::core::v1::PodSpec>;
}

impl Images for Deployment {
    fn containers(&self) -> Option<&k8s_openapi::api::core::v1::PodSpec> {
        self.spec.as_ref()?.template.spec.as_ref()
    }
}

impl Images for Pod {
    fn containers(&self) -> Option<&k8s_openapi::api::core::v1::PodSpec> {
        self.spec.as_ref()
    }
}

fn pod_problem(pod: &Pod) -> Option<Desired> {
    let st = pod.status.as_ref()?;
    let statuses = st
        .init_container_statuses
        .iter()
        .flatten()
        .chain(st.container_statuses.iter().flatten());
    for c in statuses {
        if let Some(d) =
            image_unavailable(&pod.name_any(), c).or_else(|| crash_loop(&pod.name_any(), c))
        {
            return Some(d);
        }
    }
    None
}

fn image_unavailable(pod: &str, c: &ContainerStatus) -> Option<Desired> {
    let waiting = c.state.as_ref()?.waiting.as_ref()?;
    let why = waiting.reason.as_deref()?;
    if !IMAGE_PULL_FAILURES.contains(&why) {
        return None;
    }
    let detail = waiting.message.as_deref().unwrap_or("");
    Some(Desired::failed(
        READY,
        reason::MANAGER_IMAGE_UNAVAILABLE,
        format!(
            "pod {pod} container {} cannot get image {} ({why}): {detail}",
            c.name, c.image
        ),
    ))
}

fn crash_loop(pod: &str, c: &ContainerStatus) -> Option<Desired> {
    let backing_off = c
        .state
        .as_ref()
        .and_then(|s| s.waiting.as_ref())
        .is_some_and(|w| w.reason.as_deref() == Some("CrashLoopBackOff"));
    let last = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
    let failed_before = last.is_some_and(|t| t.exit_code != 0) && c.restart_count > 0;
    if !backing_off && !failed_before {
        return None;
    }
    let exit = last
        .map(|t| format!("; last exit code {}", t.exit_code))
        .unwrap_or_default();
    let tail = last
        .and_then(|t| t.message.as_deref())
        .map(log_tail)
        .filter(|t| !t.is_empty())
        .map(|t| format!(": {t}"))
        .unwrap_or_default();
    Some(Desired::failed(
        READY,
        reason::MANAGER_CRASH_LOOPING,
        format!(
            "pod {pod} container {} is crash-looping (restarted {} times{exit}){tail}",
            c.name, c.restart_count
        ),
    ))
}

/// The last lines of `message` that fit in [`LOG_TAIL_BYTES`] (the end of the last line when
/// that alone is longer): the error that stopped the manager is at the end of its log.
pub fn log_tail(message: &str) -> String {
    let message = message.trim();
    if message.len() <= LOG_TAIL_BYTES {
        return message.to_string();
    }
    let mut start = None;
    for (i, _) in message.match_indices('\n').rev() {
        if message.len() - (i + 1) > LOG_TAIL_BYTES {
            break;
        }
        start = Some(i + 1);
    }
    let start = start.unwrap_or_else(|| {
        let mut s = message.len() - LOG_TAIL_BYTES;
        while !message.is_char_boundary(s) {
            s += 1;
        }
        s
    });
    message[start..].trim().to_string()
}

/// ManagerConfigured from what rendering made of the manager settings: True when every
/// setting reached a flag, False naming each one without effect (reason
/// `ManagerFlagsRejected` when the manager would refuse to start).
pub fn manager_configured(reports: &[ManagerReport]) -> Desired {
    let findings: Vec<String> = reports
        .iter()
        .flat_map(|r| r.findings.iter())
        .map(|f| format!("{} {}", f.field, f.problem))
        .collect();
    if !findings.is_empty() {
        let fatal = reports
            .iter()
            .flat_map(|r| r.findings.iter())
            .any(|f| f.fatal);
        let why = if fatal {
            reason::MANAGER_FLAGS_REJECTED
        } else {
            reason::MANAGER_SETTINGS_IGNORED
        };
        return Desired::failed(MANAGER_CONFIGURED, why, findings.join("; "));
    }
    let applied: Vec<String> = reports
        .iter()
        .map(|r| match &r.binary {
            Some(b) => format!("Deployment {}: flags of {b}", r.deployment),
            None => format!(
                "Deployment {}: conventional controller-runtime flags (its manager's flags are not known to the operator)",
                r.deployment
            ),
        })
        .collect();
    let message = if applied.is_empty() {
        "no manager settings given".to_string()
    } else {
        format!("manager settings applied: {}", applied.join("; "))
    };
    Desired::ok(
        MANAGER_CONFIGURED,
        reason::MANAGER_SETTINGS_APPLIED,
        message,
    )
}

/// ContractVerified from the contract checks of the rendered release: True when every check
/// passed; False with each finding, reason `ContractFieldsMissing` when a CRD lacks what its
/// contract requires (Cluster API would not work with the provider), else `ContractFindings`.
pub fn contract_verified(findings: &[Finding]) -> Desired {
    let bad: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity != Severity::Ok)
        .collect();
    if bad.is_empty() {
        return Desired::ok(
            CONTRACT_VERIFIED,
            reason::CONTRACT_OK,
            "the release follows the provider contracts",
        );
    }
    let why = if bad.iter().any(|f| contract::breaks_contract_fields(f)) {
        reason::CONTRACT_FIELDS_MISSING
    } else {
        reason::CONTRACT_FINDINGS
    };
    let message: Vec<String> = bad
        .iter()
        .map(|f| format!("{}: {}", f.check, f.message))
        .collect();
    Desired::failed(CONTRACT_VERIFIED, why, message.join("; "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn contract_verified_names_missing_contract_fields_with_their_own_reason() {
        let f = |severity, check: &'static str, message: &str| Finding {
            severity,
            check,
            message: message.to_string(),
        };
        let ok = contract_verified(&[f(Severity::Ok, "crd-name", "fine")]);
        assert!(ok.ok);
        assert_eq!(ok.reason, reason::CONTRACT_OK);
        let label = f(Severity::Error, "contract-label", "no label");
        let field = f(
            Severity::Error,
            "infra-machine-provider-id",
            "InfraMachine contract v1beta2: FooMachine v1beta2: required field spec.providerID (string) is missing",
        );
        let only_label = contract_verified(std::slice::from_ref(&label));
        assert_eq!(only_label.reason, reason::CONTRACT_FINDINGS);
        let both = contract_verified(&[label, field]);
        assert!(!both.ok);
        assert_eq!(both.reason, reason::CONTRACT_FIELDS_MISSING);
        assert!(
            both.message.contains(
                "contract-label: no label; infra-machine-provider-id: InfraMachine contract v1beta2"
            ),
            "{}",
            both.message
        );
    }

    fn deployment() -> Result<Deployment, serde_json::Error> {
        serde_json::from_value(json!({
            "metadata": {"name": "capi-controller-manager", "namespace": "capi-system", "generation": 1},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"cluster.x-k8s.io/provider": "cluster-api"}}, "template": {}},
            "status": {"observedGeneration": 1, "updatedReplicas": 1, "conditions": [
                {"type": "Available", "status": "False", "message": "Deployment does not have minimum availability."}
            ]}
        }))
    }

    fn pod(name: &str, status: serde_json::Value) -> Result<Pod, serde_json::Error> {
        serde_json::from_value(
            json!({"metadata": {"name": name, "namespace": "capi-system"}, "status": status}),
        )
    }

    type TestResult = Result<(), Box<dyn std::error::Error>>;

    #[test]
    fn a_crash_loop_is_named_with_the_log_tail() -> TestResult {
        let d = deployment()?;
        let why = availability(&d).err().ok_or("should not be available")?;
        let log = format!(
            "{}\nE1123 setup failed\nunknown flag: --metrics-bind-addr",
            "x".repeat(400)
        );
        let crashing = pod(
            "capi-controller-manager-abc",
            json!({"containerStatuses": [{
                "name": "manager", "image": "registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0",
                "imageID": "", "ready": false, "restartCount": 3,
                "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}},
                "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": log}}
            }]}),
        )?;
        let healthy = pod(
            "capi-controller-manager-000",
            json!({"containerStatuses": [{
                "name": "manager", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"running": {}}
            }]}),
        )?;
        let got = not_ready(&d, &why, &[crashing, healthy]);
        assert_eq!(got.reason, reason::MANAGER_CRASH_LOOPING);
        assert!(!got.ok);
        assert_eq!(
            got.message,
            "pod capi-controller-manager-abc container manager is crash-looping (restarted 3 times; last exit code 2): E1123 setup failed\nunknown flag: --metrics-bind-addr"
        );
        Ok(())
    }

    #[test]
    fn a_failed_restart_counts_as_a_crash_loop_between_back_offs() -> TestResult {
        let p = pod(
            "p",
            json!({"containerStatuses": [{
                "name": "manager", "image": "x", "imageID": "", "ready": false, "restartCount": 1,
                "state": {"running": {}},
                "lastState": {"terminated": {"exitCode": 1}}
            }]}),
        )?;
        let got = not_ready(&deployment()?, "w", &[p]);
        assert_eq!(got.reason, reason::MANAGER_CRASH_LOOPING);
        assert_eq!(
            got.message,
            "pod p container manager is crash-looping (restarted 1 times; last exit code 1)"
        );
        Ok(())
    }

    #[test]
    fn an_image_that_cannot_be_pulled_is_named() -> TestResult {
        let p = pod(
            "p",
            json!({"containerStatuses": [{
                "name": "manager", "image": "mirror.local/cluster-api-controller:v9", "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}}
            }]}),
        )?;
        let got = not_ready(&deployment()?, "w", &[p]);
        assert_eq!(got.reason, reason::MANAGER_IMAGE_UNAVAILABLE);
        assert_eq!(
            got.message,
            "pod p container manager cannot get image mirror.local/cluster-api-controller:v9 (ImagePullBackOff): Back-off pulling image"
        );
        Ok(())
    }

    /// A pod of `image` waiting on its pull for `why` with the kubelet's `message`.
    fn pulling(
        name: &str,
        image: &str,
        why: &str,
        message: &str,
    ) -> Result<Pod, serde_json::Error> {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "capi-system"},
            "spec": {"containers": [{"name": "manager", "image": image}]},
            "status": {"containerStatuses": [{
                "name": "manager", "image": image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"waiting": {"reason": why, "message": message}}
            }]}
        }))
    }

    #[test]
    fn the_pod_of_the_current_template_names_the_image_problem() -> TestResult {
        let private = "registry.example/private/cluster-api-controller:v1.12.0";
        let mut d = serde_json::to_value(deployment()?)?;
        d["spec"]["template"] =
            json!({"spec": {"containers": [{"name": "manager", "image": private}]}});
        let d: Deployment = serde_json::from_value(d)?;
        // The pod of the previous template sorts first by name and still fails on the old tag.
        let stale = pulling(
            "a-old",
            "registry.k8s.io/cluster-api/cluster-api-controller:v0.0.0-missing",
            "ImagePullBackOff",
            "Back-off pulling image: not found",
        )?;
        let kubelet = "failed to pull and unpack image: failed to resolve reference: unexpected status from HEAD request: 401 Unauthorized";
        let current = pulling("b-new", private, "ErrImagePull", kubelet)?;
        let got = not_ready(&d, "w", &[stale, current]);
        assert_eq!(got.reason, reason::MANAGER_IMAGE_UNAVAILABLE);
        assert_eq!(
            got.message,
            format!(
                "pod b-new container manager cannot get image {private} (ErrImagePull): {kubelet}"
            )
        );
        Ok(())
    }

    #[test]
    fn an_invalid_image_name_is_an_unavailable_image() -> TestResult {
        let p = pulling(
            "p",
            "registry.example/Bad:Name",
            "InvalidImageName",
            "Failed to apply default image tag",
        )?;
        let got = not_ready(&deployment()?, "w", &[p]);
        assert_eq!(
            (got.ok, got.reason.as_str()),
            (false, reason::MANAGER_IMAGE_UNAVAILABLE)
        );
        assert!(
            got.message
                .contains("registry.example/Bad:Name (InvalidImageName)")
        );
        // A pod still creating its container is no image problem.
        let creating = pulling("q", "x", "ContainerCreating", "")?;
        assert_eq!(
            not_ready(&deployment()?, "w", &[creating]).reason,
            reason::NOT_AVAILABLE
        );
        Ok(())
    }

    #[test]
    fn otherwise_the_deployment_is_just_not_available() -> TestResult {
        let d = deployment()?;
        let why = availability(&d).err().ok_or("should not be available")?;
        let got = not_ready(&d, &why, &[]);
        assert_eq!(got.reason, reason::NOT_AVAILABLE);
        assert_eq!(
            got.message,
            "Deployment capi-system/capi-controller-manager is not available: Deployment does not have minimum availability."
        );
        Ok(())
    }

    #[test]
    fn a_rollout_is_complete_only_without_old_or_unavailable_replicas() -> TestResult {
        let with_status = |status: serde_json::Value| -> Result<Deployment, serde_json::Error> {
            let mut d = serde_json::to_value(deployment()?)?;
            d["status"] = status;
            serde_json::from_value(d)
        };
        let available = json!([{"type": "Available", "status": "True"}]);
        // The old manager still serves while the new one crash-loops: Available, not rolled out.
        let d = with_status(
            json!({"observedGeneration": 1, "replicas": 2, "updatedReplicas": 1,
            "availableReplicas": 1, "conditions": available}),
        )?;
        assert_eq!(
            availability(&d),
            Err("rollout in progress: 1 old replicas pending termination".into())
        );
        let d = with_status(
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
            "availableReplicas": 0, "conditions": available}),
        )?;
        assert_eq!(
            availability(&d),
            Err("rollout in progress: 0 of 1 updated replicas available".into())
        );
        let d = with_status(
            json!({"observedGeneration": 0, "replicas": 1, "updatedReplicas": 1,
            "availableReplicas": 1, "conditions": available}),
        )?;
        assert!(
            availability(&d).is_err(),
            "a spec not yet observed is not rolled out"
        );
        let d = with_status(
            json!({"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
            "availableReplicas": 1, "conditions": available}),
        )?;
        assert_eq!(availability(&d), Ok(()));
        Ok(())
    }

    #[test]
    fn rechecks_back_off_and_give_way_to_changes() {
        let now = Arc::new(Mutex::new(Instant::now()));
        let clock = now.clone();
        let r = Rechecks::with_clock(Arc::new(move || *clock.lock().unwrap()));
        let advance = |d: Duration| *now.lock().unwrap() += d;
        let resync = Duration::from_secs(1800);
        assert!(!r.due("p", 1, resync), "never armed: a full pass");
        assert_eq!(r.arm("p", 1), Duration::from_secs(5));
        advance(Duration::from_secs(2));
        assert!(!r.due("p", 1, resync), "woken early: a full pass");
        assert!(!r.due("p", 1, resync), "and no longer armed");
        r.arm("p", 1);
        advance(Duration::from_secs(5));
        assert!(!r.due("p", 2, resync), "the object changed: a full pass");
        r.arm("p", 1);
        let mut delays = Vec::new();
        let mut d = Duration::from_secs(5);
        for _ in 0..9 {
            advance(d);
            assert!(r.due("p", 1, resync));
            d = r.again("p");
            delays.push(d.as_secs());
        }
        assert_eq!(delays, [10, 20, 40, 80, 160, 300, 300, 300, 300]);
        // 1515 s since the full pass, then 1815 s: the resync brings a full one.
        advance(d);
        assert!(r.due("p", 1, resync));
        advance(r.again("p"));
        assert!(!r.due("p", 1, resync));
        let blocked: Vec<u64> = (0..6).map(|_| r.blocked("q").as_secs()).collect();
        assert_eq!(blocked, [5, 10, 20, 40, 60, 60]);
        r.unblocked("q");
        assert_eq!(r.blocked("q"), Duration::from_secs(5));
    }

    #[test]
    fn log_tails_keep_whole_last_lines() {
        assert_eq!(log_tail("a\nb\nc\n"), "a\nb\nc");
        let long = "y".repeat(500);
        assert_eq!(log_tail(&long).len(), LOG_TAIL_BYTES);
        assert_eq!(log_tail(&format!("{long}\nlast")), "last");
        assert_eq!(
            log_tail(&"é".repeat(400)).chars().count(),
            LOG_TAIL_BYTES / 2
        );
    }

    #[test]
    fn manager_configured_lists_what_has_no_effect() {
        use capi_components::customize::ManagerFinding;
        let finding = |field: &str, fatal| ManagerFinding {
            field: field.into(),
            problem: "has no flag in cluster-api v1.12.0 (no effect)".into(),
            fatal,
        };
        let report = |findings| ManagerReport {
            deployment: "capi-controller-manager".into(),
            binary: Some("cluster-api v1.12.0".into()),
            findings,
        };
        let ok = manager_configured(&[report(vec![])]);
        assert!(ok.ok);
        assert_eq!(
            ok.message,
            "manager settings applied: Deployment capi-controller-manager: flags of cluster-api v1.12.0"
        );
        let ignored = manager_configured(&[report(vec![finding(
            "spec.manager.gracefulShutDown",
            false,
        )])]);
        assert_eq!(
            (ignored.ok, ignored.reason.as_str()),
            (false, reason::MANAGER_SETTINGS_IGNORED)
        );
        assert_eq!(
            ignored.message,
            "spec.manager.gracefulShutDown has no flag in cluster-api v1.12.0 (no effect)"
        );
        let fatal = manager_configured(&[report(vec![finding("a", false), finding("b", true)])]);
        assert_eq!(fatal.reason, reason::MANAGER_FLAGS_REJECTED);
        assert_eq!(manager_configured(&[]).message, "no manager settings given");
    }
}
