//! OCI registries: a release is an OCI artifact whose layers are the release files, each named by
//! its `org.opencontainers.image.title` annotation (the layout cluster-api-operator's
//! `fetchConfig.oci` and its kubectl plugin's `publish` use).
//!
//! The source speaks the registry v2 / OCI distribution protocol directly: versions are the
//! repository's tags (`GET /v2/<name>/tags/list`, following `Link` pagination), a version's files
//! come from its manifest (`GET /v2/<name>/manifests/<tag>`; OCI image manifests, Docker v2
//! manifests, and OCI indexes or Docker manifest lists, of which the first manifest is read) and
//! its blobs (`GET /v2/<name>/blobs/<digest>`), each checked against its sha256 digest.
//!
//! Authentication follows what registries announce in `WWW-Authenticate`: anonymous access,
//! Basic (`OCI_USERNAME`/`OCI_PASSWORD`), or the Bearer token flow (the token service is asked
//! with the Basic credentials, or with `OCI_REFRESH_TOKEN` through the OAuth2 refresh grant);
//! `OCI_ACCESS_TOKEN` is sent as a bearer token as it is. Credentials never appear in errors,
//! logs or `Debug` output.
//!
//! [`push_artifact`] publishes a release in the same layout; tests seed registries with it and
//! the kubectl plugin uses it to publish.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    future::Future,
    net::Ipv6Addr,
    sync::{Arc, Mutex},
    time::Duration,
};

use base64::Engine;
use capi_operator_api::{ProviderType, note::found_note};
use reqwest::{
    Method, StatusCode, Url,
    header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderMap, HeaderValue, LOCATION},
    redirect,
};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::{
    ReleaseSource, SourceError,
    http::{HttpConfig, next_link},
};

/// Annotation naming the file a layer holds.
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

/// Media type of every file layer [`push_artifact`] writes. Release files are YAML of several
/// kinds (metadata, components, templates); one generic type keeps publishing independent of
/// file names, and readers never look at it: files are found by their title annotation.
pub const FILE_MEDIA_TYPE: &str = "application/vnd.cluster-api.file";

/// `artifactType` of the manifests [`push_artifact`] writes (OCI 1.1), so registries and tools
/// can tell a provider release from a container image.
pub const ARTIFACT_TYPE: &str = "application/vnd.cluster-api.provider-release.v1";

/// Largest manifest (and tags page) read by default: the size the OCI distribution
/// specification asks registries to accept at least.
pub const MAX_MANIFEST_BYTES: usize = 4 * 1024 * 1024;

/// Secret key holding the registry user name.
pub const OCI_USERNAME: &str = "OCI_USERNAME";
/// Secret key holding the registry password.
pub const OCI_PASSWORD: &str = "OCI_PASSWORD";
/// Secret key holding a bearer token sent to the registry as it is.
pub const OCI_ACCESS_TOKEN: &str = "OCI_ACCESS_TOKEN";
/// Secret key holding an OAuth2 refresh token exchanged at the registry's token service.
pub const OCI_REFRESH_TOKEN: &str = "OCI_REFRESH_TOKEN";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const DOCKER_SCHEMA1: &str = "application/vnd.docker.distribution.manifest.v1";
const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
const EMPTY_BLOB: &[u8] = b"{}";
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";
/// Bounds the tags listing of a misbehaving registry that never stops paginating.
const MAX_TAG_PAGES: usize = 100;
/// Token answers are small JSON documents; anything bigger is not one.
const MAX_TOKEN_BYTES: usize = 1024 * 1024;
/// Error bodies are read only to quote the registry's error codes.
const MAX_ERROR_BYTES: usize = 64 * 1024;
const CLIENT_ID: &str = "capi-provider-operator";

fn invalid(msg: impl Into<String>) -> SourceError {
    SourceError::Invalid(msg.into())
}

// ---------------------------------------------------------------------------------------------
// References

/// A parsed OCI artifact reference: `[http://|https://|oci://]REGISTRY[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]`.
///
/// The first path segment is always the registry host (there is no implicit Docker Hub), as in
/// cluster-api-operator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OciReference {
    /// Whether the registry is spoken to over plain HTTP (`http://` prefix); HTTPS otherwise.
    pub plain_http: bool,
    /// Registry host, with its port when one was given (lower case).
    pub registry: String,
    /// Repository path inside the registry, e.g. `capi/infrastructure-sample`.
    pub repository: String,
    /// The tag, when the reference names one; it is then the release version.
    pub tag: Option<String>,
    /// The manifest digest (`sha256:...`), when the reference pins one.
    pub digest: Option<String>,
}

impl OciReference {
    /// Parses a reference. `http://` selects plain HTTP; `https://` and `oci://` are accepted
    /// and mean HTTPS, as does no prefix.
    pub fn parse(reference: &str) -> Result<OciReference, SourceError> {
        let bad = |why: &str| {
            invalid(format!(
                "{reference:?} is not an OCI reference ([http://]REGISTRY[:PORT]/REPOSITORY[:TAG][@sha256:DIGEST]): {why}"
            ))
        };
        let s = reference.trim();
        if s.is_empty() {
            return Err(bad("it is empty"));
        }
        if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err(bad("it contains white space or control characters"));
        }
        let (plain_http, rest) = if let Some(r) = strip_prefix_ci(s, "http://") {
            (true, r)
        } else if let Some(r) = strip_prefix_ci(s, "https://") {
            (false, r)
        } else if let Some(r) = strip_prefix_ci(s, "oci://") {
            (false, r)
        } else {
            (false, s)
        };
        if rest.contains("://") {
            return Err(bad(
                "unsupported scheme: only http:// (plain HTTP), https:// and oci:// are accepted",
            ));
        }
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| bad("no registry host before the repository"))?;
        let registry = parse_registry(registry).map_err(|w| bad(&w))?;
        let (name_tag, digest) = match path.split_once('@') {
            Some((n, d)) => (n, Some(parse_digest(d).map_err(|w| bad(&w))?)),
            None => (path, None),
        };
        let (repository, tag) = match name_tag.rsplit_once(':') {
            Some((n, t)) => (n, Some(t)),
            None => (name_tag, None),
        };
        if let Some(t) = tag {
            validate_tag(t).map_err(|w| bad(&w))?;
        }
        validate_repository(repository).map_err(|w| bad(&w))?;
        Ok(OciReference {
            plain_http,
            registry,
            repository: repository.to_string(),
            tag: tag.map(str::to_string),
            digest,
        })
    }

    /// The release version: the reference's tag when it has one, else `spec_version`.
    pub fn version<'a>(&'a self, spec_version: Option<&'a str>) -> Option<&'a str> {
        self.tag
            .as_deref()
            .or(spec_version.filter(|v| !v.is_empty()))
    }

    /// The same repository with another tag (and no digest).
    pub fn with_tag(&self, tag: &str) -> Result<OciReference, SourceError> {
        validate_tag(tag).map_err(|w| invalid(format!("tag {tag:?}: {w}")))?;
        Ok(OciReference {
            tag: Some(tag.to_string()),
            digest: None,
            ..self.clone()
        })
    }

    /// `http://REGISTRY` or `https://REGISTRY`.
    pub fn base_url(&self) -> String {
        let scheme = if self.plain_http { "http" } else { "https" };
        format!("{scheme}://{}", self.registry)
    }

    /// `REGISTRY/REPOSITORY`, for messages.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }
}

impl fmt::Display for OciReference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.plain_http {
            f.write_str("http://")?;
        }
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn strip_prefix_ci<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

fn parse_registry(r: &str) -> Result<String, String> {
    if r.is_empty() {
        return Err("the registry host is empty".into());
    }
    let (host, port) = if let Some(inner) = r.strip_prefix('[') {
        let (addr, after) = inner
            .split_once(']')
            .ok_or("unterminated IPv6 address in the registry")?;
        addr.parse::<Ipv6Addr>()
            .map_err(|_| format!("{addr:?} is not an IPv6 address"))?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':').ok_or("junk after the IPv6 address")?),
        };
        (format!("[{}]", addr.to_ascii_lowercase()), port)
    } else {
        let (host, port) = match r.split_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (r, None),
        };
        let host_ok = !host.is_empty()
            && host.len() <= 253
            && host.split('.').all(|label| {
                !label.is_empty()
                    && label.len() <= 63
                    && !label.starts_with('-')
                    && !label.ends_with('-')
                    && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
            });
        if !host_ok {
            return Err(format!("{host:?} is not a registry host name"));
        }
        (host.to_ascii_lowercase(), port)
    };
    match port {
        None => Ok(host),
        Some(p) => {
            let ok = !p.is_empty()
                && p.chars().all(|c| c.is_ascii_digit())
                && p.parse::<u16>().is_ok_and(|n| n > 0);
            if ok {
                Ok(format!("{host}:{p}"))
            } else {
                Err(format!("{p:?} is not a port number"))
            }
        }
    }
}

fn parse_digest(d: &str) -> Result<String, String> {
    let hex = d.strip_prefix("sha256:").ok_or_else(|| {
        format!("digest {d:?} is not sha256:<64 hex digits> (only sha256 is supported)")
    })?;
    if hex.len() == 64 && hex.chars().all(|c| matches!(c, '0'..='9' | 'a'..='f')) {
        Ok(d.to_string())
    } else {
        Err(format!(
            "digest {d:?} is not sha256:<64 lower-case hex digits>"
        ))
    }
}

fn validate_tag(t: &str) -> Result<(), String> {
    let mut chars = t.chars();
    let first_ok = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
    if t.len() <= 128
        && first_ok
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'))
    {
        Ok(())
    } else {
        Err(format!(
            "tag {t:?} is invalid (1 to 128 of A-Z a-z 0-9 _ . -, not starting with . or -)"
        ))
    }
}

fn validate_repository(repo: &str) -> Result<(), String> {
    if repo.is_empty() {
        return Err("the repository is empty".into());
    }
    if repo.len() > 255 {
        return Err("the repository is longer than 255 characters".into());
    }
    if repo.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!("repository {repo:?} must be lower case"));
    }
    for component in repo.split('/') {
        if !repository_component_ok(component) {
            return Err(format!(
                "repository component {component:?} is invalid (lower-case letters and digits, separated by one '.', one or two '_', or dashes)"
            ));
        }
    }
    Ok(())
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`, the distribution specification's path component.
fn repository_component_ok(c: &str) -> bool {
    let alnum = |ch: char| ch.is_ascii_lowercase() || ch.is_ascii_digit();
    c.starts_with(alnum)
        && c.ends_with(alnum)
        && c.split(alnum)
            .filter(|sep| !sep.is_empty())
            .all(|sep| sep == "." || sep == "_" || sep == "__" || sep.chars().all(|ch| ch == '-'))
}

// ---------------------------------------------------------------------------------------------
// Credentials and configuration

/// Registry credentials, read from the provider Secret's `OCI_*` keys.
///
/// `Debug` shows only which kinds of credential are present.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct OciCredentials {
    username: Option<String>,
    password: Option<String>,
    access_token: Option<String>,
    refresh_token: Option<String>,
}

impl OciCredentials {
    /// No credentials.
    pub fn anonymous() -> OciCredentials {
        OciCredentials::default()
    }

    /// A user name and password, used for Basic authentication and to obtain bearer tokens.
    pub fn basic(username: impl Into<String>, password: impl Into<String>) -> OciCredentials {
        OciCredentials {
            username: Some(username.into()).filter(|u| !u.is_empty()),
            password: Some(password.into()),
            ..OciCredentials::default()
        }
    }

    /// A bearer token sent to the registry as it is (`OCI_ACCESS_TOKEN`).
    pub fn access_token(token: impl Into<String>) -> OciCredentials {
        OciCredentials {
            access_token: Some(token.into()).filter(|t| !t.is_empty()),
            ..OciCredentials::default()
        }
    }

    /// Adds an OAuth2 refresh token (`OCI_REFRESH_TOKEN`), exchanged at the registry's token
    /// service for access tokens.
    pub fn with_refresh_token(mut self, token: impl Into<String>) -> OciCredentials {
        self.refresh_token = Some(token.into()).filter(|t| !t.is_empty());
        self
    }

    /// Reads `OCI_USERNAME`, `OCI_PASSWORD`, `OCI_ACCESS_TOKEN` and `OCI_REFRESH_TOKEN` through
    /// `lookup` (the controller passes the provider Secret's data). Empty values count as absent.
    pub fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> OciCredentials {
        let get = |k: &str| lookup(k).filter(|v| !v.is_empty());
        let username = get(OCI_USERNAME);
        OciCredentials {
            password: username
                .as_ref()
                .map(|_| get(OCI_PASSWORD).unwrap_or_default()),
            username,
            access_token: get(OCI_ACCESS_TOKEN),
            refresh_token: get(OCI_REFRESH_TOKEN),
        }
    }

    /// Whether no credential at all is set.
    pub fn is_anonymous(&self) -> bool {
        self.username.is_none() && self.access_token.is_none() && self.refresh_token.is_none()
    }

    fn basic_header(&self) -> Option<HeaderValue> {
        let user = self.username.as_deref()?;
        let pass = self.password.as_deref().unwrap_or_default();
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pass}"));
        sensitive(&format!("Basic {encoded}"))
    }
}

impl fmt::Debug for OciCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let set = |o: &Option<String>| if o.is_some() { "<set>" } else { "<unset>" };
        f.debug_struct("OciCredentials")
            .field("username", &set(&self.username))
            .field("password", &set(&self.password))
            .field("access_token", &set(&self.access_token))
            .field("refresh_token", &set(&self.refresh_token))
            .finish()
    }
}

fn sensitive(value: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(value).ok()?;
    v.set_sensitive(true);
    Some(v)
}

/// How an OCI source behaves on the wire.
#[derive(Clone)]
pub struct OciConfig {
    /// Retries, backoff, timeout, blob size limit (`max_bytes`, default
    /// [`MAX_FILE_BYTES`](super::MAX_FILE_BYTES)) and extra hosts blob redirects may lead to
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

// ---------------------------------------------------------------------------------------------
// The registry client

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Access {
    Pull,
    Push,
}

#[derive(Default)]
struct AuthState {
    /// The registry asked for Basic authentication, so credentials go with every request.
    basic: bool,
    /// Bearer tokens obtained from the token service, per access level.
    tokens: HashMap<Access, HeaderValue>,
}

/// One request, replayable for retries and after authenticating.
struct Call<'a> {
    method: Method,
    url: Url,
    accept: Option<&'a str>,
    content_type: Option<&'a str>,
    body: Option<&'a [u8]>,
    limit: usize,
    access: Access,
    what: &'a str,
}

struct Answer {
    headers: HeaderMap,
    body: Vec<u8>,
    url: Url,
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Challenge {
    scheme: String,
    params: BTreeMap<String, String>,
}

struct Registry {
    client: reqwest::Client,
    base: Url,
    reference: OciReference,
    credentials: OciCredentials,
    config: OciConfig,
    auth: Mutex<AuthState>,
}

impl fmt::Debug for Registry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("reference", &self.reference.to_string())
            .field("credentials", &self.credentials)
            .field("config", &self.config)
            .finish()
    }
}

fn origin(u: &Url) -> (String, Option<String>, Option<u16>) {
    (
        u.scheme().to_string(),
        u.host_str().map(|h| h.to_ascii_lowercase()),
        u.port_or_known_default(),
    )
}

impl Registry {
    fn new(
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
            credentials,
            config,
            auth: Mutex::new(AuthState::default()),
        })
    }

    fn url(&self, path: &str) -> Result<Url, SourceError> {
        self.base
            .join(&format!("/v2/{}/{path}", self.reference.repository))
            .map_err(|_| invalid(format!("cannot build a URL for {}", self.reference.name())))
    }

    fn name(&self) -> String {
        self.reference.name()
    }

    fn scope(&self, access: Access) -> String {
        let actions = match access {
            Access::Pull => "pull",
            Access::Push => "pull,push",
        };
        format!("repository:{}:{actions}", self.reference.repository)
    }

    /// Runs `op`, retrying temporary failures with exponential backoff.
    async fn retrying<T, F, Fut>(&self, what: &str, mut op: F) -> Result<T, SourceError>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, SourceError>>,
    {
        let attempts = self.config.http.attempts.max(1);
        let mut delay = self.config.http.initial_backoff;
        let mut attempt = 1;
        loop {
            match op().await {
                Err(e @ SourceError::Transient { .. }) if attempt < attempts => {
                    tracing::debug!(what, attempt, error = %e, "retrying registry request");
                    tokio::time::sleep(delay).await;
                    delay = delay.saturating_mul(2);
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    async fn call(&self, c: &Call<'_>) -> Result<Answer, SourceError> {
        self.retrying(c.what, || self.call_once(c)).await
    }

    /// One request, authenticating once when the registry challenges it.
    async fn call_once(&self, c: &Call<'_>) -> Result<Answer, SourceError> {
        let mut authenticated = false;
        loop {
            let resp = self.send(c, self.authorization(c.access)).await?;
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

    async fn send(
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
                req = req.body(Vec::new())
            }
            None => {}
        }
        if let Some(a) = auth {
            req = req.header(AUTHORIZATION, a);
        }
        req.send().await.map_err(|e| transport_error(c.what, &e))
    }

    fn authorization(&self, access: Access) -> Option<HeaderValue> {
        if let Some(t) = &self.credentials.access_token {
            return sensitive(&format!("Bearer {t}"));
        }
        let state = self.auth.lock().ok()?;
        if let Some(t) = state.tokens.get(&access) {
            return Some(t.clone());
        }
        if state.basic {
            return self.credentials.basic_header();
        }
        None
    }

    /// Reacts to a 401: returns whether the request is worth sending again.
    async fn authenticate(
        &self,
        challenges: &[Challenge],
        access: Access,
    ) -> Result<bool, SourceError> {
        if self.credentials.access_token.is_some() {
            // The one token we have was refused; nothing else to try.
            return Ok(false);
        }
        if let Some(bearer) = challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        {
            let realm = bearer.params.get("realm").ok_or_else(|| {
                invalid(format!(
                    "registry {} asked for a bearer token without naming a token service",
                    self.reference.registry
                ))
            })?;
            let scope = bearer
                .params
                .get("scope")
                .cloned()
                .unwrap_or_else(|| self.scope(access));
            tracing::debug!(registry = %self.reference.registry, %scope, "fetching a registry token");
            let token = self
                .fetch_token(
                    realm,
                    bearer.params.get("service").map(String::as_str),
                    &scope,
                )
                .await?;
            if let Ok(mut state) = self.auth.lock() {
                state.tokens.insert(access, token);
            }
            return Ok(true);
        }
        if challenges
            .iter()
            .any(|c| c.scheme.eq_ignore_ascii_case("basic"))
            && self.credentials.username.is_some()
            && let Ok(mut state) = self.auth.lock()
            && !state.basic
        {
            tracing::debug!(registry = %self.reference.registry, "registry asked for basic authentication");
            state.basic = true;
            return Ok(true);
        }
        Ok(false)
    }

    async fn fetch_token(
        &self,
        realm: &str,
        service: Option<&str>,
        scope: &str,
    ) -> Result<HeaderValue, SourceError> {
        let registry = &self.reference.registry;
        let mut url = Url::parse(realm).map_err(|_| {
            invalid(format!(
                "registry {registry} named an invalid token service address"
            ))
        })?;
        match (url.scheme(), self.base.scheme()) {
            ("https", _) | ("http", "http") => {}
            ("http", _) => {
                return Err(invalid(format!(
                    "registry {registry} named a plain-HTTP token service ({}); credentials are sent over HTTPS only",
                    url.host_str().unwrap_or("?")
                )));
            }
            (other, _) => {
                return Err(invalid(format!(
                    "registry {registry} named a token service with scheme {other:?}"
                )));
            }
        }
        let what = format!(
            "a token for {} from {}",
            self.name(),
            url.host_str().unwrap_or("?")
        );
        let req = if let Some(refresh) = &self.credentials.refresh_token {
            let mut form: Vec<(&str, &str)> = vec![
                ("grant_type", "refresh_token"),
                ("refresh_token", refresh),
                ("client_id", CLIENT_ID),
                ("scope", scope),
            ];
            if let Some(s) = service {
                form.push(("service", s));
            }
            self.client.post(url).form(&form)
        } else {
            {
                let mut q = url.query_pairs_mut();
                if let Some(s) = service {
                    q.append_pair("service", s);
                }
                for s in scope.split_whitespace() {
                    q.append_pair("scope", s);
                }
            }
            let mut req = self.client.get(url);
            if let Some(h) = self.credentials.basic_header() {
                req = req.header(AUTHORIZATION, h);
            }
            req
        };
        let resp = req.send().await.map_err(|e| transport_error(&what, &e))?;
        let status = resp.status();
        if !status.is_success() {
            return Err(status_error(&what, status, &[]));
        }
        let body = read_limited(resp, MAX_TOKEN_BYTES, &what).await?;
        #[derive(Deserialize)]
        struct TokenAnswer {
            #[serde(default)]
            token: Option<String>,
            #[serde(default)]
            access_token: Option<String>,
        }
        let answer: TokenAnswer = serde_json::from_slice(&body)
            .map_err(|_| invalid(format!("{what}: the token service's answer is not JSON")))?;
        let token = answer
            .token
            .filter(|t| !t.is_empty())
            .or(answer.access_token.filter(|t| !t.is_empty()))
            .ok_or_else(|| invalid(format!("{what}: the token service returned no token")))?;
        sensitive(&format!("Bearer {token}"))
            .ok_or_else(|| invalid(format!("{what}: the token is not a valid header value")))
    }

    async fn list_tags(&self) -> Result<Vec<String>, SourceError> {
        #[derive(Deserialize)]
        struct Tags {
            #[serde(default)]
            tags: Option<Vec<String>>,
        }
        let what = format!("tags of {}", self.name());
        let mut url = self.url("tags/list")?;
        let mut out = Vec::new();
        for _ in 0..MAX_TAG_PAGES {
            let answer = self
                .call(&Call {
                    method: Method::GET,
                    url: url.clone(),
                    accept: Some("application/json"),
                    content_type: None,
                    body: None,
                    limit: self.config.max_manifest_bytes,
                    access: Access::Pull,
                    what: &what,
                })
                .await?;
            let page: Tags = serde_json::from_slice(&answer.body)
                .map_err(|e| invalid(format!("{what}: unexpected answer: {e}")))?;
            out.extend(page.tags.unwrap_or_default());
            // Registries send relative links; pagination never leaves the registry.
            match next_link(&answer.headers).and_then(|n| answer.url.join(&n).ok()) {
                Some(next) if origin(&next) == origin(&self.base) => url = next,
                Some(_) => {
                    tracing::warn!(registry = %self.reference.registry, "tags pagination pointed to another host; ignored");
                    break;
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The manifest `reference` (tag or digest) names, descending into an index.
    async fn manifest(&self, reference: &str) -> Result<Manifest, SourceError> {
        let mut reference = reference.to_string();
        // An index points to manifests, never (usefully) to another index.
        for _ in 0..2 {
            let what = if reference.starts_with("sha256:") {
                format!("manifest {reference} of {}", self.name())
            } else {
                format!("tag {reference} of {}", self.name())
            };
            let answer = self
                .call(&Call {
                    method: Method::GET,
                    url: self.url(&format!("manifests/{reference}"))?,
                    accept: Some(MANIFEST_ACCEPT),
                    content_type: None,
                    body: None,
                    limit: self.config.max_manifest_bytes,
                    access: Access::Pull,
                    what: &what,
                })
                .await?;
            let digest = sha256_digest(&answer.body);
            if reference.starts_with("sha256:") && reference != digest {
                return Err(invalid(format!(
                    "{what}: the registry returned content with digest {digest}"
                )));
            }
            if let Some(announced) = answer
                .headers
                .get("docker-content-digest")
                .and_then(|v| v.to_str().ok())
                .filter(|d| d.starts_with("sha256:"))
                && announced != digest
            {
                return Err(invalid(format!(
                    "{what}: content digest {digest} differs from the announced {announced}"
                )));
            }
            let json: ManifestJson = serde_json::from_slice(&answer.body)
                .map_err(|e| invalid(format!("{what}: not a manifest: {e}")))?;
            let header_type = answer
                .headers
                .get(CONTENT_TYPE)
                .and_then(|v| v.to_str().ok())
                .map(|v| v.split(';').next().unwrap_or_default().trim().to_string());
            let media_type = json.media_type.clone().or(header_type).unwrap_or_default();
            if json.schema_version != Some(2) || media_type.starts_with(DOCKER_SCHEMA1) {
                return Err(invalid(format!(
                    "{what}: only schema version 2 manifests (OCI or Docker) are supported"
                )));
            }
            let is_index = media_type == OCI_INDEX
                || media_type == DOCKER_LIST
                || (media_type.is_empty() && json.manifests.is_some());
            let is_manifest = media_type == OCI_MANIFEST
                || media_type == DOCKER_MANIFEST
                || (media_type.is_empty() && json.layers.is_some());
            if is_index {
                let first = json
                    .manifests
                    .unwrap_or_default()
                    .into_iter()
                    .next()
                    .ok_or_else(|| invalid(format!("{what}: the index lists no manifest")))?;
                parse_digest(&first.digest).map_err(|w| invalid(format!("{what}: {w}")))?;
                reference = first.digest;
                continue;
            }
            if !is_manifest {
                return Err(invalid(format!(
                    "{what}: media type {media_type:?} is not an OCI or Docker image manifest or index"
                )));
            }
            return Ok(Manifest {
                layers: json.layers.unwrap_or_default(),
            });
        }
        Err(invalid(format!(
            "{reference} of {}: an index points to another index",
            self.name()
        )))
    }

    async fn blob(&self, layer: &Descriptor, what: &str) -> Result<Vec<u8>, SourceError> {
        parse_digest(&layer.digest).map_err(|w| invalid(format!("{what}: {w}")))?;
        let limit = self.config.http.max_bytes;
        if layer.size > limit as u64 {
            return Err(SourceError::TooLarge {
                what: what.to_string(),
                limit,
            });
        }
        let answer = self
            .call(&Call {
                method: Method::GET,
                url: self.url(&format!("blobs/{}", layer.digest))?,
                accept: Some("*/*"),
                content_type: None,
                body: None,
                limit,
                access: Access::Pull,
                what,
            })
            .await?;
        let digest = sha256_digest(&answer.body);
        if digest != layer.digest {
            return Err(invalid(format!(
                "{what}: the content does not match its digest {} (got {digest})",
                layer.digest
            )));
        }
        Ok(answer.body)
    }

    /// Uploads `data` unless the registry already has it; returns its descriptor fields.
    async fn upload_blob(&self, data: &[u8]) -> Result<String, SourceError> {
        let digest = sha256_digest(data);
        let what = format!("blob {digest} of {}", self.name());
        let exists = self
            .call(&Call {
                method: Method::HEAD,
                url: self.url(&format!("blobs/{digest}"))?,
                accept: None,
                content_type: None,
                body: None,
                limit: 0,
                access: Access::Push,
                what: &what,
            })
            .await;
        match exists {
            Ok(_) => return Ok(digest),
            Err(SourceError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        // The upload session is single-use, so a retry starts a new one.
        self.retrying(&what, || self.upload_once(data, &digest, &what))
            .await?;
        Ok(digest)
    }

    async fn upload_once(&self, data: &[u8], digest: &str, what: &str) -> Result<(), SourceError> {
        let started = self
            .call_once(&Call {
                method: Method::POST,
                url: self.url("blobs/uploads/")?,
                accept: None,
                content_type: None,
                body: None,
                limit: MAX_ERROR_BYTES,
                access: Access::Push,
                what,
            })
            .await?;
        let location = started
            .headers
            .get(LOCATION)
            .and_then(|v| v.to_str().ok())
            .ok_or_else(|| invalid(format!("{what}: the registry gave no upload location")))?;
        let mut url = started
            .url
            .join(location)
            .map_err(|_| invalid(format!("{what}: invalid upload location")))?;
        if origin(&url) != origin(&self.base) {
            return Err(invalid(format!(
                "{what}: the upload location leaves the registry ({})",
                url.host_str().unwrap_or("?")
            )));
        }
        url.query_pairs_mut().append_pair("digest", digest);
        self.call_once(&Call {
            method: Method::PUT,
            url,
            accept: None,
            content_type: Some("application/octet-stream"),
            body: Some(data),
            limit: MAX_ERROR_BYTES,
            access: Access::Push,
            what,
        })
        .await?;
        Ok(())
    }
}

/// The parts of a manifest or index the source reads.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct ManifestJson {
    #[serde(default)]
    schema_version: Option<u32>,
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    layers: Option<Vec<Descriptor>>,
    #[serde(default)]
    manifests: Option<Vec<Descriptor>>,
}

/// An OCI content descriptor.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Descriptor {
    media_type: String,
    digest: String,
    size: u64,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    annotations: BTreeMap<String, String>,
}

impl Descriptor {
    fn title(&self) -> Option<&str> {
        self.annotations.get(TITLE_ANNOTATION).map(String::as_str)
    }
}

#[derive(Debug)]
struct Manifest {
    layers: Vec<Descriptor>,
}

fn sha256_digest(data: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(data))
}

async fn read_limited(
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

fn transport_error(what: &str, e: &reqwest::Error) -> SourceError {
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
fn status_error(what: &str, status: StatusCode, body: &[u8]) -> SourceError {
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

/// Parses every `WWW-Authenticate` header: `Scheme k="v",k2="v2"` (values may hold commas).
fn parse_challenges(headers: &HeaderMap) -> Vec<Challenge> {
    headers
        .get_all(reqwest::header::WWW_AUTHENTICATE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .filter_map(parse_challenge)
        .collect()
}

fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = match header.split_once(char::is_whitespace) {
        Some((s, r)) => (s, r.trim()),
        None => (header, ""),
    };
    if scheme.is_empty() {
        return None;
    }
    let mut params = BTreeMap::new();
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_ascii_lowercase();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => {
                        if let Some(n) = chars.next() {
                            value.push(n);
                        }
                    }
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        params.insert(key, value);
    }
    Some(Challenge {
        scheme: scheme.to_string(),
        params,
    })
}

// ---------------------------------------------------------------------------------------------
// The release source

/// Releases of one provider from an OCI repository: tags are versions, each tag an artifact
/// whose layers are the release files.
///
/// Manifests are cached per tag (or digest) for the lifetime of the source, so a release's
/// files come from one consistent manifest even if the tag moves meanwhile.
pub struct OciSource {
    registry: Registry,
    provider: Option<(Vec<&'static str>, String)>,
    manifests: Mutex<HashMap<String, Arc<Manifest>>>,
}

impl fmt::Debug for OciSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OciSource")
            .field("registry", &self.registry)
            .field("provider", &self.provider)
            .finish()
    }
}

impl OciSource {
    /// Releases from the repository `reference` names, looking files up by the names asked for
    /// (and the generic `metadata.yaml` / `components.yaml`).
    pub fn new(
        reference: &OciReference,
        credentials: OciCredentials,
        config: OciConfig,
    ) -> Result<OciSource, SourceError> {
        Ok(OciSource {
            registry: Registry::new(reference, credentials, config)?,
            provider: None,
            manifests: Mutex::new(HashMap::new()),
        })
    }

    /// Releases of the provider of type `provider_type` named `name`: files are looked up with
    /// cluster-api-operator's priorities (see [`OciSource::file_candidates`]).
    pub fn for_provider(
        reference: &OciReference,
        provider_type: ProviderType,
        name: &str,
        credentials: OciCredentials,
        config: OciConfig,
    ) -> Result<OciSource, SourceError> {
        let mut words = vec![provider_type.word()];
        // cluster-api-operator spells this type without the dash in file names.
        if provider_type == ProviderType::RuntimeExtension {
            words.push("runtimeextension");
        }
        Ok(OciSource {
            provider: Some((words, name.to_string())),
            ..OciSource::new(reference, credentials, config)?
        })
    }

    /// The reference the source reads.
    pub fn reference(&self) -> &OciReference {
        &self.registry.reference
    }

    /// The layer titles tried, best first, when `file` of `version` is asked for.
    ///
    /// `metadata.yaml`: `<type>-<name>-<version>-metadata.yaml`, then `metadata.yaml`.
    /// A components file (`components.yaml` or `*-components.yaml`):
    /// `<type>-<name>-<version>-components.yaml`, the file asked for, `<type>-components.yaml`,
    /// then `components.yaml`. Any other file: its own name only. The typed names need
    /// [`OciSource::for_provider`].
    pub fn file_candidates(&self, version: &str, file: &str) -> Vec<String> {
        let words: &[&str] = self
            .provider
            .as_ref()
            .map(|(w, _)| w.as_slice())
            .unwrap_or_default();
        let name = self.provider.as_ref().map(|(_, n)| n.as_str());
        let mut out: Vec<String> = Vec::new();
        if file == "metadata.yaml" {
            if let Some(name) = name {
                out.extend(
                    words
                        .iter()
                        .map(|w| format!("{w}-{name}-{version}-metadata.yaml")),
                );
            }
            out.push("metadata.yaml".into());
        } else if file == "components.yaml" || file.ends_with("-components.yaml") {
            if let Some(name) = name {
                out.extend(
                    words
                        .iter()
                        .map(|w| format!("{w}-{name}-{version}-components.yaml")),
                );
            }
            out.push(file.to_string());
            out.extend(words.iter().map(|w| format!("{w}-components.yaml")));
            out.push("components.yaml".into());
        } else {
            out.push(file.to_string());
        }
        let mut seen = std::collections::HashSet::new();
        out.retain(|c| seen.insert(c.clone()));
        out
    }

    async fn cached_manifest(&self, reference: &str) -> Result<Arc<Manifest>, SourceError> {
        if let Some(m) = self
            .manifests
            .lock()
            .ok()
            .and_then(|m| m.get(reference).cloned())
        {
            return Ok(m);
        }
        let manifest = Arc::new(self.registry.manifest(reference).await?);
        if let Ok(mut m) = self.manifests.lock() {
            m.insert(reference.to_string(), manifest.clone());
        }
        Ok(manifest)
    }
}

impl ReleaseSource for OciSource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        Ok(self
            .registry
            .list_tags()
            .await?
            .into_iter()
            .filter(|t| capi_components::version::parse(t).is_some())
            .collect())
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let manifest_ref = match &self.reference().digest {
            Some(d) => d.clone(),
            None => {
                validate_tag(version).map_err(|w| {
                    invalid(format!(
                        "version {version:?} cannot be an OCI tag of {}: {w}",
                        self.registry.name()
                    ))
                })?;
                version.to_string()
            }
        };
        let manifest = self.cached_manifest(&manifest_ref).await?;
        let candidates = self.file_candidates(version, file);
        let layer = candidates
            .iter()
            .find_map(|c| {
                manifest
                    .layers
                    .iter()
                    .find(|l| l.title() == Some(c.as_str()))
            })
            .ok_or_else(|| {
                let titles: Vec<String> = manifest
                    .layers
                    .iter()
                    .filter_map(|l| l.title().map(str::to_string))
                    .collect();
                SourceError::NotFoundAmong {
                    what: format!(
                        "{file} (looked for {}) in artifact {}:{manifest_ref}",
                        candidates.join(", "),
                        self.registry.name()
                    ),
                    found: found_note(
                        "the artifact holds ",
                        &titles,
                        "the artifact holds no titled layer",
                    ),
                }
            })?;
        let what = format!(
            "{} of artifact {}:{manifest_ref}",
            layer.title().unwrap_or(file),
            self.registry.name()
        );
        self.registry.blob(layer, &what).await
    }
}

// ---------------------------------------------------------------------------------------------
// Publishing

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ManifestOut<'a> {
    schema_version: u32,
    media_type: &'a str,
    artifact_type: &'a str,
    config: Descriptor,
    layers: Vec<Descriptor>,
}

/// Publishes `files` (title, content) as an OCI 1.1 artifact at `reference`'s tag and returns
/// the manifest digest.
///
/// Each file is one layer of media type [`FILE_MEDIA_TYPE`] with its title annotation; the
/// config is the OCI empty descriptor (`application/vnd.oci.empty.v1+json`, content `{}`), and
/// `artifactType` is [`ARTIFACT_TYPE`]. Blobs go up with a monolithic upload (`POST` then `PUT
/// ?digest=`), skipped when the registry already holds them.
pub async fn push_artifact(
    reference: &OciReference,
    files: &[(String, Vec<u8>)],
    credentials: &OciCredentials,
    config: &OciConfig,
) -> Result<String, SourceError> {
    let tag = reference.tag.as_deref().ok_or_else(|| {
        invalid(format!(
            "{reference}: publishing needs a tag (REPOSITORY:TAG)"
        ))
    })?;
    if reference.digest.is_some() {
        return Err(invalid(format!(
            "{reference}: publishing needs a tag, not a digest"
        )));
    }
    if files.is_empty() {
        return Err(invalid("an artifact needs at least one file"));
    }
    let mut titles = std::collections::HashSet::new();
    for (title, _) in files {
        if title.is_empty() || title.contains('/') || !titles.insert(title.as_str()) {
            return Err(invalid(format!(
                "file name {title:?} is empty, holds a '/' or is given twice"
            )));
        }
    }
    let registry = Registry::new(reference, credentials.clone(), config.clone())?;
    let config_digest = registry.upload_blob(EMPTY_BLOB).await?;
    let mut layers = Vec::with_capacity(files.len());
    for (title, data) in files {
        let digest = registry.upload_blob(data).await?;
        layers.push(Descriptor {
            media_type: FILE_MEDIA_TYPE.into(),
            digest,
            size: data.len() as u64,
            annotations: BTreeMap::from([(TITLE_ANNOTATION.to_string(), title.clone())]),
        });
    }
    let manifest = ManifestOut {
        schema_version: 2,
        media_type: OCI_MANIFEST,
        artifact_type: ARTIFACT_TYPE,
        config: Descriptor {
            media_type: EMPTY_MEDIA_TYPE.into(),
            digest: config_digest,
            size: EMPTY_BLOB.len() as u64,
            annotations: BTreeMap::new(),
        },
        layers,
    };
    let body = serde_json::to_vec(&manifest)
        .map_err(|e| invalid(format!("serializing the manifest: {e}")))?;
    let digest = sha256_digest(&body);
    let what = format!("manifest {tag} of {}", registry.name());
    let answer = registry
        .call(&Call {
            method: Method::PUT,
            url: registry.url(&format!("manifests/{tag}"))?,
            accept: None,
            content_type: Some(OCI_MANIFEST),
            body: Some(&body),
            limit: MAX_ERROR_BYTES,
            access: Access::Push,
            what: &what,
        })
        .await?;
    if let Some(announced) = answer
        .headers
        .get("docker-content-digest")
        .and_then(|v| v.to_str().ok())
        && announced != digest
    {
        return Err(invalid(format!(
            "{what}: the registry stored digest {announced}, expected {digest}"
        )));
    }
    tracing::info!(reference = %reference, %digest, files = files.len(), "published OCI artifact");
    Ok(digest)
}

#[cfg(test)]
// Tests fail loudly on unexpected values; unwrap says exactly that.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    const D: &str = "sha256:aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";

    /// `plain_http|registry|repository|tag|digest`, `-` for none.
    fn describe(r: &OciReference) -> String {
        let or_dash = |o: &Option<String>| o.clone().unwrap_or_else(|| "-".into());
        format!(
            "{}|{}|{}|{}|{}",
            r.plain_http,
            r.registry,
            r.repository,
            or_dash(&r.tag),
            or_dash(&r.digest)
        )
    }

    #[test]
    fn references_parse() -> Result<(), SourceError> {
        let cases = [
            ("registry/image:v1.1.0", "false|registry|image|v1.1.0|-"),
            ("registry/image", "false|registry|image|-|-"),
            ("registry:5050/image", "false|registry:5050|image|-|-"),
            (
                "registry:5050/image:v1.1.0",
                "false|registry:5050|image|v1.1.0|-",
            ),
            (
                "http://registry:5050/image:v1.1.0",
                "true|registry:5050|image|v1.1.0|-",
            ),
            (
                "HTTP://Reg.Example.com/a/b/c",
                "true|reg.example.com|a/b/c|-|-",
            ),
            (
                "oci://ghcr.io/org/capi/infra-x:v0.1.0",
                "false|ghcr.io|org/capi/infra-x|v0.1.0|-",
            ),
            (
                "https://127.0.0.1:5000/my_repo/a__b.c-d",
                "false|127.0.0.1:5000|my_repo/a__b.c-d|-|-",
            ),
            ("[::1]:5000/x", "false|[::1]:5000|x|-|-"),
            (&format!("reg/img@{D}"), &format!("false|reg|img|-|{D}")),
            (
                &format!("reg:1/img:v1@{D}"),
                &format!("false|reg:1|img|v1|{D}"),
            ),
        ];
        for (input, want) in cases {
            let r = OciReference::parse(input)?;
            assert_eq!(describe(&r), want, "{input}");
            // Display round-trips.
            assert_eq!(OciReference::parse(&r.to_string())?, r, "{input}");
        }
        Ok(())
    }

    #[test]
    fn malformed_references_are_refused_with_a_reason() {
        let cases = [
            ("", "empty"),
            ("image", "no registry host"),
            ("registry/", "repository is empty"),
            ("registry/Image", "lower case"),
            ("registry/a..b", "component"),
            ("registry/-a", "component"),
            ("registry//a", "component"),
            ("registry/a:", "tag"),
            ("registry/a:.x", "tag"),
            ("registry/a:b/c", "tag"),
            ("registry:port/a", "port"),
            ("registry:0/a", "port"),
            ("registry:99999/a", "port"),
            ("reg_istry/a", "host name"),
            ("ftp://registry/a", "scheme"),
            ("registry/a b", "white space"),
            ("registry/a@sha512:abc", "sha256"),
            ("registry/a@sha256:abc", "64"),
            ("[::1/a", "IPv6"),
        ];
        for (input, why) in cases {
            match OciReference::parse(input) {
                Err(SourceError::Invalid(m)) => assert!(m.contains(why), "{input:?}: {m}"),
                other => panic!("{input:?} gave {other:?}"),
            }
        }
    }

    #[test]
    fn the_tag_wins_over_the_spec_version() {
        let tagged = OciReference::parse("r/i:v1.1.0").unwrap();
        assert_eq!(tagged.version(Some("v1.2.0")), Some("v1.1.0"));
        let untagged = OciReference::parse("r/i").unwrap();
        assert_eq!(untagged.version(Some("v1.2.0")), Some("v1.2.0"));
        assert_eq!(untagged.version(Some("")), None);
        assert_eq!(untagged.version(None), None);
        assert_eq!(
            untagged.with_tag("v2.0.0").unwrap().to_string(),
            "r/i:v2.0.0"
        );
        assert!(untagged.with_tag("bad tag").is_err());
    }

    #[test]
    fn challenges_parse() {
        let c = parse_challenge(
            r#"Bearer realm="https://auth.example/token",service="registry.example",scope="repository:a/b:pull,push""#,
        )
        .unwrap();
        assert_eq!(c.scheme, "Bearer");
        assert_eq!(c.params["realm"], "https://auth.example/token");
        assert_eq!(c.params["service"], "registry.example");
        assert_eq!(c.params["scope"], "repository:a/b:pull,push");
        let b = parse_challenge(r#"Basic realm="Registry \"Realm\"", charset=UTF-8"#).unwrap();
        assert_eq!(b.scheme, "Basic");
        assert_eq!(b.params["realm"], "Registry \"Realm\"");
        assert_eq!(b.params["charset"], "UTF-8");
        assert_eq!(parse_challenge("Basic").unwrap().params.len(), 0);
    }

    #[test]
    fn file_priorities() {
        let r = OciReference::parse("r/i").unwrap();
        let typed = OciSource::for_provider(
            &r,
            ProviderType::Infrastructure,
            "docker",
            OciCredentials::anonymous(),
            OciConfig::default(),
        )
        .unwrap();
        assert_eq!(
            typed.file_candidates("v1.0.0", "metadata.yaml"),
            [
                "infrastructure-docker-v1.0.0-metadata.yaml",
                "metadata.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "infrastructure-components.yaml"),
            [
                "infrastructure-docker-v1.0.0-components.yaml",
                "infrastructure-components.yaml",
                "components.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "custom-components.yaml"),
            [
                "infrastructure-docker-v1.0.0-components.yaml",
                "custom-components.yaml",
                "infrastructure-components.yaml",
                "components.yaml"
            ]
        );
        assert_eq!(
            typed.file_candidates("v1.0.0", "cluster-template.yaml"),
            ["cluster-template.yaml"]
        );
        let rx = OciSource::for_provider(
            &r,
            ProviderType::RuntimeExtension,
            "x",
            OciCredentials::anonymous(),
            OciConfig::default(),
        )
        .unwrap();
        assert_eq!(
            rx.file_candidates("v1", "metadata.yaml"),
            [
                "runtime-extension-x-v1-metadata.yaml",
                "runtimeextension-x-v1-metadata.yaml",
                "metadata.yaml"
            ]
        );
        let plain = OciSource::new(&r, OciCredentials::anonymous(), OciConfig::default()).unwrap();
        assert_eq!(
            plain.file_candidates("v1", "core-components.yaml"),
            ["core-components.yaml", "components.yaml"]
        );
    }

    #[test]
    fn credentials_come_from_the_secret_and_never_show() {
        let secret = BTreeMap::from([
            (OCI_USERNAME.to_string(), "robot".to_string()),
            (OCI_PASSWORD.to_string(), "hunter2-secret".to_string()),
            (OCI_ACCESS_TOKEN.to_string(), String::new()),
            (OCI_REFRESH_TOKEN.to_string(), "refresh-secret".to_string()),
        ]);
        let c = OciCredentials::from_lookup(|k| secret.get(k).cloned());
        assert!(!c.is_anonymous());
        assert_eq!(c.access_token, None, "empty values count as absent");
        let shown = format!("{c:?}");
        for secret in ["robot", "hunter2", "refresh-secret"] {
            assert!(!shown.contains(secret), "{shown}");
        }
        let r = OciReference::parse("r/i").unwrap();
        let src = OciSource::new(&r, c, OciConfig::default()).unwrap();
        let shown = format!("{src:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("robot"),
            "{shown}"
        );
        assert!(OciCredentials::from_lookup(|_| None).is_anonymous());
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

    #[test]
    fn empty_blob_digest_is_the_well_known_one() {
        assert_eq!(
            sha256_digest(EMPTY_BLOB),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
