//! What a reconcile is handed: the cluster, the index, the applier and the bookkeeping shared
//! by the controllers, and the names a provider goes by in that bookkeeping.

use std::{collections::BTreeMap, sync::Arc};

use capi_decide::readiness;
use capi_operator_api::{AnyProvider, ProviderStatus};
use kube::Client;

use super::{
    apply::Applier, events, index::Index, inputs, mirror, options::Options, owned::OwnedKinds,
};

/// Everything a reconcile needs.
pub struct Ctx {
    /// The cluster.
    pub client: Client,
    /// The caches.
    pub world: World,
    /// Applies rendered objects.
    pub applier: Applier,
    /// Publishes events on provider objects.
    pub recorder: events::Events,
    /// Settings.
    pub opts: Options,
    /// Consecutive transient failures per provider, for exponential backoff.
    pub failures: std::sync::Mutex<BTreeMap<String, u32>>,
    /// Readiness rechecks of unready providers and looks at blocked deletions, with back-off.
    pub rechecks: readiness::Rechecks,
    /// Releases the release cache could not keep (`provider@version`): how many times they
    /// were fetched and when last, so fetching them again waits for the back-off (on tokio's
    /// clock, which the seeded fault tier pauses: a run then replays exactly).
    pub uncached: std::sync::Mutex<BTreeMap<String, (u32, tokio::time::Instant)>>,
    /// Whether providers get clusterctl inventory entries (asked for, and the CRD is served).
    pub inventory: bool,
    /// Watches of the Secrets and ConfigMaps providers read.
    pub inputs: inputs::InputWatches,
    /// The operator-wide image mirror setting.
    pub mirror: Arc<mirror::MirrorSetting>,
    /// The last status this process wrote per provider.
    pub written: Written,
}

/// The last status this process wrote to each provider (by [`provider_key`]). The provider a
/// pass is handed comes from the controller's cache, which can lag this process's own writes:
///
/// - a pass that computes what such a stale copy already shows must still write it when the
///   server holds something else, or a Ready=True found after a Ready=False write is never
///   written and nothing wakes the provider until the resync;
/// - a pass that computes what this process last wrote, handed a copy from before that write,
///   must not write it again: the server holds it, and under load (many providers installed
///   at once) those repeated writes were a tenth of all the operator's writes.
#[derive(Default)]
pub struct Written(std::sync::Mutex<BTreeMap<String, LastWrite>>);

/// What the server holds of a provider's status, as far as this process knows.
pub enum Known {
    /// The cache's copy: it shows this process's last write, or nothing was written yet, or
    /// someone else wrote since.
    Cached,
    /// This process's last write: the cache's copy is older than it (the cache lagging).
    Wrote(ProviderStatus),
    /// The last write failed (or the lock is poisoned): the server may hold anything.
    Unknown,
}

/// How many statuses older than the last write are remembered per provider: copies a lagging
/// cache can still hand a pass.
const OLDER_KEPT: usize = 4;

/// What this process last wrote to one provider's status.
#[derive(Default)]
struct LastWrite {
    /// The status written; `None` when the write failed.
    wrote: Option<ProviderStatus>,
    /// Statuses the server held before it, newest last: what this process wrote earlier and
    /// what its writes replaced.
    older: Vec<ProviderStatus>,
}

impl Written {
    /// What the server holds of `key`'s status as far as this process knows, given the cache's
    /// copy `cached` (see [`Known`]). Cloned only when the cache lags this process's last write.
    pub fn known(&self, key: &str, cached: &ProviderStatus) -> Known {
        let Ok(w) = self.0.lock() else {
            return Known::Unknown;
        };
        let Some(last) = w.get(key) else {
            return Known::Cached;
        };
        match &last.wrote {
            None => Known::Unknown,
            Some(wrote) if wrote != cached && last.older.contains(cached) => {
                Known::Wrote(wrote.clone())
            }
            Some(_) => Known::Cached,
        }
    }

    /// Records the outcome of writing `status` over `replaced` (the cached copy the pass read)
    /// to `key`; a failed write (`ok` false) makes the next pass write whatever it finds.
    pub fn record(&self, key: &str, replaced: &ProviderStatus, status: &ProviderStatus, ok: bool) {
        let Ok(mut w) = self.0.lock() else {
            return;
        };
        let last = w.entry(key.to_string()).or_default();
        let before = last.wrote.take().into_iter().chain([replaced.clone()]);
        for s in before {
            if &s != status && !last.older.contains(&s) {
                last.older.push(s);
            }
        }
        let excess = last.older.len().saturating_sub(OLDER_KEPT);
        last.older.drain(..excess);
        last.wrote = ok.then(|| status.clone());
    }

    /// Forgets `key` (its provider is gone).
    pub fn forget(&self, key: &str) {
        if let Ok(mut w) = self.0.lock() {
            w.remove(key);
        }
    }
}

/// The owner reference naming a provider (on what it installs that can carry one).
pub use capi_cluster_io::provider_kind::owner_reference;

/// Key of a provider for bookkeeping maps.
pub fn provider_key(p: &AnyProvider) -> String {
    format!("{}/{}/{}", p.provider_type.kind(), p.namespace(), p.name())
}

/// The CRD watch re-discovers the owned kinds through the context it holds weakly.
impl AsRef<OwnedKinds> for Ctx {
    fn as_ref(&self) -> &OwnedKinds {
        &self.world.owned
    }
}

/// The caches controllers read: the index, and the watched kinds of installed objects.
pub struct World {
    index: Arc<Index>,
    /// Watched kinds of installed objects.
    pub owned: OwnedKinds,
}

impl World {
    /// The world of `index`, whose installed objects are of the kinds of `owned`.
    pub fn new(index: Arc<Index>, owned: OwnedKinds) -> World {
        World { index, owned }
    }

    /// The index the watches feed.
    pub fn index(&self) -> &Arc<Index> {
        &self.index
    }
}

impl std::ops::Deref for World {
    type Target = Index;
    fn deref(&self) -> &Index {
        &self.index
    }
}
