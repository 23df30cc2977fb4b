//! `make bench`: median time to render the real Cluster API v1.12.0 core release from memory
//! (substitution, parsing, namespace fixing, customizations, labels, ordering).

use std::time::Instant;

use capi_components::{render::render, source::Release};
use capi_operator_api::AnyProvider;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let shared = std::env::var_os("CAPI_SHARED_DIR")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared")
        });
    let dir = shared.join("testdata/providers/cluster-api/v1.12.0");
    if !dir.is_dir() {
        eprintln!("SKIPPED: {} not found; set CAPI_SHARED_DIR", dir.display());
        return Ok(());
    }
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
    let runs = 30;
    let mut times = Vec::with_capacity(runs);
    for i in 0..runs + 3 {
        let t = Instant::now();
        let r = render(&provider, &release, |_| None)?;
        let elapsed = t.elapsed().as_secs_f64() * 1e3;
        std::hint::black_box(r);
        if i >= 3 {
            times.push(elapsed);
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "render v1.12.0 core ({} bytes): median {:.2} ms, min {:.2} ms, max {:.2} ms over {runs} runs",
        release.components.len(),
        times[runs / 2],
        times[0],
        times[runs - 1]
    );
    Ok(())
}
