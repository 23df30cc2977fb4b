//! A local stand-in for the remote release hosts the operator reads: the parts of GitHub's REST
//! API that release sources use (the paginated releases list, a release by tag, asset downloads
//! that may redirect to a separate asset host) and GitLab's generic-packages file downloads.
//!
//! Releases are read from a directory in clusterctl's local-repository layout,
//! `DIR/<label>/<version>/<file>`, on every request, so a test can add files while the server
//! runs. The caller maps each repository (`owner/repo` on GitHub, the project path on GitLab) to
//! one or more labels: cluster-api's repository publishes the core, kubeadm bootstrap and kubeadm
//! control-plane files in one release, so a release's assets are the union of its labels' files.
//! On GitLab the package name must be one of the project's labels.
//!
//! [`Knobs`] injects the failures a real host produces (server errors, rate limits, refused
//! tokens, slow answers, oversized bodies), switches on small pages, draft and pre-release
//! entries, and redirects of asset downloads to a second local host, so tests can check how a
//! client behaves without any network.
//!
//! Everything listens on loopback addresses only: the main host on the address given (by default
//! `127.0.0.1` on an ephemeral port), the asset host on `127.0.0.2` (a different host name for
//! redirect allowlists; `localhost` where that address cannot be bound).

pub mod tls;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    io,
    path::{Path, PathBuf},
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering},
    },
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, StreamBody, combinators::BoxBody};
use hyper::{
    Request, Response, StatusCode,
    body::{Frame, Incoming},
    server::conn::http1,
    service::service_fn,
};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};
use tokio::{net::TcpListener, task::JoinHandle};

type Body = BoxBody<Bytes, Infallible>;

/// Largest page GitHub serves, whatever `per_page` asks.
const GITHUB_MAX_PER_PAGE: usize = 100;
/// GitHub's page size when `per_page` is absent.
const GITHUB_DEFAULT_PER_PAGE: usize = 30;

/// Which of the two listeners a request reached.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HostKind {
    /// The API host (GitHub REST API and GitLab API).
    Main,
    /// The separate host asset downloads are redirected to.
    Assets,
}

/// One request the server received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRequest {
    /// The listener it reached.
    pub host: HostKind,
    /// HTTP method.
    pub method: String,
    /// Path and query, as sent (still percent-encoded).
    pub target: String,
    /// The `Authorization` header, if any (tests check tokens reach only the right host).
    pub authorization: Option<String>,
    /// The `Accept` header, if any.
    pub accept: Option<String>,
    /// The `User-Agent` header, if any (tests check clients say who they are).
    pub user_agent: Option<String>,
}

/// A body answered instead of every file download (GitHub assets, GitLab package files).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OversizedBody {
    /// Bytes sent.
    pub bytes: usize,
    /// Whether `Content-Length` announces the size; without it the body is sent chunked, so a
    /// client only notices the size while streaming.
    pub content_length: bool,
}

/// Flags of one release in the listing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct ReleaseFlags {
    draft: bool,
    prerelease: bool,
}

/// Fault injection and behaviour switches, changeable while the server runs. Faults apply to
/// the main host only, in this order: slow, 500, rate-limit 403, 429, plain 403, token check.
#[derive(Debug, Default)]
pub struct Knobs {
    slow_next: AtomicU32,
    slow_for_ms: AtomicU64,
    fail_next: AtomicU32,
    rate_limit_next: AtomicU32,
    too_many_next: AtomicU32,
    forbid_next: AtomicU32,
    token: Mutex<Option<String>>,
    page_size: AtomicUsize,
    releases: Mutex<BTreeMap<(String, String), ReleaseFlags>>,
    redirect_assets: AtomicBool,
    foreign_next_link: AtomicBool,
    oversized: Mutex<Option<OversizedBody>>,
}

fn take(counter: &AtomicU32) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

impl Knobs {
    /// Answers the next `n` requests with `500 Internal Server Error`.
    pub fn fail_next(&self, n: u32) {
        self.fail_next.store(n, Ordering::SeqCst);
    }

    /// Answers the next `n` requests as GitHub does when the hourly quota is spent: `403` with
    /// `x-ratelimit-remaining: 0`.
    pub fn rate_limit_next(&self, n: u32) {
        self.rate_limit_next.store(n, Ordering::SeqCst);
    }

    /// Answers the next `n` requests with `429 Too Many Requests` and `Retry-After: 30`.
    pub fn too_many_requests_next(&self, n: u32) {
        self.too_many_next.store(n, Ordering::SeqCst);
    }

    /// Answers the next `n` requests with a plain `403 Forbidden` (no rate-limit headers), as
    /// for a token lacking permissions.
    pub fn forbid_next(&self, n: u32) {
        self.forbid_next.store(n, Ordering::SeqCst);
    }

    /// Delays the answer to the next `n` requests by `delay` (for client timeouts).
    pub fn slow_next(&self, n: u32, delay: Duration) {
        self.slow_for_ms.store(
            delay.as_millis().try_into().unwrap_or(u64::MAX),
            Ordering::SeqCst,
        );
        self.slow_next.store(n, Ordering::SeqCst);
    }

    /// Requires `Authorization: Bearer <token>` on every main-host request (`None`: no check).
    /// Other requests get `401` with GitHub's "Bad credentials".
    pub fn require_token(&self, token: Option<&str>) {
        if let Ok(mut t) = self.token.lock() {
            *t = token.map(str::to_string);
        }
    }

    /// Serves the releases list `n` entries per page whatever `per_page` asks (0: honour
    /// `per_page`, as GitHub does).
    pub fn page_size(&self, n: usize) {
        self.page_size.store(n, Ordering::SeqCst);
    }

    /// Sets the draft and pre-release flags of release `tag` of `repo`. A tag without files in
    /// the directory is listed too, with no assets. By default a release is published, and a
    /// pre-release when its tag has a `-` part. Draft releases are listed (as GitHub lists them
    /// to users who can push) but their tag lookup answers 404.
    pub fn set_release(&self, repo: &str, tag: &str, draft: bool, prerelease: bool) {
        if let Ok(mut r) = self.releases.lock() {
            r.insert(
                (repo.to_string(), tag.to_string()),
                ReleaseFlags { draft, prerelease },
            );
        }
    }

    /// Whether GitHub asset downloads answer `302` to the asset host instead of the content.
    pub fn redirect_assets(&self, on: bool) {
        self.redirect_assets.store(on, Ordering::SeqCst);
    }

    /// Whether the releases list's `rel="next"` link points at the asset host instead of the
    /// API host (a client must not follow pagination to another host).
    pub fn foreign_next_link(&self, on: bool) {
        self.foreign_next_link.store(on, Ordering::SeqCst);
    }

    /// Answers every file download with `body` instead of the file (`None`: the real files).
    pub fn oversized_downloads(&self, body: Option<OversizedBody>) {
        if let Ok(mut o) = self.oversized.lock() {
            *o = body;
        }
    }

    fn oversized(&self) -> Option<OversizedBody> {
        self.oversized.lock().ok().and_then(|o| *o)
    }

    fn flags(&self, repo: &str, tag: &str) -> ReleaseFlags {
        self.releases
            .lock()
            .ok()
            .and_then(|r| r.get(&(repo.to_string(), tag.to_string())).copied())
            .unwrap_or(ReleaseFlags {
                draft: false,
                prerelease: tag.contains('-'),
            })
    }

    fn extra_tags(&self, repo: &str) -> Vec<String> {
        self.releases
            .lock()
            .map(|r| {
                r.keys()
                    .filter(|(r, _)| r == repo)
                    .map(|(_, t)| t.clone())
                    .collect()
            })
            .unwrap_or_default()
    }
}

struct State {
    dir: PathBuf,
    /// Repository (`owner/repo` or GitLab project path) → labels.
    repos: BTreeMap<String, Vec<String>>,
    base: String,
    asset_base: String,
    knobs: Knobs,
    requests: Mutex<Vec<RecordedRequest>>,
}

/// A running fake server. The listeners stop when it is dropped.
pub struct FakeServer {
    state: Arc<State>,
    asset_host: String,
    tasks: Vec<JoinHandle<()>>,
}

impl std::fmt::Debug for FakeServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeServer")
            .field("url", &self.state.base)
            .field("asset_url", &self.state.asset_base)
            .field("repos", &self.state.repos)
            .finish()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl FakeServer {
    /// Starts a server on `127.0.0.1` (ephemeral port) serving releases under `dir` for
    /// `repos`: pairs of repository (`owner/repo`, or a GitLab project path `group/project`)
    /// and the labels (subdirectories of `dir`) its releases are made of.
    pub async fn start(dir: impl Into<PathBuf>, repos: &[(&str, &[&str])]) -> io::Result<Self> {
        Self::start_on(dir, repos, "127.0.0.1:0").await
    }

    /// Like [`FakeServer::start`], with the main host listening on `listen` (`IP:PORT`).
    pub async fn start_on(
        dir: impl Into<PathBuf>,
        repos: &[(&str, &[&str])],
        listen: &str,
    ) -> io::Result<Self> {
        let main = TcpListener::bind(listen).await?;
        // A second loopback address gives redirects a host name of their own; 127.0.0.0/8 is
        // all loopback on Linux, not on every system, hence the fallback name.
        let (assets, asset_host) = match TcpListener::bind("127.0.0.2:0").await {
            Ok(l) => (l, "127.0.0.2"),
            Err(_) => (TcpListener::bind("127.0.0.1:0").await?, "localhost"),
        };
        let base = format!("http://{}", main.local_addr()?);
        let asset_base = format!("http://{asset_host}:{}", assets.local_addr()?.port());
        let state = Arc::new(State {
            dir: dir.into(),
            repos: repos
                .iter()
                .map(|(r, labels)| {
                    (
                        r.to_string(),
                        labels
                            .iter()
                            .map(std::string::ToString::to_string)
                            .collect(),
                    )
                })
                .collect(),
            base,
            asset_base,
            knobs: Knobs::default(),
            requests: Mutex::new(Vec::new()),
        });
        let tasks = vec![
            spawn_listener(main, state.clone(), HostKind::Main),
            spawn_listener(assets, state.clone(), HostKind::Assets),
        ];
        Ok(FakeServer {
            state,
            asset_host: asset_host.to_string(),
            tasks,
        })
    }

    /// Base URL of the main host, `http://127.0.0.1:PORT`: the GitHub API base and the GitLab
    /// host.
    pub fn url(&self) -> &str {
        &self.state.base
    }

    /// Base URL of the asset host asset downloads are redirected to.
    pub fn asset_url(&self) -> &str {
        &self.state.asset_base
    }

    /// Host name of the asset host (what a redirect allowlist must contain).
    pub fn asset_host(&self) -> &str {
        &self.asset_host
    }

    /// The fault and behaviour switches.
    pub fn knobs(&self) -> &Knobs {
        &self.state.knobs
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.state
            .requests
            .lock()
            .map(|r| r.clone())
            .unwrap_or_default()
    }

    /// How many requests (to either host) have a target containing `needle`.
    pub fn count(&self, needle: &str) -> usize {
        self.requests()
            .iter()
            .filter(|r| r.target.contains(needle))
            .count()
    }

    /// The GitLab generic-package file URL of `file` of `package` at `version` in `project`
    /// (`group/project`, sent URL-encoded as GitLab expects).
    pub fn gitlab_file_url(
        &self,
        project: &str,
        package: &str,
        version: &str,
        file: &str,
    ) -> String {
        format!(
            "{}/api/v4/projects/{}/packages/generic/{package}/{version}/{file}",
            self.state.base,
            project.replace('/', "%2F")
        )
    }
}

fn spawn_listener(listener: TcpListener, state: Arc<State>, host: HostKind) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                // Out of descriptors or similar: back off instead of spinning.
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            };
            let state = state.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req| {
                    let state = state.clone();
                    async move { Ok::<_, Infallible>(handle(&state, host, req).await) }
                });
                // A client hanging up mid-body (size limits) is normal here.
                let _ = http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await;
            });
        }
    })
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

fn reply(status: StatusCode, content_type: &str, body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = status;
    if let Ok(v) = content_type.parse() {
        r.headers_mut().insert("content-type", v);
    }
    r
}

fn json_reply(status: StatusCode, v: &Value) -> Response<Body> {
    reply(status, "application/json", full(v.to_string()))
}

fn message(status: StatusCode, msg: &str) -> Response<Body> {
    json_reply(status, &json!({ "message": msg }))
}

fn with_header(mut r: Response<Body>, name: &'static str, value: &str) -> Response<Body> {
    if let Ok(v) = value.parse() {
        r.headers_mut().insert(name, v);
    }
    r
}

fn header(req: &Request<Incoming>, name: &str) -> Option<String> {
    req.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

async fn handle(state: &State, host: HostKind, req: Request<Incoming>) -> Response<Body> {
    let target = req
        .uri()
        .path_and_query()
        .map(|p| p.as_str().to_string())
        .unwrap_or_else(|| "/".into());
    let authorization = header(&req, "authorization");
    let accept = header(&req, "accept");
    if let Ok(mut r) = state.requests.lock() {
        r.push(RecordedRequest {
            host,
            method: req.method().to_string(),
            target: target.clone(),
            authorization: authorization.clone(),
            accept: accept.clone(),
            user_agent: header(&req, "user-agent"),
        });
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    if host == HostKind::Assets {
        return match path.strip_prefix("/assets/").and_then(|id| id.parse().ok()) {
            Some(id) => download_asset(state, id),
            None => message(StatusCode::NOT_FOUND, "Not Found"),
        };
    }
    if let Some(injected) = injected_reply(state).await {
        return injected;
    }
    let wanted = state.knobs.token.lock().ok().and_then(|t| t.clone());
    if let Some(t) = wanted
        && authorization.as_deref() != Some(&format!("Bearer {t}"))
    {
        return message(StatusCode::UNAUTHORIZED, "Bad credentials");
    }
    route(state, path, query, accept.as_deref())
}

/// The failure the test asked for with a knob (slowness, an error, a rate limit), once.
async fn injected_reply(state: &State) -> Option<Response<Body>> {
    let k = &state.knobs;
    if take(&k.slow_next) {
        tokio::time::sleep(Duration::from_millis(k.slow_for_ms.load(Ordering::SeqCst))).await;
    }
    if take(&k.fail_next) {
        return Some(message(
            StatusCode::INTERNAL_SERVER_ERROR,
            "injected failure",
        ));
    }
    if take(&k.rate_limit_next) {
        let reset = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs() + 3600)
            .unwrap_or(0);
        let r = message(
            StatusCode::FORBIDDEN,
            "API rate limit exceeded for 127.0.0.1. (But here's the good news: Authenticated requests get a higher rate limit.)",
        );
        let r = with_header(r, "x-ratelimit-limit", "60");
        let r = with_header(r, "x-ratelimit-remaining", "0");
        return Some(with_header(r, "x-ratelimit-reset", &reset.to_string()));
    }
    if take(&k.too_many_next) {
        let r = message(StatusCode::TOO_MANY_REQUESTS, "Too Many Requests");
        return Some(with_header(r, "retry-after", "30"));
    }
    if take(&k.forbid_next) {
        return Some(message(
            StatusCode::FORBIDDEN,
            "Resource not accessible by integration",
        ));
    }
    None
}

/// The GitHub (and GitHub Enterprise) and GitLab API routes.
fn route(state: &State, path: &str, query: &str, accept: Option<&str>) -> Response<Body> {
    let segs: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(decode)
        .collect();
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    // GitHub Enterprise Server serves the same API under /api/v3.
    let segs = match segs.as_slice() {
        ["api", "v3", rest @ ..] => rest,
        all => all,
    };
    match segs {
        [
            "api",
            "v4",
            "projects",
            project,
            "packages",
            "generic",
            package,
            version,
            file,
        ] => gitlab_file(state, project, package, version, file),
        ["repos", owner, repo, rest @ ..] => {
            let repo = format!("{owner}/{repo}");
            if !state.repos.contains_key(&repo) {
                return message(StatusCode::NOT_FOUND, "Not Found");
            }
            match rest {
                ["releases"] => list_releases(state, &repo, query),
                ["releases", "tags", tag] => release_by_tag(state, &repo, tag),
                ["releases", "assets", id] => match id.parse() {
                    Ok(id) => asset(state, &repo, id, accept),
                    Err(_) => message(StatusCode::NOT_FOUND, "Not Found"),
                },
                _ => message(StatusCode::NOT_FOUND, "Not Found"),
            }
        }
        _ => message(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

/// A path segment that is safe to join under the release directory.
fn safe(seg: &str) -> bool {
    !seg.is_empty() && seg != "." && seg != ".." && !seg.contains(['/', '\\'])
}

/// Releases of `repo`: tag → file name → path (first label holding a name wins).
fn scan(state: &State, repo: &str) -> BTreeMap<String, BTreeMap<String, PathBuf>> {
    let mut out: BTreeMap<String, BTreeMap<String, PathBuf>> = BTreeMap::new();
    for label in state.repos.get(repo).into_iter().flatten() {
        let Ok(versions) = std::fs::read_dir(state.dir.join(label)) else {
            continue;
        };
        for v in versions.flatten() {
            let Ok(files) = std::fs::read_dir(v.path()) else {
                continue;
            };
            let tag = v.file_name().to_string_lossy().into_owned();
            for f in files.flatten() {
                if f.path().is_file() {
                    out.entry(tag.clone())
                        .or_default()
                        .entry(f.file_name().to_string_lossy().into_owned())
                        .or_insert_with(|| f.path());
                }
            }
        }
    }
    out
}

/// A stable asset id, so download URLs stay valid across listings; kept below 2^53 so it
/// survives JSON number handling anywhere.
fn asset_id(repo: &str, tag: &str, name: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in repo
        .bytes()
        .chain([0])
        .chain(tag.bytes())
        .chain([0])
        .chain(name.bytes())
    {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h >> 11
}

fn release_json(
    state: &State,
    repo: &str,
    tag: &str,
    files: Option<&BTreeMap<String, PathBuf>>,
) -> Value {
    let flags = state.knobs.flags(repo, tag);
    let api = format!("{}/repos/{repo}", state.base);
    let assets: Vec<Value> = files
        .into_iter()
        .flatten()
        .map(|(name, path)| {
            let id = asset_id(repo, tag, name);
            json!({
                "id": id,
                "name": name,
                "size": std::fs::metadata(path).map(|m| m.len()).unwrap_or(0),
                "content_type": "application/octet-stream",
                "url": format!("{api}/releases/assets/{id}"),
                "browser_download_url": format!("{}/{repo}/releases/download/{tag}/{name}", state.base),
            })
        })
        .collect();
    json!({
        "id": asset_id(repo, tag, ""),
        "tag_name": tag,
        "name": tag,
        "draft": flags.draft,
        "prerelease": flags.prerelease,
        "assets": assets,
    })
}

/// Newest first, as GitHub lists releases; tags that are not versions go last.
fn newest_first(tags: &mut [String]) {
    // Versions first, newest first (`Reverse`), then the other tags by name.
    tags.sort_by_cached_key(|t| {
        let v = semver::Version::parse(t.strip_prefix('v').unwrap_or(t)).ok();
        (v.is_none(), v.map(std::cmp::Reverse), t.clone())
    });
}

fn query_param(query: &str, name: &str) -> Option<usize> {
    query
        .split('&')
        .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
}

fn list_releases(state: &State, repo: &str, query: &str) -> Response<Body> {
    let releases = scan(state, repo);
    // A set: tests list up to 100,000 tags, and a quadratic merge would take minutes.
    let mut tags: Vec<String> = releases
        .keys()
        .cloned()
        .chain(state.knobs.extra_tags(repo))
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    newest_first(&mut tags);
    let per_page = match state.knobs.page_size.load(Ordering::SeqCst) {
        0 => query_param(query, "per_page")
            .unwrap_or(GITHUB_DEFAULT_PER_PAGE)
            .clamp(1, GITHUB_MAX_PER_PAGE),
        n => n,
    };
    let page = query_param(query, "page").unwrap_or(1).max(1);
    let pages = tags.len().div_ceil(per_page).max(1);
    let items: Vec<Value> = tags
        .iter()
        .skip((page - 1).saturating_mul(per_page))
        .take(per_page)
        .map(|t| release_json(state, repo, t, releases.get(t)))
        .collect();
    let mut r = json_reply(StatusCode::OK, &Value::Array(items));
    let link_base = if state.knobs.foreign_next_link.load(Ordering::SeqCst) {
        &state.asset_base
    } else {
        &state.base
    };
    let link = |p: usize, rel: &str| {
        format!("<{link_base}/repos/{repo}/releases?per_page={per_page}&page={p}>; rel=\"{rel}\"")
    };
    let mut links = Vec::new();
    if page < pages {
        links.push(link(page + 1, "next"));
        links.push(link(pages, "last"));
    }
    if page > 1 {
        links.push(link(1, "first"));
        links.push(link(page - 1, "prev"));
    }
    if !links.is_empty() {
        r = with_header(r, "link", &links.join(", "));
    }
    r
}

fn release_by_tag(state: &State, repo: &str, tag: &str) -> Response<Body> {
    let releases = scan(state, repo);
    let listed =
        releases.contains_key(tag) || state.knobs.extra_tags(repo).iter().any(|t| t == tag);
    if !listed || state.knobs.flags(repo, tag).draft {
        return message(StatusCode::NOT_FOUND, "Not Found");
    }
    json_reply(
        StatusCode::OK,
        &release_json(state, repo, tag, releases.get(tag)),
    )
}

fn find_asset(state: &State, repo: Option<&str>, id: u64) -> Option<(String, String, PathBuf)> {
    let repos: Vec<&String> = match repo {
        Some(r) => state.repos.keys().filter(|k| k.as_str() == r).collect(),
        None => state.repos.keys().collect(),
    };
    repos.into_iter().find_map(|repo| {
        scan(state, repo).into_iter().find_map(|(tag, files)| {
            files
                .into_iter()
                .find(|(name, _)| asset_id(repo, &tag, name) == id)
                .map(|(name, path)| (tag.clone(), name, path))
        })
    })
}

fn asset(state: &State, repo: &str, id: u64, accept: Option<&str>) -> Response<Body> {
    let Some((tag, name, path)) = find_asset(state, Some(repo), id) else {
        return message(StatusCode::NOT_FOUND, "Not Found");
    };
    // As on GitHub, only `Accept: application/octet-stream` gets the content; anything else
    // gets the asset's description.
    if accept != Some("application/octet-stream") {
        let release = release_json(state, repo, &tag, scan(state, repo).get(&tag));
        let described = release["assets"]
            .as_array()
            .and_then(|a| a.iter().find(|x| x["name"] == name.as_str()).cloned())
            .unwrap_or(Value::Null);
        return json_reply(StatusCode::OK, &described);
    }
    if state.knobs.redirect_assets.load(Ordering::SeqCst) {
        let r = reply(StatusCode::FOUND, "text/plain", full(""));
        return with_header(r, "location", &format!("{}/assets/{id}", state.asset_base));
    }
    file_body(state, &path)
}

fn download_asset(state: &State, id: u64) -> Response<Body> {
    match find_asset(state, None, id) {
        Some((_, _, path)) => file_body(state, &path),
        None => message(StatusCode::NOT_FOUND, "Not Found"),
    }
}

fn gitlab_file(
    state: &State,
    project: &str,
    package: &str,
    version: &str,
    file: &str,
) -> Response<Body> {
    let Some(labels) = state.repos.get(project) else {
        return message(StatusCode::NOT_FOUND, "404 Project Not Found");
    };
    if !labels.iter().any(|l| l == package) || !safe(version) || !safe(file) {
        return message(StatusCode::NOT_FOUND, "404 Package Not Found");
    }
    let path = state.dir.join(package).join(version).join(file);
    if !path.is_file() {
        return message(StatusCode::NOT_FOUND, "404 Package File Not Found");
    }
    file_body(state, &path)
}

fn file_body(state: &State, path: &Path) -> Response<Body> {
    if let Some(o) = state.knobs.oversized() {
        let body = if o.content_length {
            full(vec![b'#'; o.bytes])
        } else {
            // Unknown length: hyper sends it chunked.
            const CHUNK: usize = 64 * 1024;
            let chunks: Vec<Result<Frame<Bytes>, Infallible>> = (0..o.bytes.div_ceil(CHUNK))
                .map(|i| {
                    let n = CHUNK.min(o.bytes - i * CHUNK);
                    Ok(Frame::data(Bytes::from(vec![b'#'; n])))
                })
                .collect();
            BodyExt::boxed(StreamBody::new(futures::stream::iter(chunks)))
        };
        return reply(StatusCode::OK, "application/octet-stream", body);
    }
    match std::fs::read(path) {
        Ok(b) => reply(StatusCode::OK, "application/octet-stream", full(b)),
        Err(_) => message(StatusCode::NOT_FOUND, "Not Found"),
    }
}

/// A temporary directory in clusterctl's local-repository layout, removed when dropped.
#[derive(Debug)]
pub struct ReleaseTree {
    root: PathBuf,
}

impl ReleaseTree {
    /// A new empty tree under the system's temporary directory.
    pub fn new() -> io::Result<ReleaseTree> {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        let root = std::env::temp_dir().join(format!(
            "capi-fake-remotes-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&root)?;
        Ok(ReleaseTree { root })
    }

    /// The tree's root (the server's `dir`).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// Writes `contents` as `<label>/<version>/<file>`.
    pub fn add(
        &self,
        label: &str,
        version: &str,
        file: &str,
        contents: impl AsRef<[u8]>,
    ) -> io::Result<&Self> {
        for seg in [label, version, file] {
            if !safe(seg) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("{seg:?} is not a plain path segment"),
                ));
            }
        }
        let dir = self.root.join(label).join(version);
        std::fs::create_dir_all(&dir)?;
        std::fs::write(dir.join(file), contents)?;
        Ok(self)
    }
}

impl Drop for ReleaseTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

#[cfg(test)]
#[allow(clippy::expect_used)]
mod tests {
    use super::*;

    #[test]
    fn releases_are_listed_newest_first() {
        let mut tags: Vec<String> = ["v0.9.0", "notes", "v0.10.0", "v0.10.0-rc.1", "v1.0.0"]
            .iter()
            .map(std::string::ToString::to_string)
            .collect();
        newest_first(&mut tags);
        assert_eq!(
            tags,
            ["v1.0.0", "v0.10.0", "v0.10.0-rc.1", "v0.9.0", "notes"]
        );
    }

    #[test]
    fn query_parameters() {
        assert_eq!(query_param("per_page=100&page=3", "page"), Some(3));
        assert_eq!(query_param("per_page=100&page=3", "per_page"), Some(100));
        assert_eq!(query_param("xpage=3", "page"), None);
    }

    #[test]
    fn tree_refuses_path_tricks() {
        let t = ReleaseTree::new().expect("tree");
        assert!(t.add("l", "..", "f", "x").is_err());
        assert!(t.add("l", "v1", "a/b", "x").is_err());
        t.add("l", "v1", "f", "x").expect("add");
        assert!(t.path().join("l/v1/f").is_file());
        let root = t.path().to_path_buf();
        drop(t);
        assert!(!root.exists());
    }
}
