//! One pod's worker: network, volumes, containers, probes and status, until deletion.

use std::{
    collections::BTreeMap,
    net::SocketAddr,
    path::PathBuf,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use jiff::Timestamp;
use k8s_openapi::api::core::v1::Pod;
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, Preconditions},
};
use nix::{sys::signal::Signal, unistd::Pid};
use serde_json::{Value, json};
use tokio::{sync::watch, task::JoinHandle};

use crate::{
    container::{Ctr, Run, State, Term, log_tail, mark_log, time},
    env::{self, ApiEndpoint},
    error::Error,
    events::Recorder,
    fields::Addresses,
    images,
    net::{Network, PodNet},
    node::MANAGER,
    probe, trampoline,
    volumes::Volumes,
};

/// What every pod worker shares.
pub struct Shared {
    /// API client.
    pub client: Client,
    /// The Node's name.
    pub node: String,
    /// The Node's IP.
    pub node_ip: String,
    /// The pod network.
    pub net: Network,
    /// The state directory.
    pub state_dir: PathBuf,
    /// The images file.
    pub images: PathBuf,
    /// The API server, from the agent's namespace.
    pub api_target: SocketAddr,
    /// Initial crash back-off.
    pub backoff_initial: Duration,
    /// Maximum crash back-off.
    pub backoff_max: Duration,
    /// Cap on the termination grace period.
    pub max_grace: Duration,
}

const VOLUME_REFRESH: Duration = Duration::from_secs(3);
const RETRY: Duration = Duration::from_secs(2);
/// A container that ran this long has its back-off reset (kubelet's rule).
const BACKOFF_RESET: Duration = Duration::from_secs(600);

struct Worker {
    sh: Arc<Shared>,
    pod: Pod,
    uid: String,
    dir: PathBuf,
    net: Option<PodNet>,
    net_ready: bool,
    forwarder: Option<JoinHandle<()>>,
    volumes: Volumes,
    mount_error: Option<String>,
    mount_error_reported: Option<(String, Instant)>,
    next_volume_sync: Instant,
    ctrs: Vec<Ctr>,
    events: Recorder,
    conditions: BTreeMap<&'static str, (bool, Value)>,
    start_time: Value,
    last_status: Option<Value>,
}

/// Runs the pod whose updates arrive on `rx` (`None`: the pod is gone) until it is deleted.
pub async fn run(sh: Arc<Shared>, mut rx: watch::Receiver<Option<Pod>>) {
    let Some(pod) = rx.borrow().clone() else {
        return;
    };
    let mut w = Worker::new(sh, pod);
    loop {
        let current = rx.borrow_and_update().clone();
        match current {
            None => return w.shutdown(false).await,
            Some(p) if p.metadata.deletion_timestamp.is_some() => {
                w.pod = p;
                return w.shutdown(true).await;
            }
            Some(p) => w.pod = p,
        }
        w.tick().await;
        let _ = tokio::time::timeout(Duration::from_millis(500), rx.changed()).await;
    }
}

impl Worker {
    fn new(sh: Arc<Shared>, pod: Pod) -> Worker {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let dir = sh.state_dir.join("pods").join(&uid);
        let spec = pod.spec.clone().unwrap_or_default();
        let mut ctrs: Vec<Ctr> = spec
            .init_containers
            .into_iter()
            .flatten()
            .map(|c| Ctr::new(c, true))
            .collect();
        ctrs.extend(spec.containers.into_iter().map(|c| Ctr::new(c, false)));
        let start_time = pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.clone())
            .map(|t| time(t.0))
            .unwrap_or_else(|| time(Timestamp::now()));
        Worker {
            events: Recorder::new(sh.client.clone(), &sh.node, &pod),
            volumes: Volumes::new(dir.join("volumes")),
            sh,
            pod,
            uid,
            dir,
            net: None,
            net_ready: false,
            forwarder: None,
            mount_error: Some("volumes not prepared yet".into()),
            mount_error_reported: None,
            next_volume_sync: Instant::now(),
            ctrs,
            conditions: BTreeMap::new(),
            start_time,
            last_status: None,
        }
    }

    fn host_network(&self) -> bool {
        self.pod.spec.as_ref().and_then(|s| s.host_network) == Some(true)
    }

    fn addresses(&self) -> Addresses {
        let pod_ip = match &self.net {
            Some(n) => n.ip.to_string(),
            None if self.host_network() => self.sh.node_ip.clone(),
            None => String::new(),
        };
        Addresses {
            pod_ip,
            host_ip: self.sh.node_ip.clone(),
        }
    }

    fn name(&self) -> String {
        self.pod.metadata.name.clone().unwrap_or_default()
    }

    /// The pod's hostname as a kubelet sets it: spec.hostname, else the pod's name, at most
    /// 63 characters.
    fn hostname(&self) -> String {
        let spec = self.pod.spec.as_ref().and_then(|s| s.hostname.clone());
        let h: String = spec
            .unwrap_or_else(|| self.name())
            .chars()
            .take(63)
            .collect();
        h.trim_end_matches(['-', '.']).to_string()
    }

    fn namespace(&self) -> String {
        self.pod
            .metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into())
    }

    async fn tick(&mut self) {
        self.ensure_network().await;
        if self.net_ready && Instant::now() >= self.next_volume_sync {
            self.sync_volumes().await;
        }
        if self.net_ready {
            self.step_containers().await;
        }
        self.write_status().await;
    }

    async fn ensure_network(&mut self) {
        if self.net_ready {
            return;
        }
        if self.host_network() {
            self.net_ready = true;
            return;
        }
        let result = async {
            let requested = crate::net::requested_address(self.pod.metadata.annotations.as_ref())?;
            let net = self.sh.net.add_pod(&self.uid, requested).await?;
            let port = self.sh.api_target.port();
            let fwd = crate::forward::start(&net.netns_path(), port, self.sh.api_target).await?;
            Ok::<_, Error>((net, fwd))
        }
        .await;
        match result {
            Ok((net, fwd)) => {
                self.net = Some(net);
                self.forwarder = Some(fwd);
                self.net_ready = true;
            }
            Err(e) => {
                tracing::warn!(pod = %self.name(), error = %e, "setting up the pod network");
                self.events.warning("FailedCreatePodSandBox", e.to_string());
                self.sh.net.remove_pod(&self.uid, None).await;
            }
        }
    }

    async fn sync_volumes(&mut self) {
        let addr = self.addresses();
        let result = self.volumes.sync(&self.sh.client, &self.pod, &addr).await;
        match result {
            Ok(()) => {
                self.mount_error = None;
                self.next_volume_sync = Instant::now() + VOLUME_REFRESH;
            }
            Err(e) => {
                let msg = e.to_string();
                let stale = self
                    .mount_error_reported
                    .as_ref()
                    .is_none_or(|(m, at)| *m != msg || at.elapsed() > Duration::from_secs(30));
                if stale {
                    self.events.warning("FailedMount", msg.clone());
                    self.mount_error_reported = Some((msg.clone(), Instant::now()));
                }
                // Running containers keep their last good contents, as with kubelet.
                if self.mount_error.is_some() {
                    self.mount_error = Some(msg);
                }
                self.next_volume_sync = Instant::now() + RETRY;
            }
        }
    }

    async fn step_containers(&mut self) {
        let first_pending_init = self.ctrs.iter().position(|c| c.init && !c.completed());
        match first_pending_init {
            Some(i) => self.step(i).await,
            None => {
                for i in 0..self.ctrs.len() {
                    if !self.ctrs[i].init {
                        self.step(i).await;
                    }
                }
            }
        }
    }

    async fn step(&mut self, i: usize) {
        let now = Instant::now();
        let grace = self.grace();
        let c = &mut self.ctrs[i];
        match &mut c.state {
            State::Running(run) => {
                if run.kill_deadline.is_none() && run.health.kill.load(Ordering::SeqCst) {
                    self.events.normal(
                        "Killing",
                        format!(
                            "Container {} failed liveness probe, will be restarted",
                            c.spec.name
                        ),
                    );
                    signal(run.pid, Signal::SIGTERM);
                    run.kill_deadline = Some(now + grace);
                }
                if run.kill_deadline.is_some_and(|d| now >= d) {
                    signal(run.pid, Signal::SIGKILL);
                }
                if let Ok(Some(status)) = run.child.try_wait() {
                    self.exited(i, status);
                }
            }
            State::Waiting { until, .. } if now >= *until && self.mount_error.is_none() => {
                self.start(i).await;
            }
            State::Waiting { .. } => {
                if let Some(m) = &self.mount_error
                    && !c.ever_started
                {
                    c.state = State::Waiting {
                        reason: "ContainerCreating".into(),
                        message: m.clone(),
                        until: now,
                    };
                }
            }
            State::Terminated(_) => {}
        }
    }

    fn restart_policy(&self) -> String {
        self.pod
            .spec
            .as_ref()
            .and_then(|s| s.restart_policy.clone())
            .unwrap_or_else(|| "Always".into())
    }

    fn log_path(&self, container: &str) -> PathBuf {
        let file = format!("{}_{}_{}.log", self.namespace(), self.name(), container);
        self.sh.state_dir.join("logs").join(file)
    }

    fn exited(&mut self, i: usize, status: std::process::ExitStatus) {
        use std::os::unix::process::ExitStatusExt;
        let policy = self.restart_policy();
        let pod_desc = format!("{}_{}({})", self.name(), self.namespace(), self.uid);
        let log = self.log_path(&self.ctrs[i].spec.name);
        let (backoff_initial, backoff_max) = (self.sh.backoff_initial, self.sh.backoff_max);
        let c = &mut self.ctrs[i];
        let State::Running(run) = &c.state else {
            return;
        };
        run.probes.iter().for_each(JoinHandle::abort);
        let code = status
            .code()
            .unwrap_or_else(|| 128 + status.signal().unwrap_or(9));
        let fallback =
            c.spec.termination_message_policy.as_deref() == Some("FallbackToLogsOnError");
        let message = (fallback && code != 0).then(|| log_tail(&log, run.log_offset));
        let term = Term {
            code,
            reason: if code == 0 { "Completed" } else { "Error" }.into(),
            message: message.filter(|m| !m.is_empty()),
            started_at: run.started_at,
            finished_at: Timestamp::now(),
            pid: run.pid,
        };
        let ran = run.since.elapsed();
        let restart = match (c.init, policy.as_str()) {
            (_, "Never") => false,
            (true, _) | (false, "OnFailure") => code != 0,
            (false, _) => true,
        };
        if !restart {
            c.state = State::Terminated(term);
            return;
        }
        if ran >= BACKOFF_RESET {
            c.backoff = None;
        }
        let delay = c.backoff.unwrap_or(Duration::ZERO);
        c.backoff = Some(match c.backoff {
            None => backoff_initial,
            Some(d) => (d * 2).min(backoff_max),
        });
        c.last = Some(term);
        let name = c.spec.name.clone();
        // Kubelet restarts the first exit at once; only later ones are backed off.
        if delay.is_zero() {
            c.state = State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
                until: Instant::now(),
            };
            return;
        }
        c.state = State::Waiting {
            reason: "CrashLoopBackOff".into(),
            message: format!(
                "back-off {}s restarting failed container={name} pod={pod_desc}",
                delay.as_secs()
            ),
            until: Instant::now() + delay,
        };
        self.events.warning(
            "BackOff",
            format!("Back-off restarting failed container {name} in pod {pod_desc}"),
        );
    }

    async fn start(&mut self, i: usize) {
        match self.spawn(i).await {
            Ok(run) => {
                let c = &mut self.ctrs[i];
                if c.ever_started {
                    c.restarts += 1;
                }
                c.ever_started = true;
                c.pull_failures = 0;
                self.events
                    .normal("Started", format!("Started container {}", c.spec.name));
                c.state = State::Running(run);
            }
            Err(e) => self.start_failed(i, e),
        }
    }

    fn start_failed(&mut self, i: usize, e: Error) {
        let c = &mut self.ctrs[i];
        let image = c.spec.image.clone().unwrap_or_default();
        let (reason, message, delay) = match e {
            Error::ImagePull(m) | Error::Images { message: m, .. } => {
                c.pull_failures += 1;
                let delay =
                    self.sh.backoff_initial * 2u32.saturating_pow(c.pull_failures - 1).min(32);
                self.events
                    .warning("Failed", format!("Failed to pull image {image:?}: {m}"));
                if c.pull_failures % 2 == 1 {
                    ("ErrImagePull", m, Duration::ZERO.max(RETRY))
                } else {
                    self.events
                        .normal("BackOff", format!("Back-off pulling image {image:?}"));
                    let msg = format!("Back-off pulling image {image:?}: ErrImagePull: {m}");
                    ("ImagePullBackOff", msg, delay.min(self.sh.backoff_max))
                }
            }
            Error::Config(m) | Error::Mount(m) => {
                self.events.warning("Failed", format!("Error: {m}"));
                ("CreateContainerConfigError", m, RETRY)
            }
            other => {
                self.events.warning("Failed", format!("Error: {other}"));
                ("RunContainerError", other.to_string(), RETRY)
            }
        };
        c.state = State::Waiting {
            reason: reason.into(),
            message,
            until: Instant::now() + delay,
        };
    }

    async fn spawn(&mut self, i: usize) -> Result<Run, Error> {
        let spec = self.ctrs[i].spec.clone();
        let image = spec.image.clone().unwrap_or_default();
        let binary = images::load(&self.sh.images)?.resolve(&image)?;
        let binary = binary.to_string_lossy().into_owned();
        self.ctrs[i].binary = Some(binary.clone());
        self.events.normal(
            "Pulled",
            format!("Container image {image:?} already present on machine"),
        );
        let addr = self.addresses();
        let api = ApiEndpoint {
            host: "127.0.0.1".into(),
            port: self.sh.api_target.port(),
        };
        let mut env = env::resolve(&self.sh.client, &self.pod, &spec, &addr, &api).await?;
        let argv = env::argv(&spec, &binary, &env);
        for (k, v) in [
            (
                "PATH",
                "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".to_string(),
            ),
            ("HOSTNAME", self.hostname()),
        ] {
            if env::lookup(&env, k).is_none() {
                env.push((k.into(), v));
            }
        }
        let cwd = self.working_dir(&spec)?;
        let mounts = self.mounts(&spec);
        let exec = trampoline::Spec {
            netns: self.net.as_ref().map(PodNet::netns_path),
            // A pod with its own network has its own hostname, the pod's name, as under a
            // kubelet: managers derive their leader-election identity from it.
            hostname: self.net.as_ref().map(|_| self.hostname()),
            mounts,
            argv,
            cwd,
        };
        let log = self.log_path(&spec.name);
        let marker = format!(
            "--- capi-process-node: starting container {} (restart {}) at {} ---",
            spec.name,
            self.ctrs[i].restarts + i32::from(self.ctrs[i].ever_started),
            Timestamp::now()
        );
        let (out, log_offset) =
            mark_log(&log, &marker).map_err(crate::error::io(format!("log {}", log.display())))?;
        let err = out.try_clone().map_err(crate::error::io("log"))?;
        let me = std::env::current_exe().map_err(crate::error::io("current_exe"))?;
        self.events
            .normal("Created", format!("Created container {}", spec.name));
        // Spawned from a runtime worker thread, which lives as long as the agent: the child's
        // PR_SET_PDEATHSIG fires when the spawning thread exits.
        let child = tokio::process::Command::new(me)
            .arg(trampoline::SUBCOMMAND)
            .arg(serde_json::to_string(&exec)?)
            .env_clear()
            .envs(env)
            .stdin(std::process::Stdio::null())
            .stdout(out)
            .stderr(err)
            .process_group(0)
            .spawn()
            .map_err(crate::error::io(format!("starting {binary}")))?;
        let pid = child.id().unwrap_or_default();
        let target = probe::Target {
            ip: addr.pod_ip,
            pid,
            container: spec,
        };
        let (health, probes) = probe::start(target, self.events.clone());
        Ok(Run {
            child,
            pid,
            started_at: Timestamp::now(),
            since: Instant::now(),
            log_offset,
            kill_deadline: None,
            health,
            probes,
        })
    }

    fn working_dir(&self, spec: &k8s_openapi::api::core::v1::Container) -> Result<PathBuf, Error> {
        if let Some(wd) = &spec.working_dir
            && std::path::Path::new(wd).is_dir()
        {
            return Ok(PathBuf::from(wd));
        }
        let dir = self.dir.join("containers").join(&spec.name);
        std::fs::create_dir_all(&dir)
            .map_err(crate::error::io(format!("creating {}", dir.display())))?;
        Ok(dir)
    }

    fn mounts(&self, spec: &k8s_openapi::api::core::v1::Container) -> Vec<trampoline::BindMount> {
        spec.volume_mounts
            .iter()
            .flatten()
            .map(|m| {
                let mut source = self.volumes.host_path(&self.pod, &m.name);
                if let Some(sub) = m.sub_path.as_deref().filter(|s| !s.is_empty()) {
                    source = source.join(sub);
                }
                trampoline::BindMount {
                    source,
                    target: PathBuf::from(&m.mount_path),
                    read_only: m.read_only == Some(true),
                }
            })
            .collect()
    }

    fn grace(&self) -> Duration {
        let secs = self
            .pod
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| {
                self.pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(30)
            .max(0) as u64;
        Duration::from_secs(secs).min(self.sh.max_grace)
    }

    fn phase(&self) -> &'static str {
        let inits: Vec<&Ctr> = self.ctrs.iter().filter(|c| c.init).collect();
        let mains: Vec<&Ctr> = self.ctrs.iter().filter(|c| !c.init).collect();
        let failed = |c: &&Ctr| matches!(&c.state, State::Terminated(t) if t.code != 0);
        if inits.iter().any(failed) {
            return "Failed";
        }
        if !inits.iter().all(|c| c.completed()) {
            return "Pending";
        }
        let all_done = mains
            .iter()
            .all(|c| matches!(c.state, State::Terminated(_)));
        if all_done && !mains.is_empty() {
            return if mains.iter().any(failed) {
                "Failed"
            } else {
                "Succeeded"
            };
        }
        let started = mains.iter().any(|c| c.ever_started);
        if started { "Running" } else { "Pending" }
    }

    fn condition(&mut self, kind: &'static str, ok: bool) -> Value {
        let entry = self
            .conditions
            .entry(kind)
            .or_insert_with(|| (ok, time(Timestamp::now())));
        if entry.0 != ok {
            *entry = (ok, time(Timestamp::now()));
        }
        json!({"type": kind, "status": if ok { "True" } else { "False" },
               "lastProbeTime": null, "lastTransitionTime": entry.1})
    }

    async fn write_status(&mut self) {
        let status = self.status();
        if self.last_status.as_ref() == Some(&status) {
            return;
        }
        let api: Api<Pod> = Api::namespaced(self.sh.client.clone(), &self.namespace());
        let patch = json!({"status": status});
        let pp = PatchParams {
            field_manager: Some(MANAGER.into()),
            ..Default::default()
        };
        match api
            .patch_status(&self.name(), &pp, &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.last_status = Some(status),
            Err(e) => tracing::warn!(pod = %self.name(), error = %e, "writing pod status"),
        }
    }

    fn status(&mut self) -> Value {
        let addr = self.addresses();
        let initialized = self.ctrs.iter().filter(|c| c.init).all(Ctr::completed);
        let mains_ready = self.ctrs.iter().filter(|c| !c.init).all(Ctr::ready);
        let phase = self.phase();
        let ready = mains_ready && phase == "Running";
        let conditions = vec![
            self.condition("PodScheduled", true),
            self.condition("PodReadyToStartContainers", self.net_ready),
            self.condition("Initialized", initialized),
            self.condition("ContainersReady", ready),
            self.condition("Ready", ready),
        ];
        let statuses = |init: bool| -> Vec<Value> {
            self.ctrs
                .iter()
                .filter(|c| c.init == init)
                .map(Ctr::status)
                .collect()
        };
        let mut s = json!({
            "phase": phase,
            "conditions": conditions,
            "hostIP": addr.host_ip,
            "hostIPs": [{"ip": addr.host_ip}],
            "startTime": self.start_time,
            "containerStatuses": statuses(false),
            "initContainerStatuses": statuses(true),
            "qosClass": self.pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        });
        if !addr.pod_ip.is_empty() {
            s["podIP"] = json!(addr.pod_ip);
            s["podIPs"] = json!([{"ip": addr.pod_ip}]);
        }
        s
    }

    /// Stops every process (SIGTERM, SIGKILL after the grace period), releases the network and
    /// volumes and, for a pod being deleted, removes the Pod object.
    async fn shutdown(&mut self, delete: bool) {
        let grace = self.grace();
        for c in &self.ctrs {
            if let State::Running(r) = &c.state {
                self.events
                    .normal("Killing", format!("Stopping container {}", c.spec.name));
                signal(r.pid, Signal::SIGTERM);
            }
        }
        let deadline = Instant::now() + grace;
        for c in &mut self.ctrs {
            if let State::Running(r) = &mut c.state {
                r.probes.iter().for_each(JoinHandle::abort);
                let left = deadline.saturating_duration_since(Instant::now());
                if tokio::time::timeout(left, r.child.wait()).await.is_err() {
                    signal(r.pid, Signal::SIGKILL);
                    let _ = r.child.wait().await;
                }
            }
        }
        if let Some(f) = self.forwarder.take() {
            f.abort();
        }
        self.sh.net.remove_pod(&self.uid, self.net.as_ref()).await;
        let _ = std::fs::remove_dir_all(&self.dir);
        if delete {
            self.delete().await;
        }
    }

    async fn delete(&self) {
        let api: Api<Pod> = Api::namespaced(self.sh.client.clone(), &self.namespace());
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions {
                uid: Some(self.uid.clone()),
                resource_version: None,
            }),
            ..Default::default()
        };
        match api.delete(&self.name(), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => tracing::warn!(pod = %self.name(), error = %e, "deleting the pod"),
        }
    }
}

/// Signals the container's process group.
fn signal(pid: u32, sig: Signal) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    if nix::sys::signal::killpg(Pid::from_raw(pid), sig).is_err() {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), sig);
    }
}
