//! `make bench`: what the watches' index costs at 1, 30 and 300 providers (each with three
//! installed objects and two Deployments): routing one watch event of an installed Deployment
//! (the index entry replaced and compared with the old one), the queries one reconcile makes
//! (its kind's and the core providers, every provider, its installed objects and what the
//! index holds of each, its Deployments twice), and, for comparison, one provider's change
//! (translated once; the shared lists of providers rebuilt). The first two stay flat.

use std::{hint::black_box, sync::Arc, time::Instant};

use capi_operator_api::{
    CoreProvider, InfrastructureProvider, OWNER_KIND_LABEL, OWNER_NAME_LABEL,
    OWNER_NAMESPACE_LABEL, ProviderApi, ProviderType,
};
use capi_provider_operator::controller::index::Index;
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta},
    runtime::watcher::Event,
};
use serde_json::{Value, json};

const RUNS: usize = 30;
const BATCH: usize = 200;

type Error = Box<dyn std::error::Error>;

/// Microseconds per call of `f` in each of `RUNS` batches of `BATCH` calls, after one batch
/// of warm-up, sorted.
fn times(mut f: impl FnMut(usize)) -> Vec<f64> {
    let mut out = Vec::with_capacity(RUNS);
    for run in 0..=RUNS {
        let t = Instant::now();
        for i in 0..BATCH {
            f(run * BATCH + i);
        }
        if run > 0 {
            out.push(t.elapsed().as_secs_f64() * 1e6 / BATCH as f64);
        }
    }
    out.sort_by(f64::total_cmp);
    out
}

fn report(what: &str, n: usize, t: &[f64]) {
    println!(
        "{what} at {n} providers: median {:.2} µs, min {:.2} µs, max {:.2} µs over {RUNS} runs",
        t[RUNS / 2],
        t[0],
        t[RUNS - 1]
    );
}

fn owner(name: &str) -> Value {
    json!({OWNER_KIND_LABEL: "InfrastructureProvider",
           OWNER_NAMESPACE_LABEL: format!("{name}-system"), OWNER_NAME_LABEL: name})
}

fn infra(name: &str, generation: i64) -> Result<InfrastructureProvider, Error> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": "InfrastructureProvider",
        "metadata": {"name": name, "namespace": format!("{name}-system"), "generation": generation},
        "spec": {"version": "v1.0.0", "configSecret": {"name": "vars"}},
    }))?)
}

fn deployment(owner_name: &str, name: &str, available: bool) -> Result<Deployment, Error> {
    let condition =
        json!({"type": "Available", "status": if available { "True" } else { "False" }});
    Ok(serde_json::from_value(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": format!("{owner_name}-system"), "generation": 1,
                     "labels": owner(owner_name)},
        "spec": {"selector": {}, "template": {}},
        "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                   "availableReplicas": i32::from(available), "conditions": [condition]},
    }))?)
}

/// The index of a core provider and `n` infrastructure providers with their objects.
fn index_of(n: usize) -> Result<Index, Error> {
    let index = Index::default();
    let core: CoreProvider = serde_json::from_value(json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": "capi-system"}, "spec": {}}))?;
    index.feed_provider(&Event::Apply(core));
    let kinds = [
        ("", "ServiceAccount"),
        ("", "Service"),
        ("rbac.authorization.k8s.io", "Role"),
    ];
    let resources: Vec<Arc<ApiResource>> = kinds
        .iter()
        .map(|(g, k)| Arc::new(ApiResource::from_gvk(&GroupVersionKind::gvk(g, "v1", k))))
        .collect();
    for i in 0..n {
        let name = format!("infra-{i}");
        index.feed_provider(&Event::Apply(infra(&name, 1)?));
        for r in &resources {
            let o: PartialObjectMeta<DynamicObject> = serde_json::from_value(json!({
                "apiVersion": r.api_version, "kind": r.kind,
                "metadata": {"name": "manager", "namespace": format!("{name}-system"),
                             "resourceVersion": "1", "labels": owner(&name)}}))?;
            index.feed_installed(r, true, &Event::Apply(o));
        }
        for d in ["controller", "webhook"] {
            index.feed_deployment(&Event::Apply(deployment(&name, d, true)?));
        }
    }
    Ok(index)
}

/// The machine's load when the run starts: the figures are wall time, shared with whatever
/// else runs.
fn load() -> String {
    let avg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let one = avg.split_whitespace().next().unwrap_or("unknown");
    let cores = std::thread::available_parallelism().map_or(0, usize::from);
    format!("machine load (1-minute average) {one} on {cores} cores")
}

fn main() -> Result<(), Error> {
    println!("{}", load());
    for n in [1, 30, 300] {
        let index = index_of(n)?;
        let t = ProviderType::Infrastructure;
        let p = index
            .provider(ProviderApi::Management, t, "infra-0-system", "infra-0")
            .ok_or("infra-0 not indexed")?;
        let flips = [
            Event::Apply(deployment("infra-0", "controller", false)?),
            Event::Apply(deployment("infra-0", "controller", true)?),
        ];
        report(
            "routed event",
            n,
            &times(|i| {
                black_box(index.feed_deployment(&flips[i % 2]));
            }),
        );
        report(
            "reconcile queries",
            n,
            &times(|_| {
                black_box(index.providers(t));
                black_box(index.providers(ProviderType::Core));
                black_box(index.all_providers());
                for (k, _, _) in index.installed(&p) {
                    black_box(index.live(&k));
                }
                black_box(index.deployments_of(&p));
                black_box(index.deployments_of(&p));
            }),
        );
        let changes = [
            Event::Apply(infra("infra-0", 2)?),
            Event::Apply(infra("infra-0", 3)?),
        ];
        report(
            "provider change",
            n,
            &times(|i| {
                black_box(index.feed_provider(&changes[i % 2]));
            }),
        );
    }
    Ok(())
}
