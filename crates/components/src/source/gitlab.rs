//! GitLab generic packages:
//! `https://{host}/api/v4/projects/{slug}/packages/generic/{package}/{version}/{file}`.
//! As in clusterctl, the URL names the version and no listing is done, so the version list is
//! just that version; files are fetched from the same package at a requested version.

use super::{
    ReleaseSource, SourceError,
    http::{Http, HttpConfig},
};

/// A parsed GitLab generic-package URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitLabUrl {
    /// `scheme://host[:port]`.
    pub base: String,
    /// Project slug as it appears in the URL (URL-encoded `group%2Fproject` or a numeric id).
    pub project: String,
    /// Package name.
    pub package: String,
    /// Version named by the URL.
    pub version: String,
    /// The file (components file name).
    pub file: String,
}

impl GitLabUrl {
    /// Whether `url` has the GitLab generic-packages shape (checked before GitHub's).
    pub fn looks_like(url: &str) -> bool {
        url.contains("/api/v4/projects/") && url.contains("/packages/generic/")
    }

    /// Parses the URL: exactly `api/v4/projects/{slug}/packages/generic/{pkg}/{version}/{file}`.
    pub fn parse(url: &str) -> Result<GitLabUrl, SourceError> {
        let bad = |why: &str| {
            SourceError::Invalid(format!(
                "{url:?} is not a GitLab package URL (https://HOST/api/v4/projects/SLUG/packages/generic/PACKAGE/VERSION/FILE): {why}"
            ))
        };
        let u = reqwest::Url::parse(url).map_err(|_| bad("not a URL"))?;
        if u.scheme() != "https" && u.scheme() != "http" {
            return Err(bad("only https is accepted"));
        }
        let host = u.host_str().ok_or_else(|| bad("no host"))?;
        let base = match u.port() {
            Some(p) => format!("{}://{host}:{p}", u.scheme()),
            None => format!("{}://{host}", u.scheme()),
        };
        // The raw path keeps an encoded slug (group%2Fproject) in one segment.
        let segs: Vec<&str> = u.path().split('/').filter(|s| !s.is_empty()).collect();
        match segs.as_slice() {
            [
                "api",
                "v4",
                "projects",
                project,
                "packages",
                "generic",
                package,
                version,
                file,
            ] => Ok(GitLabUrl {
                base,
                project: project.to_string(),
                package: package.to_string(),
                version: version.to_string(),
                file: file.to_string(),
            }),
            _ => Err(bad("unexpected path")),
        }
    }
}

/// Releases published as GitLab generic packages.
#[derive(Debug)]
pub struct GitLabSource {
    http: Http,
    url: GitLabUrl,
}

impl GitLabSource {
    /// A source for the package `url` names, with an optional access token (Bearer).
    pub fn new(
        url: &GitLabUrl,
        token: Option<String>,
        config: HttpConfig,
    ) -> Result<GitLabSource, SourceError> {
        Ok(GitLabSource {
            http: Http::new(&url.base, token, config)?,
            url: url.clone(),
        })
    }
}

impl ReleaseSource for GitLabSource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        Ok(vec![self.url.version.clone()])
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        let u = &self.url;
        let url = format!(
            "{}/api/v4/projects/{}/packages/generic/{}/{version}/{file}",
            u.base, u.project, u.package
        );
        Ok(self.http.get(&url, "*/*").await?.body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn package_urls() {
        let u = GitLabUrl::parse("https://gitlab.example.com/api/v4/projects/group%2Fproject/packages/generic/capi-provider/v1.2.0/infrastructure-components.yaml").unwrap();
        assert_eq!(u.base, "https://gitlab.example.com");
        assert_eq!(u.project, "group%2Fproject");
        assert_eq!(
            (u.package.as_str(), u.version.as_str()),
            ("capi-provider", "v1.2.0")
        );
        assert!(GitLabUrl::looks_like(
            "https://gitlab-x.example/api/v4/projects/7/packages/generic/p/v1/f.yaml"
        ));
        assert!(
            GitLabUrl::parse(
                "https://gitlab.example.com/api/v4/projects/7/packages/generic/p/f.yaml"
            )
            .is_err()
        );
        assert!(
            GitLabUrl::parse(
                "ftp://gitlab.example.com/api/v4/projects/7/packages/generic/p/v1/f.yaml"
            )
            .is_err()
        );
    }
}
