//! Copying images into a mirror (`copy_image`, behind the plugin's `preload --images --copy`):
//! a multi-platform index from a plain anonymous registry into a TLS registry with Basic
//! authentication and a private certificate authority, each manifest byte for byte (same
//! digests), every blob readable from the copy.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::oci_support::{self, Auth, TempDir, TestRegistry};

use std::time::Duration;

use capi_operator_api::ProviderType;
use capi_release_sources::{
    ReleaseSource,
    http::HttpConfig,
    oci::{
        CopyEnds, OciConfig, OciCredentials, OciReference, OciSource, copy_image, push_artifact,
    },
};
use sha2::{Digest, Sha256};

fn config(ca: Option<Vec<u8>>) -> OciConfig {
    OciConfig {
        http: HttpConfig {
            attempts: 2,
            initial_backoff: Duration::from_millis(10),
            timeout: Duration::from_secs(20),
            ..HttpConfig::default()
        },
        root_certificates_pem: ca.into_iter().collect(),
        ..OciConfig::default()
    }
}

/// Two "platforms" pushed as manifests, then an index listing both at `img:v1`; returns the
/// index digest and the platforms' digests.
async fn seed(reg: &TestRegistry) -> (String, Vec<String>) {
    let anon = OciCredentials::anonymous();
    let mut children = Vec::new();
    for arch in ["amd64", "arm64"] {
        let r = OciReference::parse(&reg.reference(&format!("img:{arch}"))).unwrap();
        let files = vec![(
            "arch.txt".to_string(),
            format!("built for {arch}").into_bytes(),
        )];
        let d = push_artifact(&r, &files, &anon, &config(None))
            .await
            .unwrap();
        let body = reqwest::get(format!("{}/v2/img/manifests/{d}", reg.base_url()))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        children.push((d, body.len(), arch));
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": children.iter().map(|(d, size, arch)| serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": d, "size": size, "platform": {"os": "linux", "architecture": arch}})).collect::<Vec<_>>(),
    });
    let body = serde_json::to_vec(&index).unwrap();
    let put = reqwest::Client::new()
        .put(format!("{}/v2/img/manifests/v1", reg.base_url()))
        .header("content-type", "application/vnd.oci.image.index.v1+json")
        .body(body.clone())
        .send()
        .await
        .unwrap();
    assert!(put.status().is_success(), "{}", put.status());
    (
        format!("sha256:{:x}", Sha256::digest(&body)),
        children.into_iter().map(|(d, ..)| d).collect(),
    )
}

#[tokio::test]
async fn an_index_is_copied_by_digest_into_a_tls_registry_with_auth() {
    let src = TestRegistry::start(Auth::Anonymous, None).await;
    let dir = TempDir::new("mirror-tls");
    let tls = oci_support::make_tls(dir.path());
    let auth = || Auth::Htpasswd {
        user: "robot".into(),
        password: "mirror-pass".into(),
    };
    let dst = TestRegistry::start(auth(), Some(&tls)).await;
    let ca = std::fs::read(&tls.ca_cert).unwrap();
    let (index_digest, children) = seed(&src).await;

    let from = OciReference::parse(&src.reference("img:v1")).unwrap();
    let to = OciReference::parse(&dst.reference("mirror/img:v1")).unwrap();
    let anon = OciCredentials::anonymous();
    let robot = OciCredentials::basic("robot", "mirror-pass");
    let ends = CopyEnds {
        from: &from,
        from_credentials: &anon,
        to: &to,
        to_credentials: &anon,
    };
    let refused = copy_image(&ends, &config(Some(ca.clone()))).await;
    assert!(refused.is_err(), "pushed without credentials");
    let ends = CopyEnds {
        to_credentials: &robot,
        ..ends
    };
    let digest = copy_image(&ends, &config(Some(ca.clone())))
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", dst.log()));
    assert_eq!(digest, index_digest, "the index keeps its digest");

    // Each platform's files read back from the copy, by digest.
    for (child, arch) in children.iter().zip(["amd64", "arm64"]) {
        let r = OciReference::parse(&dst.reference(&format!("mirror/img@{child}"))).unwrap();
        let s = OciSource::for_provider(
            &r,
            ProviderType::Infrastructure,
            "img",
            robot.clone(),
            config(Some(ca.clone())),
        )
        .unwrap();
        let text = s.fetch_file("v1", "arch.txt").await;
        assert_eq!(
            text.map(|b| String::from_utf8_lossy(&b).to_string()).ok(),
            Some(format!("built for {arch}")),
            "{}",
            dst.log()
        );
    }
    // A second copy finds every blob and manifest in place.
    assert_eq!(copy_image(&ends, &config(Some(ca))).await.unwrap(), digest);
}
