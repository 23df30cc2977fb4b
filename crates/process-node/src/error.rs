//! Errors of the process node.

use std::path::PathBuf;

/// Everything that can go wrong in the agent.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A Kubernetes API call failed.
    #[error(transparent)]
    Kube(#[from] kube::Error),
    /// The kubeconfig could not be loaded.
    #[error("loading the kubeconfig: {0}")]
    Kubeconfig(#[from] kube::config::KubeconfigError),
    /// A file or process operation failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: std::io::Error,
    },
    /// A system call failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: String,
        /// Why it failed.
        source: nix::Error,
    },
    /// An `ip` command failed.
    #[error("ip {args}: {stderr}")]
    Ip {
        /// Its arguments.
        args: String,
        /// What it printed.
        stderr: String,
    },
    /// The images file is unreadable or invalid.
    #[error("images file {path}: {message}")]
    Images {
        /// Its path.
        path: PathBuf,
        /// Why.
        message: String,
    },
    /// An image maps to no binary.
    #[error("{0}")]
    ImagePull(String),
    /// A volume could not be prepared (kubelet's FailedMount).
    #[error("{0}")]
    Mount(String),
    /// A container could not be configured (kubelet's CreateContainerConfigError).
    #[error("{0}")]
    Config(String),
    /// The pod CIDR has no free address or is invalid.
    #[error("{0}")]
    Network(String),
    /// JSON (de)serialisation failed.
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}

/// Shorthand for results of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Wraps an I/O error with what was being done.
pub fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let what = what.into();
    move |source| Error::Io { what, source }
}

/// Wraps a system call error with what was being done.
pub fn sys(what: impl Into<String>) -> impl FnOnce(nix::Error) -> Error {
    let what = what.into();
    move |source| Error::Sys { what, source }
}
