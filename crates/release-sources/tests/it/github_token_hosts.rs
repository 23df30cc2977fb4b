//! Which GitHub token reaches which host: the operator's own token (shared by every provider)
//! only an API host the operator vouches for, a provider Secret's token that provider's host.
//! A provider's URL names a GitHub Enterprise-shaped host served over TLS by a local server
//! (a private CA, trusted through the provider's HTTP_CA_BUNDLE) that records the
//! `Authorization` header of every request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use capi_fake_remotes::{FakeServer, ReleaseTree, tls::TlsFront};
use capi_operator_api::{FetchConfiguration, ProviderType};
use capi_release_sources::{
    SourceError,
    configmap::{ConfigMapData, ConfigMapReader},
    fetch_config::{ProviderRef, SourceSettings, source_for_provider},
    fetch_release,
};

const GLOBAL: &str = "ghp_operator_wide_token";
const OWN: &str = "ghp_the_providers_own_token";

struct NoConfigMaps;

impl ConfigMapReader for NoConfigMaps {
    async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        Ok(Vec::new())
    }
}

/// A GitHub-shaped server on https://127.0.0.1:PORT holding acme/widget v0.1.0.
struct Enterprise {
    fake: FakeServer,
    port: u16,
    ca: String,
    _front: TlsFront,
    _tree: ReleaseTree,
}

async fn enterprise() -> Enterprise {
    let tree = ReleaseTree::new().unwrap();
    let meta = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contract: v1beta1\n";
    tree.add("w", "v0.1.0", "metadata.yaml", meta).unwrap();
    tree.add(
        "w",
        "v0.1.0",
        "infrastructure-components.yaml",
        "kind: Namespace\napiVersion: v1\nmetadata:\n  name: w\n",
    )
    .unwrap();
    let fake = FakeServer::start(tree.path(), &[("acme/widget", &["w"])])
        .await
        .unwrap();
    let front = TlsFront::start(fake.url().trim_start_matches("http://"))
        .await
        .unwrap();
    Enterprise {
        fake,
        port: front.port(),
        ca: front.ca().to_string(),
        _front: front,
        _tree: tree,
    }
}

/// Fetches v0.1.0 of the provider whose URL is on `e`, with `own` as its Secret's token, and
/// returns the `Authorization` headers `e` received.
async fn fetch_from(e: &Enterprise, own: Option<&str>, hosts: &[String]) -> Vec<Option<String>> {
    let fetch = FetchConfiguration {
        url: Some(format!(
            "https://127.0.0.1:{}/acme/widget/releases/v0.1.0/infrastructure-components.yaml",
            e.port
        )),
        ..FetchConfiguration::default()
    };
    let ca = e.ca.clone();
    let vars = move |k: &str| match k {
        "HTTP_CA_BUNDLE" => Some(ca.clone()),
        "GITHUB_TOKEN" => own.map(str::to_string),
        _ => None,
    };
    let chosen = source_for_provider(
        ProviderRef {
            provider_type: ProviderType::Infrastructure,
            name: "widget",
            namespace: "ns",
        },
        Some(&fetch),
        vars,
        &SourceSettings {
            github_token: Some(GLOBAL),
            github_token_hosts: hosts,
            ..SourceSettings::default()
        },
        |_, _| Some(NoConfigMaps),
    )
    .unwrap();
    let release = fetch_release(&chosen.source, Some("v0.1.0"), &chosen.components_file)
        .await
        .unwrap();
    assert_eq!(release.version, "v0.1.0");
    let seen: Vec<_> = e
        .fake
        .requests()
        .into_iter()
        .map(|r| r.authorization)
        .collect();
    assert!(!seen.is_empty(), "the release came from the TLS server");
    seen
}

#[tokio::test]
async fn the_operators_token_goes_to_no_host_a_provider_names() {
    let e = enterprise().await;
    let seen = fetch_from(&e, None, &[]).await;
    assert!(seen.iter().all(Option::is_none), "{seen:?}");
}

#[tokio::test]
async fn the_operators_token_goes_to_hosts_the_operator_names() {
    let e = enterprise().await;
    let hosts = vec![format!("127.0.0.1:{}", e.port)];
    let seen = fetch_from(&e, None, &hosts).await;
    let want = Some(format!("Bearer {GLOBAL}"));
    assert!(seen.iter().all(|a| *a == want), "{seen:?}");
}

#[tokio::test]
async fn a_providers_own_token_goes_to_its_host_only() {
    let e = enterprise().await;
    let other = enterprise().await;
    let seen = fetch_from(&e, Some(OWN), &[]).await;
    let want = Some(format!("Bearer {OWN}"));
    assert!(seen.iter().all(|a| *a == want), "{seen:?}");
    // The other host heard nothing, and the operator's token went nowhere.
    assert!(other.fake.requests().is_empty());
    let global = format!("Bearer {GLOBAL}");
    assert!(!seen.iter().flatten().any(|a| *a == global));
}
