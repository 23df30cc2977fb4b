//! The memory budget's model against what rendering really takes: each release is rendered as
//! an install pass renders it (the release copied for the render's thread, substituted,
//! parsed, customized, finalized) in a process of its own (this binary run again), which
//! reports the growth of its peak resident memory (VmHWM) over its resident memory before the
//! render; releases dense in nodes, dense in bytes, expanding through substitution, and the
//! real core release. Every peak must stay within what the pass is charged
//! (`ReleaseCost::memory`). No test harness: `main` is the parent, or with `child NAME` the
//! child rendering fixture NAME.
//!
//! `cargo test -p capi-provider-operator --test render_cost` prints the measurements
//! docs/performance.md quotes.

use std::process::Command;

use capi_components::{
    before_apply::{Pause, finalize},
    render::{self, RenderExtras},
};
use capi_operator_api::AnyProvider;
use capi_provider_operator::controller::budget::ReleaseCost;
use capi_release::Release;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 0, contract: v1beta1}\n- {major: 1, minor: 12, contract: v1beta2}\n";

fn provider() -> Result<AnyProvider, Box<dyn std::error::Error>> {
    Ok(AnyProvider::from_value(serde_json::json!({
        "apiVersion": "management.cluster.x-k8s.io/v1alpha1",
        "kind": "CoreProvider",
        "metadata": {"name": "cluster-api", "namespace": "capi-system"},
        "spec": {"version": "v1.0.0"},
    }))?)
}

/// A figure of /proc/self/status, in bytes.
fn status_bytes(field: &str) -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|rest| {
            rest.trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<usize>()
                .ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// Renders `components` within the limits its cost sets, as the operator does; prints the
/// cost, the growth of the peak resident memory and the result for the parent.
fn render_child(components: String, vars: &[(&str, &str)]) -> TestResult {
    let p = provider()?;
    let release = Release {
        version: "v1.0.0".into(),
        metadata: METADATA.into(),
        components,
    };
    let cost = ReleaseCost::of(&release);
    let extras = RenderExtras {
        limits: cost.limits(),
        ..RenderExtras::default()
    };
    let before = status_bytes("VmRSS:");
    // As the install pass: the release is copied for the render's thread.
    let copy = release.clone();
    let rendered = render::render_with(
        &p,
        &copy,
        |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        },
        &extras,
    );
    let result = rendered.map(|r| {
        let mut objects = r.objects;
        finalize(&mut objects, &p, Pause::Running);
        objects.len()
    });
    let peak = status_bytes("VmHWM:").saturating_sub(before);
    let result = match result {
        Ok(n) => format!("ok {n}"),
        Err(e) => format!("error {e}"),
    };
    println!(
        "{} {} {} {peak} {result}",
        cost.bytes,
        cost.nodes,
        cost.memory()
    );
    Ok(())
}

fn object(body: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c, namespace: capi-system}}\n{body}"
    )
}

/// A fixture: the components and the variables they are rendered with.
type Fixture = (String, Vec<(&'static str, String)>);

/// The fixture `name`; an error when it cannot be had (the real core release is built by
/// `make providers`).
fn fixture(name: &str) -> Result<Fixture, Box<dyn std::error::Error>> {
    let none = Vec::new();
    Ok(match name {
        // A block list of `- 0`: 4 bytes a node.
        "node-dense" => (
            object(&format!("data:\n  list:\n{}", "  - 0\n".repeat(400_000))),
            none,
        ),
        "many-objects" => (
            (0..9_000)
                .map(|i| format!("---\napiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c{i}, namespace: capi-system}}\ndata: {{a: b, c: d}}\n"))
                .collect(),
            none,
        ),
        // Long scalars, few nodes.
        "byte-dense" => (
            object(&format!(
                "data:\n{}",
                (0..16)
                    .map(|i| format!("  k{i}: {}\n", "x".repeat(1 << 20)))
                    .collect::<String>()
            )),
            none,
        ),
        // 300 bytes of V grow to 27 MB through nested replacements.
        "expansion" => (
            object("data:\n  x: ${V//a/${V//a/${V}}}\n"),
            vec![("V", "a".repeat(300))],
        ),
        "core" => {
            let file = capi_test_support::releases()?.join("cluster-api/v1.12.0/core-components.yaml");
            (std::fs::read_to_string(file)?, none)
        }
        _ => return Err(format!("no fixture {name}").into()),
    })
}

/// What a child reported for one fixture.
struct Measured {
    bytes: u64,
    nodes: u64,
    charged: u64,
    peak: u64,
    result: String,
}

/// Runs fixture `name` in a child process.
fn run_child(name: &str) -> Result<Measured, Box<dyn std::error::Error>> {
    let out = Command::new(std::env::current_exe()?)
        .args(["child", name])
        .output()?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "{name}: child failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        )
        .into());
    }
    let mut f = text.trim().splitn(5, ' ');
    let mut num = || -> Result<u64, Box<dyn std::error::Error>> {
        Ok(f.next().ok_or("short report")?.parse()?)
    };
    let (bytes, nodes, charged, peak) = (num()?, num()?, num()?, num()?);
    Ok(Measured {
        bytes,
        nodes,
        charged,
        peak,
        result: f.next().unwrap_or_default().to_string(),
    })
}

fn main() -> TestResult {
    let args: Vec<String> = std::env::args().collect();
    if let [_, child, name] = &args[..]
        && child == "child"
    {
        let (components, vars) = fixture(name)?;
        let vars: Vec<(&str, &str)> = vars.iter().map(|(k, v)| (*k, v.as_str())).collect();
        return render_child(components, &vars);
    }
    // (fixture, whether it renders)
    let cases = [
        ("node-dense", true),
        ("many-objects", true),
        ("byte-dense", true),
        ("expansion", false),
        ("core", true),
    ];
    let mut failures = Vec::new();
    for (name, renders) in cases {
        let Measured {
            bytes,
            nodes,
            charged,
            peak,
            result,
        } = run_child(name)?;
        let mib = |b: u64| b as f64 / 1048576.0;
        eprintln!(
            "{name}: {bytes} bytes, {nodes} nodes: peak RSS growth {:.1} MiB ({:.1} B/byte, {:.0} B/node), charged {:.1} MiB; {result}",
            mib(peak),
            peak as f64 / bytes.max(1) as f64,
            peak as f64 / nodes.max(1) as f64,
            mib(charged),
        );
        if peak > charged {
            failures.push(format!("{name}: peak {peak} above the charge {charged}"));
        }
        if result.starts_with("ok") != renders {
            failures.push(format!("{name}: {result}"));
        }
    }
    if failures.is_empty() {
        println!("render_cost: ok");
        Ok(())
    } else {
        Err(failures.join("\n").into())
    }
}
