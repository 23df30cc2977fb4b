//! The fault-injection tier: randomized, seeded runs of whole flows (install, upgrade, pause and
//! unpause, a contract change, deletion) of three providers against the mocked API server of
//! [`super::fake_api`], which answers requests with faults drawn from the seed: delays, 409,
//! 422 (an immutable field among them), 429, 500, 503, connection resets before and after a
//! write, the lease lost mid-pass and the process killed before or after a request; between
//! passes, watches drop (the caches stay stale) and the user races the operator.
//!
//! After every run the invariants hold (see [`Run::finish`] and `FakeApi::violations`):
//! 1. no CRD or Namespace is ever deleted;
//! 2. no write takes effect after the writer's leadership ended;
//! 3. once faults stop, a few passes reach the desired state (versions installed, Ready or
//!    paused as asked, objects as rendered, deleted providers gone with their objects);
//! 4. no object of the user (release ConfigMaps, a ConfigMap, a Secret, a Namespace, a custom
//!    resource of a provider's CRD) is written or deleted, and all are unchanged;
//! 5. `spec.version`, once set, is never changed by the operator;
//! 6. the core provider's finalizer is released only when no other provider is left, and no
//!    reconcile panics.
//!
//! `FAULT_RUNS` (default 1000) sets the number of runs, `FAULT_SEED` replays one seed exactly
//! (each failure prints its `FAULT_SEED=<n>`), `FAULT_SEED_BASE` shifts the seeds (the soak
//! run explores new ones). Each run has its own single-threaded runtime: a seed gives the same
//! requests in the same order every time. Delays are scheduler turns, not sleeps, so a run
//! costs no wall time waiting.

use std::{
    collections::BTreeMap,
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};

use capi_operator_api::{
    AnyProvider, BootstrapProvider, CONFIGMAP_VERSION_LABEL, CoreProvider, InfrastructureProvider,
    OWNER_KIND_LABEL, OWNER_NAME_LABEL, OWNER_NAMESPACE_LABEL,
};
use k8s_openapi::api::apps::v1::Deployment;
use kube::{
    api::{ApiResource, DynamicObject, GroupVersionKind, PartialObjectMeta},
    runtime::{events::Reporter, reflector::store::Writer, watcher},
};
use serde_json::{Value, json};

use super::fake_api::{FakeApi, Fault, Rng};
use crate::controller::{
    apply::{Applier, FIELD_MANAGER},
    context::Ctx,
    context::World,
    index::Index,
    options::Options,
    owned::OwnedKinds,
    reconcile,
};
use crate::fence::Fence;

/// One of the three providers of every run.
struct Prov {
    kind: &'static str,
    plural: &'static str,
    ns: &'static str,
    name: &'static str,
    /// Word in its release's labels and object names.
    word: &'static str,
}

const PROVS: [Prov; 3] = [
    Prov {
        kind: "CoreProvider",
        plural: "coreproviders",
        ns: "capi-system",
        name: "cluster-api",
        word: "core",
    },
    Prov {
        kind: "BootstrapProvider",
        plural: "bootstrapproviders",
        ns: "kubeadm-system",
        name: "kubeadm",
        word: "bootstrap",
    },
    Prov {
        kind: "InfrastructureProvider",
        plural: "infrastructureproviders",
        ns: "docker-system",
        name: "docker",
        word: "infra",
    },
];
const CORE: usize = 0;
const INFRA: usize = 2;

impl Prov {
    fn path(&self) -> String {
        format!(
            "/apis/management.cluster.x-k8s.io/v1alpha1/namespaces/{}/{}/{}",
            self.ns, self.plural, self.name
        )
    }

    fn deployment(&self) -> String {
        format!(
            "/apis/apps/v1/namespaces/{}/deployments/{}-controller",
            self.ns, self.word
        )
    }

    /// A ServiceAccount only v1.0.0 renders: pruned by an upgrade.
    fn legacy(&self) -> String {
        format!("/api/v1/namespaces/{}/serviceaccounts/legacy", self.ns)
    }

    fn crd_name(&self) -> String {
        format!("{0}widgets.{0}.example.org", self.word)
    }

    fn crd(&self) -> String {
        format!(
            "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{}",
            self.crd_name()
        )
    }

    fn release(&self, version: &str) -> (String, Value) {
        let name = format!("{}-{version}", self.word);
        (
            format!("/api/v1/namespaces/{}/configmaps/{name}", self.ns),
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": self.ns,
                                "labels": {"sample": self.word, CONFIGMAP_VERSION_LABEL: version}},
                   "data": {"metadata": METADATA, "components": self.components(version)}}),
        )
    }

    fn components(&self, version: &str) -> String {
        let w = self.word;
        let legacy = if version == "v1.0.0" {
            "---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {name: legacy, namespace: sample-system}\n"
        } else {
            ""
        };
        format!(
            "apiVersion: v1\nkind: Namespace\nmetadata: {{name: sample-system}}\n---\n\
             apiVersion: apiextensions.k8s.io/v1\nkind: CustomResourceDefinition\n\
             metadata: {{name: {w}widgets.{w}.example.org}}\nspec:\n  group: {w}.example.org\n  scope: Namespaced\n\
             \x20 names: {{kind: Widget, plural: {w}widgets, singular: {w}widget, listKind: WidgetList}}\n\
             \x20 versions:\n  - name: v1\n    served: true\n    storage: true\n\
             \x20   schema: {{openAPIV3Schema: {{type: object, x-kubernetes-preserve-unknown-fields: true}}}}\n\
             ---\napiVersion: v1\nkind: ServiceAccount\nmetadata: {{name: sample-manager, namespace: sample-system}}\n\
             {legacy}---\napiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {w}-controller, namespace: sample-system}}\n\
             spec:\n  replicas: 1\n  selector: {{matchLabels: {{app: {w}}}}}\n  template:\n    metadata: {{labels: {{app: {w}}}}}\n\
             \x20   spec:\n      containers:\n      - {{name: manager, image: 'example.org/{w}-controller:{version}'}}\n"
        )
    }

    fn object(&self, version: &str) -> Value {
        json!({
            "apiVersion": "management.cluster.x-k8s.io/v1alpha1", "kind": self.kind,
            "metadata": {"name": self.name, "namespace": self.ns, "generation": 1,
                         "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"version": version,
                     "fetchConfig": {"selector": {"matchLabels": {"sample": self.word}}}},
        })
    }
}

const METADATA: &str = "apiVersion: clusterctl.cluster.x-k8s.io/v1alpha3\nkind: Metadata\nreleaseSeries:\n- {major: 1, minor: 0, contract: v1beta1}\n- {major: 1, minor: 1, contract: v1beta1}\n- {major: 2, minor: 0, contract: v1beta2}\n";

/// What the user does at the start of a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    /// Creates the releases v1.0.0 and v1.1.0 and the three providers at v1.0.0 (the
    /// infrastructure provider sometimes without a version, racing the operator to set one).
    Install,
    /// Core and infrastructure providers to v1.1.0.
    Upgrade,
    /// Every provider paused.
    Pause,
    /// Every provider unpaused.
    Unpause,
    /// Release v2.0.0 (contract v1beta2) published, every provider to it (while paused).
    ContractChange,
    /// Every provider deleted.
    Delete,
}

const FLOWS: &[&[Stage]] = {
    use Stage::*;
    &[
        &[Install],
        &[Install, Upgrade],
        &[Install, Pause, Unpause],
        &[Install, Pause, ContractChange, Unpause],
        &[Install, Delete],
        &[Install, Upgrade, Pause, Delete],
    ]
};

/// What the user asked of a provider.
#[derive(Debug, Clone, Default)]
struct Want {
    /// `None`: whichever release the operator resolved (v1.0.0 or v1.1.0).
    version: Option<&'static str>,
    paused: bool,
    deleted: bool,
}

/// An operator process: its fence, context and caches.
struct Process {
    id: u64,
    ctx: Arc<Ctx>,
    providers: Arc<Mutex<Vec<Value>>>,
    owned: Vec<Writer<PartialObjectMeta<DynamicObject>>>,
    index: Arc<Index>,
}

/// Kinds of the sample releases the caches watch.
const OWNED: &[(&str, &str, &str, bool)] = &[
    ("", "v1", "Namespace", false),
    ("", "v1", "ServiceAccount", true),
    ("", "v1", "ConfigMap", true),
    ("apps", "v1", "Deployment", true),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        false,
    ),
];

impl Process {
    fn start(fake: &Arc<FakeApi>, id: u64) -> Process {
        let fence = Fence::waiting();
        let started = Instant::now();
        fence.grant_until(started + Duration::from_secs(86_400));
        let client = fake.client_for(id, fence);
        let cache: Arc<Mutex<Vec<Value>>> = Arc::default();
        let mut owned = Vec::new();
        let mut writers = Vec::new();
        for (g, v, k, namespaced) in OWNED {
            let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, k));
            let writer = Writer::new(resource.clone());
            owned.push((resource, *namespaced, writer.as_reader()));
            writers.push(writer);
        }
        let index = Arc::<Index>::default();
        let reporter = Reporter {
            controller: FIELD_MANAGER.into(),
            instance: Some(format!("process-{id}")),
        };
        let ctx = Arc::new(Ctx {
            recorder: crate::controller::events::Events::new(client.clone(), reporter),
            applier: Applier::new(client.clone()),
            client,
            world: World::new(index.clone(), OwnedKinds::fixed(owned)),
            opts: Options {
                config_retry: Duration::from_secs(60),
                clusterctl_inventory: false,
                ..Options::default()
            },
            inventory: false,
            failures: std::sync::Mutex::new(BTreeMap::new()),
            // A frozen clock: no recheck falls due by the wall clock (a slow run would differ).
            rechecks: capi_decide::readiness::Rechecks::with_clock(Arc::new(move || started)),
            uncached: std::sync::Mutex::new(BTreeMap::new()),
            inputs: crate::controller::inputs::InputWatches::inactive(),
            mirror: Arc::new(crate::controller::mirror::MirrorSetting::new(
                Default::default(),
                None,
            )),
            written: Default::default(),
        });
        let mut p = Process {
            id,
            ctx,
            providers: cache,
            owned: writers,
            index,
        };
        // A starting operator lists everything before it reconciles.
        p.refresh(fake);
        p
    }

    /// The caches catch up with the fake (a relist).
    fn refresh(&mut self, fake: &FakeApi) {
        let objects = fake.objects();
        let labelled = |kind: &str| -> Vec<Value> {
            objects
                .iter()
                .map(|(_, o)| o)
                .filter(|o| {
                    o["kind"] == kind && !o["metadata"]["labels"][OWNER_KIND_LABEL].is_null()
                })
                .cloned()
                .collect()
        };
        for (w, (g, v, kind, namespaced)) in self.owned.iter_mut().zip(OWNED) {
            let items: Vec<PartialObjectMeta<DynamicObject>> = labelled(kind)
                .into_iter()
                .filter_map(|o| serde_json::from_value(o).ok())
                .collect();
            let resource = Arc::new(ApiResource::from_gvk(&GroupVersionKind::gvk(g, v, kind)));
            for ev in relist_events(items.clone()) {
                self.index.feed_installed(&resource, *namespaced, &ev);
            }
            relist(w, items);
        }
        let items = labelled("Deployment")
            .into_iter()
            .filter_map(|o| serde_json::from_value(o).ok())
            .collect();
        for ev in relist_events::<Deployment>(items) {
            self.index.feed_deployment(&ev);
        }
        let providers: Vec<Value> = objects
            .into_iter()
            .filter(|(p, _)| p.starts_with("/apis/management.cluster.x-k8s.io/"))
            .map(|(_, o)| o)
            .collect();
        let read = providers
            .iter()
            .cloned()
            .filter_map(|o| AnyProvider::from_value(o).ok());
        self.index.replace_providers(read.collect());
        if let Ok(mut c) = self.providers.lock() {
            *c = providers;
        }
    }

    /// The cached provider object at `path`.
    fn cached(&self, p: &Prov) -> Option<Value> {
        let c = self.providers.lock().ok()?;
        c.iter()
            .find(|o| o["kind"] == p.kind && o["metadata"]["name"] == p.name)
            .cloned()
    }
}

fn relist<K>(w: &mut Writer<K>, items: Vec<K>)
where
    K: kube::Resource + Clone,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    for ev in relist_events(items) {
        w.apply_watcher_event(&ev);
    }
}

/// The events of a watch's relist finding `items`.
fn relist_events<K>(items: Vec<K>) -> Vec<watcher::Event<K>> {
    let listed = items.into_iter().map(watcher::Event::InitApply);
    std::iter::once(watcher::Event::Init)
        .chain(listed)
        .chain([watcher::Event::InitDone])
        .collect()
}

/// How one reconcile ended.
enum Ended {
    Done,
    /// The process was killed or lost its lease: a fresh one takes over.
    ProcessGone,
}

/// Counters of one run.
#[derive(Debug, Default, Clone)]
struct Stats {
    passes: u64,
    processes: u64,
    dropped_watches: u64,
    user_races: u64,
    requests: u64,
    faults: Vec<u64>,
    /// [`FakeApi::digest`] at the end of the run.
    digest: u64,
}

impl Stats {
    fn add(&mut self, o: &Stats) {
        self.passes += o.passes;
        self.processes += o.processes;
        self.dropped_watches += o.dropped_watches;
        self.user_races += o.user_races;
        self.requests += o.requests;
        if self.faults.len() < o.faults.len() {
            self.faults.resize(o.faults.len(), 0);
        }
        for (t, n) in self.faults.iter_mut().zip(&o.faults) {
            *t += n;
        }
    }
}

/// One seeded run of one flow.
struct Run {
    rng: Rng,
    fake: Arc<FakeApi>,
    process: Process,
    want: Vec<Want>,
    /// The provider created without spec.version, the user racing the operator to set it.
    racing: Option<usize>,
    user: Vec<(String, Value)>,
    stats: Stats,
    stage: Stage,
    /// The user has a custom resource of the infrastructure provider's kind.
    workload: bool,
}

/// Passes with faults per stage, at most; then faults stop.
const FAULTY_STEPS: u64 = 5;
/// Passes without faults a stage may take to reach its desired state.
const CLEAN_STEPS: usize = 12;
/// Faults per thousand requests while faults are on.
const FAULT_RATE: u64 = 150;

impl Run {
    fn new(seed: u64) -> Run {
        let fake = FakeApi::new();
        let mut rng = Rng::new(seed);
        fake.plan_faults(rng.next_u64(), FAULT_RATE);
        let process = Process::start(&fake, 1);
        Run {
            rng,
            fake,
            process,
            want: vec![Want::default(); PROVS.len()],
            racing: None,
            user: Vec::new(),
            stats: Stats {
                processes: 1,
                ..Stats::default()
            },
            stage: Stage::Install,
            workload: false,
        }
    }

    fn flow(&mut self) -> &'static [Stage] {
        let flow = FLOWS[self.rng.below(FLOWS.len() as u64) as usize];
        // A custom resource of the infrastructure provider's CRD would (rightly) hold its
        // deletion: only flows that keep the providers have one.
        self.workload = !flow.contains(&Stage::Delete);
        flow
    }

    /// Runs the flow; gives what went wrong (nothing when every invariant held).
    async fn go(&mut self) -> (&'static [Stage], Vec<String>) {
        let flow = self.flow();
        for &stage in flow {
            self.stage = stage;
            self.user_acts(stage);
            self.fake.faults_on(true);
            for _ in 0..=self.rng.below(FAULTY_STEPS) {
                self.step(true).await;
            }
            self.fake.faults_on(false);
            let mut reached = Err(String::new());
            for _ in 0..CLEAN_STEPS {
                self.step(false).await;
                reached = self.reached();
                if reached.is_ok() {
                    break;
                }
            }
            if let Err(why) = reached {
                self.fake.violation(format!(
                    "stage {stage:?}: the desired state was not reached once faults stopped: {why}"
                ));
                break;
            }
        }
        (flow, self.finish())
    }

    /// The user's changes of a stage.
    fn user_acts(&mut self, stage: Stage) {
        match stage {
            Stage::Install => self.install(),
            Stage::Upgrade => {
                for i in [CORE, INFRA] {
                    self.edit(i, |o| o["spec"]["version"] = json!("v1.1.0"));
                    self.want[i].version = Some("v1.1.0");
                }
            }
            Stage::Pause | Stage::Unpause => {
                let paused = stage == Stage::Pause;
                for i in 0..PROVS.len() {
                    self.edit(i, |o| o["spec"]["paused"] = json!(paused));
                    self.want[i].paused = paused;
                }
            }
            Stage::ContractChange => {
                for (i, p) in PROVS.iter().enumerate() {
                    let (path, cm) = p.release("v2.0.0");
                    self.user_object(&path, cm);
                    self.edit(i, |o| o["spec"]["version"] = json!("v2.0.0"));
                    self.want[i].version = Some("v2.0.0");
                }
            }
            Stage::Delete => {
                for (i, p) in PROVS.iter().enumerate() {
                    self.edit(i, |o| {
                        o["metadata"]["deletionTimestamp"] = json!("2026-01-02T00:00:00Z");
                    });
                    if self.fake.get(&p.path()).is_some_and(|o| {
                        o["metadata"]["finalizers"]
                            .as_array()
                            .is_none_or(Vec::is_empty)
                    }) {
                        // Nothing holds it: the apiserver removes it at once.
                        self.fake.remove(&p.path());
                    }
                    self.want[i].deleted = true;
                }
            }
        }
    }

    fn install(&mut self) {
        for (i, p) in PROVS.iter().enumerate() {
            for v in ["v1.0.0", "v1.1.0"] {
                let (path, cm) = p.release(v);
                self.user_object(&path, cm);
            }
            let racing = i == INFRA && self.rng.chance(500);
            let version = if racing { "" } else { "v1.0.0" };
            self.fake.put(&p.path(), p.object(version));
            self.want[i].version = (!racing).then_some("v1.0.0");
            if racing {
                self.racing = Some(i);
            }
        }
        if self.workload {
            self.user_object(
                "/apis/infra.example.org/v1/namespaces/team-a/infrawidgets/my-cluster",
                json!({"apiVersion": "infra.example.org/v1", "kind": "Widget",
                       "metadata": {"name": "my-cluster", "namespace": "team-a"},
                       "spec": {"replicas": 3}}),
            );
        }
        self.user_object(
            "/api/v1/namespaces/team-a",
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
        );
        self.tenant_claims();
        self.user_object(
            "/api/v1/namespaces/capi-system/configmaps/user-settings",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "user-settings", "namespace": "capi-system"},
                   "data": {"k": "v"}}),
        );
        self.user_object(
            "/api/v1/namespaces/docker-system/secrets/user-credentials",
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "user-credentials", "namespace": "docker-system"},
                   "data": {"token": "c2VjcmV0"}}),
        );
    }

    /// A tenant labels objects of its own namespace with the core provider's identity (issue 45
    /// item 4): a ConfigMap and a Deployment that is never available. They must steer nothing
    /// (the stages still reach Ready) and be neither written nor deleted (invariant 4).
    fn tenant_claims(&mut self) {
        let labels = json!({OWNER_KIND_LABEL: PROVS[CORE].kind,
                            OWNER_NAMESPACE_LABEL: PROVS[CORE].ns,
                            OWNER_NAME_LABEL: PROVS[CORE].name});
        self.user_object(
            "/api/v1/namespaces/team-a/configmaps/claims-the-core",
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": "claims-the-core", "namespace": "team-a",
                                "labels": labels},
                   "data": {"k": "v"}}),
        );
        self.user_object(
            "/apis/apps/v1/namespaces/team-a/deployments/claims-the-core",
            json!({"apiVersion": "apps/v1", "kind": "Deployment",
                   "metadata": {"name": "claims-the-core", "namespace": "team-a",
                                "generation": 1, "labels": labels},
                   "spec": {"replicas": 1,
                            "selector": {"matchLabels": {"app": "t"}},
                            "template": {"metadata": {"labels": {"app": "t"}},
                                         "spec": {"nodeSelector": {"no-such-node": "true"},
                                                  "containers": [{"name": "t", "image": "t"}]}}},
                   "status": {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1,
                              "unavailableReplicas": 1}}),
        );
    }

    fn user_object(&mut self, path: &str, obj: Value) {
        self.fake.user_object(path, obj);
        if let Some(o) = self.fake.get(path) {
            self.user.push((path.to_string(), o));
        }
    }

    /// A user's change of provider `i` (as `kubectl edit` makes it).
    fn edit(&mut self, i: usize, change: impl FnOnce(&mut Value)) {
        let path = PROVS[i].path();
        let Some(mut o) = self.fake.get(&path) else {
            return;
        };
        let spec = o["spec"].clone();
        change(&mut o);
        if o["spec"] != spec {
            let g = o["metadata"]["generation"].as_i64().unwrap_or(1);
            o["metadata"]["generation"] = json!(g + 1);
        }
        self.fake.update(&path, o);
    }

    /// Deployments roll out at once (there is no controller-manager): their status says so. One
    /// whose pods select a node (the tenant's) never gets one.
    fn kubelet(&self) {
        for (path, mut d) in self.fake.objects() {
            if d["kind"] != "Deployment" || !d["spec"]["template"]["spec"]["nodeSelector"].is_null()
            {
                continue;
            }
            let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
            let status = json!({"observedGeneration": d["metadata"]["generation"], "replicas": replicas,
                "updatedReplicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas,
                "conditions": [{"type": "Available", "status": "True"}]});
            if d["status"] != status {
                d["status"] = status;
                self.fake.update(&path, d);
            }
        }
    }

    /// One pass over every provider, in a seeded order.
    async fn step(&mut self, faulty: bool) {
        self.kubelet();
        if faulty && self.rng.chance(200) {
            self.stats.dropped_watches += 1;
        } else {
            self.process.refresh(&self.fake);
        }
        let mut order: Vec<usize> = (0..PROVS.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, self.rng.below(i as u64 + 1) as usize);
        }
        for i in order {
            if faulty {
                self.race();
            }
            if let Ended::ProcessGone = self.pass(i).await {
                self.stats.processes += 1;
                self.process = Process::start(&self.fake, self.process.id + 1);
            }
            self.check_core_goes_last();
        }
    }

    /// The user sets the version the operator may be resolving at the same moment (only while
    /// it is still empty: a user who saw it set would not downgrade it).
    fn race(&mut self) {
        let Some(i) = self.racing else { return };
        let empty = self
            .fake
            .get(&PROVS[i].path())
            .is_some_and(|o| o["spec"]["version"].as_str().is_none_or(str::is_empty));
        if empty && self.rng.chance(150) {
            self.stats.user_races += 1;
            self.edit(i, |o| o["spec"]["version"] = json!("v1.0.0"));
            self.want[i].version = Some("v1.0.0");
            self.racing = None;
        }
    }

    fn check_core_goes_last(&self) {
        let core_gone = self.fake.get(&PROVS[CORE].path()).is_none();
        let others: Vec<&str> = PROVS[1..]
            .iter()
            .filter(|p| self.fake.get(&p.path()).is_some())
            .map(|p| p.name)
            .collect();
        if self.stage == Stage::Delete && core_gone && !others.is_empty() {
            self.fake.violation(format!(
                "the core provider's finalizer was released while {others:?} remained"
            ));
        }
    }

    /// One reconcile of provider `i` by the current process, as its controller would run it
    /// (on the object its cache holds).
    async fn pass(&mut self, i: usize) -> Ended {
        let Some(obj) = self.process.cached(&PROVS[i]) else {
            return Ended::Done;
        };
        self.stats.passes += 1;
        let mut kills = self.fake.kills();
        let ctx = self.process.ctx.clone();
        let result = tokio::select! {
            biased;
            _ = kills.changed() => return Ended::ProcessGone,
            r = reconcile_value(obj, ctx) => r,
        };
        if let Err(e) = result {
            self.fake.violation(e);
        }
        if self.fake.revoked(self.process.id) {
            return Ended::ProcessGone;
        }
        Ended::Done
    }

    /// Whether the stage's desired state holds; why not otherwise.
    fn reached(&self) -> Result<(), String> {
        for (p, want) in PROVS.iter().zip(&self.want) {
            let obj = self.fake.get(&p.path());
            if want.deleted {
                if obj.is_some() {
                    return Err(format!("{} still exists", p.name));
                }
                if self.fake.get(&p.deployment()).is_some() {
                    return Err(format!("{}'s Deployment still exists", p.name));
                }
                continue;
            }
            let obj = obj.ok_or_else(|| format!("{} is gone", p.name))?;
            installed_as_wanted(&self.fake, p, &obj, want)?;
        }
        Ok(())
    }

    /// The invariants checked after the run; what was broken.
    fn finish(&mut self) -> Vec<String> {
        for (path, obj) in &self.user {
            if self.fake.get(path).as_ref() != Some(obj) {
                self.fake
                    .violation(format!("the user's object {path} changed or vanished"));
            }
        }
        for p in &PROVS {
            if self.fake.get(&p.crd()).is_none() {
                self.fake.violation(format!("CRD {} is gone", p.crd_name()));
            }
            if self
                .fake
                .get(&format!("/api/v1/namespaces/{}", p.ns))
                .is_none()
            {
                self.fake.violation(format!("Namespace {} is gone", p.ns));
            }
        }
        self.stats.requests = self.fake.arrived();
        self.stats.faults = self.fake.injected();
        self.stats.digest = self.fake.digest();
        self.fake.violations()
    }
}

/// Installed at the wanted version, Ready (or paused as asked), objects as rendered.
fn installed_as_wanted(fake: &FakeApi, p: &Prov, obj: &Value, want: &Want) -> Result<(), String> {
    let spec_version = obj["spec"]["version"].as_str().unwrap_or("");
    match want.version {
        Some(v) if v != spec_version => {
            return Err(format!(
                "{}: spec.version {spec_version:?}, want {v}",
                p.name
            ));
        }
        None if !["v1.0.0", "v1.1.0"].contains(&spec_version) => {
            return Err(format!(
                "{}: spec.version {spec_version:?} not resolved",
                p.name
            ));
        }
        _ => {}
    }
    let status = &obj["status"];
    if status["installedVersion"] != spec_version {
        return Err(format!(
            "{}: installed {}, want {spec_version}",
            p.name, status["installedVersion"]
        ));
    }
    let condition = |t: &str| {
        status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == t))
            .map(|c| c["status"].as_str().unwrap_or("").to_string())
    };
    let (shown, replicas) = if want.paused {
        ("Paused", 0)
    } else {
        ("Ready", 1)
    };
    if condition(shown).as_deref() != Some("True") {
        return Err(format!(
            "{}: {shown} is not True: {}",
            p.name, status["conditions"]
        ));
    }
    let d = fake
        .get(&p.deployment())
        .ok_or_else(|| format!("{}: no Deployment", p.name))?;
    let image = d
        .pointer("/spec/template/spec/containers/0/image")
        .and_then(Value::as_str)
        .unwrap_or("");
    if !image.ends_with(&format!(":{spec_version}")) || d["spec"]["replicas"] != replicas {
        return Err(format!(
            "{}: Deployment runs {image} with {} replicas",
            p.name, d["spec"]["replicas"]
        ));
    }
    if fake.get(&p.crd()).is_none() {
        return Err(format!("{}: CRD missing", p.name));
    }
    let legacy = fake.get(&p.legacy()).is_some();
    if !want.paused && legacy != (spec_version == "v1.0.0") {
        return Err(format!(
            "{}: legacy ServiceAccount present: {legacy}",
            p.name
        ));
    }
    Ok(())
}

/// Reconciles a provider object of any of the three kinds; a panic is an error.
async fn reconcile_value(obj: Value, ctx: Arc<Ctx>) -> Result<(), String> {
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let r = match kind.as_str() {
        "CoreProvider" => match serde_json::from_value::<CoreProvider>(obj) {
            Ok(p) => reconcile::reconcile(Arc::new(p), ctx).await,
            Err(e) => return Err(format!("{kind}: {e}")),
        },
        "BootstrapProvider" => match serde_json::from_value::<BootstrapProvider>(obj) {
            Ok(p) => reconcile::reconcile(Arc::new(p), ctx).await,
            Err(e) => return Err(format!("{kind}: {e}")),
        },
        _ => match serde_json::from_value::<InfrastructureProvider>(obj) {
            Ok(p) => reconcile::reconcile(Arc::new(p), ctx).await,
            Err(e) => return Err(format!("{kind}: {e}")),
        },
    };
    match r {
        Err(crate::controller::outcome::Error::Panic(what)) => {
            Err(format!("a reconcile of a {kind} panicked: {what}"))
        }
        // Other errors are retried by the next pass, as the controller's back-off would.
        _ => Ok(()),
    }
}

/// Runs seed `seed`; gives its flow, counters and violations.
fn run_seed(seed: u64) -> (&'static [Stage], Stats, Vec<String>) {
    // Paused time (advanced only when every task waits): the operator's timers (a CRD's
    // Established polls, back-off sleeps) then fire in the same order in every run, not by the
    // wall clock's millisecond ticks; otherwise concurrent requests arrive in another order
    // and the seeded faults land on other requests.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
    {
        Ok(rt) => rt,
        Err(e) => return (&[], Stats::default(), vec![format!("no runtime: {e}")]),
    };
    rt.block_on(async move {
        let mut run = Run::new(seed);
        let (flow, violations) = run.go().await;
        if std::env::var_os("FAULT_TRACE").is_some() {
            for r in run.fake.requests() {
                eprintln!("{} {} {}?{}", r.process, r.method, r.path, r.query);
            }
        }
        (flow, run.stats.clone(), violations)
    })
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The invariant a violation breaks (see the module docs).
fn invariant(violation: &str) -> &'static str {
    const INVARIANTS: &[(&str, &str)] = &[
        ("deleted /apis/apiextensions", "1. no CRD deleted"),
        ("deleted /api/v1/namespaces", "1. no Namespace deleted"),
        ("is gone", "1. no CRD or Namespace deleted"),
        (
            "after its leadership ended",
            "2. no write after leadership ended",
        ),
        (
            "desired state",
            "3. the desired state reached once faults stop",
        ),
        ("the user's object", "4. no user object touched"),
        (
            "spec.version",
            "5. spec.version never changed by the operator",
        ),
        (
            "finalizer was released",
            "6. the core provider deleted last",
        ),
        ("panicked", "6. no reconcile panics"),
    ];
    INVARIANTS
        .iter()
        .find(|(text, _)| violation.contains(text))
        .map_or("other", |(_, i)| i)
}

/// One run's outcome: seed, flow, counters, violations.
type Outcome = (u64, &'static [Stage], Stats, Vec<String>);

/// Runs `seeds` on every core (each run on its own thread's runtime, so each stays exact).
fn run_all(seeds: &[u64]) -> Vec<Outcome> {
    let workers = std::thread::available_parallelism()
        .map(usize::from)
        .unwrap_or(1)
        .clamp(1, 8);
    let next = std::sync::atomic::AtomicUsize::new(0);
    let done = Mutex::new(Vec::with_capacity(seeds.len()));
    std::thread::scope(|s| {
        for _ in 0..workers {
            s.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let Some(&seed) = seeds.get(i) else { break };
                    let (flow, stats, violations) = run_seed(seed);
                    if let Ok(mut d) = done.lock() {
                        d.push((seed, flow, stats, violations));
                    }
                }
            });
        }
    });
    let mut done = done
        .into_inner()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    done.sort_by_key(|o| o.0);
    done
}

#[test]
fn seeded_fault_injection_keeps_every_invariant() {
    let seeds: Vec<u64> = match env_u64("FAULT_SEED") {
        Some(s) => vec![s],
        None => {
            let base = env_u64("FAULT_SEED_BASE").unwrap_or(0);
            (base..base + env_u64("FAULT_RUNS").unwrap_or(1000)).collect()
        }
    };
    let started = Instant::now();
    let outcomes = run_all(&seeds);
    let mut total = Stats::default();
    for (_, _, stats, _) in &outcomes {
        total.add(stats);
    }
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.3.is_empty()).collect();
    let faults: u64 = total.faults.iter().sum();
    eprintln!(
        "fault injection: {} runs (seeds {}..={}) in {:.1} s; {} requests, {faults} faults injected, {} dropped watches, {} user races, {} reconciles, {} operator processes",
        seeds.len(),
        seeds.first().copied().unwrap_or_default(),
        seeds.last().copied().unwrap_or_default(),
        started.elapsed().as_secs_f64(),
        total.requests,
        total.dropped_watches,
        total.user_races,
        total.passes,
        total.processes,
    );
    for (name, n) in Fault::NAMES.iter().zip(&total.faults) {
        eprintln!("  {name}: {n}");
    }
    if let [(seed, flow, stats, _)] = &outcomes[..] {
        eprintln!(
            "FAULT_SEED={seed} flow {flow:?}: request digest {:016x}",
            stats.digest
        );
    }
    let mut by_invariant: BTreeMap<&str, u64> = BTreeMap::new();
    for (_, _, _, violations) in &failed {
        let mut seen: Vec<&str> = violations.iter().map(|v| invariant(v)).collect();
        seen.dedup();
        for i in seen {
            *by_invariant.entry(i).or_default() += 1;
        }
    }
    for (i, n) in &by_invariant {
        eprintln!("  runs breaking \"{i}\": {n}");
    }
    for (seed, flow, _, violations) in failed.iter().take(40) {
        eprintln!("FAULT_SEED={seed} flow {flow:?}:");
        for v in violations.iter().take(3) {
            eprintln!("  {v}");
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {} seeded runs broke an invariant (replay one with FAULT_SEED=<n>); first: FAULT_SEED={}",
        failed.len(),
        seeds.len(),
        failed.first().map(|f| f.0).unwrap_or_default()
    );
}

#[test]
fn a_seed_replays_exactly() {
    for seed in 0..8 {
        let (flow, a, va) = run_seed(seed);
        let (_, b, vb) = run_seed(seed);
        assert_eq!(
            (a.digest, a.requests, &va),
            (b.digest, b.requests, &vb),
            "FAULT_SEED={seed} flow {flow:?} ran differently twice"
        );
        assert!(a.requests > 0, "seed {seed} sent nothing");
    }
}
