//! Registry authentication: the credentials from the provider Secret, the registry's
//! `WWW-Authenticate` challenges, and the decisions of the Basic and Bearer token flows
//! answering them. The registry client sends what these decide; this module sends nothing.

use std::{
    collections::{BTreeMap, HashMap},
    fmt,
    sync::Mutex,
};

use base64::Engine;
use reqwest::{
    Url,
    header::{HeaderMap, HeaderValue},
};
use serde::Deserialize;

use super::{
    CLIENT_ID, OCI_ACCESS_TOKEN, OCI_PASSWORD, OCI_REFRESH_TOKEN, OCI_USERNAME, SourceError,
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
struct AuthState {
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

/// What a registry client knows about authenticating: the credentials, and what the registry
/// asked for so far. The client sends, this decides: it names no client type, so the
/// dependency between the two modules runs one way.
pub(super) struct Authenticator {
    credentials: OciCredentials,
    state: Mutex<AuthState>,
}

/// What to do after a registry answered 401.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Reaction {
    /// Nothing else to try: the refusal stands.
    GiveUp,
    /// Send the request again, now with Basic credentials.
    Resend,
    /// Get a bearer token from the registry's token service, then send the request again.
    FetchToken(TokenRequest),
}

/// A request to a registry's token service.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct TokenRequest {
    /// The token service's address, with the query of the GET flow.
    pub(super) url: Url,
    /// The OAuth2 refresh grant's form, POSTed instead of the GET flow when set.
    pub(super) form: Option<Vec<(&'static str, String)>>,
    /// Basic credentials for the GET flow.
    pub(super) basic: Option<HeaderValue>,
    /// The token's name in errors.
    pub(super) what: String,
}

/// Where a registry is, for the messages and checks of the token flow.
pub(super) struct RegistryIdentity<'a> {
    /// The registry's host (and port), as the reference names it.
    pub(super) registry: &'a str,
    /// The repository's name in messages.
    pub(super) name: String,
    /// The scheme the registry is spoken to over: a token service is never asked over plain
    /// HTTP for an HTTPS registry.
    pub(super) scheme: &'a str,
    /// The scope asked for when the challenge names none.
    pub(super) default_scope: String,
}

impl Authenticator {
    pub(super) fn new(credentials: OciCredentials) -> Authenticator {
        Authenticator {
            credentials,
            state: Mutex::new(AuthState::default()),
        }
    }

    pub(super) fn credentials(&self) -> &OciCredentials {
        &self.credentials
    }

    /// The `Authorization` header for a request needing `access`, if any is known.
    pub(super) fn authorization(&self, access: Access) -> Option<HeaderValue> {
        if let Some(t) = &self.credentials.access_token {
            return sensitive(&format!("Bearer {t}"));
        }
        let state = self.state.lock().ok()?;
        if let Some(t) = state.tokens.get(&access) {
            return Some(t.clone());
        }
        if state.basic {
            return self.credentials.basic_header();
        }
        None
    }

    /// Keeps a bearer token the token service issued for `access`.
    pub(super) fn store_token(&self, access: Access, token: HeaderValue) {
        if let Ok(mut state) = self.state.lock() {
            state.tokens.insert(access, token);
        }
    }

    /// Reacts to a 401 carrying `challenges`.
    pub(super) fn react(
        &self,
        challenges: &[Challenge],
        at: &RegistryIdentity<'_>,
    ) -> Result<Reaction, SourceError> {
        if self.credentials.access_token.is_some() {
            // The one token we have was refused; nothing else to try.
            return Ok(Reaction::GiveUp);
        }
        if let Some(bearer) = challenges
            .iter()
            .find(|c| c.scheme.eq_ignore_ascii_case("bearer"))
        {
            return self.token_request(bearer, at).map(Reaction::FetchToken);
        }
        if challenges
            .iter()
            .any(|c| c.scheme.eq_ignore_ascii_case("basic"))
            && self.credentials.username.is_some()
            && let Ok(mut state) = self.state.lock()
            && !state.basic
        {
            tracing::debug!(registry = %at.registry, "registry asked for basic authentication");
            state.basic = true;
            return Ok(Reaction::Resend);
        }
        Ok(Reaction::GiveUp)
    }

    /// The request a bearer challenge asks for: the refresh grant when a refresh token is set,
    /// else a GET with the Basic credentials (or none).
    fn token_request(
        &self,
        bearer: &Challenge,
        at: &RegistryIdentity<'_>,
    ) -> Result<TokenRequest, SourceError> {
        let registry = at.registry;
        let realm = bearer.params.get("realm").ok_or_else(|| {
            invalid(format!(
                "registry {registry} asked for a bearer token without naming a token service"
            ))
        })?;
        let service = bearer.params.get("service");
        let scope = bearer
            .params
            .get("scope")
            .cloned()
            .unwrap_or_else(|| at.default_scope.clone());
        tracing::debug!(%registry, %scope, "fetching a registry token");
        let mut url = token_service_url(realm, at)?;
        let what = format!(
            "a token for {} from {}",
            at.name,
            url.host_str().unwrap_or("?")
        );
        if let Some(refresh) = &self.credentials.refresh_token {
            let mut form = vec![
                ("grant_type", "refresh_token".to_string()),
                ("refresh_token", refresh.clone()),
                ("client_id", CLIENT_ID.to_string()),
                ("scope", scope),
            ];
            form.extend(service.map(|s| ("service", s.clone())));
            return Ok(TokenRequest {
                url,
                form: Some(form),
                basic: None,
                what,
            });
        }
        {
            let mut q = url.query_pairs_mut();
            if let Some(s) = service {
                q.append_pair("service", s);
            }
            for s in scope.split_whitespace() {
                q.append_pair("scope", s);
            }
        }
        Ok(TokenRequest {
            url,
            form: None,
            basic: self.credentials.basic_header(),
            what,
        })
    }
}

/// The token service's address `realm`, refused when credentials would travel over plain HTTP
/// to it from an HTTPS registry.
fn token_service_url(realm: &str, at: &RegistryIdentity<'_>) -> Result<Url, SourceError> {
    let registry = at.registry;
    let url = Url::parse(realm).map_err(|_| {
        invalid(format!(
            "registry {registry} named an invalid token service address"
        ))
    })?;
    match (url.scheme(), at.scheme) {
        ("https", _) | ("http", "http") => Ok(url),
        ("http", _) => Err(invalid(format!(
            "registry {registry} named a plain-HTTP token service ({}); credentials are sent over HTTPS only",
            url.host_str().unwrap_or("?")
        ))),
        (other, _) => Err(invalid(format!(
            "registry {registry} named a token service with scheme {other:?}"
        ))),
    }
}

/// The bearer token in a token service's answer (`token`, or OAuth2's `access_token`).
pub(super) fn token_from_answer(what: &str, body: &[u8]) -> Result<HeaderValue, SourceError> {
    #[derive(Deserialize)]
    struct TokenAnswer {
        #[serde(default)]
        token: Option<String>,
        #[serde(default)]
        access_token: Option<String>,
    }
    let answer: TokenAnswer = serde_json::from_slice(body)
        .map_err(|_| invalid(format!("{what}: the token service's answer is not JSON")))?;
    let token = answer
        .token
        .filter(|t| !t.is_empty())
        .or(answer.access_token.filter(|t| !t.is_empty()))
        .ok_or_else(|| invalid(format!("{what}: the token service returned no token")))?;
    sensitive(&format!("Bearer {token}"))
        .ok_or_else(|| invalid(format!("{what}: the token is not a valid header value")))
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

    fn at(scheme: &str) -> RegistryIdentity<'_> {
        RegistryIdentity {
            registry: "registry.example",
            name: "registry.example/r/i".into(),
            scheme,
            default_scope: "repository:r/i:pull".into(),
        }
    }

    fn challenged(header: &str) -> Vec<Challenge> {
        vec![parse_challenge(header).unwrap()]
    }

    #[test]
    fn bearer_challenges_ask_for_a_token_the_way_the_credentials_allow() {
        let bearer = challenged(r#"Bearer realm="https://auth.example/token",service="reg""#);
        let basic = Authenticator::new(OciCredentials::basic("robot", "pw"));
        let Reaction::FetchToken(t) = basic.react(&bearer, &at("https")).unwrap() else {
            panic!("a bearer challenge asks for a token");
        };
        assert_eq!(
            t.url.as_str(),
            "https://auth.example/token?service=reg&scope=repository%3Ar%2Fi%3Apull"
        );
        assert!(t.form.is_none() && t.basic.is_some());
        let refresh = Authenticator::new(OciCredentials::anonymous().with_refresh_token("rt"));
        let Reaction::FetchToken(t) = refresh.react(&bearer, &at("https")).unwrap() else {
            panic!("a bearer challenge asks for a token");
        };
        let form = t.form.unwrap();
        assert!(form.contains(&("grant_type", "refresh_token".to_string())));
        assert!(form.contains(&("service", "reg".to_string())));
        assert!(t.basic.is_none());
        let plain = challenged(r#"Bearer realm="http://auth.example/token""#);
        assert!(matches!(
            basic.react(&plain, &at("https")),
            Err(SourceError::Invalid(m)) if m.contains("plain-HTTP")
        ));
        let fixed = Authenticator::new(OciCredentials::access_token("t"));
        assert_eq!(
            fixed.react(&bearer, &at("https")).unwrap(),
            Reaction::GiveUp
        );
    }

    #[test]
    fn basic_challenges_turn_basic_authentication_on_once() {
        let basic = challenged(r#"Basic realm="r""#);
        let auth = Authenticator::new(OciCredentials::basic("robot", "pw"));
        assert_eq!(auth.authorization(Access::Pull), None);
        assert_eq!(auth.react(&basic, &at("https")).unwrap(), Reaction::Resend);
        assert!(auth.authorization(Access::Pull).is_some());
        assert_eq!(auth.react(&basic, &at("https")).unwrap(), Reaction::GiveUp);
        let anonymous = Authenticator::new(OciCredentials::anonymous());
        assert_eq!(
            anonymous.react(&basic, &at("https")).unwrap(),
            Reaction::GiveUp
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
}
