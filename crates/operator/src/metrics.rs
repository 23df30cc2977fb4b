//! The operator's metrics in the Prometheus text exposition format (version 0.0.4).
//!
//! A handful of families does not justify a metrics framework: counters and histograms are kept
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
}

#[derive(Debug, Default)]
struct Inner {
    reconciles: BTreeMap<(String, &'static str), u64>,
    durations: BTreeMap<String, Histogram>,
    errors: BTreeMap<(String, String), u64>,
    fetches: BTreeMap<(&'static str, &'static str), Histogram>,
    providers: BTreeMap<(String, String, String), ProviderState>,
    stalls: Histogram,
    max_stall: f64,
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
    pub fn reconciled(&self, kind: &str, ok: bool, took: Duration) {
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

    /// Records how late a periodic tick of the event loop ran (see [`watch_stalls`]).
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
        out.push_str("# HELP capi_operator_event_loop_stall_seconds How late a 100 ms tick of the operator's (single-threaded) event loop ran: time nothing else could run.\n# TYPE capi_operator_event_loop_stall_seconds histogram\n");
        m.stalls
            .write(&mut out, "capi_operator_event_loop_stall_seconds", "");
        let _ = writeln!(
            out,
            "# HELP capi_operator_event_loop_stall_max_seconds The longest such stall since start.\n# TYPE capi_operator_event_loop_stall_max_seconds gauge\ncapi_operator_event_loop_stall_max_seconds {}",
            m.max_stall
        );
        out.push_str("# HELP capi_operator_provider_ready Whether a provider is Ready (1) or not (0), with its installed version.\n# TYPE capi_operator_provider_ready gauge\n");
        for ((kind, ns, name), s) in &m.providers {
            let _ = writeln!(
                out,
                "capi_operator_provider_ready{{kind=\"{}\",namespace=\"{}\",name=\"{}\",version=\"{}\",paused=\"{}\"}} {}",
                escape(kind),
                escape(ns),
                escape(name),
                escape(&s.version),
                s.paused,
                u8::from(s.ready)
            );
        }
        out
    }
}

/// Ticks every 100 ms and records how late each tick ran: on the operator's one thread, a long
/// render or parse delays lease renewal and watch handling by exactly that much.
pub async fn watch_stalls(metrics: std::sync::Arc<Metrics>) {
    const TICK: Duration = Duration::from_millis(100);
    let mut last = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(TICK).await;
        let now = tokio::time::Instant::now();
        metrics.stalled((now - last).saturating_sub(TICK));
        last = now;
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
        };
        m.provider("CoreProvider", "capi-system", "cluster-api", state);
        let text = m.render();
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
        assert!(text.contains("name=\"cluster-api\",version=\"v1.12.0\",paused=\"false\"} 1"));
        m.forget("CoreProvider", "capi-system", "cluster-api");
        assert!(!m.render().contains("cluster-api"));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
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
