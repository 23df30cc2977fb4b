//! A local server that speaks the parts of GitHub's REST API release sources use: the releases
//! list (with `Link` pagination), a release by tag, and asset downloads. Releases are read from
//! a directory in clusterctl's local-repository layout, `DIR/<label>/<version>/<file>`; a
//! repository maps to one or more labels (cluster-api's repository publishes the core, kubeadm
//! bootstrap and kubeadm control-plane files in one release). GitLab's generic-packages file
//! URLs are served too (the package name is the label). Fault knobs let tests exercise
//! retries, rate limits, missing files and redirects.

use std::{
    collections::BTreeMap,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicU32, AtomicUsize, Ordering},
    },
};

use serde_json::json;
use tokio::{
    io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader},
    net::{TcpListener, TcpStream},
};

/// Fault injection and behaviour switches.
#[derive(Debug, Default)]
pub struct Knobs {
    /// Answer the next N requests with 500.
    pub fail_next: AtomicU32,
    /// Answer the next N requests with 403 and `x-ratelimit-remaining: 0`.
    pub rate_limit_next: AtomicU32,
    /// When set, requests must carry `Authorization: Bearer <token>`.
    pub token: Mutex<Option<String>>,
    /// Releases per page of the releases list.
    pub page_size: AtomicUsize,
    /// When set, asset downloads redirect to this base URL (`{base}/assets/{id}`).
    pub redirect_assets_to: Mutex<Option<String>>,
    /// Extra releases listed without files: (tag, draft, prerelease).
    pub extra_releases: Mutex<Vec<(String, bool, bool)>>,
}

/// A running fake GitHub.
#[derive(Clone)]
pub struct FakeGitHub {
    /// Base URL of the API (`http://127.0.0.1:PORT`).
    pub url: String,
    /// Fault knobs.
    pub knobs: Arc<Knobs>,
    /// Requests served, by path.
    pub requests: Arc<Mutex<Vec<String>>>,
}

struct Repo {
    dir: PathBuf,
    labels: Vec<String>,
}

fn releases(repo: &Repo) -> BTreeMap<String, Vec<(String, PathBuf)>> {
    let mut out: BTreeMap<String, Vec<(String, PathBuf)>> = BTreeMap::new();
    for label in &repo.labels {
        let Ok(versions) = std::fs::read_dir(repo.dir.join(label)) else {
            continue;
        };
        for v in versions.flatten() {
            let version = v.file_name().to_string_lossy().into_owned();
            let Ok(files) = std::fs::read_dir(v.path()) else {
                continue;
            };
            for f in files.flatten() {
                let name = f.file_name().to_string_lossy().into_owned();
                let entry = out.entry(version.clone()).or_default();
                if !entry.iter().any(|(n, _)| n == &name) {
                    entry.push((name, f.path()));
                }
            }
        }
    }
    out
}

fn asset_id(version: &str, name: &str) -> u64 {
    // Stable ids so a download URL stays valid across listings.
    let mut h: u64 = 1469598103934665603;
    for b in version.bytes().chain([b'/']).chain(name.bytes()) {
        h = (h ^ b as u64).wrapping_mul(1099511628211);
    }
    h >> 12
}

impl FakeGitHub {
    /// Starts a server on 127.0.0.1 (ephemeral port) serving `repos`: `owner/repo` → labels
    /// under `dir`.
    pub async fn start(dir: &Path, repos: &[(&str, &[&str])]) -> std::io::Result<FakeGitHub> {
        Self::start_on(dir, repos, "127.0.0.1:0").await
    }

    /// Like [`FakeGitHub::start`] on a given address.
    pub async fn start_on(
        dir: &Path,
        repos: &[(&str, &[&str])],
        addr: &str,
    ) -> std::io::Result<FakeGitHub> {
        let listener = TcpListener::bind(addr).await?;
        let url = format!("http://{}", listener.local_addr()?);
        let map: Arc<BTreeMap<String, Repo>> = Arc::new(
            repos
                .iter()
                .map(|(r, labels)| {
                    (
                        r.to_string(),
                        Repo {
                            dir: dir.to_path_buf(),
                            labels: labels.iter().map(|s| s.to_string()).collect(),
                        },
                    )
                })
                .collect(),
        );
        let knobs = Arc::new(Knobs {
            page_size: AtomicUsize::new(30),
            ..Knobs::default()
        });
        let requests = Arc::new(Mutex::new(Vec::new()));
        let me = FakeGitHub {
            url: url.clone(),
            knobs: knobs.clone(),
            requests: requests.clone(),
        };
        tokio::spawn(async move {
            loop {
                let Ok((sock, _)) = listener.accept().await else {
                    continue;
                };
                let (map, knobs, requests, url) =
                    (map.clone(), knobs.clone(), requests.clone(), url.clone());
                tokio::spawn(async move {
                    let _ = serve(sock, &map, &knobs, &requests, &url).await;
                });
            }
        });
        Ok(me)
    }

    /// How many requests have paths containing `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.requests
            .lock()
            .map(|r| r.iter().filter(|p| p.contains(needle)).count())
            .unwrap_or(0)
    }
}

struct Reply {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

fn reply(status: u16, body: impl Into<Vec<u8>>) -> Reply {
    Reply {
        status,
        headers: vec![("content-type".into(), "application/json".into())],
        body: body.into(),
    }
}

async fn serve(
    sock: TcpStream,
    map: &BTreeMap<String, Repo>,
    knobs: &Knobs,
    requests: &Mutex<Vec<String>>,
    base: &str,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(sock);
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).await? == 0 {
            return Ok(());
        }
        let target = line.split_whitespace().nth(1).unwrap_or("/").to_string();
        let mut auth = None;
        let mut content_length = 0usize;
        loop {
            let mut h = String::new();
            if reader.read_line(&mut h).await? == 0 {
                return Ok(());
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':') {
                match k.trim().to_ascii_lowercase().as_str() {
                    "authorization" => auth = Some(v.trim().to_string()),
                    "content-length" => content_length = v.trim().parse().unwrap_or(0),
                    _ => {}
                }
            }
        }
        let mut sink = vec![0u8; content_length];
        reader.read_exact(&mut sink).await?;
        if let Ok(mut r) = requests.lock() {
            r.push(target.clone());
        }
        let r = route(&target, auth.as_deref(), map, knobs, base);
        let mut out = format!(
            "HTTP/1.1 {} X\r\ncontent-length: {}\r\n",
            r.status,
            r.body.len()
        );
        for (k, v) in &r.headers {
            out.push_str(&format!("{k}: {v}\r\n"));
        }
        out.push_str("\r\n");
        let sock = reader.get_mut();
        sock.write_all(out.as_bytes()).await?;
        sock.write_all(&r.body).await?;
        sock.flush().await?;
    }
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

fn route(
    target: &str,
    auth: Option<&str>,
    map: &BTreeMap<String, Repo>,
    knobs: &Knobs,
    base: &str,
) -> Reply {
    if take(&knobs.fail_next) {
        return reply(500, r#"{"message":"injected failure"}"#);
    }
    if take(&knobs.rate_limit_next) {
        let mut r = reply(403, r#"{"message":"API rate limit exceeded"}"#);
        r.headers.push(("x-ratelimit-remaining".into(), "0".into()));
        return r;
    }
    if let Ok(t) = knobs.token.lock()
        && let Some(t) = t.as_ref()
        && auth != Some(&format!("Bearer {t}"))
    {
        return reply(401, r#"{"message":"Bad credentials"}"#);
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    // GitLab generic packages: the package name is the label directory.
    if let [
        "api",
        "v4",
        "projects",
        _project,
        "packages",
        "generic",
        package,
        version,
        file,
    ] = segs.as_slice()
    {
        for r in map.values() {
            if r.labels.iter().any(|l| l == package) {
                return match std::fs::read(r.dir.join(package).join(version).join(file)) {
                    Ok(b) => Reply {
                        status: 200,
                        headers: vec![("content-type".into(), "application/octet-stream".into())],
                        body: b,
                    },
                    Err(_) => reply(404, r#"{"message":"404 Not Found"}"#),
                };
            }
        }
        return reply(404, r#"{"message":"404 Project Not Found"}"#);
    }
    // Redirected asset downloads land here.
    if let ["assets", id] = segs.as_slice() {
        return download(map, id.parse().unwrap_or(0));
    }
    let ["repos", owner, repo, rest @ ..] = segs.as_slice() else {
        return reply(404, r#"{"message":"Not Found"}"#);
    };
    let Some(r) = map.get(&format!("{owner}/{repo}")) else {
        return reply(404, r#"{"message":"Not Found"}"#);
    };
    let rel = releases(r);
    let release_json = |tag: &str, draft: bool, pre: bool| {
        let assets: Vec<_> = rel
            .get(tag)
            .map(|files| {
                files
                    .iter()
                    .map(|(n, _)| json!({"id": asset_id(tag, n), "name": n}))
                    .collect()
            })
            .unwrap_or_default();
        json!({"tag_name": tag, "draft": draft, "prerelease": pre, "assets": assets})
    };
    match rest {
        ["releases"] => {
            let mut all: Vec<serde_json::Value> = rel
                .keys()
                .rev()
                .map(|t| release_json(t, false, t.contains('-')))
                .collect();
            if let Ok(extra) = knobs.extra_releases.lock() {
                for (t, d, p) in extra.iter() {
                    all.push(release_json(t, *d, *p));
                }
            }
            let size = knobs.page_size.load(Ordering::SeqCst).max(1);
            let page: usize = query
                .split('&')
                .find_map(|kv| kv.strip_prefix("page="))
                .and_then(|p| p.parse().ok())
                .unwrap_or(1)
                .max(1);
            let start = (page - 1) * size;
            let chunk: Vec<_> = all.iter().skip(start).take(size).cloned().collect();
            let mut r = reply(200, serde_json::to_vec(&chunk).unwrap_or_default());
            if start + size < all.len() {
                r.headers.push((
                    "link".into(),
                    format!(
                        "<{base}/repos/{owner}/{repo}/releases?per_page=100&page={}>; rel=\"next\"",
                        page + 1
                    ),
                ));
            }
            r
        }
        ["releases", "tags", tag] => match rel.get(*tag) {
            Some(_) => reply(200, release_json(tag, false, false).to_string()),
            None => reply(404, r#"{"message":"Not Found"}"#),
        },
        ["releases", "assets", id] => {
            let id: u64 = id.parse().unwrap_or(0);
            if let Ok(to) = knobs.redirect_assets_to.lock()
                && let Some(to) = to.as_ref()
            {
                return Reply {
                    status: 302,
                    headers: vec![("location".into(), format!("{to}/assets/{id}"))],
                    body: Vec::new(),
                };
            }
            download(map, id)
        }
        _ => reply(404, r#"{"message":"Not Found"}"#),
    }
}

fn download(map: &BTreeMap<String, Repo>, id: u64) -> Reply {
    for r in map.values() {
        for (tag, files) in releases(r) {
            for (name, path) in files {
                if asset_id(&tag, &name) == id {
                    return match std::fs::read(&path) {
                        Ok(b) => Reply {
                            status: 200,
                            headers: vec![(
                                "content-type".into(),
                                "application/octet-stream".into(),
                            )],
                            body: b,
                        },
                        Err(_) => reply(500, "{}"),
                    };
                }
            }
        }
    }
    reply(404, r#"{"message":"Not Found"}"#)
}
