//! Releases on any HTTP(S) server in clusterctl's repository layout — Artifactory, Nexus, an
//! nginx or Apache mirror, object storage behind a web server: `<base>/<version>/<file>`.
//!
//! A fetchConfig URL names either one file (`<base>/<version>/<file>`, or `<base>/latest/<file>`)
//! or the repository (`<base>`, the provider's default components file). The versions come from
//! the server's listing of `<base>/`: the HTML index that nginx, Apache, Artifactory, Nexus and
//! most static servers generate (the `href`s of its links), nginx's JSON autoindex, or a plain
//! list with one name per line. Entries that are not versions (`../`, `index.html`) are ignored;
//! `latest` then resolves like every other source, from the newest release's metadata.
//!
//! Credentials (basic or bearer) and a private CA bundle come from the caller; the shared
//! [`Http`] client applies the same timeouts, retries, size limit and redirect rules as the
//! GitHub and GitLab sources.

use reqwest::Url;

use crate::{
    ReleaseSource, SourceError,
    http::{Credentials, Http, HttpConfig, redact_url},
};

/// A fetchConfig URL of an HTTP repository, split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepositoryUrl {
    /// The repository, without a trailing slash.
    pub base: String,
    /// The version the URL pins; `None` for `latest` or a bare repository URL.
    pub version: Option<String>,
    /// The components file.
    pub file: String,
}

impl RepositoryUrl {
    /// Parses `url`; a bare repository URL reads `default_file`.
    pub fn parse(url: &str, default_file: &str) -> Result<RepositoryUrl, SourceError> {
        let bad = |why: &str| {
            SourceError::Invalid(format!(
                "{} is not a release repository URL (https://HOST/PATH[/VERSION|latest/FILE]): {why}",
                redact_url(url)
            ))
        };
        let mut u = Url::parse(url).map_err(|_| bad("not a URL"))?;
        if !matches!(u.scheme(), "https" | "http") {
            return Err(bad("only https (or http) is accepted"));
        }
        if u.host_str().is_none() {
            return Err(bad("no host"));
        }
        if u.query().is_some() || u.fragment().is_some() {
            return Err(bad("a query or fragment has no place in a repository URL"));
        }
        let segs: Vec<String> = u
            .path_segments()
            .map(|s| s.filter(|p| !p.is_empty()).map(str::to_string).collect())
            .unwrap_or_default();
        // URL paths are case-sensitive, and releases name their files in lower case.
        #[allow(clippy::case_sensitive_file_extension_comparisons)]
        let names_file = segs
            .last()
            .is_some_and(|f| f.ends_with(".yaml") || f.ends_with(".yml"));
        let (keep, version, file) = match segs.as_slice() {
            [rest @ .., version, file] if names_file && !rest.is_empty() => {
                let version = (version != "latest").then(|| version.clone());
                (rest.to_vec(), version, file.clone())
            }
            _ if names_file => return Err(bad("a file URL needs BASE/VERSION/FILE")),
            _ => (segs.clone(), None, default_file.to_string()),
        };
        if let Some(v) = &version
            && !plain(v)
        {
            return Err(bad("invalid version segment"));
        }
        u.set_path(&keep.join("/"));
        let base = u.as_str().trim_end_matches('/').to_string();
        Ok(RepositoryUrl {
            base,
            version,
            file,
        })
    }
}

/// A path segment that stays one segment (no traversal, no separators).
fn plain(s: &str) -> bool {
    !s.is_empty() && s != "." && s != ".." && !s.contains(['/', '\\', '?', '#'])
}

/// Releases in clusterctl's layout on an HTTP(S) server.
#[derive(Debug)]
pub struct RepositorySource {
    http: Http,
    base: String,
}

impl RepositorySource {
    /// A source for the repository at `base` (https unless `config.allow_http`).
    pub fn new(
        base: &str,
        credentials: Credentials,
        config: HttpConfig,
    ) -> Result<RepositorySource, SourceError> {
        if base.starts_with("http://") && !config.allow_http {
            return Err(SourceError::Invalid(format!(
                "{}: release repositories must use https; plain http would expose credentials and releases to anyone on the path",
                redact_url(base)
            )));
        }
        Ok(RepositorySource {
            http: Http::with_credentials(base, credentials, config)?,
            base: base.trim_end_matches('/').to_string(),
        })
    }

    /// The repository URL.
    pub fn base(&self) -> &str {
        &self.base
    }
}

/// The versions a directory listing names: link targets (HTML), `name`s (nginx's JSON
/// autoindex) or lines (plain text), kept when they read as a version.
pub fn listed_versions(body: &str) -> Vec<String> {
    let trimmed = body.trim_start();
    let names: Vec<String> = if trimmed.starts_with('[') {
        serde_json::from_str::<Vec<serde_json::Value>>(trimmed)
            .unwrap_or_default()
            .iter()
            .filter_map(|e| e.get("name")?.as_str().map(str::to_string))
            .collect()
    } else if trimmed.starts_with('<') {
        hrefs(body)
    } else {
        body.lines().map(str::to_string).collect()
    };
    let mut versions: Vec<String> = names
        .iter()
        .filter_map(|n| {
            let n = n.trim().trim_end_matches('/');
            let n = n.rsplit('/').next().unwrap_or(n);
            // Listings escape `+` of build metadata.
            let n = percent_encoding::percent_decode_str(n)
                .decode_utf8_lossy()
                .into_owned();
            let bare = n.strip_prefix('v').unwrap_or(&n);
            semver::Version::parse(bare).is_ok().then_some(n)
        })
        .collect();
    versions.sort();
    versions.dedup();
    versions
}

/// The values of the `href` attributes of an HTML page.
fn hrefs(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let lower = html.to_ascii_lowercase();
    let mut at = 0;
    while let Some(i) = lower[at..].find("href=") {
        let start = at + i + 5;
        let rest = &html[start..];
        let (value, len) = match rest.chars().next() {
            Some(q @ ('"' | '\'')) => {
                let end = rest[1..].find(q).map_or(rest.len(), |e| e + 1);
                (&rest[1..end], end)
            }
            _ => {
                let end = rest
                    .find(|c: char| c.is_whitespace() || c == '>')
                    .unwrap_or(rest.len());
                (&rest[..end], end)
            }
        };
        out.push(value.to_string());
        at = (start + len.max(1)).min(html.len());
    }
    out
}

impl ReleaseSource for RepositorySource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        let url = format!("{}/", self.base);
        let listing = self
            .http
            .get(&url, "text/html, application/json;q=0.9, text/plain;q=0.8")
            .await?;
        let versions = listed_versions(&String::from_utf8_lossy(&listing.body));
        if versions.is_empty() {
            return Err(SourceError::NotFound(format!(
                "no release versions listed at {} (the server must list the repository's version directories, e.g. nginx autoindex)",
                redact_url(&url)
            )));
        }
        Ok(versions)
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        if !plain(version) || !plain(file) {
            return Err(SourceError::Invalid(format!(
                "invalid repository path {version}/{file}"
            )));
        }
        let url = format!("{}/{version}/{file}", self.base);
        match self.http.get(&url, "application/octet-stream, */*").await {
            Err(SourceError::NotFound(_)) => Err(SourceError::NotFound(format!(
                "{file} of {version} in {}",
                redact_url(&url)
            ))),
            r => Ok(r?.body),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls() -> Result<(), SourceError> {
        let d = "core-components.yaml";
        let cases = [
            (
                "https://m.example/capi/core/v1.12.0/core-components.yaml",
                "https://m.example/capi/core",
                Some("v1.12.0"),
                d,
            ),
            (
                "https://m.example/capi/core/latest/components.yaml",
                "https://m.example/capi/core",
                None,
                "components.yaml",
            ),
            (
                "https://m.example/capi/core/",
                "https://m.example/capi/core",
                None,
                d,
            ),
            (
                "https://m.example:8443/artifactory/capi",
                "https://m.example:8443/artifactory/capi",
                None,
                d,
            ),
        ];
        for (url, base, version, file) in cases {
            let u = RepositoryUrl::parse(url, d)?;
            assert_eq!(
                (u.base.as_str(), u.version.as_deref(), u.file.as_str()),
                (base, version, file),
                "{url}"
            );
        }
        for bad in [
            "ftp://m.example/capi",
            "https://m.example/core-components.yaml",
            "https://m.example/capi?x=1",
            "not a url",
        ] {
            assert!(RepositoryUrl::parse(bad, d).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn listings() {
        let nginx = r#"<html><head><title>Index of /capi/</title></head><body><h1>Index of /capi/</h1><hr><pre><a href="../">../</a>
<a href="v1.11.0/">v1.11.0/</a>                                           23-Nov-2026 10:00       -
<a href="v1.12.0/">v1.12.0/</a>                                           23-Nov-2026 10:00       -
<a href="v1.13.0-rc.1/">v1.13.0-rc.1/</a>
<a href="index.html">index.html</a>
</pre><hr></body></html>"#;
        assert_eq!(
            listed_versions(nginx),
            ["v1.11.0", "v1.12.0", "v1.13.0-rc.1"]
        );
        let artifactory = "<html><body><a href='https://art.example/artifactory/capi/v2.0.0%2Bmeta/'>v2.0.0+meta/</a><a href=v1.0.0/>v1.0.0/</a></body></html>";
        assert_eq!(listed_versions(artifactory), ["v1.0.0", "v2.0.0+meta"]);
        let json = r#"[{"name":"v0.1.0","type":"directory"},{"name":"README","type":"file"}]"#;
        assert_eq!(listed_versions(json), ["v0.1.0"]);
        assert_eq!(
            listed_versions("v1.0.0\nv1.1.0\nnotes\n"),
            ["v1.0.0", "v1.1.0"]
        );
        assert!(listed_versions("<html>nothing</html>").is_empty());
        assert!(listed_versions("<a href=").is_empty());
    }

    #[test]
    fn plain_http_needs_permission_and_paths_stay_inside() {
        let e = RepositorySource::new(
            "http://m.example/capi",
            Credentials::None,
            HttpConfig::default(),
        );
        assert!(e.is_err());
        let ok = RepositorySource::new(
            "http://m.example/capi",
            Credentials::None,
            HttpConfig {
                allow_http: true,
                ..HttpConfig::default()
            },
        );
        assert!(ok.is_ok());
    }

    #[test]
    fn a_bad_ca_bundle_is_refused() {
        let config = HttpConfig {
            ca_bundle: Some("not pem".into()),
            ..HttpConfig::default()
        };
        assert!(
            RepositorySource::new("https://m.example/capi", Credentials::None, config).is_err()
        );
    }
}
