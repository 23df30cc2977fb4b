//! The images file: which local binary stands in for which container image.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};

/// The images file (`images:` list).
#[derive(Debug, Deserialize)]
pub struct ImagesFile {
    /// Its entries.
    #[serde(default)]
    pub images: Vec<ImageEntry>,
}

/// One image: a repository's last path segment and tag, and the binary that runs it.
#[derive(Debug, Deserialize)]
pub struct ImageEntry {
    /// Last path segment of the image's repository, e.g. `cluster-api-controller`.
    pub repository: String,
    /// The tag, e.g. `v1.12.0`.
    pub tag: String,
    /// Absolute path of the binary.
    pub binary: PathBuf,
}

/// Reads the images file. Read on every container start so new entries apply at once.
pub fn load(path: &Path) -> Result<ImagesFile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::Images {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_saphyr::from_str(&text).map_err(|e| Error::Images {
        path: path.to_path_buf(),
        message: e.to_string(),
    })
}

/// Splits an image reference into (last repository segment, tag). A digest-only reference
/// has no tag; `None` for the tag then.
pub fn split_image(image: &str) -> (&str, Option<&str>) {
    let without_digest = image.split('@').next().unwrap_or(image);
    let last = without_digest.rsplit('/').next().unwrap_or(without_digest);
    match last.split_once(':') {
        Some((repo, tag)) => (repo, Some(tag)),
        // Kubernetes' default tag applies only when there is no digest either.
        None if !image.contains('@') => (last, Some("latest")),
        None => (last, None),
    }
}

impl ImagesFile {
    /// The binary for `image`, or an `ErrImagePull`-style message naming the known tags.
    pub fn resolve(&self, image: &str) -> Result<PathBuf> {
        let (repo, tag) = split_image(image);
        let known: Vec<&str> = self
            .images
            .iter()
            .filter(|e| e.repository == repo)
            .map(|e| e.tag.as_str())
            .collect();
        if let Some(tag) = tag
            && let Some(e) = self
                .images
                .iter()
                .find(|e| e.repository == repo && e.tag == tag)
        {
            return Ok(e.binary.clone());
        }
        let why = match tag {
            None => "digest-only references are not supported".to_string(),
            Some(_) if known.is_empty() => format!("no binary is known for repository {repo:?}"),
            Some(_) => format!("known tags of {repo:?}: {}", known.join(", ")),
        };
        Err(Error::ImagePull(format!(
            "image {image:?} is not in the process node's images file: {why}"
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file() -> ImagesFile {
        serde_saphyr::from_str(
            "images:\n- repository: cluster-api-controller\n  tag: v1.12.0\n  binary: /bin/capi\n",
        )
        .unwrap()
    }

    #[test]
    fn maps_any_registry_prefix() {
        let f = file();
        assert_eq!(
            f.resolve("registry.k8s.io/cluster-api/cluster-api-controller:v1.12.0")
                .unwrap(),
            PathBuf::from("/bin/capi")
        );
        assert_eq!(
            f.resolve("gcr.io/x/cluster-api-controller:v1.12.0")
                .unwrap(),
            PathBuf::from("/bin/capi")
        );
    }

    #[test]
    fn other_tags_and_digests_fail_with_the_known_tags() {
        let f = file();
        let e = f.resolve("r/cluster-api-controller:v1.11.0").unwrap_err();
        assert!(e.to_string().contains("v1.12.0"), "{e}");
        assert!(f.resolve("r/cluster-api-controller@sha256:00").is_err());
        assert!(f.resolve("r/other:v1").is_err());
    }

    #[test]
    fn registry_port_is_not_a_tag() {
        assert_eq!(split_image("localhost:5000/a/b"), ("b", Some("latest")));
    }
}
