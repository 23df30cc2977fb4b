//! OCI artifact references: parsing, validation and display.

use std::{fmt, net::Ipv6Addr};

use super::{SourceError, invalid};

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

pub(super) fn parse_digest(d: &str) -> Result<String, String> {
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

pub(super) fn validate_tag(t: &str) -> Result<(), String> {
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
}
