//! The release memory budget against hostile releases, on a local control plane: the operator
//! runs with the budget a 256 MiB container gets (`--release-memory-mib 192`), and a small
//! gzipped release in a ConfigMap that parses to millions of nodes, then one whose
//! substitution grows a few hundred bytes to megabytes, each end in a render error condition,
//! while the operator process keeps running (the same process: no restart) and its peak
//! resident memory stays under the 256 MiB it would be killed at.

use crate::support;

use std::{collections::BTreeMap, io::Write, time::Duration};

use capi_test_support::{OperatorProcess, private_cluster, wait_for};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Secret},
};
use kube::{
    Api,
    api::{ObjectMeta, PostParams},
};
use support::*;

const T: Duration = Duration::from_secs(90);
const NS: &str = "budget-core";
const LABEL: &str = "budget-core";
const LIMIT: u64 = 256 * 1024 * 1024;
const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 0, minor: 2, contract: v1beta1}\n- {major: 0, minor: 3, contract: v1beta1}\n";

/// A release ConfigMap of `version` whose components are gzip of `components`.
async fn release(client: &kube::Client, version: &str, components: &[u8]) -> TestResult {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
    gz.write_all(components)?;
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("{LABEL}-{version}")),
            namespace: Some(NS.into()),
            labels: Some(BTreeMap::from([
                ("provider.cluster.x-k8s.io/name".into(), LABEL.into()),
                ("provider.cluster.x-k8s.io/version".into(), version.into()),
            ])),
            annotations: Some(BTreeMap::from([(
                "provider.cluster.x-k8s.io/compressed".into(),
                "true".into(),
            )])),
            ..Default::default()
        },
        data: Some(BTreeMap::from([("metadata".into(), METADATA.into())])),
        binary_data: Some(BTreeMap::from([(
            "components".into(),
            ByteString(gz.finish()?),
        )])),
        ..Default::default()
    };
    Api::<ConfigMap>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &cm)
        .await?;
    Ok(())
}

fn core(version: &str) -> String {
    format!(
        "apiVersion: management.cluster.x-k8s.io/v1alpha1\nkind: CoreProvider\nmetadata:\n  name: cluster-api\n  namespace: {NS}\nspec:\n  version: {version}\n  secretName: vars\n  fetchConfig:\n    selector:\n      matchLabels:\n        provider.cluster.x-k8s.io/name: {LABEL}\n"
    )
}

/// The peak resident memory of process `pid` (VmHWM), in bytes.
fn peak_rss(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))?
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .ok()?;
    Some(kb * 1024)
}

#[tokio::test]
async fn hostile_releases_end_in_a_render_error_within_the_memory_limit() -> TestResult {
    let _serial = capi_test_support::isolated(module_path!()).await;
    let cluster = private_cluster()?;
    cluster.install_crds()?;
    let client = cluster.client().await?;
    cluster.ensure_namespace(NS)?;
    // Node-dense: 4.5 million `- 0` items, 27 MB of text, 40 KB gzipped.
    let mut dense =
        b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: dense}\ndata:\n  list:\n".to_vec();
    dense.extend(b"  - 0\n".repeat(4_500_000));
    release(&client, "v0.2.0", &dense).await?;
    // Expansion: 300 bytes of V grow to 27 MB through nested replacements.
    let bomb = b"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bomb}\ndata:\n  x: ${V//a/${V//a/${V}}}\n";
    release(&client, "v0.3.0", bomb).await?;
    let vars = Secret {
        metadata: ObjectMeta {
            name: Some("vars".into()),
            namespace: Some(NS.into()),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([("V".into(), "a".repeat(300))])),
        ..Default::default()
    };
    Api::<Secret>::namespaced(client.clone(), NS)
        .create(&PostParams::default(), &vars)
        .await?;

    let mut operator = start_operator(
        cluster,
        &["--release-memory-mib", "192", "--config-retry-seconds", "2"],
    )?;
    let pid = operator.pid().ok_or("no operator pid")?;
    let log =
        |e: Box<dyn std::error::Error>, operator: &OperatorProcess| -> Box<dyn std::error::Error> {
            format!("{e}\n--- operator log ---\n{}", operator.logs()).into()
        };
    let key = ("CoreProvider", NS, "cluster-api");
    let mut previous = String::new();
    for (version, says) in [
        (
            "v0.2.0",
            "more than the operator's whole release memory budget",
        ),
        ("v0.3.0", "exceeds"),
    ] {
        apply(cluster, &core(version))?;
        // A render error other than the previous version's.
        let seen = previous.clone();
        let message = wait_for(T, || async {
            let p = provider(&client, key.0, key.1, key.2).await?;
            let c = condition(&p, "ProviderInstalled")?;
            let message = condition_message(&p, "ProviderInstalled");
            let ours = c.get("reason")? == "ComponentsRenderError"
                && c.get("status")? == "False"
                && message != seen;
            ours.then_some(message)
        })
        .await
        .ok_or_else(|| log(format!("{version}: no render error").into(), &operator))?;
        eprintln!("{version}: {message}");
        assert!(operator.running(), "the operator exited at {version}");
        assert_eq!(operator.pid(), Some(pid), "the operator restarted");
        let peak = peak_rss(pid).ok_or("no VmHWM")?;
        eprintln!("{version}: operator peak RSS {} MiB", peak / (1024 * 1024));
        assert!(
            peak < LIMIT,
            "{version}: peak RSS {} MiB, a 256 MiB container would have been killed",
            peak / (1024 * 1024)
        );
        assert!(message.contains(says), "{version}: {message}");
        previous = message;
    }
    operator.kill();
    Ok(())
}
