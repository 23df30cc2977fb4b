//! The GitHub release source against a local server speaking GitHub's releases API
//! (`capi-fake-remotes`), with small releases written by each test: pagination, drafts and
//! pre-releases, "latest" as clusterctl chooses it, missing releases and assets, retries,
//! timeouts, rate limits, tokens, redirects, size limits and URL parsing.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capi_fake_remotes::{FakeServer, HostKind, OversizedBody, ReleaseTree};
use capi_release_sources::{
    ReleaseSource, SourceError, fetch_release,
    github::{GITHUB_API, GitHubSource, GitHubUrl},
    http::HttpConfig,
};

const REPO: &str = "acme/widget";
const LABEL: &str = "core-widget";
const COMPONENTS: &str = "core-components.yaml";

fn metadata(minors: &[u64]) -> String {
    let mut m = String::from(
        "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n",
    );
    for minor in minors {
        m.push_str(&format!(
            "- major: 0\n  minor: {minor}\n  contract: v1beta1\n"
        ));
    }
    m
}

fn components(version: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: widget-system\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: widget-controller-manager\n  namespace: widget-system\n  labels: {{release: \"{version}\"}}\n"
    )
}

/// Releases v0.1.0, v0.2.0, v0.2.1, v0.3.0-rc.1 (complete) and v0.4.0 (components only, no
/// metadata.yaml: the newest release, which "latest" must skip).
fn tree() -> ReleaseTree {
    let t = ReleaseTree::new().expect("tree");
    for v in ["v0.1.0", "v0.2.0", "v0.2.1", "v0.3.0-rc.1"] {
        t.add(LABEL, v, "metadata.yaml", metadata(&[1, 2, 3]))
            .expect("write");
        t.add(LABEL, v, COMPONENTS, components(v)).expect("write");
    }
    t.add(LABEL, "v0.4.0", COMPONENTS, components("v0.4.0"))
        .expect("write");
    t
}

async fn server(t: &ReleaseTree) -> FakeServer {
    FakeServer::start(t.path(), &[(REPO, &[LABEL])])
        .await
        .expect("server")
}

fn config() -> HttpConfig {
    HttpConfig {
        attempts: 3,
        initial_backoff: Duration::from_millis(10),
        timeout: Duration::from_secs(5),
        ..HttpConfig::default()
    }
}

fn source(s: &FakeServer, token: Option<&str>, cfg: HttpConfig) -> GitHubSource {
    GitHubSource::new(s.url(), "acme", "widget", token.map(str::to_string), cfg).expect("source")
}

fn sorted(mut v: Vec<String>) -> Vec<String> {
    v.sort();
    v
}

#[tokio::test]
async fn lists_every_page_without_drafts_or_non_versions() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().page_size(2);
    s.knobs().set_release(REPO, "v9.0.0", true, false);
    s.knobs().set_release(REPO, "v0.5.0-beta.1", false, true);
    s.knobs().set_release(REPO, "nightly", false, false);
    let versions = source(&s, None, config()).list_versions().await.unwrap();
    assert_eq!(
        sorted(versions),
        [
            "v0.1.0",
            "v0.2.0",
            "v0.2.1",
            "v0.3.0-rc.1",
            "v0.4.0",
            "v0.5.0-beta.1"
        ]
    );
    // 8 releases listed 2 per page: every one of the 4 pages read, none twice.
    let pages: Vec<String> = s
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("/releases?"))
        .map(|r| r.target)
        .collect();
    assert_eq!(pages.len(), 4, "{pages:?}");
    assert!(pages[0].ends_with("/repos/acme/widget/releases?per_page=100"));
    assert!(pages[3].ends_with("page=4"), "{pages:?}");
}

#[tokio::test]
async fn latest_skips_prereleases_and_releases_without_metadata() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().set_release(REPO, "v0.5.0-beta.1", false, true);
    let r = fetch_release(&source(&s, None, config()), None, COMPONENTS)
        .await
        .unwrap();
    // v0.4.0 is newer but has no metadata.yaml; the pre-releases lose to any release.
    assert_eq!(r.version, "v0.2.1");
    assert_eq!(r.metadata, metadata(&[1, 2, 3]));
    assert_eq!(r.components, components("v0.2.1"));
    // The listing carries the assets: no per-release lookup, two downloads.
    assert_eq!(s.count("/releases/tags/"), 0);
    assert_eq!(s.count("/releases/assets/"), 2);
}

#[tokio::test]
async fn latest_is_the_newest_prerelease_when_there_is_no_release() {
    let t = ReleaseTree::new().unwrap();
    for v in ["v1.0.0-alpha.1", "v1.0.0-beta.0", "v0.9.0-rc.2"] {
        t.add(LABEL, v, "metadata.yaml", metadata(&[9])).unwrap();
        t.add(LABEL, v, COMPONENTS, components(v)).unwrap();
    }
    let s = server(&t).await;
    let r = fetch_release(&source(&s, None, config()), None, COMPONENTS)
        .await
        .unwrap();
    assert_eq!(r.version, "v1.0.0-beta.0");
}

#[tokio::test]
async fn no_release_with_metadata_among_the_candidates_is_not_found() {
    let t = ReleaseTree::new().unwrap();
    t.add(LABEL, "v1.0.0", COMPONENTS, components("v1.0.0"))
        .unwrap();
    let s = server(&t).await;
    let e = fetch_release(&source(&s, None, config()), None, COMPONENTS)
        .await
        .unwrap_err();
    // The versions looked at are named.
    assert!(
        matches!(&e, SourceError::NotFoundAmong { what, found } if what == "a release with metadata.yaml" && found == "the source lists v1.0.0"),
        "{e}"
    );
}

#[tokio::test]
async fn a_pinned_version_costs_one_release_lookup() {
    let t = tree();
    let s = server(&t).await;
    let r = fetch_release(&source(&s, None, config()), Some("v0.2.0"), COMPONENTS)
        .await
        .unwrap();
    assert_eq!(
        (r.version.as_str(), r.components),
        ("v0.2.0", components("v0.2.0"))
    );
    assert_eq!(s.count("/releases/tags/v0.2.0"), 1);
    let downloads: Vec<_> = s
        .requests()
        .into_iter()
        .filter(|r| r.target.contains("/releases/assets/"))
        .collect();
    assert_eq!(downloads.len(), 2);
    assert!(
        downloads
            .iter()
            .all(|r| r.accept.as_deref() == Some("application/octet-stream")),
        "{downloads:?}"
    );
}

#[tokio::test]
async fn missing_releases_and_assets_are_not_found() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().set_release(REPO, "v0.2.1", true, false);
    let src = source(&s, None, config());
    let e = fetch_release(&src, Some("v9.9.9"), COMPONENTS)
        .await
        .unwrap_err();
    // The message names the releases the repository has (newest first, no draft).
    let SourceError::NotFoundAmong { what, found } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(what, "release v9.9.9 of acme/widget");
    assert!(found.starts_with("the source lists v0.4.0, "), "{found}");
    assert!(
        found.contains("v0.2.0") && !found.contains("v0.2.1"),
        "{found}"
    );
    let e = src
        .fetch_file("v0.2.0", "ipam-components.yaml")
        .await
        .unwrap_err();
    // A missing file of a release: the release's assets are named.
    let SourceError::NotFoundAmong { what, found } = &e else {
        panic!("{e:?}");
    };
    assert_eq!(
        what,
        "ipam-components.yaml in release v0.2.0 of acme/widget"
    );
    assert!(found.starts_with("the release has assets "), "{found}");
    assert!(found.contains("metadata.yaml"), "{found}");
    // v0.4.0 exists but has no metadata.yaml.
    let e = src.fetch_file("v0.4.0", "metadata.yaml").await.unwrap_err();
    assert!(e.is_not_found(), "{e}");
    // A draft cannot be fetched by tag.
    let e = src.fetch_file("v0.2.1", COMPONENTS).await.unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e}");
    let e = GitHubSource::new(s.url(), "acme", "nope", None, config())
        .unwrap()
        .list_versions()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFound(m) if m.contains("/repos/acme/nope/releases")),
        "{e}"
    );
}

#[tokio::test]
async fn server_errors_are_retried_then_reported_as_transient() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().fail_next(2);
    let body = source(&s, None, config())
        .fetch_file("v0.1.0", "metadata.yaml")
        .await
        .unwrap();
    assert_eq!(body, metadata(&[1, 2, 3]).as_bytes());
    // Two failures and the successful lookup, then the download.
    assert_eq!(s.count("/releases/tags/v0.1.0"), 3);

    s.knobs().fail_next(100);
    let before = s.requests().len();
    let e = source(&s, None, config())
        .list_versions()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::Transient { reason, .. } if reason == "HTTP 500"),
        "{e}"
    );
    assert!(e.is_transient());
    assert_eq!(s.requests().len() - before, 3, "one request per attempt");
}

#[tokio::test]
async fn timeouts_are_retried_then_reported_as_transient() {
    let t = tree();
    let s = server(&t).await;
    let cfg = || HttpConfig {
        timeout: Duration::from_millis(300),
        read_timeout: Duration::from_millis(300),
        ..config()
    };
    s.knobs().slow_next(1, Duration::from_secs(2));
    let versions = source(&s, None, cfg()).list_versions().await.unwrap();
    assert_eq!(versions.len(), 5);
    s.knobs().slow_next(3, Duration::from_secs(2));
    let e = source(&s, None, cfg()).list_versions().await.unwrap_err();
    assert!(
        matches!(&e, SourceError::Transient { reason, .. } if reason == "timed out"),
        "{e}"
    );
}

#[tokio::test]
async fn unreachable_servers_are_transient() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let src = GitHubSource::new(
        &format!("http://127.0.0.1:{port}"),
        "acme",
        "widget",
        None,
        HttpConfig {
            attempts: 2,
            ..config()
        },
    )
    .unwrap();
    let e = src.list_versions().await.unwrap_err();
    assert!(
        matches!(&e, SourceError::Transient { reason, .. } if reason == "connection failed"),
        "{e}"
    );
}

#[tokio::test]
async fn rate_limits_are_reported_without_retrying() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().rate_limit_next(1);
    let e = source(&s, None, config())
        .list_versions()
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::RateLimited(m) if m.contains("resets in")),
        "{e}"
    );
    assert!(e.to_string().contains("GITHUB_TOKEN"));
    assert_eq!(s.requests().len(), 1, "a rate limit is not hammered");
    // The quota the answer announced is kept for the operator's metrics.
    let host = reqwest::Url::parse(s.url())
        .ok()
        .and_then(|u| u.host_str().map(str::to_string))
        .expect("a host");
    let seen = capi_release_sources::http::rate_limits();
    assert!(
        seen.iter()
            .any(|l| l.host == host && l.remaining == 0 && l.limit == Some(60)),
        "{seen:?}"
    );

    s.knobs().too_many_requests_next(1);
    let e = source(&s, None, config())
        .fetch_file("v0.1.0", "metadata.yaml")
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::RateLimited(m) if m.ends_with("(retry after 30 s)")),
        "{e}"
    );
    assert!(e.is_transient());
}

#[tokio::test]
async fn tokens_are_sent_checked_and_never_shown() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().require_token(Some("ghp_right"));
    let r = fetch_release(
        &source(&s, Some("ghp_right"), config()),
        Some("v0.2.0"),
        COMPONENTS,
    )
    .await
    .unwrap();
    assert_eq!(r.version, "v0.2.0");
    let reqs = s.requests();
    assert!(
        reqs.iter()
            .all(|r| r.authorization.as_deref() == Some("Bearer ghp_right")),
        "{reqs:?}"
    );

    let e = source(&s, None, config())
        .list_versions()
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");

    let wrong = source(&s, Some("ghp_wrong_secret"), config());
    let e = wrong.list_versions().await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");
    for shown in [e.to_string(), format!("{e:?}"), format!("{wrong:?}")] {
        assert!(!shown.contains("ghp_wrong_secret"), "{shown}");
    }

    // A 403 without rate-limit headers is a refused token, not a rate limit.
    s.knobs().forbid_next(1);
    let e = source(&s, Some("ghp_right"), config())
        .list_versions()
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");
}

#[tokio::test]
async fn asset_redirects_only_to_allowed_hosts() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().redirect_assets(true);
    s.knobs().require_token(Some("ghp_right"));

    let e = source(&s, Some("ghp_right"), config())
        .fetch_file("v0.2.0", COMPONENTS)
        .await
        .unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m)
            if m.contains(&format!("redirect to {} refused", s.asset_host()))
            && m.contains("no request outside the configured source")),
        "{e}"
    );
    assert!(
        s.requests().iter().all(|r| r.host == HostKind::Main),
        "the refused host was contacted"
    );

    let mut cfg = config();
    cfg.redirect_hosts.push(s.asset_host().to_uppercase());
    let body = source(&s, Some("ghp_right"), cfg)
        .fetch_file("v0.2.0", COMPONENTS)
        .await
        .unwrap();
    assert_eq!(body, components("v0.2.0").as_bytes());
    let on_asset_host: Vec<_> = s
        .requests()
        .into_iter()
        .filter(|r| r.host == HostKind::Assets)
        .collect();
    assert_eq!(on_asset_host.len(), 1);
    // The token stays with the API host.
    assert_eq!(on_asset_host[0].authorization, None);
}

#[tokio::test]
async fn pagination_never_leaves_the_api_host() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().page_size(2);
    s.knobs().foreign_next_link(true);
    let versions = source(&s, None, config()).list_versions().await.unwrap();
    // Only the first page: the newest two.
    assert_eq!(sorted(versions), ["v0.3.0-rc.1", "v0.4.0"]);
    assert!(s.requests().iter().all(|r| r.host == HostKind::Main));
}

#[tokio::test]
async fn oversized_downloads_are_refused() {
    let t = tree();
    let s = server(&t).await;
    let limited = || HttpConfig {
        max_bytes: 64 * 1024,
        ..config()
    };
    for content_length in [true, false] {
        s.knobs().oversized_downloads(Some(OversizedBody {
            bytes: 1024 * 1024,
            content_length,
        }));
        let e = source(&s, None, limited())
            .fetch_file("v0.2.0", COMPONENTS)
            .await
            .unwrap_err();
        assert!(
            matches!(e, SourceError::TooLarge { limit, .. } if limit == 64 * 1024),
            "content_length {content_length}: {e}"
        );
        assert!(!e.is_transient());
    }
    // Exactly the limit is fine.
    s.knobs().oversized_downloads(Some(OversizedBody {
        bytes: 64 * 1024,
        content_length: false,
    }));
    let body = source(&s, None, limited())
        .fetch_file("v0.2.0", COMPONENTS)
        .await
        .unwrap();
    assert_eq!(body.len(), 64 * 1024);
    // Real files count too.
    s.knobs().oversized_downloads(None);
    let e = source(
        &s,
        None,
        HttpConfig {
            max_bytes: 16,
            ..config()
        },
    )
    .fetch_file("v0.2.0", COMPONENTS)
    .await
    .unwrap_err();
    assert!(matches!(e, SourceError::TooLarge { .. }), "{e}");
}

#[test]
fn release_urls_parse() {
    struct Case {
        url: &'static str,
        host: &'static str,
        owner: &'static str,
        repo: &'static str,
        version: Option<&'static str>,
        file: &'static str,
        api: &'static str,
    }
    let cases = [
        Case {
            url: "https://github.com/kubernetes-sigs/cluster-api/releases/latest/core-components.yaml",
            host: "github.com",
            owner: "kubernetes-sigs",
            repo: "cluster-api",
            version: None,
            file: "core-components.yaml",
            api: GITHUB_API,
        },
        Case {
            url: "https://github.com/myorg/awesome-azure-provider/releases/v1.2.3/infrastructure-components.yaml",
            host: "github.com",
            owner: "myorg",
            repo: "awesome-azure-provider",
            version: Some("v1.2.3"),
            file: "infrastructure-components.yaml",
            api: GITHUB_API,
        },
        Case {
            url: "https://GitHub.com/o/r.go_x/releases/download/v0.1.0-rc.1/bootstrap-components.yaml",
            host: "github.com",
            owner: "o",
            repo: "r.go_x",
            version: Some("v0.1.0-rc.1"),
            file: "bootstrap-components.yaml",
            api: GITHUB_API,
        },
        Case {
            url: "https://ghe.corp.example/platform/capi-infra/releases/v2.0.0%2Bcorp.1/infrastructure-components.yaml",
            host: "ghe.corp.example",
            owner: "platform",
            repo: "capi-infra",
            version: Some("v2.0.0+corp.1"),
            file: "infrastructure-components.yaml",
            api: "https://ghe.corp.example/api/v3",
        },
        Case {
            url: "https://ghe.corp.example:8443/platform/capi-infra/releases/latest/infrastructure-components.yaml?x=1",
            host: "ghe.corp.example:8443",
            owner: "platform",
            repo: "capi-infra",
            version: None,
            file: "infrastructure-components.yaml",
            api: "https://ghe.corp.example:8443/api/v3",
        },
    ];
    for c in cases {
        let u = GitHubUrl::parse(c.url).unwrap_or_else(|e| panic!("{}: {e}", c.url));
        assert_eq!(
            (
                u.host.as_str(),
                u.owner.as_str(),
                u.repo.as_str(),
                u.version.as_deref(),
                u.file.as_str()
            ),
            (c.host, c.owner, c.repo, c.version, c.file),
            "{}",
            c.url
        );
        assert_eq!(u.default_api(), c.api, "{}", c.url);
    }

    let bad = [
        ("http://github.com/o/r/releases/latest/f.yaml", "only https"),
        (
            "https://github.com/o/r/tags/latest/f.yaml",
            "expected OWNER/REPO/releases",
        ),
        ("https://github.com/o/r/releases/latest", "missing"),
        ("https://github.com/o/r/releases", "missing"),
        (
            "https://github.com/o/releases/latest/f.yaml",
            "expected OWNER/REPO/releases",
        ),
        (
            "https://github.com/o/r/releases/v1/extra/f.yaml",
            "releases/latest/FILE",
        ),
        (
            "https://github.com/o/r/releases/download/f.yaml",
            "releases/latest/FILE",
        ),
        ("https://github.com/o%2Fx/r/releases/latest/f.yaml", "owner"),
        // The URL parser resolves the `..`, leaving no version or file.
        ("https://github.com/o/r/releases/latest/..", "missing"),
        ("github.com/o/r/releases/latest/f.yaml", "not a URL"),
        ("not a url", "not a URL"),
    ];
    for (url, why) in bad {
        match GitHubUrl::parse(url) {
            Err(SourceError::Invalid(m)) => {
                assert!(m.contains(why), "{url}: {m}");
                assert!(m.contains("is not a GitHub release URL"), "{url}: {m}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    // Credentials in a URL never reach an error.
    let e = GitHubUrl::parse("https://me:hunter2@github.com/o/r/tags/x").unwrap_err();
    assert!(!e.to_string().contains("hunter2"), "{e}");
}

#[test]
fn sources_follow_the_url_and_the_api_override() {
    let u = GitHubUrl::parse("https://github.com/o/r/releases/latest/f.yaml").unwrap();
    let s = GitHubSource::from_url(&u, None, None, HttpConfig::default()).unwrap();
    assert_eq!(s.repository(), "o/r");
    assert!(format!("{s:?}").contains("api.github.com"));
    let s = GitHubSource::from_url(
        &u,
        Some("https://ghe.example/api/v3"),
        Some("ghp_x".into()),
        HttpConfig::default(),
    )
    .unwrap();
    let shown = format!("{s:?}");
    assert!(
        shown.contains("ghe.example") && !shown.contains("ghp_x"),
        "{shown}"
    );
}
