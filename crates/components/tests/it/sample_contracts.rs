//! The project's sample releases (examples/sample-providers), which `make demo` and the
//! end-to-end tests install and a newcomer meets first, pass every provider contract check
//! the operator runs: the operator reports ContractVerified=True for each of them, not a
//! finding to explain away.

use capi_components::{contract, metadata::Metadata, pipeline};
use capi_operator_api::ProviderType;

type TestResult = Result<(), Box<dyn std::error::Error>>;

#[test]
fn every_sample_release_passes_the_contract_checks() -> TestResult {
    let root = capi_test_support::workspace_root().join("examples/sample-providers");
    let (mut checked, mut failed) = (0, Vec::new());
    for provider in std::fs::read_dir(&root)? {
        for release in std::fs::read_dir(provider?.path())? {
            let dir = release?.path();
            let version = dir.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            let metadata = Metadata::parse(&std::fs::read_to_string(dir.join("metadata.yaml"))?)?;
            let contract = metadata.contract_for(version)?.to_string();
            let (t, file) = ProviderType::ALL
                .iter()
                .map(|t| (*t, dir.join(t.components_file())))
                .find(|(_, f)| f.is_file())
                .ok_or_else(|| format!("{}: no components file", dir.display()))?;
            let raw = std::fs::read_to_string(&file)?;
            let objects = pipeline::parse_objects(&pipeline::substitute(&raw, |_| None)?)?;
            let findings: Vec<String> = contract::verify(t, Some(&contract), &objects)
                .into_iter()
                .filter(|f| f.severity != contract::Severity::Ok)
                .map(|f| f.to_string())
                .collect();
            if !findings.is_empty() {
                failed.push(format!(
                    "{} ({} {version}, contract {contract}):\n{}",
                    file.display(),
                    t.kind(),
                    findings.join("\n")
                ));
            }
            checked += 1;
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    assert_eq!(checked, 6, "three sample providers, two releases each");
    Ok(())
}
