//! The operator's metrics in the Prometheus text exposition format (version 0.0.4).
//!
//! Our own rather than prometheus-client, which writes only OpenMetrics text and so would rename
//! what the alerts query (docs/architecture.md, "Why our own"): counters and histograms are kept
//! in maps behind one mutex and written out on each scrape. Every label value comes from a
//! bounded set (the seven kinds, a fixed list of results and condition reasons, source kinds),
//! except the per-provider gauge, which holds one series per provider object and drops it when
//! the object goes.

use std::{collections::BTreeMap, fmt::Write, sync::Mutex, time::Duration};

/// Upper bounds (seconds) of the duration histograms' buckets.
const BUCKETS: [f64; 12] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

#[derive(Debug, Default, Clone)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    total: u64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (i, bound) in BUCKETS.iter().enumerate() {
            if seconds <= *bound {
                self.counts[i] += 1;
            }
        }
        self.sum += seconds;
        self.total += 1;
    }

    fn write(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        for (i, bound) in BUCKETS.iter().enumerate() {
            let _ = writeln!(
                out,
                "{name}_bucket{{{labels}{sep}le=\"{bound}\"}} {}",
                self.counts[i]
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}",
            self.total
        );
        let _ = writeln!(out, "{name}_sum{{{labels}}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{{labels}}} {}", self.total);
    }
}

/// What is known of one provider object, for the per-provider gauge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProviderState {
    /// The installed version, empty before the first install.
    pub version: String,
    /// Whether its Ready condition is True.
    pub ready: bool,
    /// Whether it is paused.
    pub paused: bool,
    /// The reason of its Ready condition (empty before it has one): says why it is not Ready.
    pub reason: String,
    /// The reason of its Stalled condition when that is True (a configuration problem that
    /// retrying does not fix), else `None`.
    pub stalled: Option<String>,
    /// The newest patch of the installed minor that the source offers, and since when (Unix
    /// seconds) the operator has seen it.
    pub newer_patch: Option<(String, i64)>,
}

#[derive(Debug, Default)]
struct Inner {
    reconciles: BTreeMap<(String, &'static str), u64>,
    durations: BTreeMap<String, Histogram>,
    errors: BTreeMap<(String, String), u64>,
    fetches: BTreeMap<(&'static str, &'static str), Histogram>,
    providers: BTreeMap<ProviderKey, ProviderState>,
    fetch_errors: BTreeMap<(&'static str, &'static str), u64>,
    stalls: Histogram,
    max_stall: f64,
    leader: bool,
}

/// The operator's metrics registry.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

fn escape(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

impl Metrics {
    /// Records one reconcile of a provider of `kind` that took `took`; `ok` is its result.
    /// Every reconcile ends here, so this is also where the heap trim hears of it (it gives the
    /// heap a burst freed back once the burst settles: [`crate::memory`]).
    pub fn reconciled(&self, kind: &str, ok: bool, took: Duration) {
        crate::memory::passed();
        if let Ok(mut m) = self.inner.lock() {
            let result = if ok { "success" } else { "error" };
            *m.reconciles.entry((kind.to_string(), result)).or_default() += 1;
            m.durations
                .entry(kind.to_string())
                .or_default()
                .observe(took.as_secs_f64());
        }
    }

    /// Counts a failure of a provider of `kind`, by its condition reason.
    pub fn failed(&self, kind: &str, reason: &str) {
        if let Ok(mut m) = self.inner.lock() {
            *m.errors
                .entry((kind.to_string(), reason.to_string()))
                .or_default() += 1;
        }
    }

    /// Records a release fetch from a source of kind `source` (github, gitlab, oci,
    /// configmap), `ok` or not.
    pub fn fetched(&self, source: &'static str, ok: bool, took: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            let result = if ok { "success" } else { "error" };
            m.fetches
                .entry((source, result))
                .or_default()
                .observe(took.as_secs_f64());
        }
    }

    /// Counts a failed release fetch from a source of kind `source`, by error class (see
    /// [`fetch_error_class`]).
    pub fn fetch_failed(&self, source: &'static str, class: &'static str) {
        if let Ok(mut m) = self.inner.lock() {
            *m.fetch_errors.entry((source, class)).or_default() += 1;
        }
    }

    /// Records whether this replica runs the controllers (leads, or leader election is off).
    pub fn leading(&self, leading: bool) {
        if let Ok(mut m) = self.inner.lock() {
            m.leader = leading;
        }
    }

    /// Records one busy stretch of the event loop (see [`LoopClock`]).
    pub fn stalled(&self, late: Duration) {
        if let Ok(mut m) = self.inner.lock() {
            m.stalls.observe(late.as_secs_f64());
            m.max_stall = m.max_stall.max(late.as_secs_f64());
        }
    }

    /// Sets the state of the provider `kind namespace/name`.
    pub fn provider(&self, kind: &str, namespace: &str, name: &str, state: ProviderState) {
        if let Ok(mut m) = self.inner.lock() {
            m.providers.insert(
                (kind.to_string(), namespace.to_string(), name.to_string()),
                state,
            );
        }
    }

    /// Drops the series of a provider object that is gone.
    pub fn forget(&self, kind: &str, namespace: &str, name: &str) {
        if let Ok(mut m) = self.inner.lock() {
            m.providers
                .remove(&(kind.to_string(), namespace.to_string(), name.to_string()));
        }
    }

    /// The metrics in the Prometheus text format.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let Ok(m) = self.inner.lock() else {
            return out;
        };
        out.push_str("# HELP capi_operator_reconcile_total Reconciles of provider objects, by kind and result.\n# TYPE capi_operator_reconcile_total counter\n");
        for ((kind, result), n) in &m.reconciles {
            let _ = writeln!(
                out,
                "capi_operator_reconcile_total{{kind=\"{}\",result=\"{result}\"}} {n}",
                escape(kind)
            );
        }
        out.push_str("# HELP capi_operator_reconcile_duration_seconds Duration of reconciles, by kind.\n# TYPE capi_operator_reconcile_duration_seconds histogram\n");
        for (kind, h) in &m.durations {
            h.write(
                &mut out,
                "capi_operator_reconcile_duration_seconds",
                &format!("kind=\"{}\"", escape(kind)),
            );
        }
        out.push_str("# HELP capi_operator_reconcile_errors_total Failed reconciles, by kind and condition reason.\n# TYPE capi_operator_reconcile_errors_total counter\n");
        for ((kind, reason), n) in &m.errors {
            let _ = writeln!(
                out,
                "capi_operator_reconcile_errors_total{{kind=\"{}\",reason=\"{}\"}} {n}",
                escape(kind),
                escape(reason)
            );
        }
        out.push_str("# HELP capi_operator_fetch_duration_seconds Duration of release fetches, by source kind and result.\n# TYPE capi_operator_fetch_duration_seconds histogram\n");
        for ((source, result), h) in &m.fetches {
            h.write(
                &mut out,
                "capi_operator_fetch_duration_seconds",
                &format!("source=\"{source}\",result=\"{result}\""),
            );
        }
        out.push_str("# HELP capi_operator_fetch_errors_total Failed release fetches, by source kind and error class.\n# TYPE capi_operator_fetch_errors_total counter\n");
        for ((source, class), n) in &m.fetch_errors {
            let _ = writeln!(
                out,
                "capi_operator_fetch_errors_total{{source=\"{source}\",error=\"{class}\"}} {n}"
            );
        }
        out.push_str("# HELP capi_operator_event_loop_stall_seconds How long each busy stretch of the operator's (single-threaded) event loop lasted, from waking to going idle: the longest anything else waited for the thread.\n# TYPE capi_operator_event_loop_stall_seconds histogram\n");
        m.stalls
            .write(&mut out, "capi_operator_event_loop_stall_seconds", "");
        let _ = writeln!(
            out,
            "# HELP capi_operator_event_loop_stall_max_seconds The longest such stretch since start.\n# TYPE capi_operator_event_loop_stall_max_seconds gauge\ncapi_operator_event_loop_stall_max_seconds {}",
            m.max_stall
        );
        let _ = writeln!(
            out,
            "# HELP capi_operator_leader Whether this replica runs the controllers (1: it leads, or leader election is off) or waits (0).\n# TYPE capi_operator_leader gauge\ncapi_operator_leader {}",
            u8::from(m.leader)
        );
        write_providers(&mut out, &m.providers);
        write_rate_limits(&mut out, &capi_release_sources::http::rate_limits());
        out
    }
}

/// Kind, namespace and name of a provider object.
type ProviderKey = (String, String, String);

/// The labels naming one provider object.
fn provider_labels((kind, ns, name): &ProviderKey) -> String {
    format!(
        "kind=\"{}\",namespace=\"{}\",name=\"{}\"",
        escape(kind),
        escape(ns),
        escape(name)
    )
}

/// The per-provider gauges: Ready (with the condition's reason) and Stalled.
fn write_providers(out: &mut String, providers: &BTreeMap<ProviderKey, ProviderState>) {
    out.push_str("# HELP capi_operator_provider_ready Whether a provider is Ready (1) or not (0), with its installed version and the Ready condition's reason.\n# TYPE capi_operator_provider_ready gauge\n");
    for (key, s) in providers {
        let _ = writeln!(
            out,
            "capi_operator_provider_ready{{{},version=\"{}\",paused=\"{}\",reason=\"{}\"}} {}",
            provider_labels(key),
            escape(&s.version),
            s.paused,
            escape(&s.reason),
            u8::from(s.ready)
        );
    }
    out.push_str("# HELP capi_operator_provider_newer_patch_since_timestamp_seconds Since when (Unix time) the provider's source has offered a newer patch release of its installed minor version, labelled with that version.\n# TYPE capi_operator_provider_newer_patch_since_timestamp_seconds gauge\n");
    for (key, s) in providers {
        if let Some((version, since)) = &s.newer_patch {
            let _ = writeln!(
                out,
                "capi_operator_provider_newer_patch_since_timestamp_seconds{{{},version=\"{}\"}} {since}",
                provider_labels(key),
                escape(version)
            );
        }
    }
    out.push_str("# HELP capi_operator_provider_stalled Whether a provider is stalled on a problem retrying does not fix (1, with the Stalled condition's reason) or not (0).\n# TYPE capi_operator_provider_stalled gauge\n");
    for (key, s) in providers {
        let _ = writeln!(
            out,
            "capi_operator_provider_stalled{{{},reason=\"{}\"}} {}",
            provider_labels(key),
            escape(s.stalled.as_deref().unwrap_or_default()),
            u8::from(s.stalled.is_some())
        );
    }
}

/// The rate limit quota the release sources' servers last announced, by host.
fn write_rate_limits(out: &mut String, limits: &[capi_release_sources::http::RateLimit]) {
    out.push_str("# HELP capi_operator_source_rate_limit_remaining Requests left in the current rate limit window of a release source's server (as its last answer said), by host.\n# TYPE capi_operator_source_rate_limit_remaining gauge\n");
    for l in limits {
        let _ = writeln!(
            out,
            "capi_operator_source_rate_limit_remaining{{host=\"{}\"}} {}",
            escape(&l.host),
            l.remaining
        );
    }
    out.push_str("# HELP capi_operator_source_rate_limit_limit Requests allowed per rate limit window of a release source's server, by host.\n# TYPE capi_operator_source_rate_limit_limit gauge\n");
    for l in limits.iter().filter(|l| l.limit.is_some()) {
        let _ = writeln!(
            out,
            "capi_operator_source_rate_limit_limit{{host=\"{}\"}} {}",
            escape(&l.host),
            l.limit.unwrap_or_default()
        );
    }
}

/// The error class of a failed fetch, a bounded label value.
pub fn fetch_error_class(e: &capi_release_sources::SourceError) -> &'static str {
    use capi_release_sources::SourceError as E;
    match e {
        E::NotFound(_) | E::NotFoundAmong { .. } => "NotFound",
        E::RateLimited(_) => "RateLimited",
        E::Unauthorized(_) => "Unauthorized",
        E::Transient { .. } => "Transient",
        // A listing over its count bound is too large too: the label set stays as documented.
        E::TooLarge { .. } | E::TooManyVersions { .. } => "TooLarge",
        E::Invalid(_) => "Invalid",
    }
}

/// Times the busy stretches of the operator's event loop: from the moment its runtime wakes
/// (the thread unparks) to the moment it goes idle again (parks). On the one thread, a long
/// render or parse delays lease renewal and watch handling by at most that much. The runtime
/// calls these hooks only when it wakes for work anyway, so an idle operator is never woken
/// to measure (a periodic probe timer cost 600 wake-ups a minute).
#[derive(Debug)]
pub struct LoopClock {
    metrics: std::sync::Arc<Metrics>,
    woke: Mutex<Option<std::time::Instant>>,
}

impl LoopClock {
    /// Installs the hooks on `builder`; the first stretch starts now (the runtime starts busy).
    pub fn install(builder: &mut tokio::runtime::Builder, metrics: std::sync::Arc<Metrics>) {
        let clock = std::sync::Arc::new(LoopClock {
            metrics,
            woke: Mutex::new(Some(std::time::Instant::now())),
        });
        let parked = clock.clone();
        builder
            .on_thread_unpark(move || clock.unparked())
            .on_thread_park(move || parked.parked());
    }

    fn unparked(&self) {
        if let Ok(mut w) = self.woke.lock() {
            *w = Some(std::time::Instant::now());
        }
    }

    fn parked(&self) {
        let woke = self.woke.lock().ok().and_then(|mut w| w.take());
        if let Some(t) = woke {
            self.metrics.stalled(t.elapsed());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_series_go_with_their_provider() {
        let m = Metrics::default();
        m.reconciled("CoreProvider", true, Duration::from_millis(20));
        m.reconciled("CoreProvider", false, Duration::from_secs(3));
        m.failed("CoreProvider", "MissingVariables");
        m.fetched("github", true, Duration::from_millis(700));
        let state = ProviderState {
            version: "v1.12.0".into(),
            ready: true,
            paused: false,
            reason: "DeploymentsAvailable".into(),
            stalled: None,
            newer_patch: Some(("v1.12.3".into(), 1_800_000_000)),
        };
        m.provider("CoreProvider", "capi-system", "cluster-api", state);
        let text = m.render();
        assert!(text.contains(
            "capi_operator_provider_newer_patch_since_timestamp_seconds{kind=\"CoreProvider\",namespace=\"capi-system\",name=\"cluster-api\",version=\"v1.12.3\"} 1800000000\n"
        ), "{text}");
        assert!(
            text.contains(
                "capi_operator_reconcile_total{kind=\"CoreProvider\",result=\"success\"} 1"
            )
        );
        assert!(
            text.contains(
                "capi_operator_reconcile_total{kind=\"CoreProvider\",result=\"error\"} 1"
            )
        );
        assert!(text.contains(
            "capi_operator_reconcile_duration_seconds_bucket{kind=\"CoreProvider\",le=\"0.025\"} 1"
        ));
        assert!(text.contains(
            "capi_operator_reconcile_duration_seconds_bucket{kind=\"CoreProvider\",le=\"5\"} 2"
        ));
        assert!(
            text.contains(
                "capi_operator_reconcile_duration_seconds_count{kind=\"CoreProvider\"} 2"
            )
        );
        assert!(text.contains("reason=\"MissingVariables\"} 1"));
        assert!(text.contains(
            "capi_operator_fetch_duration_seconds_bucket{source=\"github\",result=\"success\",le=\"1\"} 1"
        ));
        assert!(text.contains(
            "name=\"cluster-api\",version=\"v1.12.0\",paused=\"false\",reason=\"DeploymentsAvailable\"} 1"
        ));
        assert!(text.contains(
            "capi_operator_provider_stalled{kind=\"CoreProvider\",namespace=\"capi-system\",name=\"cluster-api\",reason=\"\"} 0"
        ));
        m.forget("CoreProvider", "capi-system", "cluster-api");
        assert!(!m.render().contains("cluster-api"));
    }

    #[test]
    fn stalls_fetch_errors_and_leadership_are_exported() {
        let m = Metrics::default();
        let text = m.render();
        assert!(text.contains("# TYPE capi_operator_fetch_errors_total counter\n"));
        assert!(text.contains("# TYPE capi_operator_provider_stalled gauge\n"));
        assert!(text.contains("# TYPE capi_operator_source_rate_limit_remaining gauge\n"));
        assert!(text.contains("\ncapi_operator_leader 0\n"), "{text}");
        m.leading(true);
        let error = capi_release_sources::SourceError::RateLimited("api.github.com".into());
        m.fetch_failed("github", fetch_error_class(&error));
        m.fetch_failed("github", fetch_error_class(&error));
        let state = ProviderState {
            version: String::new(),
            ready: false,
            paused: false,
            reason: "MissingVariables".into(),
            stalled: Some("MissingVariables".into()),
            newer_patch: None,
        };
        m.provider("InfrastructureProvider", "capa", "aws", state);
        let text = m.render();
        assert!(text.contains("\ncapi_operator_leader 1\n"), "{text}");
        assert!(
            text.contains(
                "capi_operator_fetch_errors_total{source=\"github\",error=\"RateLimited\"} 2\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "capi_operator_provider_stalled{kind=\"InfrastructureProvider\",namespace=\"capa\",name=\"aws\",reason=\"MissingVariables\"} 1\n"
        ));
        assert!(text.contains("paused=\"false\",reason=\"MissingVariables\"} 0\n"));
    }

    #[test]
    fn rate_limits_are_exported_by_host() {
        let mut out = String::new();
        let limits = [
            capi_release_sources::http::RateLimit {
                host: "api.github.com".into(),
                remaining: 7,
                limit: Some(60),
            },
            capi_release_sources::http::RateLimit {
                host: "gitlab.example".into(),
                remaining: 3,
                limit: None,
            },
        ];
        write_rate_limits(&mut out, &limits);
        assert!(
            out.contains("capi_operator_source_rate_limit_remaining{host=\"api.github.com\"} 7\n")
        );
        assert!(
            out.contains("capi_operator_source_rate_limit_remaining{host=\"gitlab.example\"} 3\n")
        );
        assert!(
            out.contains("capi_operator_source_rate_limit_limit{host=\"api.github.com\"} 60\n")
        );
        assert!(!out.contains("capi_operator_source_rate_limit_limit{host=\"gitlab.example\"}"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    /// The busy stretches an event loop with the hooks reports: (count, longest in seconds).
    fn stretches(m: &Metrics) -> (u64, f64) {
        let text = m.render();
        let value = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<f64>().ok())
                .unwrap_or(f64::NAN)
        };
        (
            value("capi_operator_event_loop_stall_seconds_count{}") as u64,
            value("capi_operator_event_loop_stall_max_seconds"),
        )
    }

    #[test]
    fn a_blocked_event_loop_is_seen_and_an_idle_one_is_not_woken() {
        let metrics = std::sync::Arc::new(Metrics::default());
        let mut builder = tokio::runtime::Builder::new_current_thread();
        LoopClock::install(builder.enable_all(), metrics.clone());
        let Ok(rt) = builder.build() else {
            panic!("no runtime");
        };
        // Idle: one timer 600 ms away; nothing may wake the loop before it (a 100 ms probe
        // timer would make six stretches).
        rt.block_on(async { tokio::time::sleep(Duration::from_millis(600)).await });
        let (count, longest) = stretches(&metrics);
        assert!(count <= 3, "{count} busy stretches while idle");
        assert!(longest < 0.1, "idle loop busy for {longest} s");
        // A task holding the thread for 250 ms, then the loop going idle once.
        rt.block_on(async {
            let _ = tokio::spawn(async { std::thread::sleep(Duration::from_millis(250)) }).await;
            tokio::time::sleep(Duration::from_millis(10)).await;
        });
        let (_, longest) = stretches(&metrics);
        assert!(longest >= 0.25, "the 250 ms block was seen as {longest} s");
    }

    #[test]
    fn event_loop_stalls_keep_their_maximum() {
        let m = Metrics::default();
        m.stalled(Duration::from_millis(3));
        m.stalled(Duration::from_millis(120));
        m.stalled(Duration::from_millis(7));
        let text = m.render();
        assert!(
            text.contains("capi_operator_event_loop_stall_max_seconds 0.12\n"),
            "{text}"
        );
        assert!(
            text.contains("capi_operator_event_loop_stall_seconds_count{} 3\n"),
            "{text}"
        );
    }
}
