//! The fake server answers as GitHub and GitLab do on the wire: listings, Link pagination,
//! release lookups, asset descriptions versus downloads, redirects, GitLab package files, and
//! each fault knob.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use capi_fake_remotes::{FakeServer, HostKind, OversizedBody, ReleaseTree};
use serde_json::Value;

/// cluster-api's layout: one repository, three labels, one release made of all their files.
fn tree() -> ReleaseTree {
    let t = ReleaseTree::new().unwrap();
    for (label, file) in [
        ("cluster-api", "core-components.yaml"),
        ("bootstrap-kubeadm", "bootstrap-components.yaml"),
        ("control-plane-kubeadm", "control-plane-components.yaml"),
    ] {
        for v in ["v1.0.0", "v1.1.0", "v1.2.0-rc.0"] {
            t.add(label, v, "metadata.yaml", "releaseSeries: []\n")
                .unwrap();
            t.add(label, v, file, format!("# {label} {v}\n")).unwrap();
        }
    }
    t
}

async fn start(t: &ReleaseTree) -> FakeServer {
    FakeServer::start(
        t.path(),
        &[
            (
                "kubernetes-sigs/cluster-api",
                &["cluster-api", "bootstrap-kubeadm", "control-plane-kubeadm"],
            ),
            ("group/sub", &["cluster-api"]),
        ],
    )
    .await
    .unwrap()
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
}

async fn get(url: &str, accept: &str) -> (u16, reqwest::header::HeaderMap, Vec<u8>) {
    let r = client()
        .get(url)
        .header("accept", accept)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let headers = r.headers().clone();
    (status, headers, r.bytes().await.unwrap().to_vec())
}

fn json(body: &[u8]) -> Value {
    serde_json::from_slice(body).unwrap()
}

#[tokio::test]
async fn releases_are_listed_newest_first_with_link_pagination() {
    let t = tree();
    let s = start(&t).await;
    s.knobs()
        .set_release("kubernetes-sigs/cluster-api", "v2.0.0", true, false);
    let api = format!("{}/repos/kubernetes-sigs/cluster-api/releases", s.url());
    let (status, headers, body) = get(&format!("{api}?per_page=2"), "application/json").await;
    assert_eq!(status, 200);
    let page = json(&body);
    let tags: Vec<&str> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tag_name"].as_str().unwrap())
        .collect();
    assert_eq!(tags, ["v2.0.0", "v1.2.0-rc.0"]);
    assert_eq!(page[0]["draft"], true);
    assert_eq!(page[1]["prerelease"], true);
    let assets: Vec<&str> = page[1]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        assets,
        [
            "bootstrap-components.yaml",
            "control-plane-components.yaml",
            "core-components.yaml",
            "metadata.yaml"
        ]
    );
    let link = headers["link"].to_str().unwrap();
    assert!(
        link.contains(&format!("<{api}?per_page=2&page=2>; rel=\"next\"")),
        "{link}"
    );
    let (_, headers, body) = get(&format!("{api}?per_page=2&page=2"), "application/json").await;
    assert_eq!(json(&body).as_array().unwrap().len(), 2);
    assert!(!headers["link"].to_str().unwrap().contains("rel=\"next\""));
}

#[tokio::test]
async fn tags_assets_and_redirects() {
    let t = tree();
    let s = start(&t).await;
    let repo = format!("{}/repos/kubernetes-sigs/cluster-api", s.url());
    let (status, _, body) = get(&format!("{repo}/releases/tags/v1.1.0"), "application/json").await;
    assert_eq!(status, 200);
    let release = json(&body);
    let asset = release["assets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "core-components.yaml")
        .unwrap()
        .clone();
    let url = asset["url"].as_str().unwrap().to_string();
    // JSON description unless the content is asked for.
    let (_, _, body) = get(&url, "application/vnd.github+json").await;
    assert_eq!(json(&body)["name"], "core-components.yaml");
    let (_, _, body) = get(&url, "application/octet-stream").await;
    assert_eq!(body, b"# cluster-api v1.1.0\n");

    s.knobs().redirect_assets(true);
    let (status, headers, _) = get(&url, "application/octet-stream").await;
    assert_eq!(status, 302);
    let location = headers["location"].to_str().unwrap().to_string();
    assert!(location.starts_with(s.asset_url()), "{location}");
    let (_, _, body) = get(&location, "application/octet-stream").await;
    assert_eq!(body, b"# cluster-api v1.1.0\n");
    assert_eq!(s.requests().last().unwrap().host, HostKind::Assets);

    s.knobs()
        .set_release("kubernetes-sigs/cluster-api", "v1.1.0", true, false);
    let (status, _, _) = get(&format!("{repo}/releases/tags/v1.1.0"), "application/json").await;
    assert_eq!(status, 404, "drafts are not found by tag");
    let (status, _, _) = get(
        &format!("{}/repos/other/repo/releases", s.url()),
        "application/json",
    )
    .await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn gitlab_package_files() {
    let t = tree();
    let s = start(&t).await;
    let url = s.gitlab_file_url("group/sub", "cluster-api", "v1.0.0", "core-components.yaml");
    assert!(url.contains("/projects/group%2Fsub/"), "{url}");
    let (status, _, body) = get(&url, "*/*").await;
    assert_eq!(
        (status, body.as_slice()),
        (200, &b"# cluster-api v1.0.0\n"[..])
    );
    for bad in [
        s.gitlab_file_url(
            "group/other",
            "cluster-api",
            "v1.0.0",
            "core-components.yaml",
        ),
        s.gitlab_file_url("group/sub", "bootstrap-kubeadm", "v1.0.0", "metadata.yaml"),
        s.gitlab_file_url("group/sub", "cluster-api", "v1.0.0", "nope.yaml"),
        s.gitlab_file_url("group/sub", "cluster-api", "..", "core-components.yaml"),
    ] {
        assert_eq!(get(&bad, "*/*").await.0, 404, "{bad}");
    }
}

#[tokio::test]
async fn fault_knobs_answer_once_each() {
    let t = tree();
    let s = start(&t).await;
    let url = format!("{}/repos/kubernetes-sigs/cluster-api/releases", s.url());
    s.knobs().fail_next(1);
    assert_eq!(get(&url, "application/json").await.0, 500);
    assert_eq!(get(&url, "application/json").await.0, 200);

    s.knobs().rate_limit_next(1);
    let (status, headers, _) = get(&url, "application/json").await;
    assert_eq!(status, 403);
    assert_eq!(headers["x-ratelimit-remaining"], "0");

    s.knobs().too_many_requests_next(1);
    let (status, headers, _) = get(&url, "application/json").await;
    assert_eq!(
        (status, headers["retry-after"].to_str().unwrap()),
        (429, "30")
    );

    s.knobs().forbid_next(1);
    let (status, headers, _) = get(&url, "application/json").await;
    assert_eq!(status, 403);
    assert!(headers.get("x-ratelimit-remaining").is_none());

    s.knobs().require_token(Some("t0ken"));
    assert_eq!(get(&url, "application/json").await.0, 401);
    let ok = client()
        .get(&url)
        .bearer_auth("t0ken")
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
    s.knobs().require_token(None);

    s.knobs().slow_next(1, Duration::from_millis(300));
    let started = std::time::Instant::now();
    assert_eq!(get(&url, "application/json").await.0, 200);
    assert!(started.elapsed() >= Duration::from_millis(300));

    s.knobs().oversized_downloads(Some(OversizedBody {
        bytes: 200_000,
        content_length: false,
    }));
    let gl = s.gitlab_file_url("group/sub", "cluster-api", "v1.0.0", "metadata.yaml");
    let r = client().get(&gl).send().await.unwrap();
    assert!(r.content_length().is_none(), "sent chunked");
    assert_eq!(r.bytes().await.unwrap().len(), 200_000);
    assert_eq!(s.count("/releases"), 8);
}
