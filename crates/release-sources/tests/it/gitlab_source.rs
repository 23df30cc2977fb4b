//! The GitLab generic-packages source against the local fake server (`capi-fake-remotes`; the
//! package name is the release directory's label): the URL's version is the only version,
//! files of any version come from the package, tokens are sent and checked, failures are
//! classified, plain http needs an explicit opt-in, and URLs parse as clusterctl expects.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capi_fake_remotes::{FakeServer, OversizedBody, ReleaseTree};
use capi_release_sources::{
    ReleaseSource, SourceError, fetch_release,
    gitlab::{GitLabSource, GitLabUrl},
    http::HttpConfig,
};

const PROJECT: &str = "platform/capi";
const PACKAGE: &str = "infra-widget";
const FILE: &str = "infrastructure-components.yaml";

const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- major: 0\n  minor: 1\n  contract: v1beta1\n- major: 0\n  minor: 2\n  contract: v1beta2\n";

fn components(version: &str) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: widget-infra-controller-manager\n  namespace: widget-infra-system\n  labels: {{release: \"{version}\"}}\n"
    )
}

fn tree() -> ReleaseTree {
    let t = ReleaseTree::new().expect("tree");
    for v in ["v0.1.0", "v0.2.0"] {
        t.add(PACKAGE, v, "metadata.yaml", METADATA).expect("write");
        t.add(PACKAGE, v, FILE, components(v)).expect("write");
    }
    t
}

async fn server(t: &ReleaseTree) -> FakeServer {
    FakeServer::start(t.path(), &[(PROJECT, &[PACKAGE])])
        .await
        .expect("server")
}

fn config() -> HttpConfig {
    HttpConfig {
        attempts: 3,
        initial_backoff: Duration::from_millis(10),
        timeout: Duration::from_secs(5),
        allow_http: true,
        ..HttpConfig::default()
    }
}

fn source(s: &FakeServer, version: &str, token: Option<&str>) -> (GitLabUrl, GitLabSource) {
    let u = GitLabUrl::parse(&s.gitlab_file_url(PROJECT, PACKAGE, version, FILE)).unwrap();
    let src = GitLabSource::new(&u, token.map(str::to_string), config()).unwrap();
    (u, src)
}

#[tokio::test]
async fn the_urls_version_is_the_release() {
    let t = tree();
    let s = server(&t).await;
    let (u, src) = source(&s, "v0.2.0", None);
    assert_eq!(u.project, "platform%2Fcapi");
    assert_eq!(src.list_versions().await.unwrap(), ["v0.2.0"]);
    let r = fetch_release(&src, None, &u.file).await.unwrap();
    assert_eq!(
        (r.version.as_str(), r.metadata.as_str()),
        ("v0.2.0", METADATA)
    );
    assert_eq!(r.components, components("v0.2.0"));
    // Another version of the same package, as an explicit spec.version asks.
    let r = fetch_release(&src, Some("v0.1.0"), &u.file).await.unwrap();
    assert_eq!(r.components, components("v0.1.0"));
    assert_eq!(
        s.count("/api/v4/projects/platform%2Fcapi/packages/generic/infra-widget/v0.1.0/"),
        2
    );
}

#[tokio::test]
async fn missing_files_versions_and_packages_are_not_found() {
    let t = tree();
    let s = server(&t).await;
    let (_, src) = source(&s, "v0.2.0", None);
    let e = src.fetch_file("v0.2.0", "nope.yaml").await.unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFound(m) if m.starts_with("nope.yaml of package infra-widget v0.2.0")),
        "{e}"
    );
    // A missing version names the one the package URL gives.
    let e = fetch_release(&src, Some("v9.0.0"), FILE).await.unwrap_err();
    assert!(
        matches!(&e, SourceError::NotFoundAmong { found, .. } if found == "the source lists v0.2.0"),
        "{e}"
    );
    let u = GitLabUrl::parse(&s.gitlab_file_url(PROJECT, "other", "v0.2.0", FILE)).unwrap();
    let e = GitLabSource::new(&u, None, config())
        .unwrap()
        .fetch_file("v0.2.0", FILE)
        .await
        .unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e}");
}

#[tokio::test]
async fn tokens_are_sent_as_bearer_and_checked() {
    let t = tree();
    let s = server(&t).await;
    s.knobs().require_token(Some("glpat-right"));
    let (_, src) = source(&s, "v0.2.0", Some("glpat-right"));
    assert_eq!(
        src.fetch_file("v0.2.0", "metadata.yaml").await.unwrap(),
        METADATA.as_bytes()
    );
    assert_eq!(
        s.requests()[0].authorization.as_deref(),
        Some("Bearer glpat-right")
    );
    let (_, wrong) = source(&s, "v0.2.0", Some("glpat-wrong"));
    let e = wrong.fetch_file("v0.2.0", FILE).await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");
    for shown in [e.to_string(), format!("{wrong:?}")] {
        assert!(!shown.contains("glpat-wrong"), "{shown}");
    }
    let (_, none) = source(&s, "v0.2.0", None);
    let e = none.fetch_file("v0.2.0", FILE).await.unwrap_err();
    assert!(matches!(e, SourceError::Unauthorized(_)), "{e}");
}

#[tokio::test]
async fn failures_are_retried_and_classified() {
    let t = tree();
    let s = server(&t).await;
    let (_, src) = source(&s, "v0.2.0", None);
    s.knobs().fail_next(2);
    assert_eq!(
        src.fetch_file("v0.2.0", FILE).await.unwrap(),
        components("v0.2.0").as_bytes()
    );
    s.knobs().fail_next(3);
    let e = src.fetch_file("v0.2.0", FILE).await.unwrap_err();
    assert!(matches!(e, SourceError::Transient { .. }), "{e}");
    s.knobs().too_many_requests_next(1);
    let e = src.fetch_file("v0.2.0", FILE).await.unwrap_err();
    assert!(matches!(e, SourceError::RateLimited(_)), "{e}");
    s.knobs().oversized_downloads(Some(OversizedBody {
        bytes: 512 * 1024,
        content_length: false,
    }));
    let small = GitLabSource::new(
        &GitLabUrl::parse(&s.gitlab_file_url(PROJECT, PACKAGE, "v0.2.0", FILE)).unwrap(),
        None,
        HttpConfig {
            max_bytes: 4096,
            ..config()
        },
    )
    .unwrap();
    let e = small.fetch_file("v0.2.0", FILE).await.unwrap_err();
    assert!(
        matches!(e, SourceError::TooLarge { limit: 4096, .. }),
        "{e}"
    );
}

#[test]
fn plain_http_needs_an_explicit_opt_in() {
    let u = GitLabUrl::parse(
        "http://gitlab.example.com/api/v4/projects/7/packages/generic/p/v1.0.0/f.yaml",
    )
    .unwrap();
    let e = GitLabSource::new(&u, None, HttpConfig::default()).unwrap_err();
    assert!(
        matches!(&e, SourceError::Invalid(m) if m.contains("must use https")),
        "{e}"
    );
    assert!(
        GitLabSource::new(
            &u,
            None,
            HttpConfig {
                allow_http: true,
                ..HttpConfig::default()
            }
        )
        .is_ok()
    );
}

#[test]
fn package_urls_parse() {
    let good = [
        (
            "https://gitlab.example.com/api/v4/projects/group%2Fproject/packages/generic/capi-provider/v1.2.0/infrastructure-components.yaml",
            (
                "https://gitlab.example.com",
                "group%2Fproject",
                "capi-provider",
                "v1.2.0",
                "infrastructure-components.yaml",
            ),
        ),
        (
            "https://gitlab-ce.corp.example:8443/api/v4/projects/1234/packages/generic/capz/v0.3.0-rc.1/infrastructure-components.yaml",
            (
                "https://gitlab-ce.corp.example:8443",
                "1234",
                "capz",
                "v0.3.0-rc.1",
                "infrastructure-components.yaml",
            ),
        ),
        (
            "https://code.corp.example/api/v4/projects/a%2Fb%2Fc/packages/generic/p/v1.0.0%2Bbuild/core-components.yaml",
            (
                "https://code.corp.example",
                "a%2Fb%2Fc",
                "p",
                "v1.0.0+build",
                "core-components.yaml",
            ),
        ),
        (
            "https://user:secret@gitlab.example.com/api/v4/projects/7/packages/generic/p/v1/f.yaml",
            ("https://gitlab.example.com", "7", "p", "v1", "f.yaml"),
        ),
    ];
    for (url, want) in good {
        let u = GitLabUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
        assert_eq!(
            (
                u.base.as_str(),
                u.project.as_str(),
                u.package.as_str(),
                u.version.as_str(),
                u.file.as_str()
            ),
            want,
            "{url}"
        );
        assert!(GitLabUrl::looks_like(url), "{url}");
    }

    let bad = [
        // The project path must be encoded: one more segment.
        "https://gitlab.example.com/api/v4/projects/group/project/packages/generic/p/v1/f.yaml",
        // No version.
        "https://gitlab.example.com/api/v4/projects/7/packages/generic/p/f.yaml",
        "https://gitlab.example.com/api/v4/projects/7/packages/maven/p/v1/f.yaml",
        "https://gitlab.example.com/api/v3/projects/7/packages/generic/p/v1/f.yaml",
        "https://gitlab.example.com/api/v4/projects//packages/generic/p/v1/f.yaml",
        "https://gitlab.example.com/api/v4/projects/7/packages/generic/p/v1%2F..%2Fx/f.yaml",
        "ftp://gitlab.example.com/api/v4/projects/7/packages/generic/p/v1/f.yaml",
        "gitlab.example.com/api/v4/projects/7/packages/generic/p/v1/f.yaml",
    ];
    for url in bad {
        match GitLabUrl::parse(url) {
            Err(SourceError::Invalid(m)) => {
                assert!(m.contains("is not a GitLab package URL"), "{url}: {m}");
                assert!(!m.contains("secret"), "{m}");
            }
            other => panic!("{url}: {other:?}"),
        }
    }
    assert!(!GitLabUrl::looks_like(
        "https://github.com/o/r/releases/latest/f.yaml"
    ));
    let e = GitLabUrl::parse("https://me:secret@gitlab.example.com/api/v4/nope").unwrap_err();
    assert!(!e.to_string().contains("secret"), "{e}");
}
