//! GitLab generic packages:
//! `https://{host}/api/v4/projects/{slug}/packages/generic/{package}/{version}/{file}`.
//!
//! As in clusterctl, the URL names the version and the version list is just that version: no
//! listing is done, so "latest" is the URL's version. (GitLab could list a project's packages,
//! but that needs the API's `read_api` scope where downloads need only `read_package_registry`,
//! and a different answer than clusterctl's would surprise users moving from it.) Files of any
//! version are fetched from the same package. Tokens are sent as `Authorization: Bearer`.
//!
//! A URL is recognised by its path alone, so self-hosted GitLab works on any host name.

use reqwest::Url;

use super::{
    ReleaseSource, SourceError,
    http::{Http, HttpConfig, redact_url},
};

/// A parsed GitLab generic-package URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitLabUrl {
    /// `scheme://host[:port]`, without any user info.
    pub base: String,
    /// Project as it appears in the URL: a numeric id or the URL-encoded path
    /// (`group%2Fproject`).
    pub project: String,
    /// Package name.
    pub package: String,
    /// Version named by the URL.
    pub version: String,
    /// The file (components file name).
    pub file: String,
}

fn decode(seg: &str) -> String {
    percent_encoding::percent_decode_str(seg)
        .decode_utf8_lossy()
        .into_owned()
}

/// A decoded segment that stays one path segment and means no directory trick.
fn plain(seg: &str) -> bool {
    !seg.is_empty() && seg != "." && seg != ".." && !seg.contains(['/', '\\'])
}

impl GitLabUrl {
    /// Whether `url` has the GitLab generic-packages shape (checked before GitHub's).
    pub fn looks_like(url: &str) -> bool {
        Url::parse(url).is_ok_and(|u| {
            u.path().starts_with("/api/v4/projects/") && u.path().contains("/packages/generic/")
        })
    }

    /// Parses the URL: exactly
    /// `/api/v4/projects/{slug}/packages/generic/{package}/{version}/{file}` (nine segments, so
    /// a project path must be URL-encoded). Plain `http` parses, but [`GitLabSource::new`]
    /// refuses it unless [`HttpConfig::allow_http`] is set.
    pub fn parse(url: &str) -> Result<GitLabUrl, SourceError> {
        let bad = |why: &str| {
            SourceError::Invalid(format!(
                "{} is not a GitLab package URL (https://HOST/api/v4/projects/GROUP%2FPROJECT/packages/generic/PACKAGE/VERSION/FILE): {why}",
                redact_url(url)
            ))
        };
        let u = Url::parse(url).map_err(|_| bad("not a URL"))?;
        if u.scheme() != "https" && u.scheme() != "http" {
            return Err(bad("only https is accepted"));
        }
        let host = u.host_str().ok_or_else(|| bad("no host"))?;
        let base = match u.port() {
            Some(p) => format!("{}://{host}:{p}", u.scheme()),
            None => format!("{}://{host}", u.scheme()),
        };
        // The raw path keeps an encoded slug (group%2Fproject) in one segment.
        let segs: Vec<&str> = u.path().trim_start_matches('/').split('/').collect();
        let [
            "api",
            "v4",
            "projects",
            project,
            "packages",
            "generic",
            package,
            version,
            file,
        ] = segs.as_slice()
        else {
            return Err(bad(
                "expected api/v4/projects/PROJECT/packages/generic/PACKAGE/VERSION/FILE",
            ));
        };
        if project.is_empty() || matches!(decode(project).as_str(), "." | "..") {
            return Err(bad("the project is missing"));
        }
        for (what, seg) in [("package", package), ("version", version), ("file", file)] {
            if !plain(&decode(seg)) {
                return Err(bad(&format!("the {what} is not valid")));
            }
        }
        Ok(GitLabUrl {
            base,
            project: project.to_string(),
            package: decode(package),
            version: decode(version),
            file: decode(file),
        })
    }
}

/// Releases published as GitLab generic packages.
#[derive(Debug)]
pub struct GitLabSource {
    http: Http,
    url: GitLabUrl,
    /// `{base}/api/v4/projects/{project}/packages/generic`, to which the package, version and
    /// file are appended as encoded segments.
    packages: Url,
}

impl GitLabSource {
    /// A source for the package `url` names, with an optional access token (Bearer).
    pub fn new(
        url: &GitLabUrl,
        token: Option<String>,
        config: HttpConfig,
    ) -> Result<GitLabSource, SourceError> {
        if url.base.starts_with("http://") && !config.allow_http {
            return Err(SourceError::Invalid(format!(
                "{}: GitLab package URLs must use https; plain http would expose the token and the release to anyone on the path",
                url.base
            )));
        }
        let packages = Url::parse(&format!(
            "{}/api/v4/projects/{}/packages/generic",
            url.base, url.project
        ))
        .map_err(|_| SourceError::Invalid(format!("{}: not a valid GitLab project", url.base)))?;
        Ok(GitLabSource {
            http: Http::new(&url.base, token, config)?,
            url: url.clone(),
            packages,
        })
    }

    /// The URL of `file` of `version` of this source's package.
    pub fn file_url(&self, version: &str, file: &str) -> Result<String, SourceError> {
        if !plain(version) || !plain(file) {
            return Err(SourceError::Invalid(format!(
                "invalid package path {version}/{file}"
            )));
        }
        let mut u = self.packages.clone();
        u.path_segments_mut()
            .map_err(|()| SourceError::Invalid("the GitLab URL cannot be a base".into()))?
            .extend([self.url.package.as_str(), version, file]);
        Ok(u.into())
    }
}

impl ReleaseSource for GitLabSource {
    /// Just the URL's version, as clusterctl answers (see the module documentation).
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        Ok(vec![self.url.version.clone()])
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let url = self.file_url(version, file)?;
        match self.http.get(&url, "application/octet-stream, */*").await {
            Err(SourceError::NotFound(_)) => Err(SourceError::NotFound(format!(
                "{file} of package {} {version} ({})",
                self.url.package,
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
    fn file_urls_are_encoded() -> Result<(), SourceError> {
        let u = GitLabUrl::parse(
            "https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fproject/packages/generic/capi/v1.0.0/infrastructure-components.yaml",
        )?;
        let s = GitLabSource::new(&u, None, HttpConfig::default())?;
        assert_eq!(
            s.file_url("v1.0.0+meta", "metadata.yaml")?,
            "https://gitlab.example.com/api/v4/projects/group%2Fsub%2Fproject/packages/generic/capi/v1.0.0+meta/metadata.yaml"
        );
        assert!(s.file_url("..", "metadata.yaml").is_err());
        assert!(s.file_url("v1", "a/b").is_err());
        Ok(())
    }
}
