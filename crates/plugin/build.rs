//! Renders the operator's release manifest of this version from `manifests/kustomization.yaml`
//! (its resources, in order, as `kubectl kustomize manifests/` prints them: the kustomization
//! transforms nothing), so `init` installs the operator from nothing with one source of truth.

use std::{fmt::Write as _, path::Path};

fn main() {
    let manifest_dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
    let root = Path::new(&manifest_dir).join("../../manifests");
    let kustomization = root.join("kustomization.yaml");
    println!("cargo::rerun-if-changed={}", kustomization.display());
    let text = std::fs::read_to_string(&kustomization)
        .unwrap_or_else(|e| panic!("reading {}: {e}", kustomization.display()));
    let mut out = String::new();
    for resource in resources(&text) {
        let path = root.join(resource);
        println!("cargo::rerun-if-changed={}", path.display());
        let body = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        let _ = write!(out, "---\n# {resource}\n{}\n", body.trim_end());
    }
    let out_dir = std::env::var("OUT_DIR").unwrap_or_else(|_| panic!("OUT_DIR is not set"));
    let dest = Path::new(&out_dir).join("operator.yaml");
    std::fs::write(&dest, out).unwrap_or_else(|e| panic!("writing {}: {e}", dest.display()));
}

/// The entries of the top-level `resources:` list (block style, one `- path` a line).
fn resources(text: &str) -> Vec<&str> {
    let mut in_list = false;
    let mut out = Vec::new();
    for line in text.lines() {
        if line.starts_with('#') || line.trim().is_empty() {
            continue;
        }
        if !line.starts_with(' ') && !line.starts_with('-') {
            in_list = line.trim_end() == "resources:";
            continue;
        }
        if in_list && let Some(item) = line.trim_start().strip_prefix("- ") {
            out.push(item.trim());
        }
    }
    out
}
