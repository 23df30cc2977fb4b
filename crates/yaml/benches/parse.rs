//! `cargo bench -p capi-yaml`: median time to parse the real Cluster API v1.12.0 core
//! components as build-providers.sh assembles them (after clusterctl's substitution) with
//! `parse_documents`, and with each of its parsers alone.

use std::time::Instant;

use capi_yaml::Limits;
use capi_yaml::internals::{parse_documents_fast, parse_documents_full};

const RUNS: usize = 30;
const WARMUP: usize = 3;

fn median<T, E>(mut f: impl FnMut() -> Result<T, E>) -> Result<(f64, f64), E> {
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
    Ok((times[RUNS / 2], times[0]))
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The release build-providers.sh assembles (the published v1.12.0, byte for byte): an
    // error naming `make providers` when it has not run.
    let path = capi_test_support::releases()?.join("cluster-api/v1.12.0/core-components.yaml");
    let raw = std::fs::read_to_string(&path)?;
    let text = capi_envsubst::process(&raw, |_| None)?;
    let limits = Limits::default();
    if let Err(bail) = parse_documents_fast(&text, &limits) {
        println!("NOTE: the fast parser falls back on this input: {bail:?}");
    }
    let bytes = text.len();
    let report = |what: &str, (median, min): (f64, f64)| {
        println!(
            "parse v1.12.0 core ({bytes} bytes), {what}: median {median:.2} ms, min {min:.2} ms over {RUNS} runs"
        );
    };
    report(
        "parse_documents",
        median(|| capi_yaml::parse_documents(&text, &limits))?,
    );
    report(
        "fast parser alone",
        median(|| parse_documents_fast(&text, &limits))?,
    );
    report(
        "serde-saphyr alone",
        median(|| parse_documents_full(&text, &limits))?,
    );
    Ok(())
}
