//! The OCI release source against a real registry (Debian's `docker-registry`, distribution
//! v2.8, started per test on 127.0.0.1 with storage in a temporary directory): releases are
//! published with `push_artifact` and read back through `ReleaseSource`; anonymous, htpasswd
//! (Basic), token (Bearer) and TLS registries; and a tiny local server for what a healthy
//! registry never does (5xx, 429, pagination, tampered blobs, redirects).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use crate::oci_support;

use std::{
    collections::{BTreeMap, HashMap},
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use capi_operator_api::ProviderType;
use capi_release_sources::{
    ReleaseSource, SourceError, fetch_release,
    http::HttpConfig,
    oci::{
        ARTIFACT_TYPE, FILE_MEDIA_TYPE, OciConfig, OciCredentials, OciReference, OciSource,
        TITLE_ANNOTATION, push_artifact,
    },
};
use oci_support::{Auth, Reply, Request, TempDir, TestRegistry, TinyServer, TokenService};
use sha2::{Digest, Sha256};

const COMPONENTS: &str = "infrastructure-components.yaml";

fn config() -> OciConfig {
    OciConfig {
        http: HttpConfig {
            attempts: 3,
            initial_backoff: Duration::from_millis(10),
            timeout: Duration::from_secs(20),
            ..HttpConfig::default()
        },
        ..OciConfig::default()
    }
}

fn metadata(minor: u64) -> String {
    format!(
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: {minor}\n  contract: v1beta1\n"
    )
}

fn components(version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: sample-system\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: sample-controller-manager\n  namespace: sample-system\n  labels:\n    release: {version}\nspec:\n  selector:\n    matchLabels: {{app: sample}}\n  template:\n    metadata:\n      labels: {{app: sample}}\n    spec:\n      containers:\n      - name: manager\n        image: registry.example/sample:{version}\n"
    )
}

fn release(version: &str, minor: u64) -> Vec<(String, Vec<u8>)> {
    vec![
        ("metadata.yaml".into(), metadata(minor).into_bytes()),
        (COMPONENTS.into(), components(version).into_bytes()),
    ]
}

fn files(list: &[(&str, &str)]) -> Vec<(String, Vec<u8>)> {
    list.iter()
        .map(|(n, c)| (n.to_string(), c.as_bytes().to_vec()))
        .collect()
}

fn digest_of(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

async fn push(
    reg: &TestRegistry,
    repo_tag: &str,
    files: &[(String, Vec<u8>)],
    creds: &OciCredentials,
    config: &OciConfig,
) -> Result<String, SourceError> {
    let r = OciReference::parse(&reg.reference(repo_tag))?;
    push_artifact(&r, files, creds, config).await
}

fn source(reg: &TestRegistry, repo: &str, creds: OciCredentials, config: OciConfig) -> OciSource {
    let r = OciReference::parse(&reg.reference(repo)).unwrap();
    OciSource::for_provider(&r, ProviderType::Infrastructure, "sample", creds, config).unwrap()
}

async fn sorted_versions(s: &OciSource) -> Result<Vec<String>, SourceError> {
    let mut v = s.list_versions().await?;
    v.sort();
    Ok(v)
}

#[tokio::test]
async fn push_then_fetch_by_version_list_and_latest() {
    let reg = TestRegistry::start(Auth::Anonymous, None).await;
    let anon = OciCredentials::anonymous();
    let repo = "capi/infrastructure-sample";
    let mut digests = HashMap::new();
    for (tag, minor) in [
        ("v0.1.0", 1),
        ("v0.2.0", 2),
        ("v0.3.0-rc.1", 3),
        ("latest", 2),
    ] {
        let d = push(
            &reg,
            &format!("{repo}:{tag}"),
            &release(tag, minor),
            &anon,
            &config(),
        )
        .await
        .unwrap_or_else(|e| panic!("push {tag}: {e}\n{}", reg.log()));
        digests.insert(tag, d);
    }

    let src = source(&reg, repo, anon.clone(), config());
    // Tags that are not versions (latest) are not versions.
    assert_eq!(
        sorted_versions(&src).await.unwrap(),
        ["v0.1.0", "v0.2.0", "v0.3.0-rc.1"]
    );

    let r = fetch_release(&src, Some("v0.1.0"), COMPONENTS)
        .await
        .unwrap();
    assert_eq!(r.version, "v0.1.0");
    assert_eq!(r.metadata, metadata(1));
    assert_eq!(r.components, components("v0.1.0"));

    // Latest as clusterctl picks it: releases before pre-releases.
    let latest = fetch_release(&src, None, COMPONENTS).await.unwrap();
    assert_eq!(latest.version, "v0.2.0");
    assert_eq!(latest.components, components("v0.2.0"));

    // What the registry stored is the artifact push_artifact described.
    let http = reqwest::Client::new();
    let resp = http
        .get(format!("{}/v2/{repo}/manifests/v0.1.0", reg.base_url()))
        .header("Accept", "application/vnd.oci.image.manifest.v1+json")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["docker-content-digest"].to_str().unwrap(),
        digests["v0.1.0"]
    );
    let body = resp.bytes().await.unwrap();
    assert_eq!(digest_of(&body), digests["v0.1.0"]);
    let m: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(m["artifactType"], ARTIFACT_TYPE);
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.empty.v1+json"
    );
    assert_eq!(m["config"]["size"], 2);
    let titles: Vec<&str> = m["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| {
            assert_eq!(l["mediaType"], FILE_MEDIA_TYPE);
            l["annotations"][TITLE_ANNOTATION].as_str().unwrap()
        })
        .collect();
    assert_eq!(titles, ["metadata.yaml", COMPONENTS]);

    // Publishing the same files again gives the same digest (blobs already there are kept).
    let again = push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &anon,
        &config(),
    )
    .await
    .unwrap();
    assert_eq!(again, digests["v0.1.0"]);

    // A digest pins the manifest whatever version is asked for.
    let pinned =
        OciReference::parse(&format!("{}@{}", reg.reference(repo), digests["v0.1.0"])).unwrap();
    let by_digest = OciSource::new(&pinned, anon.clone(), config()).unwrap();
    assert_eq!(
        by_digest.fetch_file("v0.1.0", COMPONENTS).await.unwrap(),
        components("v0.1.0").into_bytes()
    );

    // A tag in the reference is the version.
    let tagged = OciReference::parse(&reg.reference(&format!("{repo}:v0.2.0"))).unwrap();
    assert_eq!(tagged.version(Some("v0.1.0")), Some("v0.2.0"));
}

#[tokio::test]
async fn files_are_chosen_by_priority() {
    let reg = TestRegistry::start(Auth::Anonymous, None).await;
    let anon = OciCredentials::anonymous();
    let repo = "capi/prio";
    push(
        &reg,
        &format!("{repo}:v1.0.0"),
        &files(&[
            ("components.yaml", "generic"),
            ("infrastructure-components.yaml", "by type"),
            (
                "infrastructure-sample-v1.0.0-components.yaml",
                "by type, name and version",
            ),
            ("metadata.yaml", "generic metadata"),
            (
                "infrastructure-sample-v1.0.0-metadata.yaml",
                "typed metadata",
            ),
        ]),
        &anon,
        &config(),
    )
    .await
    .unwrap();
    push(
        &reg,
        &format!("{repo}:v1.1.0"),
        &files(&[
            ("components.yaml", "generic"),
            ("infrastructure-components.yaml", "by type"),
            ("metadata.yaml", "generic metadata"),
        ]),
        &anon,
        &config(),
    )
    .await
    .unwrap();
    push(
        &reg,
        &format!("{repo}:v1.2.0"),
        &files(&[
            ("metadata.yaml", "generic metadata"),
            ("components.yaml", "generic"),
        ]),
        &anon,
        &config(),
    )
    .await
    .unwrap();

    let typed = source(&reg, repo, anon.clone(), config());
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    for (version, want_components, want_metadata) in [
        ("v1.0.0", "by type, name and version", "typed metadata"),
        ("v1.1.0", "by type", "generic metadata"),
        ("v1.2.0", "generic", "generic metadata"),
    ] {
        assert_eq!(
            text(typed.fetch_file(version, COMPONENTS).await.unwrap()),
            want_components,
            "{version}"
        );
        assert_eq!(
            text(typed.fetch_file(version, "metadata.yaml").await.unwrap()),
            want_metadata,
            "{version}"
        );
    }

    // Without provider information (or for another provider) only the generic names match.
    let r = OciReference::parse(&reg.reference(repo)).unwrap();
    let plain = OciSource::new(&r, anon.clone(), config()).unwrap();
    assert_eq!(
        text(plain.fetch_file("v1.0.0", COMPONENTS).await.unwrap()),
        "by type"
    );
    assert_eq!(
        text(plain.fetch_file("v1.0.0", "metadata.yaml").await.unwrap()),
        "generic metadata"
    );
    let other =
        OciSource::for_provider(&r, ProviderType::Infrastructure, "other", anon, config()).unwrap();
    assert_eq!(
        text(other.fetch_file("v1.0.0", COMPONENTS).await.unwrap()),
        "by type"
    );
}

#[tokio::test]
async fn missing_tags_repositories_and_files_are_not_found() {
    let reg = TestRegistry::start(Auth::Anonymous, None).await;
    let anon = OciCredentials::anonymous();
    push(
        &reg,
        "capi/partial:v0.1.0",
        &files(&[("metadata.yaml", &metadata(1))]),
        &anon,
        &config(),
    )
    .await
    .unwrap();
    let src = source(&reg, "capi/partial", anon.clone(), config());

    let e = src.fetch_file("v9.9.9", "metadata.yaml").await.unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFound(m) if m.contains("tag v9.9.9")),
        "{e:?}"
    );
    // A missing version: the message names the tags the repository has.
    let e = fetch_release(&src, Some("v9.9.9"), COMPONENTS)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFoundAmong { what, found } if what.contains("tag v9.9.9") && found == "the source lists v0.1.0"),
        "{e:?}"
    );

    // The artifact exists but has no components file: the files it holds are named.
    let e = src.fetch_file("v0.1.0", COMPONENTS).await.unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFoundAmong { what, found } if what.contains(COMPONENTS) && what.contains("components.yaml") && what.contains("artifact") && found == "the artifact holds metadata.yaml"),
        "{e:?}"
    );
    let e = fetch_release(&src, Some("v0.1.0"), COMPONENTS)
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
    // A file that is not part of the artifact is not found either.
    let e = src
        .fetch_file("v0.1.0", "cluster-template.yaml")
        .await
        .unwrap_err();
    assert!(e.is_not_found(), "{e:?}");

    let missing = source(&reg, "capi/nothing-here", anon, config());
    let e = missing.list_versions().await.unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e:?}");
    let e = fetch_release(&missing, None, COMPONENTS).await.unwrap_err();
    assert!(e.is_not_found(), "{e:?}");
}

fn assert_hidden(secret: &str, shown: &[String]) {
    for s in shown {
        assert!(!s.contains(secret), "a credential leaked into {s:?}");
    }
}

/// Distribution 2.8 accepts htpasswd authentication over plain HTTP (no TLS needed).
#[tokio::test]
async fn htpasswd_registry_needs_the_right_credentials() {
    let password = "s3cret-Pa55word";
    let reg = TestRegistry::start(
        Auth::Htpasswd {
            user: "robot".into(),
            password: password.into(),
        },
        None,
    )
    .await;
    let repo = "capi/private";
    let anon = OciCredentials::anonymous();
    let wrong = OciCredentials::basic("robot", "not-the-password");
    let secret: BTreeMap<String, String> = [
        ("OCI_USERNAME", "robot"),
        ("OCI_PASSWORD", password),
        ("OTHER", "x"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect();
    let right = OciCredentials::from_lookup(|k| secret.get(k).cloned());

    let e = push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &anon,
        &config(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
    let e = push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &wrong,
        &config(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
    push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &right,
        &config(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", reg.log()));

    let src = source(&reg, repo, right.clone(), config());
    assert_eq!(sorted_versions(&src).await.unwrap(), ["v0.1.0"]);
    let r = fetch_release(&src, None, COMPONENTS).await.unwrap();
    assert_eq!(r.components, components("v0.1.0"));

    let nobody = source(&reg, repo, anon, config());
    let e1 = nobody.list_versions().await.unwrap_err();
    assert!(matches!(e1, SourceError::Unauthorized(_)), "{e1:?}");
    let e2 = nobody
        .fetch_file("v0.1.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e2, SourceError::Unauthorized(_)), "{e2:?}");
    let intruder = source(&reg, repo, wrong, config());
    let e3 = intruder
        .fetch_file("v0.1.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e3, SourceError::Unauthorized(_)), "{e3:?}");

    assert_hidden(
        password,
        &[
            format!("{right:?}"),
            format!("{src:?}"),
            format!("{e1} {e1:?} {e2} {e2:?} {e3} {e3:?}"),
        ],
    );
    assert_hidden("not-the-password", &[format!("{intruder:?} {e3}")]);
}

/// Distribution's `auth: token`: the registry answers 401 with a Bearer challenge naming the
/// token service started here, which signs JWTs with a key the registry trusts.
#[tokio::test]
async fn token_registry_uses_the_bearer_flow() {
    let dir = TempDir::new("token");
    let password = "t0ken-Pa55word";
    let ts = TokenService::start(dir.path(), "robot", password).await;
    let reg = TestRegistry::start(ts.registry_auth(), None).await;
    let repo = "capi/tokened";
    let right = OciCredentials::basic("robot", password);

    let e = push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &OciCredentials::anonymous(),
        &config(),
    )
    .await
    .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
    push(
        &reg,
        &format!("{repo}:v0.1.0"),
        &release("v0.1.0", 1),
        &right,
        &config(),
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", reg.log()));
    push(
        &reg,
        &format!("{repo}:v0.2.0"),
        &release("v0.2.0", 2),
        &right,
        &config(),
    )
    .await
    .unwrap();

    let src = source(&reg, repo, right.clone(), config());
    assert_eq!(sorted_versions(&src).await.unwrap(), ["v0.1.0", "v0.2.0"]);
    let r = fetch_release(&src, None, COMPONENTS).await.unwrap();
    assert_eq!(
        (r.version.as_str(), r.metadata.as_str()),
        ("v0.2.0", metadata(2).as_str())
    );
    // The pull token is reused for later requests of the same source.
    let issued = ts.issued.load(Ordering::SeqCst);
    assert!(issued > 0, "the registry asked for bearer tokens");
    src.fetch_file("v0.1.0", COMPONENTS).await.unwrap();
    assert_eq!(ts.issued.load(Ordering::SeqCst), issued);

    // Anonymous users get a token granting nothing; a wrong password gets no token.
    for creds in [
        OciCredentials::anonymous(),
        OciCredentials::basic("robot", "wrong"),
    ] {
        let s = source(&reg, repo, creds, config());
        let e = s.fetch_file("v0.1.0", "metadata.yaml").await.unwrap_err();
        assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
        assert_hidden(password, &[format!("{e} {e:?} {s:?}")]);
    }

    // OCI_ACCESS_TOKEN goes to the registry as it is.
    let token = reqwest::Client::new()
        .get(format!(
            "{}/token?service={}&scope=repository:{repo}:pull",
            ts.server.url, ts.service
        ))
        .basic_auth("robot", Some(password))
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let token: serde_json::Value = serde_json::from_slice(&token).unwrap();
    let token = token["token"].as_str().unwrap().to_string();
    let lookup: HashMap<&str, String> = HashMap::from([("OCI_ACCESS_TOKEN", token.clone())]);
    let with_token = source(
        &reg,
        repo,
        OciCredentials::from_lookup(|k| lookup.get(k).cloned()),
        config(),
    );
    let issued = ts.issued.load(Ordering::SeqCst);
    assert_eq!(
        with_token.fetch_file("v0.1.0", COMPONENTS).await.unwrap(),
        components("v0.1.0").into_bytes()
    );
    assert_eq!(
        ts.issued.load(Ordering::SeqCst),
        issued,
        "an access token needs no token service"
    );
    assert_hidden(&token, &[format!("{with_token:?}")]);
    // OCI_REFRESH_TOKEN is exchanged at the token service (OAuth2 refresh grant).
    let refresh = source(
        &reg,
        repo,
        OciCredentials::anonymous().with_refresh_token(ts.refresh_token.clone()),
        config(),
    );
    assert_eq!(
        refresh.fetch_file("v0.2.0", "metadata.yaml").await.unwrap(),
        metadata(2).into_bytes()
    );
    let stale = source(
        &reg,
        repo,
        OciCredentials::anonymous().with_refresh_token("expired"),
        config(),
    );
    let e = stale
        .fetch_file("v0.2.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
    assert_hidden(&ts.refresh_token, &[format!("{refresh:?} {e} {e:?}")]);

    let bogus = source(
        &reg,
        repo,
        OciCredentials::access_token("not-a-jwt"),
        config(),
    );
    let e = bogus.fetch_file("v0.1.0", COMPONENTS).await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
}

/// A registry serving HTTPS with a certificate from a private authority: refused until that
/// authority is configured as a root certificate.
#[tokio::test]
async fn tls_registry_with_a_private_certificate_authority() {
    let dir = TempDir::new("tls");
    let tls = oci_support::make_tls(dir.path());
    let reg = TestRegistry::start(Auth::Anonymous, Some(&tls)).await;
    let reference = reg.reference("capi/secure:v0.1.0");
    assert!(!reference.starts_with("http"), "{reference}");
    let anon = OciCredentials::anonymous();

    let e = push(
        &reg,
        "capi/secure:v0.1.0",
        &release("v0.1.0", 1),
        &anon,
        &config(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("certificate")),
        "{e:?}"
    );

    let trusted = OciConfig {
        root_certificates_pem: vec![std::fs::read(&tls.ca_cert).unwrap()],
        ..config()
    };
    push(
        &reg,
        "capi/secure:v0.1.0",
        &release("v0.1.0", 1),
        &anon,
        &trusted,
    )
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", reg.log()));
    let src = source(&reg, "capi/secure", anon, trusted);
    let r = fetch_release(&src, Some("v0.1.0"), COMPONENTS)
        .await
        .unwrap();
    assert_eq!(r.components, components("v0.1.0"));
}

#[tokio::test]
async fn size_limits_are_enforced() {
    let reg = TestRegistry::start(Auth::Anonymous, None).await;
    let anon = OciCredentials::anonymous();
    let big = "#".repeat(64 * 1024);
    push(
        &reg,
        "capi/big:v0.1.0",
        &files(&[("metadata.yaml", &metadata(1)), (COMPONENTS, &big)]),
        &anon,
        &config(),
    )
    .await
    .unwrap();

    let mut small_blobs = config();
    small_blobs.http.max_bytes = 16 * 1024;
    let src = source(&reg, "capi/big", anon.clone(), small_blobs);
    let e = src.fetch_file("v0.1.0", COMPONENTS).await.unwrap_err();
    assert!(
        matches!(&e, SourceError::TooLarge { limit, .. } if *limit == 16 * 1024),
        "{e:?}"
    );
    assert_eq!(
        src.fetch_file("v0.1.0", "metadata.yaml").await.unwrap(),
        metadata(1).into_bytes()
    );

    let small_manifests = OciConfig {
        max_manifest_bytes: 100,
        ..config()
    };
    let src = source(&reg, "capi/big", anon, small_manifests);
    let e = src.fetch_file("v0.1.0", "metadata.yaml").await.unwrap_err();
    assert!(
        matches!(&e, SourceError::TooLarge { limit: 100, .. }),
        "{e:?}"
    );
}

// -------------------------------------------------------------------------------------------
// Behaviour a healthy registry does not show, from a scripted server.

struct Scripted {
    blobs: HashMap<String, Vec<u8>>,
    manifests: HashMap<String, (String, Vec<u8>)>,
    hits: Arc<std::sync::Mutex<HashMap<String, usize>>>,
}

fn layer(title: &str, content: &[u8], size: Option<usize>) -> serde_json::Value {
    serde_json::json!({
        "mediaType": "application/vnd.cluster-api.file",
        "digest": digest_of(content),
        "size": size.unwrap_or(content.len()),
        "annotations": {"org.opencontainers.image.title": title},
    })
}

fn scripted() -> Scripted {
    let mut blobs = HashMap::new();
    let mut manifests = HashMap::new();
    for c in [&b"good"[..], b"moved", b"away"] {
        blobs.insert(digest_of(c), c.to_vec());
    }
    // Served in place of "expected": a tampered blob.
    blobs.insert(digest_of(b"expected"), b"tampered".to_vec());
    let huge = vec![b'x'; 100 * 1024];
    blobs.insert(digest_of(&huge), huge.clone());
    let oci = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": digest_of(b"{}"), "size": 2},
        "layers": [
            layer("good.yaml", b"good", None),
            layer("bad.yaml", b"expected", None),
            layer("moved.yaml", b"moved", None),
            layer("away.yaml", b"away", None),
            layer("liar.yaml", &huge, Some(10)),
        ],
    });
    let oci_bytes = serde_json::to_vec(&oci).unwrap();
    let oci_digest = digest_of(&oci_bytes);
    manifests.insert(
        "art/v1".into(),
        (
            "application/vnd.oci.image.manifest.v1+json".into(),
            oci_bytes.clone(),
        ),
    );
    manifests.insert(
        format!("idx/{oci_digest}"),
        (
            "application/vnd.oci.image.manifest.v1+json".into(),
            oci_bytes,
        ),
    );
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": oci_digest, "size": 1}],
    });
    manifests.insert(
        "idx/v1".into(),
        (
            "application/vnd.oci.image.index.v1+json".into(),
            serde_json::to_vec(&index).unwrap(),
        ),
    );
    // Docker v2 manifests (no mediaType field; the header says what it is).
    let docker = serde_json::json!({
        "schemaVersion": 2,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "digest": digest_of(b"{}"), "size": 2},
        "layers": [layer("good.yaml", b"good", None)],
    });
    manifests.insert(
        "dock/v1".into(),
        (
            "application/vnd.docker.distribution.manifest.v2+json".into(),
            serde_json::to_vec(&docker).unwrap(),
        ),
    );
    Scripted {
        blobs,
        manifests,
        hits: Arc::default(),
    }
}

fn answer(s: &Scripted, req: &Request) -> Reply {
    let path = req.path().to_string();
    let hit = {
        let mut h = s.hits.lock().unwrap();
        let n = h.entry(path.clone()).or_default();
        *n += 1;
        *n
    };
    let tags = |t: &[&str]| Reply::json(200, &serde_json::json!({"name": "x", "tags": t}));
    match path.as_str() {
        "/v2/flaky/tags/list" if hit <= 2 => Reply::status(503),
        "/v2/flaky/tags/list" => tags(&["v0.1.0"]),
        "/v2/down/tags/list" => Reply::status(502),
        "/v2/limited/tags/list" => Reply::status(429),
        "/v2/locked/tags/list" => Reply::status(401),
        "/v2/paged/tags/list" => match req.query("last").first().map(String::as_str) {
            None => tags(&["v0.1.0"]).header(
                "Link",
                "</v2/paged/tags/list?last=v0.1.0&n=1>; rel=\"next\"",
            ),
            Some("v0.1.0") => tags(&["v0.2.0", "latest"]),
            Some(_) => Reply::status(400),
        },
        "/v2/lie/manifests/v1" => {
            let (ct, body) = &s.manifests["art/v1"];
            Reply::status(200)
                .header("Content-Type", ct)
                .header("Docker-Content-Digest", &digest_of(b"something else"))
                .body(body.clone())
        }
        p if p.starts_with("/v2/") && p.contains("/manifests/") => {
            let key = p.trim_start_matches("/v2/").replace("/manifests/", "/");
            match s.manifests.get(&key) {
                Some((ct, body)) => Reply::status(200)
                    .header("Content-Type", ct)
                    .body(body.clone()),
                None => Reply::status(404),
            }
        }
        p if p.starts_with("/v2/") && p.contains("/blobs/") => {
            let digest = p.rsplit('/').next().unwrap_or_default();
            if digest == digest_of(b"moved") && !req.target.contains("moved=1") {
                return Reply::status(307).header("Location", &format!("{p}?moved=1"));
            }
            if digest == digest_of(b"away") {
                return Reply::status(307).header("Location", &format!("http://localhost:1{p}"));
            }
            match s.blobs.get(digest) {
                Some(b) => Reply::status(200).body(b.clone()),
                None => Reply::status(404),
            }
        }
        _ => Reply::status(404),
    }
}

#[tokio::test]
async fn retries_rate_limits_pagination_and_tampering() {
    let s = Arc::new(scripted());
    let hits = s.hits.clone();
    let server = TinyServer::start({
        let s = s.clone();
        move |req| answer(&s, &req)
    })
    .await;
    let anon = OciCredentials::anonymous();
    let src = |repo: &str, config: OciConfig| {
        let r = OciReference::parse(&format!("http://{}/{repo}", server.addr)).unwrap();
        OciSource::new(&r, anon.clone(), config).unwrap()
    };
    let count = |p: &str| hits.lock().unwrap().get(p).copied().unwrap_or(0);

    // Two 503s, then an answer: retried with backoff.
    assert_eq!(
        src("flaky", config()).list_versions().await.unwrap(),
        ["v0.1.0"]
    );
    assert_eq!(count("/v2/flaky/tags/list"), 3);
    // Always failing: transient, after the configured attempts.
    let e = src("down", config()).list_versions().await.unwrap_err();
    assert!(
        e.is_transient() && matches!(e, SourceError::Transient { .. }),
        "{e:?}"
    );
    assert_eq!(count("/v2/down/tags/list"), 3);
    // Rate limits are not hammered.
    let e = src("limited", config()).list_versions().await.unwrap_err();
    assert!(matches!(e, SourceError::RateLimited(_)), "{e:?}");
    assert_eq!(count("/v2/limited/tags/list"), 1);
    let e = src("locked", config()).list_versions().await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e:?}");
    // Link pagination (relative links), non-version tags dropped.
    assert_eq!(
        src("paged", config()).list_versions().await.unwrap(),
        ["v0.1.0", "v0.2.0"]
    );

    let art = src("art", config());
    assert_eq!(art.fetch_file("v1", "good.yaml").await.unwrap(), b"good");
    let e = art.fetch_file("v1", "bad.yaml").await.unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("digest")),
        "{e:?}"
    );
    // Redirects within the registry are followed, elsewhere refused.
    assert_eq!(art.fetch_file("v1", "moved.yaml").await.unwrap(), b"moved");
    let e = art.fetch_file("v1", "away.yaml").await.unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("refused")),
        "{e:?}"
    );
    // A layer lying about its size is cut off at the limit.
    let mut small = config();
    small.http.max_bytes = 1024;
    let e = src("art", small)
        .fetch_file("v1", "liar.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::TooLarge { .. }), "{e:?}");
    // The manifest is read once per tag.
    let before = count("/v2/art/manifests/v1");
    art.fetch_file("v1", "good.yaml").await.unwrap();
    assert_eq!(count("/v2/art/manifests/v1"), before);

    // An index leads to its first manifest; Docker v2 manifests work too.
    assert_eq!(
        src("idx", config())
            .fetch_file("v1", "good.yaml")
            .await
            .unwrap(),
        b"good"
    );
    assert_eq!(
        src("dock", config())
            .fetch_file("v1", "good.yaml")
            .await
            .unwrap(),
        b"good"
    );
    // A manifest whose announced digest differs from its content is refused.
    let e = src("lie", config())
        .fetch_file("v1", "good.yaml")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("digest")),
        "{e:?}"
    );
    let e = src("art", config())
        .fetch_file("v2", "good.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e:?}");
}
