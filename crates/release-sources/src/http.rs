//! HTTP fetching shared by the remote sources: connect, read and total timeouts; retries with
//! exponential backoff on server errors, timeouts and broken connections; a size limit enforced
//! while streaming; redirects only to allowed hosts; status codes mapped to [`SourceError`].
//!
//! Tokens travel only in the `Authorization` header (reqwest drops it when a redirect leaves the
//! host), and URLs are stripped of user info and token-like query values before they appear in
//! an error or a log line, so no credential leaves through either.

use std::{
    collections::BTreeMap,
    fmt,
    sync::Mutex,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use reqwest::{StatusCode, Url, header::HeaderMap, redirect};

use super::{
    MAX_FILE_BYTES, SourceError,
    retry::{Backoff, retry},
};

/// The rate limit quota a server announced in its last answer (GitHub's `x-ratelimit-*`,
/// GitLab's `ratelimit-*` headers).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RateLimit {
    /// The server's host name.
    pub host: String,
    /// Requests left in the current window.
    pub remaining: u64,
    /// Requests allowed per window, when announced.
    pub limit: Option<u64>,
}

/// The last quota each host announced: one entry per host the configured sources name, so
/// the set stays as small as the providers' fetch configurations.
static RATE_LIMITS: Mutex<BTreeMap<String, RateLimit>> = Mutex::new(BTreeMap::new());

/// The rate limit quotas the servers answered with most recently, by host.
pub fn rate_limits() -> Vec<RateLimit> {
    RATE_LIMITS
        .lock()
        .map(|m| m.values().cloned().collect())
        .unwrap_or_default()
}

/// The quota an answer from `host` announces, if it announces one.
fn announced_rate_limit(host: &str, headers: &HeaderMap) -> Option<RateLimit> {
    let number = |names: [&str; 2]| {
        names
            .iter()
            .find_map(|n| header(headers, n).and_then(|v| v.parse::<u64>().ok()))
    };
    Some(RateLimit {
        host: host.to_string(),
        remaining: number(["x-ratelimit-remaining", "ratelimit-remaining"])?,
        limit: number(["x-ratelimit-limit", "ratelimit-limit"]),
    })
}

fn record_rate_limit(url: &Url, headers: &HeaderMap) {
    let Some(limit) = host_of(url).and_then(|h| announced_rate_limit(&h, headers)) else {
        return;
    };
    if let Ok(mut m) = RATE_LIMITS.lock() {
        m.insert(limit.host.clone(), limit);
    }
}

/// Most redirects followed for one request.
const MAX_REDIRECTS: usize = 5;

/// How a remote source behaves on the wire.
#[derive(Debug, Clone)]
pub struct HttpConfig {
    /// Attempts per request (1 = no retry). Only temporary failures are retried.
    pub attempts: u32,
    /// Delay before the first retry; doubled after each, up to `max_backoff`.
    pub initial_backoff: Duration,
    /// Longest delay between two attempts.
    pub max_backoff: Duration,
    /// Timeout for establishing a connection.
    pub connect_timeout: Duration,
    /// Longest wait for the next bytes of an answer (a stalled connection).
    pub read_timeout: Duration,
    /// Timeout of one whole attempt, body included.
    pub timeout: Duration,
    /// Largest body accepted, after decompression.
    pub max_bytes: usize,
    /// Hosts redirects may lead to besides the source's own host.
    pub redirect_hosts: Vec<String>,
    /// Whether plain `http://` sources are accepted where a source would otherwise insist on
    /// https (GitLab package URLs); meant for tests against local servers.
    pub allow_http: bool,
    /// PEM certificates trusted besides the public roots (a private CA of an internal mirror).
    pub ca_bundle: Option<String>,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            attempts: 4,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(8),
            connect_timeout: Duration::from_secs(10),
            read_timeout: Duration::from_secs(30),
            // A components file of tens of MB over a slow link still fits.
            timeout: Duration::from_secs(120),
            max_bytes: MAX_FILE_BYTES,
            redirect_hosts: Vec::new(),
            allow_http: false,
            ca_bundle: None,
        }
    }
}

impl HttpConfig {
    /// The retry schedule these settings ask for.
    pub(crate) fn backoff(&self) -> Backoff {
        Backoff::new(self.attempts, self.initial_backoff, self.max_backoff)
    }
}

/// An HTTP client bound to one source: its allowed hosts, limits and credentials.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    config: HttpConfig,
    credentials: Credentials,
}

/// How a source authenticates.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum Credentials {
    /// No credentials.
    #[default]
    None,
    /// HTTP basic authentication.
    Basic {
        /// User name.
        user: String,
        /// Password.
        password: String,
    },
    /// A bearer token.
    Bearer(String),
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Credentials::None => f.write_str("None"),
            Credentials::Basic { user, .. } => write!(f, "Basic({user}, <redacted>)"),
            Credentials::Bearer(_) => f.write_str("Bearer(<redacted>)"),
        }
    }
}

impl fmt::Debug for Http {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Http")
            .field("config", &self.config)
            .field("credentials", &self.credentials)
            .finish()
    }
}

/// The answer to a successful request.
#[derive(Debug)]
pub struct Response {
    /// Response headers.
    pub headers: HeaderMap,
    /// The body.
    pub body: Vec<u8>,
}

/// Why the redirect policy stopped a request; found again in reqwest's error chain.
#[derive(Debug)]
struct RedirectRefused(String);

impl fmt::Display for RedirectRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for RedirectRefused {}

/// `url` fit for errors and logs: no user info, and the values of token-like query parameters
/// replaced. Unparsable input is not echoed, since it might be a credential itself.
pub fn redact_url(url: &str) -> String {
    let Ok(mut u) = Url::parse(url) else {
        return "<invalid URL>".into();
    };
    // Setting these only fails for URLs that cannot have user info, which then have none.
    let _ = u.set_username("");
    let _ = u.set_password(None);
    if u.query().is_some() {
        let pairs: Vec<(String, String)> = u
            .query_pairs()
            .map(|(k, v)| {
                let lower = k.to_ascii_lowercase();
                let secret = ["token", "secret", "signature", "credential", "password"]
                    .iter()
                    .any(|s| lower.contains(s));
                let v = if secret {
                    "REDACTED".into()
                } else {
                    v.into_owned()
                };
                (k.into_owned(), v)
            })
            .collect();
        u.query_pairs_mut().clear().extend_pairs(pairs);
    }
    u.to_string()
}

/// Whether two URLs share scheme, host and port.
pub fn same_origin(a: &str, b: &str) -> bool {
    match (Url::parse(a), Url::parse(b)) {
        (Ok(a), Ok(b)) => a.origin() == b.origin(),
        _ => false,
    }
}

fn host_of(url: &Url) -> Option<String> {
    url.host_str().map(str::to_ascii_lowercase)
}

impl Http {
    /// A client for a source at `base_url`, sending `token` as a bearer token when given.
    /// Redirects may go to `base_url`'s host and to `config.redirect_hosts`, never from https
    /// to plain http.
    pub fn new(
        base_url: &str,
        token: Option<String>,
        config: HttpConfig,
    ) -> Result<Http, SourceError> {
        let credentials = match token.filter(|t| !t.is_empty()) {
            Some(t) => Credentials::Bearer(t),
            None => Credentials::None,
        };
        Http::with_credentials(base_url, credentials, config)
    }

    /// Like [`Http::new`], with any kind of credentials.
    pub fn with_credentials(
        base_url: &str,
        credentials: Credentials,
        mut config: HttpConfig,
    ) -> Result<Http, SourceError> {
        let base = Url::parse(base_url)
            .map_err(|_| SourceError::Invalid(format!("{} is not a URL", redact_url(base_url))))?;
        if !matches!(base.scheme(), "https" | "http") {
            return Err(SourceError::Invalid(format!(
                "{}: only https (or http) sources are supported",
                redact_url(base_url)
            )));
        }
        let own = host_of(&base)
            .ok_or_else(|| SourceError::Invalid(format!("{} has no host", redact_url(base_url))))?;
        for h in &mut config.redirect_hosts {
            *h = h.to_ascii_lowercase();
        }
        config.redirect_hosts.push(own);
        config.redirect_hosts.sort();
        config.redirect_hosts.dedup();
        let allowed = config.redirect_hosts.clone();
        let https_only = base.scheme() == "https";
        let policy = redirect::Policy::custom(move |attempt| {
            let host = host_of(attempt.url()).unwrap_or_default();
            if attempt.previous().len() >= MAX_REDIRECTS {
                attempt.error(RedirectRefused(format!(
                    "more than {MAX_REDIRECTS} redirects"
                )))
            } else if https_only && attempt.url().scheme() != "https" {
                attempt.error(RedirectRefused(format!(
                    "redirect to http://{host} refused: a download over https never continues over plain http"
                )))
            } else if allowed.contains(&host) {
                attempt.follow()
            } else {
                attempt.error(RedirectRefused(format!(
                    "redirect to {host} refused: no request outside the configured source (allowed hosts: {})",
                    allowed.join(", ")
                )))
            }
        });
        let mut builder = crate::trust::with_extra_roots(reqwest::Client::builder());
        if let Some(pem) = &config.ca_bundle {
            for c in crate::trust::parse(pem.as_bytes())? {
                builder = builder.add_root_certificate(c);
            }
        }
        let client = builder
            .redirect(policy)
            .connect_timeout(config.connect_timeout)
            .read_timeout(config.read_timeout)
            .timeout(config.timeout)
            .user_agent(concat!(
                "capi-provider-operator/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| SourceError::Invalid(format!("cannot set up an HTTP client: {e}")))?;
        Ok(Http {
            client,
            config,
            credentials,
        })
    }

    /// The limits this client enforces.
    pub fn config(&self) -> &HttpConfig {
        &self.config
    }

    /// GETs `url` with `accept`, retrying temporary failures with exponential backoff.
    pub async fn get(&self, url: &str, accept: &str) -> Result<Response, SourceError> {
        self.get_limited(url, accept, self.config.max_bytes).await
    }

    /// [`Http::get`] with a lower size limit for this answer (the configured one still applies
    /// when it is lower): listings are refused well before a file would be.
    pub async fn get_limited(
        &self,
        url: &str,
        accept: &str,
        limit: usize,
    ) -> Result<Response, SourceError> {
        let limit = limit.min(self.config.max_bytes);
        let shown = redact_url(url);
        retry(self.backoff(), &shown, || {
            self.get_once(url, &shown, accept, limit)
        })
        .await
    }

    /// The retry schedule of this client's requests.
    fn backoff(&self) -> Backoff {
        self.config.backoff()
    }

    async fn get_once(
        &self,
        url: &str,
        shown: &str,
        accept: &str,
        limit: usize,
    ) -> Result<Response, SourceError> {
        tracing::debug!(url = %shown, "GET");
        let mut req = self.client.get(url).header("Accept", accept);
        match &self.credentials {
            Credentials::None => {}
            Credentials::Basic { user, password } => req = req.basic_auth(user, Some(password)),
            Credentials::Bearer(t) => req = req.bearer_auth(t),
        }
        let mut resp = req.send().await.map_err(|e| transport(shown, &e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        record_rate_limit(resp.url(), &headers);
        if !status.is_success() {
            return Err(status_error(shown, status, &headers));
        }
        let too_large = || SourceError::TooLarge {
            what: shown.to_string(),
            limit,
        };
        // Announced sizes are refused before any byte is read; the count below covers answers
        // that announce none (chunked) or lie.
        if resp.content_length().is_some_and(|len| len > limit as u64) {
            return Err(too_large());
        }
        let mut body = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(|e| transport(shown, &e))? {
            if body.len() + chunk.len() > limit {
                return Err(too_large());
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response { headers, body })
    }
}

fn transport(shown: &str, e: &reqwest::Error) -> SourceError {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if let Some(r) = s.downcast_ref::<RedirectRefused>() {
            return SourceError::Invalid(format!("{shown}: {r}"));
        }
        // An untrusted certificate does not heal by retrying: say what fixes it. rustls' error
        // sits inside an io::Error, whose source() skips it, hence the text.
        let text = s.to_string();
        if text.to_ascii_lowercase().contains("certificate") {
            return SourceError::Invalid(format!(
                "{shown}: the server's TLS certificate is not trusted ({text}); give the CA that signed it (HTTP_CA_BUNDLE in the provider's Secret)"
            ));
        }
        src = s.source();
    }
    let reason = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "connection failed"
    } else if e.is_redirect() {
        return SourceError::Invalid(format!("{shown}: too many redirects"));
    } else if e.is_body() || e.is_decode() {
        "the connection broke while reading the answer"
    } else {
        "the request failed"
    };
    SourceError::Transient {
        what: shown.to_string(),
        reason: reason.into(),
    }
}

fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// When a rate limit ends, as far as the answer says.
fn rate_limit_hint(headers: &HeaderMap) -> String {
    if let Some(s) = header(headers, "retry-after").and_then(|v| v.parse::<u64>().ok()) {
        return format!(" (retry after {s} s)");
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    match header(headers, "x-ratelimit-reset").and_then(|v| v.parse::<u64>().ok()) {
        Some(reset) if reset > now => format!(" (resets in {} s)", reset - now),
        _ => String::new(),
    }
}

fn status_error(shown: &str, status: StatusCode, headers: &HeaderMap) -> SourceError {
    let quota_spent = header(headers, "x-ratelimit-remaining") == Some("0");
    match status {
        StatusCode::NOT_FOUND | StatusCode::GONE => SourceError::NotFound(shown.to_string()),
        StatusCode::TOO_MANY_REQUESTS => {
            SourceError::RateLimited(format!("{shown}{}", rate_limit_hint(headers)))
        }
        // GitHub answers spent quotas and secondary rate limits with 403, told apart from a
        // refused token only by these headers.
        StatusCode::FORBIDDEN if quota_spent || headers.contains_key("retry-after") => {
            SourceError::RateLimited(format!("{shown}{}", rate_limit_hint(headers)))
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            SourceError::Unauthorized(shown.to_string())
        }
        s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT => SourceError::Transient {
            what: shown.to_string(),
            reason: format!("HTTP {}", s.as_u16()),
        },
        s => SourceError::Invalid(format!("{shown}: unexpected HTTP {}", s.as_u16())),
    }
}

/// The `rel="next"` link of a `Link` header (RFC 8288), if any.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = header(headers, "link")?;
    link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .filter_map(|p| p.trim().strip_prefix("rel="))
            .any(|rel| {
                rel.trim_matches('"')
                    .split_whitespace()
                    .any(|r| r == "next")
            })
            .then(|| {
                target
                    .trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

#[cfg(test)]
#[allow(clippy::expect_used)]
pub(crate) mod tests {
    use super::*;

    /// Settings whose retry delays double past their cap within a few retries.
    pub(crate) fn capped_config() -> HttpConfig {
        HttpConfig {
            attempts: 8,
            initial_backoff: Duration::from_millis(500),
            max_backoff: Duration::from_secs(2),
            ..HttpConfig::default()
        }
    }
    use reqwest::header::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_static(v));
        }
        h
    }

    #[test]
    fn announced_rate_limits_are_read_from_github_and_gitlab_headers() {
        let github = headers(&[("x-ratelimit-remaining", "12"), ("x-ratelimit-limit", "60")]);
        assert_eq!(
            announced_rate_limit("api.github.com", &github),
            Some(RateLimit {
                host: "api.github.com".into(),
                remaining: 12,
                limit: Some(60)
            })
        );
        let gitlab = headers(&[("ratelimit-remaining", "1999")]);
        let got = announced_rate_limit("gitlab.com", &gitlab).expect("announced");
        assert_eq!((got.remaining, got.limit), (1999, None));
        assert_eq!(announced_rate_limit("x", &headers(&[])), None);
        assert_eq!(
            announced_rate_limit("x", &headers(&[("x-ratelimit-remaining", "many")])),
            None
        );
    }

    #[test]
    fn next_links_are_found() {
        let h = headers(&[(
            "link",
            "<https://api.github.com/x?page=9>; rel=\"last\", <https://api.github.com/x?page=3>; rel=\"next\"",
        )]);
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/x?page=3")
        );
        let h = headers(&[("link", "<https://a/x?page=2>; rel=next")]);
        assert_eq!(next_link(&h).as_deref(), Some("https://a/x?page=2"));
        let h = headers(&[("link", "<https://a/x?page=1>; rel=\"prev\"")]);
        assert_eq!(next_link(&h), None);
        assert_eq!(next_link(&HeaderMap::new()), None);
    }

    #[test]
    fn statuses_map_to_error_classes() {
        let none = HeaderMap::new();
        let e = status_error("u", StatusCode::NOT_FOUND, &none);
        assert_eq!(e, SourceError::NotFound("u".into()));
        assert!(matches!(
            status_error("u", StatusCode::BAD_GATEWAY, &none),
            SourceError::Transient { .. }
        ));
        assert!(matches!(
            status_error("u", StatusCode::UNAUTHORIZED, &none),
            SourceError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("u", StatusCode::FORBIDDEN, &none),
            SourceError::Unauthorized(_)
        ));
        let e = status_error(
            "u",
            StatusCode::TOO_MANY_REQUESTS,
            &headers(&[("retry-after", "30")]),
        );
        assert_eq!(e, SourceError::RateLimited("u (retry after 30 s)".into()));
        assert!(matches!(
            status_error(
                "u",
                StatusCode::FORBIDDEN,
                &headers(&[("x-ratelimit-remaining", "0")])
            ),
            SourceError::RateLimited(_)
        ));
        assert!(matches!(
            status_error(
                "u",
                StatusCode::FORBIDDEN,
                &headers(&[("x-ratelimit-remaining", "12")])
            ),
            SourceError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("u", StatusCode::IM_A_TEAPOT, &none),
            SourceError::Invalid(_)
        ));
    }

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact_url("https://user:pa55@gitlab.example/api/v4/x?private_token=glpat-1&page=2"),
            "https://gitlab.example/api/v4/x?private_token=REDACTED&page=2"
        );
        assert_eq!(
            redact_url("https://api.github.com/repos/o/r"),
            "https://api.github.com/repos/o/r"
        );
        assert_eq!(redact_url("ghp_notaurl"), "<invalid URL>");
    }

    #[test]
    fn origins() {
        assert!(same_origin(
            "https://a.example/x?page=2",
            "https://a.example/y"
        ));
        assert!(!same_origin("https://a.example/x", "http://a.example/x"));
        assert!(!same_origin(
            "https://a.example/x",
            "https://a.example:8443/x"
        ));
        assert!(!same_origin("https://a.example/x", "https://b.example/x"));
    }

    #[test]
    fn debug_hides_the_token() {
        let h = Http::new(
            "https://api.github.com",
            Some("ghp_s3cret".into()),
            HttpConfig::default(),
        )
        .expect("client");
        let shown = format!("{h:?}");
        assert!(!shown.contains("ghp_s3cret"), "{shown}");
        assert!(shown.contains("<redacted>"));
    }

    #[test]
    fn http_retries_stop_doubling_at_the_cap() {
        let h = Http::new("https://api.github.com", None, capped_config()).expect("client");
        crate::retry::tests::assert_capped(h.backoff());
    }

    #[test]
    fn bad_bases_are_refused() {
        for base in ["not a url", "ftp://example.com", "file:///tmp"] {
            assert!(
                matches!(
                    Http::new(base, None, HttpConfig::default()),
                    Err(SourceError::Invalid(_))
                ),
                "{base}"
            );
        }
    }
}
