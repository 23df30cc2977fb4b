//! `spec.manager` fields and container args turned into the flags of the manager that will run,
//! with a report of every setting that cannot take effect.
//!
//! For a manager in [`crate::managers`]' table each field maps to the flag that binary really
//! has, or is reported as having no effect; nothing the binary would reject is made up from a
//! structured field. Names the user writes free-form (`additionalArgs` and container args keys,
//! feature gate names) are passed as given, since the user asked for them explicitly, and
//! reported when the binary does not know them, because it would then refuse to start.
//! For other managers the conventional controller-runtime flags are used, guided by the
//! release's own args (a release passing `--diagnostics-address` gets its metrics there).

use std::collections::{BTreeMap, BTreeSet};

use capi_operator_api::{ManagerSpec, normalize::arg_value};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use crate::{customize::Flags, managers::ManagerFlagSet};

/// A setting that does not take effect as written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagerFinding {
    /// The field, relative to the provider's spec, e.g. `manager.gracefulShutDown`.
    pub field: String,
    /// What happens instead, e.g. "has no flag in cluster-api v1.12.0 (no effect)".
    pub problem: String,
    /// Whether the manager would refuse to start with it (an unknown flag or feature gate).
    pub fatal: bool,
}

/// The args of a manager container and what could not be applied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagerArgs {
    /// The container's new args.
    pub args: Vec<String>,
    /// Settings without effect, in field order.
    pub findings: Vec<ManagerFinding>,
}

/// Applies container args, additional args and manager fields to a container's args, in
/// increasing precedence: the release, `containers[].args` (the `namespace` key ignored),
/// `manager.additionalArgs`, then the explicit manager fields. Feature gates are merged key by
/// key in the same order. `maxConcurrentReconciles` sets every `*-concurrency` flag of the
/// binary (`binary` known) or of the release's args (unknown), except the ones given
/// explicitly in `containers[].args` or `additionalArgs`.
pub fn customize_args(
    release_args: &[String],
    container_args: Option<&BTreeMap<String, IntOrString>>,
    manager: Option<&ManagerSpec>,
    binary: Option<&ManagerFlagSet>,
) -> ManagerArgs {
    let mut b = Builder::new(release_args, binary);
    if let Some(args) = container_args {
        b.explicit_args(
            "deployment.containers[manager].args",
            args.iter().map(|(k, v)| (k, arg_value(v))),
        );
    }
    if let Some(m) = manager {
        let extra = m.additional_args.iter().flatten();
        b.explicit_args("manager.additionalArgs", extra.map(|(k, v)| (k, v.clone())));
        b.fields(m);
    }
    b.finish()
}

struct Builder<'a> {
    flags: Flags,
    gates: BTreeMap<String, String>,
    /// Flags the user named explicitly in container args or additionalArgs.
    explicit: BTreeSet<String>,
    /// Whether the release serves metrics through `--diagnostics-address` only (a hint for
    /// managers whose flags are not known).
    release_uses_diagnostics: bool,
    binary: Option<&'a ManagerFlagSet>,
    findings: Vec<ManagerFinding>,
}

impl<'a> Builder<'a> {
    fn new(release_args: &[String], binary: Option<&'a ManagerFlagSet>) -> Builder<'a> {
        let flags = Flags::parse(release_args);
        let gates = flags
            .get("feature-gates")
            .and_then(|v| v.as_deref())
            .map(parse_gates)
            .unwrap_or_default();
        let release_uses_diagnostics =
            flags.get("diagnostics-address").is_some() && flags.get("metrics-bind-addr").is_none();
        Builder {
            flags,
            gates,
            explicit: BTreeSet::new(),
            release_uses_diagnostics,
            binary,
            findings: Vec::new(),
        }
    }

    fn report(&mut self, field: &str, problem: String, fatal: bool) {
        self.findings.push(ManagerFinding {
            field: field.to_string(),
            problem,
            fatal,
        });
    }

    /// The binary's name for messages: "cluster-api v1.12.0", or the conventional disclaimer.
    fn who(&self) -> String {
        match self.binary {
            Some(b) => b.describe(),
            None => "this manager (its flags are not known to the operator)".into(),
        }
    }

    fn no_flag(&mut self, field: &str) {
        let problem = format!("has no flag in {} (no effect)", self.who());
        self.report(field, problem, false);
    }

    /// Sets `flag` for `field` when the binary has it (or its flags are unknown); reports the
    /// field otherwise.
    fn field(&mut self, field: &str, flag: &str, value: String) {
        match self.binary {
            Some(b) if !b.accepts(flag) => self.no_flag(field),
            _ => self.flags.set(flag, Some(value)),
        }
    }

    /// Free-form flags: passed as given, reported when a known binary lacks them.
    fn explicit_args(
        &mut self,
        field: &str,
        args: impl Iterator<Item = (impl AsRef<str>, String)>,
    ) {
        for (k, v) in args {
            let k = k.as_ref().trim_start_matches('-');
            if k == "namespace" {
                continue;
            }
            if k == "feature-gates" {
                let given = parse_gates(&v);
                self.check_gates(&format!("{field}.feature-gates"), given.keys());
                self.gates.extend(given);
                continue;
            }
            if let Some(b) = self.binary.filter(|b| !b.accepts(k)) {
                let problem = format!(
                    "is not a flag of {}: the manager would exit at start (unknown flag --{k})",
                    b.describe()
                );
                self.report(&format!("{field}.{k}"), problem, true);
            } else if let Some(b) = self.binary.filter(|b| b.is_deprecated(k)) {
                let problem = format!(
                    "is deprecated in {} and has no function (no effect)",
                    b.describe()
                );
                self.report(&format!("{field}.{k}"), problem, false);
            }
            self.flags.set(k, Some(v));
            self.explicit.insert(k.to_string());
        }
    }

    fn check_gates<'g>(&mut self, field: &str, names: impl Iterator<Item = &'g String>) {
        let Some(b) = self.binary else { return };
        let unknown: Vec<&String> = names.filter(|g| !b.gates.contains(g.as_str())).collect();
        for g in unknown {
            let problem = format!(
                "names feature gate {g}, unknown to {}: the manager would exit at start (unrecognized feature gate)",
                b.describe()
            );
            self.report(field, problem, true);
        }
    }

    fn fields(&mut self, m: &ManagerSpec) {
        if m.debug == Some(true) {
            self.field("manager.debug", "v", "5".into());
            self.field("manager.debug", "profiler-address", "localhost:6060".into());
        }
        if let Some(p) = &m.sync_period {
            self.field("manager.syncPeriod", "sync-period", arg_value(p));
        }
        self.leader_election(m);
        if let Some(ns) = m.cache_namespace.as_ref().filter(|s| !s.is_empty()) {
            self.field("manager.cacheNamespace", "namespace", ns.clone());
        }
        if m.graceful_shutdown.is_some() {
            self.no_flag("manager.gracefulShutDown");
        }
        self.metrics(m);
        self.health(m);
        self.webhook(m);
        if let Some(p) = &m.profiler_address {
            self.field("manager.profilerAddress", "profiler-address", p.clone());
        }
        if let Some(v) = m.verbosity {
            self.field("manager.verbosity", "v", v.to_string());
        }
        if let Some(n) = m.max_concurrent_reconciles {
            self.concurrency(n);
        }
        if let Some(g) = &m.feature_gates {
            self.check_gates("manager.featureGates", g.keys());
            self.gates
                .extend(g.iter().map(|(k, v)| (k.clone(), v.to_string())));
        }
    }

    fn leader_election(&mut self, m: &ManagerSpec) {
        let Some(le) = &m.leader_election else { return };
        if let Some(b) = le.leader_elect {
            self.field(
                "manager.leaderElection.leaderElect",
                "leader-elect",
                b.to_string(),
            );
        }
        for (field, flag, v) in [
            (
                "leaseDuration",
                "leader-elect-lease-duration",
                &le.lease_duration,
            ),
            (
                "renewDeadline",
                "leader-elect-renew-deadline",
                &le.renew_deadline,
            ),
            ("retryPeriod", "leader-elect-retry-period", &le.retry_period),
        ] {
            if let Some(v) = v {
                self.field(&format!("manager.leaderElection.{field}"), flag, v.clone());
            }
        }
        // The lock's kind, name and namespace are compiled into controller managers.
        for (field, v) in [
            ("resourceLock", &le.resource_lock),
            ("resourceName", &le.resource_name),
            ("resourceNamespace", &le.resource_namespace),
        ] {
            if v.is_some() {
                self.no_flag(&format!("manager.leaderElection.{field}"));
            }
        }
    }

    fn metrics(&mut self, m: &ManagerSpec) {
        let Some(metrics) = &m.metrics else { return };
        if let Some(a) = &metrics.diagnostics_address {
            self.field(
                "manager.metrics.diagnosticsAddress",
                "diagnostics-address",
                a.clone(),
            );
        }
        if let Some(b) = metrics.insecure_diagnostics {
            self.field(
                "manager.metrics.insecureDiagnostics",
                "insecure-diagnostics",
                b.to_string(),
            );
        }
        if let Some(a) = &metrics.bind_address {
            self.bind_address(
                a,
                metrics.diagnostics_address.is_some() || metrics.insecure_diagnostics.is_some(),
            );
        }
    }

    /// `metrics.bindAddress` (or `metricsAddress`): controller-runtime's plain-HTTP metrics
    /// endpoint. Managers without `--metrics-bind-addr` (Cluster API since v1.6) serve metrics
    /// on the diagnostics endpoint, plain HTTP with `--insecure-diagnostics=true`.
    fn bind_address(&mut self, addr: &str, diagnostics_given: bool) {
        const FIELD: &str = "manager.metrics.bindAddress";
        let has = |f: &str| self.binary.is_none_or(|b| b.accepts(f));
        let via_diagnostics = match self.binary {
            Some(b) => !b.accepts("metrics-bind-addr") && b.accepts("diagnostics-address"),
            None => self.release_uses_diagnostics,
        };
        if !via_diagnostics {
            if has("metrics-bind-addr") {
                self.flags.set("metrics-bind-addr", Some(addr.to_string()));
            } else {
                self.no_flag(FIELD);
            }
        } else if diagnostics_given {
            let problem = format!(
                "has no effect: {} serves metrics on its diagnostics endpoint, which metrics.diagnosticsAddress and metrics.insecureDiagnostics configure",
                self.who()
            );
            self.report(FIELD, problem, false);
        } else {
            self.flags
                .set("diagnostics-address", Some(addr.to_string()));
            self.flags.set("insecure-diagnostics", Some("true".into()));
        }
    }

    fn health(&mut self, m: &ManagerSpec) {
        let Some(h) = &m.health else { return };
        if let Some(a) = &h.health_probe_bind_address {
            self.field(
                "manager.health.healthProbeBindAddress",
                "health-addr",
                a.clone(),
            );
        }
        // Endpoint names are compiled into managers; the probes of the release use them.
        if h.readiness_endpoint_name.is_some() {
            self.no_flag("manager.health.readinessEndpointName");
        }
        if h.liveness_endpoint_name.is_some() {
            self.no_flag("manager.health.livenessEndpointName");
        }
    }

    fn webhook(&mut self, m: &ManagerSpec) {
        let Some(w) = &m.webhook else { return };
        if let Some(p) = w.port {
            self.field("manager.webhook.port", "webhook-port", p.to_string());
        }
        if let Some(h) = &w.host {
            self.field("manager.webhook.host", "webhook-host", h.clone());
        }
        if let Some(d) = &w.cert_dir {
            self.field("manager.webhook.certDir", "webhook-cert-dir", d.clone());
        }
    }

    /// Every concurrency flag of the binary, or of the release's args when the binary is not
    /// known; never the Go operator's `--max-concurrent-reconciles` unless the binary has it.
    fn concurrency(&mut self, n: i32) {
        const FIELD: &str = "manager.maxConcurrentReconciles";
        let candidates: Vec<String> = match self.binary {
            Some(b) => b
                .concurrency_flags()
                .chain(
                    b.accepts("max-concurrent-reconciles")
                        .then_some("max-concurrent-reconciles"),
                )
                .map(str::to_string)
                .collect(),
            None => self
                .flags
                .names()
                .filter(|k| k.ends_with("-concurrency"))
                .map(str::to_string)
                .collect(),
        };
        let targets: Vec<String> = candidates
            .iter()
            .filter(|k| !self.explicit.contains(k.as_str()))
            .cloned()
            .collect();
        if targets.is_empty() {
            let problem = if candidates.is_empty() {
                format!(
                    "has no effect: no --*-concurrency flag is known for {}; set the controllers' concurrency flags in manager.additionalArgs",
                    self.who()
                )
            } else {
                "has no effect: every concurrency flag is set explicitly in the container args or additionalArgs".into()
            };
            self.report(FIELD, problem, false);
        }
        for k in targets {
            self.flags.set(&k, Some(n.to_string()));
        }
    }

    fn finish(mut self) -> ManagerArgs {
        if !self.gates.is_empty() {
            self.flags
                .set("feature-gates", Some(gates_string(&self.gates)));
        }
        ManagerArgs {
            args: self.flags.to_args(),
            findings: self.findings,
        }
    }
}

fn parse_gates(s: &str) -> BTreeMap<String, String> {
    s.split(',')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.trim().to_string(), v.trim().to_string()))
        .filter(|(k, _)| !k.is_empty())
        .collect()
}

fn gates_string(g: &BTreeMap<String, String>) -> String {
    g.iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}
