//! Hostile releases: each is offered as an upgrade of an installed provider and must end in a
//! clear condition reason while the installed version keeps running untouched (same
//! installedVersion, same Deployment resourceVersion). A release granting cluster-admin is
//! applied as released but announced in a Warning event.

use crate::support;

use std::{collections::BTreeMap, io::Write, time::Duration};

use capi_test_support::{private_cluster, wait_for};
use k8s_openapi::{
    ByteString,
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Event},
    },
};
use kube::{
    Api,
    api::{ListParams, ObjectMeta, PostParams},
};
use serde_json::Value;
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "hostile-infra";
const LABEL: &str = "sample-infrastructure";

fn infra(version: &str) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: sample\n  namespace: {NS}\nspec:\n  version: {version}\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {LABEL}\n"
    )
}

/// A ConfigMap claiming `version` whose components are gzip of `raw` (no size check here: the
/// point is a bomb).
async fn gzip_configmap(
    client: &kube::Client,
    name: &str,
    version: &str,
    metadata: &str,
    raw: impl Fn(&mut dyn Write) -> std::io::Result<()>,
) -> TestResult {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    raw(&mut gz)?;
    let bytes = gz.finish()?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([
                (
                    "provider.cluster.x-k8s.io/name".to_string(),
                    LABEL.to_string(),
                ),
                (
                    "provider.cluster.x-k8s.io/version".to_string(),
                    version.to_string(),
                ),
            ])),
            annotations: Some(BTreeMap::from([(
                "provider.cluster.x-k8s.io/compressed".to_string(),
                "true".to_string(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([(
            "metadata".to_string(),
            metadata.to_string(),
        )])),
        binary_data: Some(BTreeMap::from([(
            "components".to_string(),
            ByteString(bytes),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

#[tokio::test]
async fn hostile_releases_change_nothing_installed() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    cluster.ensure_namespace("hostile-core")?;
    cluster.ensure_namespace(NS)?;
    load_core(cluster, &client, "hostile-core").await?;
    let meta = std::fs::read_to_string(samples().join(LABEL).join("v0.2.0/metadata.yaml"))?;
    let good = std::fs::read_to_string(
        samples()
            .join(LABEL)
            .join("v0.2.0/infrastructure-components.yaml"),
    )?;
    // The installed release: the sample without its CRDs' contract labels, so the contract
    // checks have findings to report while the provider installs all the same.
    let unlabelled = good.replace("    cluster.x-k8s.io/v1beta2: v1beta2\n", "");
    assert_ne!(
        unlabelled, good,
        "the sample's CRDs carry no contract label to remove"
    );
    release_configmap(
        &client,
        NS,
        &format!("{LABEL}-v0.2.0"),
        &[("provider.cluster.x-k8s.io/name", LABEL)],
        "v0.2.0",
        &meta,
        &unlabelled,
    )
    .await?;
    let operator = start_operator(cluster, &["--config-retry-seconds", "2"])?;
    let log = |e: Box<dyn std::error::Error>| -> Box<dyn std::error::Error> {
        format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
    };
    apply(
        cluster,
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: hostile-core\nspec:\n  version: v0.2.0\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: sample-core\n",
    )?;
    apply(cluster, &infra("v0.2.0"))?;
    wait_condition(
        &client,
        ("InfrastructureProvider", NS, "sample"),
        "Ready",
        "True",
        None,
        T,
    )
    .await
    .map_err(log)?;
    // The release's CRDs name no contract: the contract checks say so (a condition and a
    // Warning event), and the provider is installed all the same.
    let p = provider(&client, "InfrastructureProvider", NS, "sample")
        .await
        .ok_or("provider gone")?;
    let verified = condition(&p, "ContractVerified").ok_or("no ContractVerified condition")?;
    assert_eq!(verified.get("status"), Some(&Value::from("False")));
    assert_eq!(
        verified.get("reason"),
        Some(&Value::from("ContractFindings"))
    );
    let findings = verified
        .get("message")
        .and_then(Value::as_str)
        .unwrap_or_default();
    assert!(
        findings.contains("InfraCluster") || findings.contains("infra"),
        "{findings}"
    );
    let deployments = Api::<Deployment>::namespaced(client.clone(), NS);
    let installed_rv = deployments
        .get("sample-infra-controller-manager")
        .await?
        .metadata
        .resource_version;

    let mut bomb = String::from("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n");
    for i in 1..10 {
        let p = i - 1;
        bomb.push_str(&format!(
            "a{i}: &a{i} [*a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}, *a{p}]\n"
        ));
    }
    let deep = format!(
        "kind: ConfigMap\napiVersion: v1\ndata: {}{}\n",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    // (version, components, condition reason)
    let text_cases: Vec<(&str, String, &str)> = vec![
        (
            "v0.2.1",
            format!("{good}\n---\n{bomb}"),
            "ComponentsRenderError",
        ),
        ("v0.2.2", deep, "ComponentsRenderError"),
        (
            "v0.2.3",
            "<html><body>404 Not Found</body></html>\n".into(),
            "ComponentsRenderError",
        ),
        (
            "v0.2.4",
            format!("{good}\n---\nmetadata:\n  name: nameless\ndata: {{a: b}}\n"),
            "ComponentsRenderError",
        ),
        (
            "v0.2.5",
            "\u{1}\u{2}binary\u{7f}\u{3}".into(),
            "ComponentsRenderError",
        ),
    ];
    let mut cases: Vec<(String, &str)> = Vec::new();
    for (v, components, reason) in &text_cases {
        release_configmap(
            &client,
            NS,
            &format!("{LABEL}-{v}"),
            &[("provider.cluster.x-k8s.io/name", LABEL)],
            v,
            &meta,
            components,
        )
        .await?;
        cases.push((v.to_string(), reason));
    }
    // A gzip bomb: 512 MiB of zeros in well under the ConfigMap size limit.
    gzip_configmap(&client, "gzip-bomb", "v0.2.6", &meta, |w| {
        let zeros = vec![0u8; 1 << 20];
        for _ in 0..512 {
            w.write_all(&zeros)?;
        }
        Ok(())
    })
    .await?;
    cases.push(("v0.2.6".into(), "ComponentsFetchError"));
    // Two ConfigMaps claiming one version.
    for n in ["a", "b"] {
        release_configmap(
            &client,
            NS,
            &format!("twin-{n}"),
            &[("provider.cluster.x-k8s.io/name", LABEL)],
            "v0.2.7",
            &meta,
            &good,
        )
        .await?;
    }
    cases.push(("v0.2.7".into(), "ComponentsFetchError"));
    // A version no ConfigMap has.
    cases.push(("v0.2.99".into(), "ComponentsFetchError"));

    for (version, reason) in &cases {
        apply(cluster, &infra(version))?;
        // The condition must describe this version: its observedGeneration is the object's.
        let p = wait_for(T, || async {
            let p = provider(&client, "InfrastructureProvider", NS, "sample").await?;
            let generation = p.pointer("/metadata/generation")?.clone();
            let c = condition(&p, "ProviderInstalled")?;
            (c.get("observedGeneration")? == &generation
                && c.get("status")? == "False"
                && c.get("reason")? == *reason)
                .then_some(p.clone())
        })
        .await
        .ok_or_else(|| {
            log(format!("{version}: ProviderInstalled=False ({reason}) not reached").into())
        })?;
        let message = condition(&p, "ProviderInstalled")
            .and_then(|c| c.get("message"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        eprintln!("{version}: {reason}: {message}");
        assert!(!message.is_empty(), "{version}: a message says why");
        assert!(message.len() < 4096, "{version}: a bounded message");
        assert_eq!(
            p.pointer("/status/installedVersion"),
            Some(&Value::from("v0.2.0")),
            "{version}: the installed version changed"
        );
        assert_eq!(
            deployments
                .get("sample-infra-controller-manager")
                .await?
                .metadata
                .resource_version,
            installed_rv,
            "{version}: the installed Deployment was touched"
        );
    }
    // An unknown URL scheme never gets past admission.
    let (ok, _, err) = cluster.kubectl(&[
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        &tempfile(&format!(
            "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: InfrastructureProvider\nmetadata:\n  name: ftp\n  namespace: {NS}\nspec:\n  fetchConfig:\n    url: ftp://example.com/releases\n"
        ))?,
    ])?;
    assert!(
        !ok && err.contains("fetchConfig.url must be an https:// URL"),
        "{err}"
    );

    // A release binding cluster-admin: applied as released, announced in a Warning event.
    let privileged = format!(
        "{good}\n---\napiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRoleBinding\nmetadata:\n  name: sample-infra-admin\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n  name: cluster-admin\nsubjects:\n- kind: ServiceAccount\n  name: sample-infra-manager\n  namespace: {NS}\n"
    );
    release_configmap(
        &client,
        NS,
        "privileged-v0.2.8",
        &[("provider.cluster.x-k8s.io/name", LABEL)],
        "v0.2.8",
        &meta,
        &privileged,
    )
    .await?;
    apply(cluster, &infra("v0.2.8"))?;
    let events = Api::<Event>::namespaced(client.clone(), NS);
    let note = wait_for(T, || async {
        events
            .list(&ListParams::default())
            .await
            .ok()?
            .into_iter()
            .find(|e| e.reason.as_deref() == Some("PrivilegedObjects"))
            .and_then(|e| e.message)
    })
    .await
    .ok_or_else(|| log("no PrivilegedObjects event".into()))?;
    assert!(
        note.contains("ClusterRoleBinding sample-infra-admin binds cluster-admin"),
        "{note}"
    );
    Ok(())
}
