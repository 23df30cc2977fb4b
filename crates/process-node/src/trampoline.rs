//! The container start helper. The agent runs its own binary as `capi-process-node __exec
//! SPEC`; that single-threaded process joins the pod's network namespace, enters a private
//! mount namespace with the volume bind mounts, and then execs the container's binary. Doing
//! this in a fresh process instead of between fork and exec keeps it free of `unsafe` and of
//! the restrictions on a forked multi-threaded parent.

use std::{os::unix::process::CommandExt, path::PathBuf};

use nix::{
    mount::{MsFlags, mount},
    sched::{CloneFlags, setns, unshare},
    sys::signal::Signal,
};
use serde::{Deserialize, Serialize};

use crate::error::{Error, Result, io, sys};

/// The hidden subcommand's name.
pub const SUBCOMMAND: &str = "__exec";

/// What the helper sets up before exec.
#[derive(Debug, Serialize, Deserialize)]
pub struct Spec {
    /// The pod's network namespace; `None` for host network.
    pub netns: Option<PathBuf>,
    /// The hostname in a private UTS namespace; `None` keeps the host's (host network).
    pub hostname: Option<String>,
    /// Bind mounts, in order.
    pub mounts: Vec<BindMount>,
    /// The process's argv; `argv[0]` is an absolute path.
    pub argv: Vec<String>,
    /// Working directory.
    pub cwd: PathBuf,
}

/// One volumeMount.
#[derive(Debug, Serialize, Deserialize)]
pub struct BindMount {
    /// Host path.
    pub source: PathBuf,
    /// Path the container sees.
    pub target: PathBuf,
    /// Mounted read-only.
    pub read_only: bool,
}

/// Sets everything up and execs; returns only on failure.
pub fn run(spec: &str) -> Error {
    match prepare(spec) {
        Ok(spec) => match spec.argv.split_first() {
            Some((bin, args)) => {
                let e = std::process::Command::new(bin)
                    .args(args)
                    .current_dir(&spec.cwd)
                    .exec();
                io(format!("exec {bin}"))(e)
            }
            None => Error::Config("empty argv".into()),
        },
        Err(e) => e,
    }
}

fn prepare(spec: &str) -> Result<Spec> {
    // The container dies with the agent, as a kubelet-less container would with its runtime.
    nix::sys::prctl::set_pdeathsig(Signal::SIGKILL).map_err(sys("prctl(PR_SET_PDEATHSIG)"))?;
    let spec: Spec = serde_json::from_str(spec)?;
    if let Some(ns) = &spec.netns {
        let f = std::fs::File::open(ns).map_err(io(format!("{}", ns.display())))?;
        setns(&f, CloneFlags::CLONE_NEWNET).map_err(sys("setns(net)"))?;
    }
    if let Some(h) = &spec.hostname {
        unshare(CloneFlags::CLONE_NEWUTS).map_err(sys("unshare(CLONE_NEWUTS)"))?;
        nix::unistd::sethostname(h).map_err(sys("sethostname"))?;
    }
    unshare(CloneFlags::CLONE_NEWNS).map_err(sys("unshare(CLONE_NEWNS)"))?;
    // Without this the bind mounts would propagate back into the host's namespace.
    mount(
        None::<&str>,
        "/",
        None::<&str>,
        MsFlags::MS_REC | MsFlags::MS_PRIVATE,
        None::<&str>,
    )
    .map_err(sys("making / private"))?;
    for m in &spec.mounts {
        bind(m)?;
    }
    Ok(spec)
}

fn bind(m: &BindMount) -> Result<()> {
    let what = format!("mounting {} at {}", m.source.display(), m.target.display());
    // Missing mount points are created on the host (the pod has no root filesystem of its own).
    if m.source.is_dir() {
        std::fs::create_dir_all(&m.target).map_err(io(what.clone()))?;
    } else if !m.target.exists() {
        if let Some(p) = m.target.parent() {
            std::fs::create_dir_all(p).map_err(io(what.clone()))?;
        }
        std::fs::write(&m.target, b"").map_err(io(what.clone()))?;
    }
    let flags = MsFlags::MS_BIND | MsFlags::MS_REC;
    mount(
        Some(&m.source),
        &m.target,
        None::<&str>,
        flags,
        None::<&str>,
    )
    .map_err(sys(what.clone()))?;
    if m.read_only {
        let ro = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        mount(None::<&str>, &m.target, None::<&str>, ro, None::<&str>).map_err(sys(what))?;
    }
    Ok(())
}
