//! Watches of the Secrets and ConfigMaps providers read, narrowed to the namespaces they read
//! from. A management cluster holds thousands of workload-cluster Secrets and ConfigMaps that
//! change all day; a cluster-wide watch would decode every one of those changes only to find
//! that no provider reads it. What a provider reads is known from its spec
//! ([`source::input_namespaces`]), so one metadata-only watch per (kind, namespace) in use is
//! enough, started when a provider first needs it and stopped when none does.

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::{Arc, Mutex, Weak},
};

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::{
    Api, Client, ResourceExt,
    api::PartialObjectMeta,
    runtime::{WatchStreamExt, watcher},
};
use tokio::task::JoinHandle;
use tracing::debug;

use super::{
    index::Index,
    routing::{Target, Triggers, route},
    source::{self, Input},
};

/// One watch: what it watches and where.
type Key = (Input, String);

/// The running input watches; [`InputWatches::sync`] makes them match the providers.
pub struct InputWatches {
    /// `None` where nothing is watched (the mocked-API tests).
    triggers: Option<Triggers>,
    running: Mutex<BTreeMap<Key, JoinHandle<()>>>,
}

impl InputWatches {
    /// Watches that wake the providers through `triggers`.
    pub(super) fn new(triggers: Triggers) -> InputWatches {
        InputWatches {
            triggers: Some(triggers),
            running: Mutex::default(),
        }
    }

    /// No watches at all: [`InputWatches::sync`] does nothing.
    pub fn inactive() -> InputWatches {
        InputWatches {
            triggers: None,
            running: Mutex::default(),
        }
    }

    /// The namespaces watched now, per input kind (for tests and logs).
    pub fn watched(&self) -> Vec<(Input, String)> {
        self.lock().keys().cloned().collect()
    }

    /// Starts the watches the cached providers need and stops those none needs any more.
    /// Cheap when nothing changed: it compares two small sets.
    pub fn sync(&self, client: &Client, index: &Arc<Index>) {
        let Some(triggers) = &self.triggers else {
            return;
        };
        let wanted: BTreeSet<Key> = index
            .all_providers()
            .iter()
            .flat_map(source::input_namespaces)
            .collect();
        let mut running = self.lock();
        running.retain(|key, task| {
            let keep = wanted.contains(key);
            if !keep {
                debug!(input = ?key.0, namespace = %key.1, "no provider reads here; watch stopped");
                task.abort();
            }
            keep
        });
        for key in wanted {
            if running.contains_key(&key) {
                continue;
            }
            debug!(input = ?key.0, namespace = %key.1, "watch started");
            let task = spawn_watch(
                client.clone(),
                Arc::downgrade(index),
                triggers.clone(),
                &key,
            );
            running.insert(key, task);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<Key, JoinHandle<()>>> {
        // A panic while holding the lock leaves a map that is still consistent.
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Drop for InputWatches {
    fn drop(&mut self) {
        for task in self.lock().values() {
            task.abort();
        }
    }
}

/// The watch of one input kind in one namespace, routing each change to the providers that
/// read the object. The task holds the index weakly: the context, which owns the index, owns
/// the task too.
fn spawn_watch(
    client: Client,
    index: Weak<Index>,
    triggers: Triggers,
    (input, namespace): &Key,
) -> JoinHandle<()> {
    let wc = watcher::Config::default().any_semantic();
    let task = match input {
        Input::Secret => {
            let api = Api::<PartialObjectMeta<Secret>>::namespaced(client, namespace);
            let stream = watcher(api, wc).default_backoff().touched_objects();
            route(stream, triggers, move |s: &PartialObjectMeta<Secret>| {
                readers(&index, s.namespace(), |p, ns| {
                    source::reads_secret(p, ns, &s.name_any())
                })
            })
        }
        Input::ConfigMap => {
            let api = Api::<PartialObjectMeta<ConfigMap>>::namespaced(client, namespace);
            let stream = watcher(api, wc).default_backoff().touched_objects();
            route(stream, triggers, move |m: &PartialObjectMeta<ConfigMap>| {
                let labels = m.metadata.labels.clone().unwrap_or_default();
                readers(&index, m.namespace(), |p, ns| {
                    source::reads_configmap(p, ns, &m.name_any(), &labels)
                })
            })
        }
    };
    tokio::spawn(task)
}

/// The providers `reads` says read an object of `namespace`.
fn readers(
    index: &Weak<Index>,
    namespace: Option<String>,
    reads: impl Fn(&capi_operator_api::AnyProvider, &str) -> bool,
) -> Vec<Target> {
    let (Some(index), Some(ns)) = (index.upgrade(), namespace) else {
        return Vec::new();
    };
    index.targets_where(|p| reads(p, &ns))
}
