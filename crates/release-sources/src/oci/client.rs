//! The registry client: one HTTP client per registry, requests retried with backoff and
//! authenticated when challenged, answers read within limits, and statuses mapped to errors.

use std::{fmt, future::Future, time::Duration};

use reqwest::{
    Method, StatusCode, Url,
    header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue},
    redirect,
};
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::{
    MAX_ERROR_BYTES, MAX_MANIFEST_BYTES, MAX_TOKEN_BYTES, SourceError,
    auth::{
        Access, Authenticator, Challenge, OciCredentials, Reaction, RegistryIdentity, TokenRequest,
        parse_challenges, token_from_answer,
    },
    invalid,
    reference::OciReference,
};
use crate::{
    http::HttpConfig,
    retry::{Backoff, retry},
};

/// How an OCI source behaves on the wire.
#[derive(Clone)]
pub struct OciConfig {
    /// Retries, backoff, timeout, blob size limit (`max_bytes`, default
    /// [`MAX_FILE_BYTES`](crate::MAX_FILE_BYTES)) and extra hosts blob redirects may lead to
    /// (the registry itself is always allowed).
    pub http: HttpConfig,
    /// Largest manifest or tags page accepted.
    pub max_manifest_bytes: usize,
    /// PEM certificates (bundles allowed) trusted in addition to the built-in roots, for
    /// registries with a private certificate authority.
    pub root_certificates_pem: Vec<Vec<u8>>,
}

impl Default for OciConfig {
    fn default() -> OciConfig {
        OciConfig {
            http: HttpConfig::default(),
            max_manifest_bytes: MAX_MANIFEST_BYTES,
            root_certificates_pem: Vec::new(),
        }
    }
}

impl fmt::Debug for OciConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciConfig")
            .field("http", &self.http)
            .field("max_manifest_bytes", &self.max_manifest_bytes)
            .field("root_certificates", &self.root_certificates_pem.len())
            .finish()
    }
}

/// One request, replayable for retries and after authenticating.
pub(super) struct Call<'a> {
    pub(super) method: Method,
    pub(super) url: Url,
    pub(super) accept: Option<&'a str>,
    pub(super) content_type: Option<&'a str>,
    pub(super) body: Option<&'a [u8]>,
    pub(super) limit: usize,
    pub(super) access: Access,
    pub(super) what: &'a str,
}

pub(super) struct Answer {
    pub(super) headers: HeaderMap,
    pub(super) body: Vec<u8>,
    pub(super) url: Url,
}

pub(super) struct Registry {
    pub(super) client: reqwest::Client,
    pub(super) base: Url,
    pub(super) reference: OciReference,
    pub(super) config: OciConfig,
    auth: Authenticator,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("reference", &self.reference.to_string())
            .field("credentials", self.auth.credentials())
            .field("config", &self.config)
            .finish()
    }
}

pub(super) fn origin(u: &Url) -> (String, Option<String>, Option<u16>) {
    (
        u.scheme().to_string(),
        u.host_str().map(str::to_ascii_lowercase),
        u.port_or_known_default(),
    )
}

impl Registry {
    pub(super) fn new(
        reference: &OciReference,
        credentials: OciCredentials,
        config: OciConfig,
    ) -> Result<Registry, SourceError> {
        let base = Url::parse(&reference.base_url()).map_err(|_| {
            invalid(format!(
                "{} is not a usable registry address",
                reference.registry
            ))
        })?;
        let own = origin(&base);
        let extra: Vec<String> = config
            .http
            .redirect_hosts
            .iter()
            .map(|h| h.to_ascii_lowercase())
            .collect();
        // Blob downloads may be redirected, but only within the registry (or to hosts the
        // configuration names, over HTTPS): credentials and trust stay with the registry.
        let policy = redirect::Policy::custom(move |attempt| {
            let to = origin(attempt.url());
            let extra_ok = to.0 == "https" && to.1.as_ref().is_some_and(|h| extra.contains(h));
            if attempt.previous().len() > 5 {
                attempt.error("too many redirects")
            } else if to == own || extra_ok {
                attempt.follow()
            } else {
                let host = to.1.unwrap_or_else(|| "?".into());
                attempt.error(format!(
                    "redirect to {}://{host} refused: downloads stay on the registry",
                    to.0
                ))
            }
        });
        let mut builder = crate::trust::with_extra_roots(reqwest::Client::builder())
            .redirect(policy)
            .connect_timeout(config.http.timeout.min(Duration::from_secs(10)))
            .timeout(config.http.timeout)
            .user_agent(concat!(
                "capi-provider-operator/",
                env!("CARGO_PKG_VERSION")
            ));
        for pem in &config.root_certificates_pem {
            let certs = reqwest::Certificate::from_pem_bundle(pem).map_err(|e| {
                invalid(format!("root certificate for {}: {e}", reference.registry))
            })?;
            for cert in certs {
                builder = builder.add_root_certificate(cert);
            }
        }
        let client = builder
            .build()
            .map_err(|e| invalid(format!("HTTP client: {e}")))?;
        Ok(Registry {
            client,
            base,
            reference: reference.clone(),
            config,
            auth: Authenticator::new(credentials),
        })
    }

    pub(super) fn url(&self, path: &str) -> Result<Url, SourceError> {
        self.base
            .join(&format!("/v2/{}/{path}", self.reference.repository))
            .map_err(|_| invalid(format!("cannot build a URL for {}", self.reference.name())))
    }

    pub(super) fn name(&self) -> String {
        self.reference.name()
    }

    pub(super) fn scope(&self, access: Access) -> String {
        let actions = match access {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        };
        format!("repository:{}:{actions}", self.reference.repository)
    }

    /// The retry schedule of this registry's requests.
    pub(super) fn backoff(&self) -> Backoff {
        self.config.http.backoff()
    }

    /// Runs `op`, retrying temporary failures with exponential backoff.
    pub(super) async fn retrying<T, F, Fut>(&self, what: &str, op: F) -> Result<T, SourceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SourceError>>,
    {
        retry(self.backoff(), what, op).await
    }

    pub(super) async fn call(&self, c: &Call<'_>) -> Result<Answer, SourceError> {
        self.retrying(c.what, || self.call_once(c)).await
    }

    /// One request, authenticating once when the registry challenges it.
    pub(super) async fn call_once(&self, c: &Call<'_>) -> Result<Answer, SourceError> {
        let mut authenticated = false;
        loop {
            let resp = self.send(c, self.auth.authorization(c.access)).await?;
            let status = resp.status();
            if status == StatusCode::UNAUTHORIZED && !authenticated {
                let challenges = parse_challenges(resp.headers());
                if self.authenticate(&challenges, c.access).await? {
                    authenticated = true;
                    continue;
                }
            }
            let headers = resp.headers().clone();
            if !status.is_success() {
                let body = read_limited(resp, MAX_ERROR_BYTES, c.what)
                    .await
                    .unwrap_or_default();
                return Err(status_error(c.what, status, &body));
            }
            let url = resp.url().clone();
            let body = read_limited(resp, c.limit, c.what).await?;
            return Ok(Answer { headers, body, url });
        }
    }

    /// Reacts to a 401: returns whether the request is worth sending again.
    async fn authenticate(
        &self,
        challenges: &[Challenge],
        access: Access,
    ) -> Result<bool, SourceError> {
        let at = RegistryIdentity {
            registry: &self.reference.registry,
            name: self.name(),
            scheme: self.base.scheme(),
            default_scope: self.scope(access),
        };
        match self.auth.react(challenges, &at)? {
            Reaction::GiveUp => Ok(false),
            Reaction::Resend => Ok(true),
            Reaction::FetchToken(request) => {
                let token = self.fetch_token(request).await?;
                self.auth.store_token(access, token);
                Ok(true)
            }
        }
    }

    async fn fetch_token(&self, t: TokenRequest) -> Result<HeaderValue, SourceError> {
        let req = match (t.form, t.basic) {
            (Some(form), _) => self.client.post(t.url).form(&form),
            (None, Some(basic)) => self.client.get(t.url).header(AUTHORIZATION, basic),
            (None, None) => self.client.get(t.url),
        };
        let resp = req.send().await.map_err(|e| transport_error(&t.what, &e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(status_error(&t.what, status, &[]));
        }
        let body = read_limited(resp, MAX_TOKEN_BYTES, &t.what).await?;
        token_from_answer(&t.what, &body)
    }

    pub(super) async fn send(
        &self,
        c: &Call<'_>,
        auth: Option<HeaderValue>,
    ) -> Result<reqwest::Response, SourceError> {
        let mut req = self.client.request(c.method.clone(), c.url.clone());
        if let Some(a) = c.accept {
            req = req.header(ACCEPT, a);
        }
        if let Some(t) = c.content_type {
            req = req.header(CONTENT_TYPE, t);
        }
        match c.body {
            Some(b) => req = req.body(b.to_vec()),
            // Some registries want an explicit empty body on POST and PUT.
            None if c.method == Method::POST || c.method == Method::PUT => {
                req = req.body(Vec::new());
            }
            None => {}
        }
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a);
        }
        req.send().await.map_err(|e| transport_error(c.what, &e))
    }
}

pub(super) fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

pub(super) async fn read_limited(
    mut resp: reqwest::Response,
    limit: usize,
    what: &str,
) -> Result<Vec<u8>, SourceError> {
    let too_large = || SourceError::TooLarge {
        what: what.to_string(),
        limit,
    };
    if resp.content_length().is_some_and(|n| n > limit as u64) {
        return Err(too_large());
    }
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(|e| transport_error(what, &e))? {
        if body.len() + chunk.len() > limit {
            return Err(too_large());
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

fn innermost_message(e: &reqwest::Error) -> String {
    let mut msg = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        msg = s.to_string();
        src = s.source();
    }
    msg
}

pub(super) fn transport_error(what: &str, e: &reqwest::Error) -> SourceError {
    if e.is_redirect() {
        // The redirect policy's message says which host was refused.
        return invalid(format!("{what}: {}", innermost_message(e)));
    }
    let chain = {
        let mut all = e.to_string();
        let mut src = std::error::Error::source(e);
        while let Some(s) = src {
            all.push_str(": ");
            all.push_str(&s.to_string());
            src = s.source();
        }
        all
    };
    if chain.contains("certificate") {
        // An untrusted certificate does not fix itself; retrying would only hide it.
        return invalid(format!(
            "{what}: the registry's TLS certificate is not trusted ({}); configure its certificate authority or use a trusted certificate",
            innermost_message(e)
        ));
    }
    SourceError::Transient {
        what: what.to_string(),
        reason: if e.is_timeout() {
            "timed out".into()
        } else if e.is_connect() {
            "connection failed".into()
        } else {
            "the connection broke".into()
        },
    }
}

/// Maps an unsuccessful status; `body` may hold the registry's JSON error list, quoted for
/// statuses the user must act on.
pub(super) fn status_error(what: &str, status: StatusCode, body: &[u8]) -> SourceError {
    match status {
        StatusCode::NOT_FOUND => SourceError::NotFound(what.to_string()),
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => {
            SourceError::Unauthorized(what.to_string())
        }
        StatusCode::TOO_MANY_REQUESTS => SourceError::RateLimited(what.to_string()),
        s if s.is_server_error() || s == StatusCode::REQUEST_TIMEOUT => SourceError::Transient {
            what: what.to_string(),
            reason: format!("HTTP {}", s.as_u16()),
        },
        s => {
            let detail = registry_errors(body)
                .map(|d| format!(": {d}"))
                .unwrap_or_default();
            invalid(format!("{what}: unexpected HTTP {}{detail}", s.as_u16()))
        }
    }
}

fn registry_errors(body: &[u8]) -> Option<String> {
    #[derive(Deserialize)]
    struct Errors {
        errors: Vec<ErrorJson>,
    }
    #[derive(Deserialize)]
    struct ErrorJson {
        #[serde(default)]
        code: String,
        #[serde(default)]
        message: String,
    }
    let parsed: Errors = serde_json::from_slice(body).ok()?;
    let text = parsed
        .errors
        .iter()
        .map(|e| format!("{} ({})", e.code, e.message))
        .collect::<Vec<_>>()
        .join(", ");
    Some(text.chars().take(300).collect())
}

#[cfg(test)]
// Tests fail loudly on unexpected values; unwrap says exactly that.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn registry_retries_stop_doubling_at_the_cap() {
        let config = OciConfig {
            http: crate::http::tests::capped_config(),
            ..OciConfig::default()
        };
        let r = OciReference::parse("r/i").unwrap();
        let registry = Registry::new(&r, OciCredentials::anonymous(), config).unwrap();
        crate::retry::tests::assert_capped(registry.backoff());
    }

    #[test]
    fn statuses_map_to_error_classes() {
        let e = status_error("tag v1 of r/i", StatusCode::NOT_FOUND, b"");
        assert_eq!(e, SourceError::NotFound("tag v1 of r/i".into()));
        assert!(matches!(
            status_error("x", StatusCode::FORBIDDEN, b""),
            SourceError::Unauthorized(_)
        ));
        assert!(matches!(
            status_error("x", StatusCode::TOO_MANY_REQUESTS, b""),
            SourceError::RateLimited(_)
        ));
        assert!(status_error("x", StatusCode::SERVICE_UNAVAILABLE, b"").is_transient());
        let e = status_error(
            "x",
            StatusCode::BAD_REQUEST,
            br#"{"errors":[{"code":"MANIFEST_INVALID","message":"manifest invalid"}]}"#,
        );
        assert!(
            matches!(&e, SourceError::Invalid(m) if m.contains("MANIFEST_INVALID")),
            "{e:?}"
        );
    }
}
