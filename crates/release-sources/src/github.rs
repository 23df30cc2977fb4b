//! GitHub releases: `https://github.com/{owner}/{repo}/releases/{latest|tag}/{file}`, and the
//! same on a GitHub Enterprise host. Versions come from the releases API, following `Link`
//! pagination; files are release assets downloaded through the API (which redirects to GitHub's
//! asset hosts). The API base is configurable, for GitHub Enterprise and for tests against a
//! local server.
//!
//! Unlike clusterctl this source never asks the Go module proxy: the operator's only remotes are
//! the ones a provider names.

use std::{collections::HashMap, sync::Mutex};

use capi_operator_api::note::found_note;
use reqwest::Url;
use serde::Deserialize;

use super::{
    MAX_LISTING_PAGE_BYTES, ReleaseSource, SourceError,
    http::{Http, HttpConfig, next_link, redact_url, same_origin},
    listing::Listing,
};

/// The public GitHub API.
pub const GITHUB_API: &str = "https://api.github.com";

/// Hosts api.github.com redirects release-asset downloads to.
pub const GITHUB_ASSET_HOSTS: &[&str] = &[
    "objects.githubusercontent.com",
    "release-assets.githubusercontent.com",
    "github-releases.githubusercontent.com",
];

/// Most pages of the releases list read (100 releases each); older releases beyond are ignored.
const MAX_PAGES: usize = 30;

/// A parsed GitHub release URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHubUrl {
    /// Host, lower case (github.com or an Enterprise host, with its port if any).
    pub host: String,
    /// Repository owner.
    pub owner: String,
    /// Repository name.
    pub repo: String,
    /// The tag the URL names; `None` for `latest`.
    pub version: Option<String>,
    /// The file (components file name).
    pub file: String,
}

fn valid_name(s: &str, extra: &[char]) -> bool {
    !s.is_empty()
        && s != "."
        && s != ".."
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || extra.contains(&c))
}

fn check_repo(owner: &str, repo: &str) -> Result<(), String> {
    // GitHub's own rules: owners are letters, digits and dashes; repositories add `.` and `_`.
    if !valid_name(owner, &[]) {
        return Err(format!("{owner:?} is not a GitHub owner name"));
    }
    if !valid_name(repo, &['.', '_']) {
        return Err(format!("{repo:?} is not a GitHub repository name"));
    }
    Ok(())
}

fn decode(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

impl GitHubUrl {
    /// Parses `https://{host}/{owner}/{repo}/releases/{latest|tag}/{file}`. The browser's
    /// download form `.../releases/download/{tag}/{file}` is accepted too.
    pub fn parse(url: &str) -> Result<GitHubUrl, SourceError> {
        Self::parse_inner(url, None)
    }

    /// Whether `url` has the shape of a GitHub release URL (`OWNER/REPO/releases[/...]`), as
    /// opposed to a plain HTTP release repository.
    pub fn looks_like(url: &str) -> bool {
        Url::parse(url).is_ok_and(|u| {
            let segs: Vec<&str> = u
                .path_segments()
                .map(|s| s.filter(|p| !p.is_empty()).collect())
                .unwrap_or_default();
            matches!(segs.as_slice(), [_, _, "releases", ..])
        })
    }

    /// Like [`GitHubUrl::parse`], and also the repository forms that name no file:
    /// `.../releases` (as the specification's examples write fetchConfig.url),
    /// `.../releases/latest`, `.../releases/{tag}` and the web page `.../releases/tag/{tag}`;
    /// the file is then `default_file`, the provider type's components file.
    pub fn parse_with_default_file(
        url: &str,
        default_file: &str,
    ) -> Result<GitHubUrl, SourceError> {
        Self::parse_inner(url, Some(default_file))
    }

    fn parse_inner(url: &str, default_file: Option<&str>) -> Result<GitHubUrl, SourceError> {
        let bad = |why: &str| {
            SourceError::Invalid(format!(
                "{} is not a GitHub release URL (https://github.com/OWNER/REPO/releases/latest|TAG/FILE): {why}",
                redact_url(url)
            ))
        };
        let u = Url::parse(url).map_err(|_| bad("not a URL"))?;
        if u.scheme() != "https" {
            return Err(bad("only https is accepted"));
        }
        let host = match (u.host_str(), u.port()) {
            (Some(h), Some(p)) => format!("{}:{p}", h.to_ascii_lowercase()),
            (Some(h), None) => h.to_ascii_lowercase(),
            (None, _) => return Err(bad("no host")),
        };
        let segs: Vec<&str> = u
            .path_segments()
            .map(|s| s.filter(|p| !p.is_empty()).collect())
            .unwrap_or_default();
        let (owner, repo, rest) = match segs.as_slice() {
            [owner, repo, "releases", rest @ ..] => (*owner, *repo, rest),
            _ => return Err(bad("expected OWNER/REPO/releases/...")),
        };
        check_repo(owner, repo).map_err(|e| bad(&e))?;
        let (version, file) = match (rest, default_file) {
            (["latest", file], _) => (None, decode(file)),
            (["download", tag, file], _) => (Some(decode(tag)), decode(file)),
            (["tag", tag], Some(d)) => (Some(decode(tag)), d.to_string()),
            ([tag, file], _) if *tag != "download" && *tag != "tag" => {
                (Some(decode(tag)), decode(file))
            }
            ([] | ["latest"], Some(d)) => (None, d.to_string()),
            ([tag], Some(d)) if *tag != "download" && *tag != "tag" => {
                (Some(decode(tag)), d.to_string())
            }
            ([] | [_], None) => return Err(bad("the version and file name are missing")),
            _ => return Err(bad("expected releases/latest/FILE or releases/TAG/FILE")),
        };
        if matches!(file.as_str(), "." | "..") {
            return Err(bad("the file name is not valid"));
        }
        Ok(GitHubUrl {
            host,
            owner: owner.to_string(),
            repo: repo.to_string(),
            version,
            file,
        })
    }

    /// The API base for this host: api.github.com for github.com, `https://{host}/api/v3` on
    /// GitHub Enterprise Server.
    pub fn default_api(&self) -> String {
        if self.host == "github.com" || self.host == "www.github.com" {
            GITHUB_API.into()
        } else {
            format!("https://{}/api/v3", self.host)
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
struct Asset {
    id: u64,
    name: String,
}

#[derive(Debug, Deserialize)]
struct ReleaseJson {
    tag_name: String,
    #[serde(default)]
    draft: bool,
    #[serde(default)]
    assets: Vec<Asset>,
}

/// Releases of one GitHub repository.
#[derive(Debug)]
pub struct GitHubSource {
    http: Http,
    api: Url,
    owner: String,
    repo: String,
    /// Assets of each release looked up (or listed), so the metadata and components of one
    /// version cost one release lookup.
    assets: Mutex<HashMap<String, Vec<Asset>>>,
}

impl GitHubSource {
    /// Releases of `owner/repo` through the API at `api` (e.g. [`GITHUB_API`],
    /// `https://HOST/api/v3`), with an optional token sent as a bearer token. With the public
    /// API, asset downloads may redirect to [`GITHUB_ASSET_HOSTS`]; any other redirect target
    /// must be in `config.redirect_hosts`.
    pub fn new(
        api: &str,
        owner: &str,
        repo: &str,
        token: Option<String>,
        mut config: HttpConfig,
    ) -> Result<GitHubSource, SourceError> {
        check_repo(owner, repo).map_err(SourceError::Invalid)?;
        let api_url = Url::parse(api.trim_end_matches('/')).map_err(|_| {
            SourceError::Invalid(format!("GitHub API URL {} is not a URL", redact_url(api)))
        })?;
        if api_url.cannot_be_a_base() || api_url.query().is_some() {
            return Err(SourceError::Invalid(format!(
                "GitHub API URL {} cannot be a base URL",
                redact_url(api)
            )));
        }
        if api_url.host_str() == Some("api.github.com") {
            config.redirect_hosts.extend(
                GITHUB_ASSET_HOSTS
                    .iter()
                    .map(std::string::ToString::to_string),
            );
        }
        Ok(GitHubSource {
            http: Http::new(api_url.as_str(), token, config)?,
            api: api_url,
            owner: owner.to_string(),
            repo: repo.to_string(),
            assets: Mutex::new(HashMap::new()),
        })
    }

    /// The source a release URL names, through `api` when given (an operator-wide override),
    /// else the URL host's default API.
    pub fn from_url(
        url: &GitHubUrl,
        api: Option<&str>,
        token: Option<String>,
        config: HttpConfig,
    ) -> Result<GitHubSource, SourceError> {
        let api = api.map_or_else(|| url.default_api(), str::to_string);
        GitHubSource::new(&api, &url.owner, &url.repo, token, config)
    }

    /// `owner/repo`.
    pub fn repository(&self) -> String {
        format!("{}/{}", self.owner, self.repo)
    }

    /// `{api}/repos/{owner}/{repo}/{segs...}`, each segment percent-encoded, so a tag can never
    /// change the path.
    fn endpoint(&self, segs: &[&str]) -> Result<String, SourceError> {
        let mut u = self.api.clone();
        u.path_segments_mut()
            .map_err(|()| SourceError::Invalid("the GitHub API URL cannot be a base".into()))?
            .pop_if_empty()
            .extend(["repos", self.owner.as_str(), self.repo.as_str()])
            .extend(segs);
        Ok(u.into())
    }

    fn cached(&self, tag: &str) -> Option<Vec<Asset>> {
        self.assets.lock().ok().and_then(|m| m.get(tag).cloned())
    }

    fn remember(&self, tag: &str, assets: Vec<Asset>) {
        if let Ok(mut m) = self.assets.lock() {
            m.insert(tag.to_string(), assets);
        }
    }

    async fn release_assets(&self, tag: &str) -> Result<Vec<Asset>, SourceError> {
        if let Some(a) = self.cached(tag) {
            return Ok(a);
        }
        let url = self.endpoint(&["releases", "tags", tag])?;
        let resp = match self.http.get(&url, "application/vnd.github+json").await {
            Ok(r) => r,
            Err(SourceError::NotFound(_)) => {
                return Err(SourceError::NotFound(format!(
                    "release {tag} of {}",
                    self.repository()
                )));
            }
            Err(e) => return Err(e),
        };
        let release: ReleaseJson = parse_json(&url, &resp.body)?;
        self.remember(tag, release.assets.clone());
        Ok(release.assets)
    }
}

fn parse_json<T: serde::de::DeserializeOwned>(url: &str, body: &[u8]) -> Result<T, SourceError> {
    serde_json::from_slice(body).map_err(|e| unexpected_answer(url, &e))
}

fn unexpected_answer(url: &str, e: &serde_json::Error) -> SourceError {
    SourceError::Invalid(format!(
        "{}: unexpected answer from the GitHub API: {e}",
        redact_url(url)
    ))
}

impl ReleaseSource for GitHubSource {
    /// Tags of the repository's published releases (drafts left out) that are semantic
    /// versions, pre-releases included, newest first as GitHub lists them.
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        let mut url = format!("{}?per_page=100", self.endpoint(&["releases"])?);
        let mut out = Listing::new(format!("the releases of {}", self.repository()));
        for page in 1..=MAX_PAGES {
            let resp = self
                .http
                .get_limited(&url, "application/vnd.github+json", MAX_LISTING_PAGE_BYTES)
                .await?;
            let releases: Vec<ReleaseJson> = out
                .parse_page(resp.body)
                .await?
                .map_err(|e| unexpected_answer(&url, &e))?;
            out.expect_entries(releases.len())?;
            for r in releases {
                if r.draft
                    || out.has(&r.tag_name)
                    || capi_release::version::parse(&r.tag_name).is_none()
                {
                    continue;
                }
                // The listing carries every release's assets: later downloads need no lookup.
                self.remember(&r.tag_name, r.assets);
                out.push(r.tag_name);
            }
            match next_link(&resp.headers) {
                None => break,
                Some(next) if same_origin(&next, self.api.as_str()) => {
                    if page == MAX_PAGES {
                        tracing::warn!(
                            repository = %self.repository(),
                            pages = MAX_PAGES,
                            "releases list truncated; older releases are ignored"
                        );
                    }
                    url = next;
                }
                Some(next) => {
                    tracing::warn!(
                        repository = %self.repository(),
                        link = %redact_url(&next),
                        "pagination link to another host ignored; no request outside the configured source"
                    );
                    break;
                }
            }
        }
        Ok(out.into_versions())
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let assets = self.release_assets(version).await?;
        let asset = assets.iter().find(|a| a.name == file).ok_or_else(|| {
            let names: Vec<String> = assets.iter().map(|a| a.name.clone()).collect();
            SourceError::NotFoundAmong {
                what: format!("{file} in release {version} of {}", self.repository()),
                found: found_note(
                    "the release has assets ",
                    &names,
                    "the release has no assets",
                ),
            }
        })?;
        let url = self.endpoint(&["releases", "assets", &asset.id.to_string()])?;
        Ok(self.http.get(&url, "application/octet-stream").await?.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repository_urls_without_a_file_take_the_default_components_file() {
        let d = "infrastructure-components.yaml";
        for (url, version) in [
            (
                "https://github.com/myorg/awesome-azure-provider/releases",
                None,
            ),
            (
                "https://github.com/myorg/awesome-azure-provider/releases/",
                None,
            ),
            (
                "https://github.com/myorg/awesome-azure-provider/releases/latest",
                None,
            ),
            (
                "https://github.com/myorg/awesome-azure-provider/releases/v1.2.3",
                Some("v1.2.3"),
            ),
            (
                "https://github.com/myorg/awesome-azure-provider/releases/tag/v1.2.3",
                Some("v1.2.3"),
            ),
        ] {
            let u = GitHubUrl::parse_with_default_file(url, d).unwrap();
            assert_eq!(
                (u.owner.as_str(), u.repo.as_str()),
                ("myorg", "awesome-azure-provider"),
                "{url}"
            );
            assert_eq!(u.version.as_deref(), version, "{url}");
            assert_eq!(u.file, d, "{url}");
            // The strict form still wants a file.
            assert!(GitHubUrl::parse(url).is_err(), "{url}");
        }
        // A file in the URL wins over the default.
        let u = GitHubUrl::parse_with_default_file(
            "https://github.com/o/r/releases/latest/custom.yaml",
            d,
        )
        .unwrap();
        assert_eq!(u.file, "custom.yaml");
        for bad in [
            "https://github.com/o/r",
            "https://github.com/o/r/releases/download/v1",
            "https://github.com/o/r/releases/tag",
            "http://github.com/o/r/releases",
        ] {
            assert!(GitHubUrl::parse_with_default_file(bad, d).is_err(), "{bad}");
        }
    }

    #[test]
    fn endpoints_encode_segments() -> Result<(), SourceError> {
        let s = GitHubSource::new(
            "https://ghe.example/api/v3/",
            "o",
            "r.go",
            None,
            HttpConfig::default(),
        )?;
        assert_eq!(
            s.endpoint(&["releases", "tags", "v1.0.0+build/../x"])?,
            "https://ghe.example/api/v3/repos/o/r.go/releases/tags/v1.0.0+build%2F..%2Fx"
        );
        Ok(())
    }

    #[test]
    fn bad_names_and_apis_are_refused() {
        let cfg = HttpConfig::default;
        assert!(GitHubSource::new(GITHUB_API, "o/x", "r", None, cfg()).is_err());
        assert!(GitHubSource::new(GITHUB_API, "o", "..", None, cfg()).is_err());
        assert!(GitHubSource::new("api.github.com", "o", "r", None, cfg()).is_err());
        assert!(GitHubSource::new("https://api.github.com?x=1", "o", "r", None, cfg()).is_err());
    }
}
