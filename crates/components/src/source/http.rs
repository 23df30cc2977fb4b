//! HTTP fetching shared by the remote sources: timeouts, retries with exponential backoff on
//! 5xx and network errors, a size limit enforced while streaming, redirects only to allowed
//! hosts, and status codes mapped to [`SourceError`]. Tokens never appear in errors or logs.

use std::time::Duration;

use reqwest::{StatusCode, header::HeaderMap, redirect};

use super::{MAX_FILE_BYTES, SourceError};

/// How a remote source behaves on the wire.
#[derive(Clone)]
pub struct HttpConfig {
    /// Attempts per request (1 = no retry).
    pub attempts: u32,
    /// Delay before the first retry; doubled after each.
    pub initial_backoff: Duration,
    /// Timeout of one request.
    pub timeout: Duration,
    /// Largest body accepted.
    pub max_bytes: usize,
    /// Hosts redirects may lead to (the source's own host is always allowed).
    pub redirect_hosts: Vec<String>,
}

impl Default for HttpConfig {
    fn default() -> HttpConfig {
        HttpConfig {
            attempts: 4,
            initial_backoff: Duration::from_millis(500),
            timeout: Duration::from_secs(60),
            max_bytes: MAX_FILE_BYTES,
            redirect_hosts: Vec::new(),
        }
    }
}

impl std::fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpConfig")
            .field("attempts", &self.attempts)
            .field("timeout", &self.timeout)
            .field("max_bytes", &self.max_bytes)
            .field("redirect_hosts", &self.redirect_hosts)
            .finish()
    }
}

/// An HTTP client bound to one source: its allowed hosts and its credentials.
#[derive(Clone)]
pub struct Http {
    client: reqwest::Client,
    config: HttpConfig,
    token: Option<String>,
}

impl std::fmt::Debug for Http {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Http")
            .field("config", &self.config)
            .field("token", &self.token.as_ref().map(|_| "<redacted>"))
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

fn host_of(url: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .ok()?
        .host_str()
        .map(|h| h.to_ascii_lowercase())
}

impl Http {
    /// A client for a source at `base_url`, sending `token` as a bearer token when given.
    pub fn new(
        base_url: &str,
        token: Option<String>,
        mut config: HttpConfig,
    ) -> Result<Http, SourceError> {
        let own = host_of(base_url)
            .ok_or_else(|| SourceError::Invalid(format!("{base_url:?} is not a URL")))?;
        config.redirect_hosts.push(own);
        let allowed = config.redirect_hosts.clone();
        let policy = redirect::Policy::custom(move |attempt| {
            let host = attempt.url().host_str().map(|h| h.to_ascii_lowercase());
            if attempt.previous().len() > 5 {
                attempt.error("too many redirects")
            } else if host.is_some_and(|h| allowed.contains(&h)) {
                attempt.follow()
            } else {
                let to = attempt.url().host_str().unwrap_or("?").to_string();
                attempt.error(format!(
                    "redirect to {to} refused: no request leaves the configured source"
                ))
            }
        });
        let client = reqwest::Client::builder()
            .redirect(policy)
            .connect_timeout(Duration::from_secs(10))
            .timeout(config.timeout)
            .user_agent(concat!(
                "capi-provider-operator/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| SourceError::Invalid(format!("HTTP client: {e}")))?;
        Ok(Http {
            client,
            config,
            token: token.filter(|t| !t.is_empty()),
        })
    }

    /// GETs `url` with `accept`, retrying temporary failures.
    pub async fn get(&self, url: &str, accept: &str) -> Result<Response, SourceError> {
        let mut delay = self.config.initial_backoff;
        let mut attempt = 1;
        loop {
            match self.get_once(url, accept).await {
                Err(e @ SourceError::Transient { .. }) if attempt < self.config.attempts => {
                    tracing::debug!(url, attempt, error = %e, "retrying");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    async fn get_once(&self, url: &str, accept: &str) -> Result<Response, SourceError> {
        let mut req = self.client.get(url).header("Accept", accept);
        if let Some(t) = &self.token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.map_err(|e| transport(url, &e))?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if !status.is_success() {
            return Err(status_error(url, status, &headers));
        }
        if let Some(len) = resp.content_length()
            && len as usize > self.config.max_bytes
        {
            return Err(SourceError::TooLarge {
                what: url.to_string(),
                limit: self.config.max_bytes,
            });
        }
        let mut body = Vec::new();
        let mut resp = resp;
        while let Some(chunk) = resp.chunk().await.map_err(|e| transport(url, &e))? {
            if body.len() + chunk.len() > self.config.max_bytes {
                return Err(SourceError::TooLarge {
                    what: url.to_string(),
                    limit: self.config.max_bytes,
                });
            }
            body.extend_from_slice(&chunk);
        }
        Ok(Response { headers, body })
    }
}

fn transport(url: &str, e: &reqwest::Error) -> SourceError {
    if e.is_redirect() {
        // The policy's message says which host was refused.
        let mut msg = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            msg = s.to_string();
            src = s.source();
        }
        return SourceError::Invalid(format!("{url}: {msg}"));
    }
    SourceError::Transient {
        what: url.to_string(),
        reason: if e.is_timeout() {
            "timed out".into()
        } else if e.is_connect() {
            "connection failed".into()
        } else {
            "the connection broke".into()
        },
    }
}

fn status_error(url: &str, status: StatusCode, headers: &HeaderMap) -> SourceError {
    let remaining_zero = headers
        .get("x-ratelimit-remaining")
        .and_then(|v| v.to_str().ok())
        == Some("0");
    match status {
        StatusCode::NOT_FOUND => SourceError::NotFound(url.to_string()),
        StatusCode::TOO_MANY_REQUESTS => SourceError::RateLimited(url.to_string()),
        StatusCode::FORBIDDEN if remaining_zero || headers.contains_key("retry-after") => {
            SourceError::RateLimited(url.to_string())
        }
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            SourceError::Unauthorized(url.to_string())
        }
        s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT => SourceError::Transient {
            what: url.to_string(),
            reason: format!("HTTP {}", s.as_u16()),
        },
        s => SourceError::Invalid(format!("{url}: unexpected HTTP {}", s.as_u16())),
    }
}

/// The `rel="next"` link of a `Link` header.
pub fn next_link(headers: &HeaderMap) -> Option<String> {
    let link = headers.get("link")?.to_str().ok()?;
    link.split(',').find_map(|part| {
        let (url, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| {
                url.trim()
                    .trim_start_matches('<')
                    .trim_end_matches('>')
                    .to_string()
            })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::HeaderValue;

    #[test]
    fn next_links_are_found() {
        let mut h = HeaderMap::new();
        h.insert(
            "link",
            HeaderValue::from_static(
                "<https://api.github.com/x?page=3>; rel=\"next\", <https://api.github.com/x?page=9>; rel=\"last\"",
            ),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://api.github.com/x?page=3")
        );
        h.insert(
            "link",
            HeaderValue::from_static("<https://a/x?page=1>; rel=\"prev\""),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn statuses_map_to_error_classes() {
        let h = HeaderMap::new();
        assert!(matches!(
            status_error("u", StatusCode::NOT_FOUND, &h),
            SourceError::NotFound(_)
        ));
        assert!(status_error("u", StatusCode::BAD_GATEWAY, &h).is_transient());
        assert!(matches!(
            status_error("u", StatusCode::UNAUTHORIZED, &h),
            SourceError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("u", StatusCode::TOO_MANY_REQUESTS, &h),
            SourceError::RateLimited(_)
        ));
        let mut rl = HeaderMap::new();
        rl.insert("x-ratelimit-remaining", HeaderValue::from_static("0"));
        assert!(matches!(
            status_error("u", StatusCode::FORBIDDEN, &rl),
            SourceError::RateLimited(_)
        ));
        assert!(matches!(
            status_error("u", StatusCode::FORBIDDEN, &h),
            SourceError::Unauthorized(_)
        ));
    }
}
