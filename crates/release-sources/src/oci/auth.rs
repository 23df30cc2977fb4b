//! Registry authentication: the credentials from the provider Secret, the registry's
//! `WWW-Authenticate` challenges, and the Basic and Bearer token flows answering them.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
};

use base64::Engine;
use reqwest::{
    Url,
    header::{AUTHORIZATION, HeaderMap, HeaderValue},
};
use serde::Deserialize;

use super::{
    CLIENT_ID, MAX_TOKEN_BYTES, OCI_ACCESS_TOKEN, OCI_PASSWORD, OCI_REFRESH_TOKEN, OCI_USERNAME,
    SourceError,
    client::{Registry, read_limited, status_error, transport_error},
    invalid,
};

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

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Access {
    Pull,
    Push,
}

#[derive(Default)]
pub(super) struct AuthState {
    /// The registry asked for Basic authentication, so credentials go with every request.
    basic: bool,
    /// Bearer tokens obtained from the token service, per access level.
    tokens: HashMap<Access, HeaderValue>,
}

/// A `WWW-Authenticate` challenge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Challenge {
    scheme: String,
    params: BTreeMap<String, String>,
}

impl Registry {
    pub(super) fn authorization(&self, access: Access) -> Option<HeaderValue> {
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
    pub(super) async fn authenticate(
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
}

/// Parses every `WWW-Authenticate` header: `Scheme k="v",k2="v2"` (values may hold commas).
pub(super) fn parse_challenges(headers: &HeaderMap) -> Vec<Challenge> {
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

#[cfg(test)]
// Tests fail loudly on unexpected values; unwrap says exactly that.
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::oci::{OciConfig, OciReference, OciSource};

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
}
