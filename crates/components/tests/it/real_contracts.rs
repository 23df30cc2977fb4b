//! The real Cluster API releases (core, kubeadm bootstrap and control plane as
//! build-providers.sh assembles them, the published ones of `../shared` where present, the
//! docker/in-memory provider as build-providers.sh renders it)
//! pass every provider contract in the contract version their metadata declares — and in
//! v1beta1 too, through the CRD versions their `cluster.x-k8s.io/v1beta1` labels name — and the
//! same release with one required field removed from a CRD fails, naming the contract, the
//! contract version, the kind and the field.

use std::path::{Path, PathBuf};

use capi_components::{contract, metadata::Metadata, pipeline};
use capi_operator_api::ProviderType;
use serde_json::Value;

type TestResult = Result<(), Box<dyn std::error::Error>>;

const VERSIONS: [&str; 2] = ["v1.11.0", "v1.12.0"];

/// Every version build-providers.sh assembles from its module's own `config/`: v1.10 is the last
/// line of contract v1beta1.
const ASSEMBLED: [&str; 5] = ["v1.10.10", "v1.11.0", "v1.12.0", "v1.13.6", "v1.14.2"];

/// The versions of the docker/in-memory provider build-providers.sh builds (`CAPD_VERSIONS`):
/// the proxy does not serve what the v1.13/v1.14 test modules need.
const DOCKER: [&str; 3] = ["v1.10.10", "v1.11.0", "v1.12.0"];

/// The core and kubeadm provider labels with their types.
const KUBEADM: [(ProviderType, &str); 3] = [
    (ProviderType::Core, "cluster-api"),
    (ProviderType::Bootstrap, "bootstrap-kubeadm"),
    (ProviderType::ControlPlane, "control-plane-kubeadm"),
];

/// A real release: type, contract its metadata declares, parsed objects.
struct Real {
    name: String,
    t: ProviderType,
    contract: String,
    objects: Vec<Value>,
}

fn load(dir: PathBuf, t: ProviderType, version: &str) -> Result<Real, Box<dyn std::error::Error>> {
    let metadata = Metadata::parse(&std::fs::read_to_string(dir.join("metadata.yaml"))?)?;
    let contract = metadata.contract_for(version)?.to_string();
    let raw = std::fs::read_to_string(dir.join(t.components_file()))?;
    let objects = pipeline::parse_objects(&pipeline::substitute(&raw, |_| None)?)?;
    Ok(Real {
        name: format!("{} {version}", dir.display()),
        t,
        contract,
        objects,
    })
}

/// The kubeadm and core releases of `versions` under `root` (one directory per provider
/// label, then per version), in that order: core, bootstrap, control plane of each version.
fn kubeadm_releases(
    root: &Path,
    versions: &[&str],
) -> Result<Vec<Real>, Box<dyn std::error::Error>> {
    let mut out = Vec::new();
    for &version in versions {
        for (t, label) in KUBEADM {
            out.push(load(root.join(label).join(version), t, version)?);
        }
    }
    Ok(out)
}

/// The docker/in-memory provider releases build-providers.sh rendered, in the order of
/// [`DOCKER`]; an error naming the script when any is missing.
fn docker_releases() -> Result<Vec<Real>, Box<dyn std::error::Error>> {
    let images = capi_test_support::provider_images().ok_or(
        "the docker provider's releases are not rendered: run `make providers` \
         (e2e/scripts/build-providers.sh)",
    )?;
    let root = images.parent().map(PathBuf::from).unwrap_or_default();
    let mut out = Vec::new();
    for version in DOCKER {
        let dir = root.join(format!("capd-{version}/release"));
        if !dir.is_dir() {
            return Err(format!(
                "{} is absent: run `make providers` (e2e/scripts/build-providers.sh)",
                dir.display()
            )
            .into());
        }
        out.push(load(dir, ProviderType::Infrastructure, version)?);
    }
    Ok(out)
}

fn not_ok(findings: &[contract::Finding]) -> Vec<String> {
    findings
        .iter()
        .filter(|f| f.severity != contract::Severity::Ok)
        .map(ToString::to_string)
        .collect()
}

/// Each release declares the contract of its line and passes every check of it (and of
/// v1beta1 too for the v1beta2 releases).
fn follow_every_contract(releases: &[Real]) {
    let mut failed = Vec::new();
    for r in releases {
        let old_line = r.name.contains("/v1.10.") || r.name.contains("capd-v1.10.");
        let declared = if old_line { "v1beta1" } else { "v1beta2" };
        assert_eq!(r.contract, declared, "{}", r.name);
        // v1beta1 too for the v1beta2 releases: they label their v1beta1 API versions as
        // following it.
        let contracts: &[&str] = if old_line {
            &["v1beta1"]
        } else {
            &["v1beta2", "v1beta1"]
        };
        for &contract in contracts {
            let findings = contract::verify(r.t, Some(contract), &r.objects);
            let bad = not_ok(&findings);
            if !bad.is_empty() {
                failed.push(format!("{} as {contract}:\n{}", r.name, bad.join("\n")));
            }
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

#[test]
fn real_releases_follow_every_contract_in_both_versions() -> TestResult {
    let mut releases = kubeadm_releases(&capi_test_support::releases()?, &ASSEMBLED)?;
    releases.extend(docker_releases()?);
    follow_every_contract(&releases);
    Ok(())
}

/// The published v1.11.0 is not byte for byte the one assembled from its module (the
/// published v1.12.0 is): its files are checked too where they are at hand.
#[test]
#[ignore = "needs the published files of ../shared (CAPI_SHARED_DIR); make test runs it when present"]
fn published_releases_follow_every_contract_in_both_versions() -> TestResult {
    let published = capi_test_support::published()?.join("testdata/providers");
    follow_every_contract(&kubeadm_releases(&published, &VERSIONS)?);
    Ok(())
}

/// Removes the property at `path` from the schema of `version` of the CRD of `kind`.
fn remove_field(objects: &mut [Value], kind: &str, version: &str, path: &[&str]) -> bool {
    let Some(crd) = objects
        .iter_mut()
        .find(|o| o["kind"] == "CustomResourceDefinition" && o["spec"]["names"]["kind"] == kind)
    else {
        return false;
    };
    let Some(versions) = crd["spec"]["versions"].as_array_mut() else {
        return false;
    };
    let Some(v) = versions.iter_mut().find(|v| v["name"] == version) else {
        return false;
    };
    let mut s = &mut v["schema"]["openAPIV3Schema"];
    let Some((last, parents)) = path.split_last() else {
        return false;
    };
    for p in parents {
        s = &mut s["properties"][*p];
    }
    s["properties"]
        .as_object_mut()
        .and_then(|m| m.remove(*last))
        .is_some()
}

/// (release index, CRD kind, CRD version, field, contract version, contract name)
type Breach = (
    usize,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static str,
);

fn expect_breach(releases: &[Real], b: Breach) -> Result<(), String> {
    let (i, kind, crd_version, field, contract_version, name) = b;
    let r = releases.get(i).ok_or("no such release")?;
    let mut objects = r.objects.clone();
    let path: Vec<&str> = field.split('.').collect();
    if !remove_field(&mut objects, kind, crd_version, &path) {
        return Err(format!("{}: {kind} {crd_version} has no {field}", r.name));
    }
    let findings = contract::verify(r.t, Some(contract_version), &objects);
    let errors: Vec<String> = findings
        .iter()
        .filter(|f| f.severity == contract::Severity::Error)
        .map(ToString::to_string)
        .collect();
    let named = errors.iter().any(|e| {
        e.contains(&format!("{name} contract {contract_version}"))
            && e.contains(kind)
            && e.contains(field)
    });
    if named {
        Ok(())
    } else {
        Err(format!(
            "{} without {kind} {crd_version} {field}: no error names {name} {contract_version}, {kind} and {field}: {errors:#?}",
            r.name
        ))
    }
}

#[test]
fn a_real_release_without_a_required_field_fails_naming_it() -> TestResult {
    let mut releases = kubeadm_releases(&capi_test_support::releases()?, &VERSIONS)?;
    // Index: v1.11.0 core, bootstrap, control plane = 0, 1, 2; v1.12.0 = 3, 4, 5; docker after.
    let mut breaches: Vec<Breach> = vec![
        (
            4,
            "KubeadmConfig",
            "v1beta2",
            "status.dataSecretName",
            "v1beta2",
            "BootstrapConfig",
        ),
        (
            4,
            "KubeadmConfig",
            "v1beta2",
            "status.initialization.dataSecretCreated",
            "v1beta2",
            "BootstrapConfig",
        ),
        (
            1,
            "KubeadmConfig",
            "v1beta1",
            "status.ready",
            "v1beta1",
            "BootstrapConfig",
        ),
        (
            5,
            "KubeadmControlPlane",
            "v1beta2",
            "status.initialization.controlPlaneInitialized",
            "v1beta2",
            "ControlPlane",
        ),
        (
            5,
            "KubeadmControlPlane",
            "v1beta2",
            "status.selector",
            "v1beta2",
            "ControlPlane",
        ),
        (
            5,
            "KubeadmControlPlane",
            "v1beta2",
            "status.version",
            "v1beta2",
            "ControlPlane",
        ),
        (
            2,
            "KubeadmControlPlane",
            "v1beta1",
            "status.initialized",
            "v1beta1",
            "ControlPlane",
        ),
        (
            2,
            "KubeadmControlPlane",
            "v1beta1",
            "status.unavailableReplicas",
            "v1beta1",
            "ControlPlane",
        ),
        (
            5,
            "KubeadmControlPlaneTemplate",
            "v1beta2",
            "spec.template.spec",
            "v1beta2",
            "ControlPlaneTemplate",
        ),
        (
            3,
            "IPAddressClaim",
            "v1beta2",
            "status.addressRef",
            "v1beta2",
            "IPAM IPAddressClaim",
        ),
        (
            3,
            "IPAddress",
            "v1beta2",
            "spec.address",
            "v1beta2",
            "IPAM IPAddress",
        ),
    ];
    let docker = docker_releases()?;
    // The docker releases follow the kubeadm ones: `d` is v1.12.0, `d - 1` v1.11.0.
    let d = releases.len()
        + DOCKER
            .iter()
            .position(|v| *v == "v1.12.0")
            .ok_or("no docker v1.12.0")?;
    breaches.extend([
        (
            d,
            "DockerMachine",
            "v1beta2",
            "spec.providerID",
            "v1beta2",
            "InfraMachine",
        ),
        (
            d,
            "DockerMachine",
            "v1beta2",
            "status.initialization.provisioned",
            "v1beta2",
            "InfraMachine",
        ),
        (
            d - 1,
            "DockerMachine",
            "v1beta1",
            "status.ready",
            "v1beta1",
            "InfraMachine",
        ),
        (
            d,
            "DockerCluster",
            "v1beta2",
            "status.initialization.provisioned",
            "v1beta2",
            "InfraCluster",
        ),
        (
            d,
            "DevCluster",
            "v1beta2",
            "status.initialization.provisioned",
            "v1beta2",
            "externally managed InfraCluster",
        ),
        (
            d,
            "DockerCluster",
            "v1beta1",
            "spec.controlPlaneEndpoint",
            "v1beta1",
            "InfraCluster",
        ),
        (
            d,
            "DockerMachinePool",
            "v1beta2",
            "spec.providerIDList",
            "v1beta2",
            "InfraMachinePool",
        ),
        (
            d,
            "DockerMachineTemplate",
            "v1beta2",
            "spec.template.spec",
            "v1beta2",
            "InfraMachineTemplate",
        ),
    ]);
    releases.extend(docker);
    let failed: Vec<String> = breaches
        .into_iter()
        .filter_map(|b| expect_breach(&releases, b).err())
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
    Ok(())
}

#[test]
fn checking_the_core_release_takes_milliseconds() -> TestResult {
    let releases = kubeadm_releases(&capi_test_support::releases()?, &VERSIONS)?;
    let core = releases
        .iter()
        .rfind(|r| r.t == ProviderType::Core)
        .ok_or("no core release")?;
    let runs: u32 = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        std::hint::black_box(contract::verify(core.t, Some("v1beta2"), &core.objects));
    }
    let each = start.elapsed() / runs;
    eprintln!("contract checks of {}: {each:?} per run", core.name);
    // A debug build on a shared CI core; the release build is several times faster.
    assert!(each < std::time::Duration::from_millis(50), "{each:?}");
    Ok(())
}
