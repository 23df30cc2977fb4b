//! Certificate authorities that every release source trusts besides the built-in public roots.
//!
//! A site behind a TLS-intercepting proxy, or with one internal mirror for GitHub, GitLab, its
//! HTTPS repositories and its registry, has one CA for all of them; giving it per provider
//! (`HTTP_CA_BUNDLE` in each provider's Secret) would repeat it in every Secret. The operator
//! reads such a bundle once at start (`--ca-bundle`, a file mounted from a ConfigMap) and every
//! HTTP client a source builds afterwards trusts it. It is process-wide on purpose, as the
//! system trust store it stands in for is: the built-in roots come from `webpki-roots`, so no
//! file in the image is ever read otherwise.

use std::sync::OnceLock;

use crate::SourceError;

static EXTRA_ROOTS: OnceLock<Vec<reqwest::Certificate>> = OnceLock::new();

/// Trusts the PEM certificates in `pem` in every client built from now on; returns how many.
/// Fails when `pem` holds no certificate or when a bundle was already given.
pub fn trust_process_wide(pem: &[u8]) -> Result<usize, SourceError> {
    let certs = parse(pem)?;
    let n = certs.len();
    EXTRA_ROOTS
        .set(certs)
        .map_err(|_| SourceError::Invalid("a CA bundle was already given".into()))?;
    Ok(n)
}

/// The certificates of a PEM bundle, refusing one without any.
pub(crate) fn parse(pem: &[u8]) -> Result<Vec<reqwest::Certificate>, SourceError> {
    let certs = reqwest::Certificate::from_pem_bundle(pem)
        .map_err(|_| SourceError::Invalid("the CA bundle is not PEM certificates".into()))?;
    if certs.is_empty() {
        return Err(SourceError::Invalid(
            "the CA bundle holds no certificate".into(),
        ));
    }
    Ok(certs)
}

/// Adds the process-wide CAs (none unless [`trust_process_wide`] was called) to `builder`.
pub(crate) fn with_extra_roots(mut builder: reqwest::ClientBuilder) -> reqwest::ClientBuilder {
    for c in EXTRA_ROOTS.get().map(Vec::as_slice).unwrap_or_default() {
        builder = builder.add_root_certificate(c.clone());
    }
    builder
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bundle_without_certificates_is_refused() {
        for pem in [&b""[..], b"not pem", b"# a comment, no certificate\n"] {
            assert!(
                matches!(parse(pem), Err(SourceError::Invalid(_))),
                "{pem:?}"
            );
        }
    }
}
