//! The GitHub release source against a local server speaking GitHub's releases API
//! (capi_test_support::fake_github), with the project's sample releases: pagination, drafts
//! and pre-releases, "latest" as clusterctl picks it, 404, retries, rate limits, tokens,
//! redirects and size limits.

use std::{sync::atomic::Ordering, time::Duration};

use capi_components::source::{
    ReleaseSource, SourceError, fetch_release,
    github::{GitHubSource, GitHubUrl},
    http::HttpConfig,
};
use capi_test_support::{fake_github::FakeGitHub, workspace_root};

fn config() -> HttpConfig {
    HttpConfig {
        attempts: 3,
        initial_backoff: Duration::from_millis(10),
        timeout: Duration::from_secs(5),
        ..HttpConfig::default()
    }
}

async fn server() -> FakeGitHub {
    let dir = workspace_root().join("examples/sample-providers");
    FakeGitHub::start(
        &dir,
        &[("acme/sample", &["sample-core", "sample-bootstrap"])],
    )
    .await
    .expect("server")
}

fn source(s: &FakeGitHub, token: Option<&str>, cfg: HttpConfig) -> GitHubSource {
    GitHubSource::new(&s.url, "acme", "sample", token.map(str::to_string), cfg).expect("source")
}

#[tokio::test]
async fn lists_every_page_without_drafts() {
    let s = server().await;
    s.knobs.page_size.store(1, Ordering::SeqCst);
    if let Ok(mut e) = s.knobs.extra_releases.lock() {
        e.push(("v0.3.0-rc.1".into(), false, true));
        e.push(("v9.0.0".into(), true, false));
        e.push(("not-a-version".into(), false, false));
    }
    let mut v = source(&s, None, config()).list_versions().await.unwrap();
    v.sort();
    assert_eq!(v, vec!["v0.1.0", "v0.2.0", "v0.3.0-rc.1"]);
    assert!(s.count("page=3") >= 1, "pagination not followed");
}

#[tokio::test]
async fn latest_skips_releases_without_metadata_and_prereleases() {
    let s = server().await;
    if let Ok(mut e) = s.knobs.extra_releases.lock() {
        e.push(("v0.3.0".into(), false, false));
        e.push(("v0.4.0-rc.0".into(), false, true));
    }
    let r = fetch_release(&source(&s, None, config()), None, "core-components.yaml")
        .await
        .unwrap();
    assert_eq!(r.version, "v0.2.0");
    assert!(r.metadata.contains("releaseSeries"));
    assert!(r.components.contains("sample-core-controller-manager"));
    // One release lookup serves metadata and components of a version.
    assert_eq!(s.count("/releases/tags/v0.2.0"), 1);
}

#[tokio::test]
async fn missing_versions_and_files_are_not_found() {
    let s = server().await;
    let src = source(&s, None, config());
    let e = fetch_release(&src, Some("v9.9.9"), "core-components.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e}");
    let e = src
        .fetch_file("v0.2.0", "ipam-components.yaml")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFound(m) if m.contains("ipam-components.yaml")),
        "{e}"
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_as_transient() {
    let s = server().await;
    s.knobs.fail_next.store(2, Ordering::SeqCst);
    let src = source(&s, None, config());
    assert!(src.fetch_file("v0.1.0", "metadata.yaml").await.is_ok());
    s.knobs.fail_next.store(10, Ordering::SeqCst);
    let e = source(&s, None, config())
        .fetch_file("v0.1.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(e.is_transient(), "{e}");
    assert!(matches!(e, SourceError::Transient { .. }));
}

#[tokio::test]
async fn rate_limits_are_named() {
    let s = server().await;
    s.knobs.rate_limit_next.store(1, Ordering::SeqCst);
    let e = source(&s, None, config())
        .list_versions()
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::RateLimited(_)), "{e}");
    assert!(e.to_string().contains("GITHUB_TOKEN"));
}

#[tokio::test]
async fn tokens_are_sent_and_never_shown() {
    let s = server().await;
    if let Ok(mut t) = s.knobs.token.lock() {
        *t = Some("s3cret-token".into());
    }
    assert!(
        source(&s, Some("s3cret-token"), config())
            .list_versions()
            .await
            .is_ok()
    );
    let wrong = source(&s, Some("wrong-token"), config());
    let e = wrong.list_versions().await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");
    assert!(!e.to_string().contains("wrong-token"));
    assert!(!format!("{wrong:?}").contains("wrong-token"));
}

#[tokio::test]
async fn redirects_only_to_allowed_hosts() {
    let s = server().await;
    let port = s.url.rsplit(':').next().unwrap_or("0").to_string();
    // The same server under another host name: followed only when that host is allowed.
    if let Ok(mut r) = s.knobs.redirect_assets_to.lock() {
        *r = Some(format!("http://localhost:{port}"));
    }
    let e = source(&s, None, config())
        .fetch_file("v0.2.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("refused")),
        "{e}"
    );
    let mut cfg = config();
    cfg.redirect_hosts.push("localhost".into());
    let body = source(&s, None, cfg)
        .fetch_file("v0.2.0", "metadata.yaml")
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&body).contains("releaseSeries"));
}

#[tokio::test]
async fn oversized_downloads_are_refused() {
    let s = server().await;
    let mut cfg = config();
    cfg.max_bytes = 64;
    let e = source(&s, None, cfg)
        .fetch_file("v0.2.0", "core-components.yaml")
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::TooLarge { .. }), "{e}");
}

#[test]
fn urls_of_the_specification_parse() {
    let u = GitHubUrl::parse(
        "https://github.com/myorg/awesome-azure-provider/releases/latest/infrastructure-components.yaml",
    )
    .unwrap();
    assert_eq!(
        (u.owner.as_str(), u.repo.as_str(), u.version),
        ("myorg", "awesome-azure-provider", None)
    );
}
