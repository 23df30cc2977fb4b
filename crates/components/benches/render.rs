//! `make bench`: median time to render the real Cluster API v1.12.0 core release (as
//! build-providers.sh assembles it) from memory (substitution, parsing, namespace fixing,
//! customizations, labels, ordering), then the time of its steps alone: substitution, and YAML parsing (the fast parser with its
//! fallback as used, and serde-saphyr alone for comparison). `CAPI_BENCH_RENDER_ONLY=1` skips
//! the steps, for profiling the render.

use std::time::Instant;

use capi_components::{pipeline, render::render};
use capi_operator_api::AnyProvider;
use capi_release::Release;

const RUNS: usize = 30;
const WARMUP: usize = 3;

/// Milliseconds of each of `RUNS` runs of `f` after `WARMUP` ones, sorted.
fn times<T, E>(mut f: impl FnMut() -> Result<T, E>) -> Result<Vec<f64>, E> {
    let mut times = Vec::with_capacity(RUNS);
    for i in 0..RUNS + WARMUP {
        let t = Instant::now();
        let r = f()?;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(r);
        if i >= WARMUP {
            times.push(elapsed);
        }
    }
    times.sort_by(f64::total_cmp);
    Ok(times)
}

fn report(what: &str, times: &[f64]) {
    println!(
        "{what}: median {:.2} ms, min {:.2} ms, max {:.2} ms over {RUNS} runs",
        times[RUNS / 2],
        times[0],
        times[RUNS - 1]
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The release build-providers.sh assembles (the published v1.12.0, byte for byte): an
    // error naming `make providers` when it has not run.
    let dir = capi_test_support::releases()?.join("cluster-api/v1.12.0");
    let release = Release {
        version: "v1.12.0".into(),
        metadata: std::fs::read_to_string(dir.join("metadata.yaml"))?,
        components: std::fs::read_to_string(dir.join("core-components.yaml"))?,
    };
    let provider = AnyProvider::from_value(serde_json::json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": "capi-system"},
        "spec": {"version": "v1.12.0", "manager": {"syncPeriod": "10m"}}
    }))?;
    let bytes = release.components.len();
    report(
        &format!("render v1.12.0 core ({bytes} bytes)"),
        &times(|| render(&provider, &release, |_| None))?,
    );

    if std::env::var_os("CAPI_BENCH_RENDER_ONLY").is_some() {
        // For profiling the render alone.
        return Ok(());
    }
    report(
        "  substitution only",
        &times(|| pipeline::substitute(&release.components, |_| None))?,
    );
    let text = pipeline::substitute(&release.components, |_| None)?;
    let limits = capi_yaml::Limits::default();
    if let Err(bail) = capi_yaml::internals::parse_documents_fast(&text, &limits) {
        println!("  NOTE: the fast YAML parser falls back on this input: {bail:?}");
    }
    report(
        "  parse only (capi_yaml::parse_documents)",
        &times(|| capi_yaml::parse_documents(&text, &limits))?,
    );
    report(
        "  parse only (serde-saphyr alone)",
        &times(|| capi_yaml::internals::parse_documents_full(&text, &limits))?,
    );
    three_releases(&limits)
}

/// The parse of each of the three real releases the peer benchmark installs (core, kubeadm
/// bootstrap and control plane), with the fast parser and with serde-saphyr alone: what one
/// render pass of the three would cost without the fast path (docs/architecture.md, "Why our
/// own").
fn three_releases(limits: &capi_yaml::Limits) -> Result<(), Box<dyn std::error::Error>> {
    let root = capi_test_support::releases()?;
    let (mut fast, mut full) = (0.0, 0.0);
    for (dir, file) in [
        ("cluster-api", "core-components.yaml"),
        ("bootstrap-kubeadm", "bootstrap-components.yaml"),
        ("control-plane-kubeadm", "control-plane-components.yaml"),
    ] {
        let raw = std::fs::read_to_string(root.join(dir).join("v1.12.0").join(file))?;
        let text = pipeline::substitute(&raw, |_| None)?;
        let a = times(|| capi_yaml::parse_documents(&text, limits))?;
        let b = times(|| capi_yaml::internals::parse_documents_full(&text, limits))?;
        let (a, b) = (a[RUNS / 2], b[RUNS / 2]);
        println!(
            "  parse {dir} v1.12.0 ({} bytes): fast path {a:.2} ms, serde-saphyr alone {b:.2} ms",
            text.len()
        );
        fast += a;
        full += b;
    }
    println!(
        "  parse of the three: fast path {fast:.2} ms, serde-saphyr alone {full:.2} ms (+{:.2} ms without the fast path)",
        full - fast
    );
    Ok(())
}
