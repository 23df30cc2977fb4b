//! Watches the Pods bound to the Node and runs one worker per pod.

use std::{
    collections::{HashMap, HashSet},
    sync::Arc,
    time::Duration,
};

use futures::StreamExt;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api,
    runtime::{WatchStreamExt, watcher},
};
use tokio::{sync::watch, task::JoinHandle};

use crate::pod::{self, Shared};

struct Workers {
    sh: Arc<Shared>,
    running: HashMap<String, (watch::Sender<Option<Pod>>, JoinHandle<()>)>,
}

impl Workers {
    fn apply(&mut self, p: Pod) {
        let Some(uid) = p.metadata.uid.clone() else {
            return;
        };
        self.running.retain(|_, (_, h)| !h.is_finished());
        if let Some((tx, _)) = self.running.get(&uid) {
            let _ = tx.send(Some(p));
            return;
        }
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        // A finished pod from before a restart is not run again; only its deletion is handled.
        if matches!(phase, Some("Succeeded" | "Failed")) && p.metadata.deletion_timestamp.is_none()
        {
            return;
        }
        let (tx, rx) = watch::channel(Some(p));
        let handle = tokio::spawn(pod::run(self.sh.clone(), rx));
        self.running.insert(uid, (tx, handle));
    }

    fn gone(&mut self, uid: &str) {
        if let Some((tx, _)) = self.running.get(uid) {
            let _ = tx.send(None);
        }
    }

    async fn stop_all(&mut self) {
        for (tx, _) in self.running.values() {
            let _ = tx.send(None);
        }
        for (_, (_, h)) in self.running.drain() {
            let _ = tokio::time::timeout(Duration::from_secs(60), h).await;
        }
    }
}

/// Runs pods until `shutdown` completes, then stops them all.
pub async fn run(sh: Arc<Shared>, shutdown: impl std::future::Future<Output = ()>) {
    let api: Api<Pod> = Api::all(sh.client.clone());
    let cfg = watcher::Config::default().fields(&format!("spec.nodeName={}", sh.node));
    let mut events = watcher(api, cfg).default_backoff().boxed();
    let mut workers = Workers {
        sh,
        running: HashMap::new(),
    };
    let mut listed: HashSet<String> = HashSet::new();
    tokio::pin!(shutdown);
    loop {
        let event = tokio::select! {
            () = &mut shutdown => break,
            e = events.next() => e,
        };
        match event {
            Some(Ok(watcher::Event::Apply(p))) => workers.apply(p),
            Some(Ok(watcher::Event::Delete(p))) => {
                if let Some(uid) = &p.metadata.uid {
                    workers.gone(uid);
                }
            }
            Some(Ok(watcher::Event::Init)) => listed.clear(),
            Some(Ok(watcher::Event::InitApply(p))) => {
                listed.extend(p.metadata.uid.clone());
                workers.apply(p);
            }
            Some(Ok(watcher::Event::InitDone)) => {
                let stale: Vec<String> = workers
                    .running
                    .keys()
                    .filter(|u| !listed.contains(*u))
                    .cloned()
                    .collect();
                stale.iter().for_each(|u| workers.gone(u));
            }
            Some(Err(e)) => tracing::warn!(error = %e, "watching pods"),
            None => break,
        }
    }
    workers.stop_all().await;
}
