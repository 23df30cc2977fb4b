//! Which GitHub token reaches which host: the operator's own token (shared by every provider)
//! only an API host the operator vouches for, a provider Secret's token that provider's host.
//! A provider's URL names a GitHub Enterprise-shaped host served over TLS by a local server
//! (a private CA, trusted through the provider's HTTP_CA_BUNDLE) that records the
//! `Authorization` header of every request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{path::Path, process::Command, sync::Arc};

use capi_fake_remotes::{FakeServer, ReleaseTree};
use capi_operator_api::{FetchConfiguration, ProviderType};
use capi_release_sources::{
    SourceError,
    configmap::{ConfigMapData, ConfigMapReader},
    fetch_config::{ProviderRef, SourceSettings, source_for_provider},
    fetch_release,
};
use tokio::net::TcpListener;
use tokio_rustls::{
    TlsAcceptor,
    rustls::{
        ServerConfig,
        pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
    },
};

const GLOBAL: &str = "ghp_operator_wide_token";
const OWN: &str = "ghp_the_providers_own_token";

struct NoConfigMaps;

impl ConfigMapReader for NoConfigMaps {
    async fn list(&self) -> Result<Vec<ConfigMapData>, SourceError> {
        Ok(Vec::new())
    }
}

fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(out.status.success(), "{args:?}: {out:?}");
}

/// A private CA (PEM) and a certificate for 127.0.0.1 it signed, with its key, in `dir`.
fn certificates(dir: &Path) -> String {
    openssl(
        &[
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "2",
            "-keyout",
            "ca.key",
            "-out",
            "ca.crt",
            "-subj",
            "/CN=token-hosts-ca",
        ],
        dir,
    );
    openssl(
        &[
            "req",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-keyout",
            "tls.key",
            "-out",
            "tls.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
        dir,
    );
    std::fs::write(
        dir.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        &[
            "x509",
            "-req",
            "-days",
            "2",
            "-set_serial",
            "2",
            "-in",
            "tls.csr",
            "-CA",
            "ca.crt",
            "-CAkey",
            "ca.key",
            "-extfile",
            "ext.cnf",
            "-out",
            "tls.crt",
        ],
        dir,
    );
    std::fs::read_to_string(dir.join("ca.crt")).unwrap()
}

/// Terminates TLS on an ephemeral 127.0.0.1 port and passes the bytes on to `backend`
/// (`host:port`), the plain-HTTP fake GitHub, which records each request. Returns the port.
async fn tls_front(dir: &Path, backend: String) -> u16 {
    let certs = CertificateDer::pem_file_iter(dir.join("tls.crt"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(dir.join("tls.key")).unwrap();
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, backend) = (acceptor.clone(), backend.clone());
            tokio::spawn(async move {
                let Ok(mut tls) = acceptor.accept(tcp).await else {
                    return;
                };
                if let Ok(mut plain) = tokio::net::TcpStream::connect(&backend).await {
                    let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                }
            });
        }
    });
    port
}

/// A GitHub-shaped server on https://127.0.0.1:PORT holding acme/widget v0.1.0.
struct Enterprise {
    fake: FakeServer,
    port: u16,
    ca: String,
    _tree: ReleaseTree,
    _dir: tempdir::Dir,
}

mod tempdir {
    /// A directory removed when dropped.
    pub struct Dir(pub std::path::PathBuf);

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

async fn enterprise(label: &str) -> Enterprise {
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
    let dir = std::env::temp_dir().join(format!("token-hosts-{label}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = certificates(&dir);
    let backend = fake.url().trim_start_matches("http://").to_string();
    let port = tls_front(&dir, backend).await;
    Enterprise {
        fake,
        port,
        ca,
        _tree: tree,
        _dir: tempdir::Dir(dir),
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
    let e = enterprise("unnamed").await;
    let seen = fetch_from(&e, None, &[]).await;
    assert!(seen.iter().all(Option::is_none), "{seen:?}");
}

#[tokio::test]
async fn the_operators_token_goes_to_hosts_the_operator_names() {
    let e = enterprise("named").await;
    let hosts = vec![format!("127.0.0.1:{}", e.port)];
    let seen = fetch_from(&e, None, &hosts).await;
    let want = Some(format!("Bearer {GLOBAL}"));
    assert!(seen.iter().all(|a| *a == want), "{seen:?}");
}

#[tokio::test]
async fn a_providers_own_token_goes_to_its_host_only() {
    let e = enterprise("own").await;
    let other = enterprise("other").await;
    let seen = fetch_from(&e, Some(OWN), &[]).await;
    let want = Some(format!("Bearer {OWN}"));
    assert!(seen.iter().all(|a| *a == want), "{seen:?}");
    // The other host heard nothing, and the operator's token went nowhere.
    assert!(other.fake.requests().is_empty());
    let global = format!("Bearer {GLOBAL}");
    assert!(!seen.iter().flatten().any(|a| *a == global));
}
