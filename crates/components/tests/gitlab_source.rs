//! The GitLab generic-packages source against the local fake server (the package name is the
//! release directory's label): the URL's version is the only version, files come from the
//! package, tokens are sent, missing files are NotFound.

use std::{sync::atomic::Ordering, time::Duration};

use capi_components::source::{
    ReleaseSource, SourceError, fetch_release,
    gitlab::{GitLabSource, GitLabUrl},
    http::HttpConfig,
};
use capi_test_support::{fake_github::FakeGitHub, workspace_root};

fn config() -> HttpConfig {
    HttpConfig {
        attempts: 2,
        initial_backoff: Duration::from_millis(10),
        ..HttpConfig::default()
    }
}

#[tokio::test]
async fn generic_packages() {
    let dir = workspace_root().join("examples/sample-providers");
    let s = FakeGitHub::start(&dir, &[("group/project", &["sample-infrastructure"])])
        .await
        .expect("server");
    let url = format!(
        "{}/api/v4/projects/group%2Fproject/packages/generic/sample-infrastructure/v0.2.0/infrastructure-components.yaml",
        s.url
    );
    let u = GitLabUrl::parse(&url).unwrap();
    let src = GitLabSource::new(&u, Some("glpat-secret".into()), config()).unwrap();
    assert_eq!(src.list_versions().await.unwrap(), vec!["v0.2.0"]);
    let r = fetch_release(&src, None, &u.file).await.unwrap();
    assert_eq!(r.version, "v0.2.0");
    assert!(r.components.contains("sample-infra-controller-manager"));
    assert!(r.metadata.contains("contract: v1beta2"));
    let e = src.fetch_file("v0.2.0", "nope.yaml").await.unwrap_err();
    assert!(matches!(e, SourceError::NotFound(_)), "{e}");
    if let Ok(mut t) = s.knobs.token.lock() {
        *t = Some("glpat-secret".into());
    }
    assert!(src.fetch_file("v0.1.0", "metadata.yaml").await.is_ok());
    s.knobs.fail_next.store(5, Ordering::SeqCst);
    assert!(
        src.fetch_file("v0.1.0", "metadata.yaml")
            .await
            .unwrap_err()
            .is_transient()
    );
}
