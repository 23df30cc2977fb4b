//! Areas: the isolation unit of a test binary that holds many test modules.
//!
//! Each crate has one integration-test binary (`tests/it/main.rs`) whose modules used to be
//! binaries of their own, each with private clusters nobody else touched. An area (by
//! convention the test's `module_path!()`) gets that back: [`isolated`] runs its holder alone
//! in the binary, and the private clusters it starts ([`crate::private_cluster`] and the
//! others) belong to the area. When a test of another area takes the lock, the previous
//! area's clusters are stopped first, so at most one area's clusters run at a time (the memory
//! of a run stays that of one old binary) and no area sees another area's objects. A later
//! test of a stopped area starts fresh clusters; tests must not rely on one another's leftovers.

use std::{
    path::Path,
    process::Command,
    sync::{Mutex, MutexGuard, OnceLock},
};

use crate::{Error, TestCluster, workspace_root};

/// The private clusters an area may start.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Kind {
    /// [`crate::private_cluster`].
    Private,
    /// [`crate::second_private_cluster`].
    Second,
    /// [`crate::real_node_cluster`].
    RealNode,
    /// [`crate::second_real_node_cluster`].
    SecondRealNode,
}

type Started = Result<&'static TestCluster, String>;

#[derive(Default)]
struct State {
    name: String,
    clusters: Vec<(Kind, Started)>,
    on_end: Vec<Box<dyn FnOnce() + Send>>,
}

fn state() -> MutexGuard<'static, State> {
    static STATE: OnceLock<Mutex<State>> = OnceLock::new();
    let m = STATE.get_or_init(|| Mutex::new(State::default()));
    // A test that panicked while starting a cluster leaves the state as it was: still usable.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The binary-wide lock of [`isolated`] (and of [`crate::serial`]).
pub(crate) fn lock() -> &'static tokio::sync::Mutex<()> {
    static LOCK: OnceLock<tokio::sync::Mutex<()>> = OnceLock::new();
    LOCK.get_or_init(|| tokio::sync::Mutex::new(()))
}

/// Held by a test of an area: no other isolated test of the binary runs meanwhile.
pub struct Isolated {
    _guard: tokio::sync::MutexGuard<'static, ()>,
}

/// Waits until no other isolated test runs, then enters `area` (stopping the private clusters
/// of the previous area when it differs). Call it first, before taking any private cluster.
pub async fn isolated(area: &str) -> Isolated {
    let guard = lock().lock().await;
    let ended = {
        let mut st = state();
        if st.name == area {
            None
        } else {
            let old = std::mem::take(&mut *st);
            st.name = area.to_string();
            Some(old)
        }
    };
    if let Some(old) = ended {
        end(old);
    }
    Isolated { _guard: guard }
}

/// Runs `f` when the current area ends (before its clusters stop): for fixtures an area keeps
/// in statics, such as an operator process started once for several tests.
pub fn on_area_end(f: Box<dyn FnOnce() + Send>) {
    state().on_end.push(f);
}

/// The current area's cluster of `kind`, started with `start` on first use.
pub(crate) fn cluster(
    kind: Kind,
    start: impl FnOnce() -> Result<TestCluster, String>,
) -> Result<&'static TestCluster, Error> {
    let mut st = state();
    if let Some((_, c)) = st.clusters.iter().find(|(k, _)| *k == kind) {
        return c.clone().map_err(Error::Start);
    }
    // Leaked on purpose: tests hold `&'static` references, and a TestCluster is one path.
    let started: Started = start().map(|c| &*Box::leak(Box::new(c)));
    st.clusters.push((kind, started.clone()));
    started.map_err(Error::Start)
}

fn end(old: State) {
    for f in old.on_end {
        f();
    }
    for (_, c) in old.clusters {
        if let Ok(c) = c {
            stop(c.dir());
        }
    }
}

fn stop(dir: &Path) {
    let script = workspace_root().join("e2e/scripts/cluster-down.sh");
    if let Err(e) = Command::new(&script).arg("--dir").arg(dir).output() {
        eprintln!("stopping the cluster in {}: {e}", dir.display());
    }
}
