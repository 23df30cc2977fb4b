//! GitHub releases: `https://github.com/{owner}/{repo}/releases/{latest|tag}/{file}` (and the
//! same on a GitHub Enterprise host). Versions come from the releases API, following `Link`
//! pagination; files are release assets downloaded through the API. The API base is
//! configurable, for GitHub Enterprise and for tests against a local server.

use std::{collections::HashMap, sync::Mutex};

use serde::Deserialize;

use super::{
    ReleaseSource, SourceError,
    http::{Http, HttpConfig, next_link},
};

/// A parsed GitHub release URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHubUrl {
    /// Host (github.com or an Enterprise host).
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

impl GitHubUrl {
    /// Parses `https://{host}/{owner}/{repo}/releases/{latest|tag}/{file}`; the older form
    /// `.../releases/download/{tag}/{file}` is accepted too.
    pub fn parse(url: &str) -> Result<GitHubUrl, SourceError> {
        let bad = |why: &str| {
            SourceError::Invalid(format!(
                "{url:?} is not a GitHub release URL (https://github.com/OWNER/REPO/releases/latest|TAG/FILE): {why}"
            ))
        };
        let u = reqwest::Url::parse(url).map_err(|_| bad("not a URL"))?;
        if u.scheme() != "https" {
            return Err(bad("only https is accepted"));
        }
        let host = u
            .host_str()
            .ok_or_else(|| bad("no host"))?
            .to_ascii_lowercase();
        let segs: Vec<&str> = u
            .path_segments()
            .map(|s| s.filter(|p| !p.is_empty()).collect())
            .unwrap_or_default();
        let (owner, repo, rest) = match segs.as_slice() {
            [owner, repo, "releases", rest @ ..] => (*owner, *repo, rest),
            _ => return Err(bad("expected OWNER/REPO/releases/...")),
        };
        let (version, file) = match rest {
            ["latest", file] => (None, *file),
            ["download", tag, file] => (Some(*tag), *file),
            [tag, file] => (Some(*tag), *file),
            _ => return Err(bad("expected releases/latest/FILE or releases/TAG/FILE")),
        };
        Ok(GitHubUrl {
            host,
            owner: owner.to_string(),
            repo: repo.to_string(),
            version: version.map(str::to_string),
            file: file.to_string(),
        })
    }

    /// The API base for this host: api.github.com, or `https://{host}/api/v3` on Enterprise.
    pub fn default_api(&self) -> String {
        if self.host == "github.com" {
            "https://api.github.com".into()
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

/// Largest releases listing read (pages of 100).
const MAX_PAGES: usize = 50;

/// Releases of one GitHub repository.
#[derive(Debug)]
pub struct GitHubSource {
    http: Http,
    api: String,
    owner: String,
    repo: String,
    assets: Mutex<HashMap<String, Vec<Asset>>>,
}

impl GitHubSource {
    /// Releases of `owner/repo` through the API at `api` (no trailing slash), with an
    /// optional token. Asset downloads may redirect to GitHub's asset hosts.
    pub fn new(
        api: &str,
        owner: &str,
        repo: &str,
        token: Option<String>,
        mut config: HttpConfig,
    ) -> Result<GitHubSource, SourceError> {
        let api = api.trim_end_matches('/').to_string();
        for h in [
            "objects.githubusercontent.com",
            "release-assets.githubusercontent.com",
            "github-releases.githubusercontent.com",
        ] {
            if api == "https://api.github.com" {
                config.redirect_hosts.push(h.to_string());
            }
        }
        Ok(GitHubSource {
            http: Http::new(&api, token, config)?,
            api,
            owner: owner.to_string(),
            repo: repo.to_string(),
            assets: Mutex::new(HashMap::new()),
        })
    }

    fn repo_url(&self) -> String {
        format!("{}/repos/{}/{}", self.api, self.owner, self.repo)
    }

    async fn release_assets(&self, tag: &str) -> Result<Vec<Asset>, SourceError> {
        if let Some(a) = self.assets.lock().ok().and_then(|m| m.get(tag).cloned()) {
            return Ok(a);
        }
        let url = format!("{}/releases/tags/{tag}", self.repo_url());
        let resp = self.http.get(&url, "application/vnd.github+json").await?;
        let release: ReleaseJson = serde_json::from_slice(&resp.body)
            .map_err(|e| SourceError::Invalid(format!("{url}: unexpected answer: {e}")))?;
        if let Ok(mut m) = self.assets.lock() {
            m.insert(tag.to_string(), release.assets.clone());
        }
        Ok(release.assets)
    }
}

impl ReleaseSource for GitHubSource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        let mut url = format!("{}/releases?per_page=100", self.repo_url());
        let api_host = reqwest::Url::parse(&self.api)
            .ok()
            .and_then(|u| u.host_str().map(str::to_string));
        let mut out = Vec::new();
        for _ in 0..MAX_PAGES {
            let resp = self.http.get(&url, "application/vnd.github+json").await?;
            let page: Vec<ReleaseJson> = serde_json::from_slice(&resp.body)
                .map_err(|e| SourceError::Invalid(format!("{url}: unexpected answer: {e}")))?;
            for r in page {
                if !r.draft && crate::version::parse(&r.tag_name).is_some() {
                    out.push(r.tag_name);
                }
            }
            match next_link(&resp.headers) {
                // Pagination never leads to another host.
                Some(next)
                    if reqwest::Url::parse(&next)
                        .ok()
                        .and_then(|u| u.host_str().map(str::to_string))
                        == api_host =>
                {
                    url = next
                }
                _ => break,
            }
        }
        Ok(out)
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let assets = self.release_assets(version).await?;
        let asset = assets.iter().find(|a| a.name == file).ok_or_else(|| {
            SourceError::NotFound(format!(
                "{file} in release {version} of {}/{}",
                self.owner, self.repo
            ))
        })?;
        let url = format!("{}/releases/assets/{}", self.repo_url(), asset.id);
        Ok(self.http.get(&url, "application/octet-stream").await?.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_urls() {
        let u = GitHubUrl::parse(
            "https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases/v2.1.4/infrastructure-components.yaml",
        )
        .unwrap();
        assert_eq!(
            (
                u.owner.as_str(),
                u.repo.as_str(),
                u.version.as_deref(),
                u.file.as_str()
            ),
            (
                "kubernetes-sigs",
                "cluster-api-provider-aws",
                Some("v2.1.4"),
                "infrastructure-components.yaml"
            )
        );
        assert_eq!(u.default_api(), "https://api.github.com");
        let u = GitHubUrl::parse("https://github.com/o/r/releases/latest/core-components.yaml")
            .unwrap();
        assert_eq!(u.version, None);
        let u = GitHubUrl::parse("https://git.corp.example/o/r/releases/download/v1.0.0/f.yaml")
            .unwrap();
        assert_eq!(u.version.as_deref(), Some("v1.0.0"));
        assert_eq!(u.default_api(), "https://git.corp.example/api/v3");
        for bad in [
            "http://github.com/o/r/releases/latest/f.yaml",
            "https://github.com/o/r/tags/latest/f.yaml",
            "https://github.com/o/r/releases/latest",
            "not a url",
            "https://github.com/o/releases/latest/f.yaml",
        ] {
            assert!(GitHubUrl::parse(bad).is_err(), "{bad}");
        }
    }
}
