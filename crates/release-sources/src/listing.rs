//! The versions of one listing as its pages arrive: bounded in count ([`MAX_LISTED_VERSIONS`])
//! and in bytes ([`MAX_LISTING_BYTES`]), de-duplicated in linear time, each page parsed off the
//! async threads. A release server answering a huge listing gets a clear error, never minutes of
//! work on the operator's event loop.

use std::collections::HashSet;

use serde::de::DeserializeOwned;

use crate::{MAX_LISTED_VERSIONS, MAX_LISTING_BYTES, SourceError};

/// A listing under construction.
#[derive(Debug)]
pub(crate) struct Listing {
    what: String,
    versions: Vec<String>,
    seen: HashSet<String>,
    entries: usize,
    bytes: usize,
}

impl Listing {
    /// An empty listing of `what` (e.g. "releases of acme/widget"), for messages.
    pub(crate) fn new(what: impl Into<String>) -> Listing {
        Listing {
            what: what.into(),
            versions: Vec::new(),
            seen: HashSet::new(),
            entries: 0,
            bytes: 0,
        }
    }

    /// Parses one page off the async threads, after counting its bytes against the total; the
    /// inner result is the page's own parse error, for the caller to word.
    pub(crate) async fn parse_page<T: DeserializeOwned + Send + 'static>(
        &mut self,
        body: Vec<u8>,
    ) -> Result<Result<T, serde_json::Error>, SourceError> {
        self.bytes = self.bytes.saturating_add(body.len());
        if self.bytes > MAX_LISTING_BYTES {
            return Err(SourceError::TooLarge {
                what: format!("the listing of {} (all pages together)", self.what),
                limit: MAX_LISTING_BYTES,
            });
        }
        // A page of several MiB takes long to parse in a debug build; the blocking pool keeps
        // the event loop (leases, probes, other providers) responsive meanwhile.
        tokio::task::spawn_blocking(move || serde_json::from_slice(&body))
            .await
            .map_err(|e| SourceError::Invalid(format!("parsing the listing of {}: {e}", self.what)))
    }

    /// Counts a page of `n` entries against [`MAX_LISTED_VERSIONS`], before any is looked at.
    pub(crate) fn expect_entries(&mut self, n: usize) -> Result<(), SourceError> {
        self.entries = self.entries.saturating_add(n);
        if self.entries > MAX_LISTED_VERSIONS {
            return Err(SourceError::TooManyVersions {
                what: self.what.clone(),
                limit: MAX_LISTED_VERSIONS,
            });
        }
        Ok(())
    }

    /// Whether `version` is listed already.
    pub(crate) fn has(&self, version: &str) -> bool {
        self.seen.contains(version)
    }

    /// Adds `version` unless listed already.
    pub(crate) fn push(&mut self, version: String) {
        if self.seen.insert(version.clone()) {
            self.versions.push(version);
        }
    }

    /// The versions, in the order first listed.
    pub(crate) fn into_versions(self) -> Vec<String> {
        self.versions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_page_over_the_bound_is_refused_by_count() {
        let tags: Vec<String> = (0..100_000).map(|i| format!("v0.{i}.0")).collect();
        let body = serde_json::to_vec(&tags).expect("json");
        let mut l = Listing::new("tags of r");
        let page: Vec<String> = l.parse_page(body).await.expect("read").expect("parse");
        let e = l.expect_entries(page.len()).expect_err("over the bound");
        assert_eq!(
            e.to_string(),
            format!(
                "tags of r holds more than {MAX_LISTED_VERSIONS} versions (the operator's bound on one listing); the listing is refused"
            )
        );
    }

    /// 100,000 versions listed twice keep the first order and each once (a quadratic
    /// de-duplication took minutes here in a debug build).
    #[test]
    fn a_version_listed_twice_is_kept_once_in_first_order() {
        let mut l = Listing::new("r");
        for round in 0..2 {
            for i in 0..100_000 {
                if round == 0 || !l.has(&format!("v{i}")) {
                    l.push(format!("v{i}"));
                }
            }
        }
        let v = l.into_versions();
        assert_eq!(v.len(), 100_000);
        assert_eq!(v.first().map(String::as_str), Some("v0"));
    }

    #[tokio::test]
    async fn bytes_are_bounded_across_pages() {
        let mut l = Listing::new("tags of r");
        let page = |n: usize| serde_json::to_vec(&"x".repeat(n)).expect("json");
        let half = MAX_LISTING_BYTES / 2;
        let _: String = l
            .parse_page(page(half - 2))
            .await
            .expect("read")
            .expect("parse");
        let e = l
            .parse_page::<String>(page(half))
            .await
            .expect_err("over the total");
        assert!(
            matches!(e, SourceError::TooLarge { limit, .. } if limit == MAX_LISTING_BYTES),
            "{e}"
        );
        assert!(e.to_string().contains("all pages together"), "{e}");
    }
}
