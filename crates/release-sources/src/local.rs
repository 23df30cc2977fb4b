//! clusterctl's local-repository layout: `DIR/<manifest-label>/<version>/<file>`.

use std::path::PathBuf;

use super::{MAX_FILE_BYTES, ReleaseSource, SourceError};

/// Releases of one provider from a local directory.
#[derive(Debug, Clone)]
pub struct LocalSource {
    dir: PathBuf,
}

impl LocalSource {
    /// `root` is the repository directory; `manifest_label` names the provider's subdirectory
    /// (e.g. `cluster-api`, `infrastructure-aws`).
    pub fn new(root: impl Into<PathBuf>, manifest_label: &str) -> LocalSource {
        LocalSource {
            dir: root.into().join(manifest_label),
        }
    }
}

impl ReleaseSource for LocalSource {
    async fn list_versions(&self) -> Result<Vec<String>, SourceError> {
        let entries = std::fs::read_dir(&self.dir)
            .map_err(|e| SourceError::NotFound(format!("{} ({e})", self.dir.display())))?;
        Ok(entries
            .filter_map(std::result::Result::ok)
            .filter(|e| e.path().is_dir())
            .filter_map(|e| e.file_name().to_str().map(str::to_string))
            .filter(|n| capi_release::version::parse(n).is_some())
            .collect())
    }

    async fn fetch_file(&self, version: &str, file: &str) -> Result<Vec<u8>, SourceError> {
        if version.contains(['/', '\\'])
            || file.contains(['/', '\\'])
            || version == ".."
            || file == ".."
        {
            return Err(SourceError::Invalid(format!(
                "invalid release path {version}/{file}"
            )));
        }
        let path = self.dir.join(version).join(file);
        let meta = std::fs::metadata(&path)
            .map_err(|_| SourceError::NotFound(path.display().to_string()))?;
        if meta.len() > MAX_FILE_BYTES as u64 {
            return Err(SourceError::TooLarge {
                what: path.display().to_string(),
                limit: MAX_FILE_BYTES,
            });
        }
        std::fs::read(&path).map_err(|e| SourceError::NotFound(format!("{} ({e})", path.display())))
    }
}
