//! Leader election on a `coordination.k8s.io/v1` Lease, so that of several operator replicas
//! only one reconciles.
//!
//! The rules are client-go's: a candidate takes the Lease when it is free or when its record
//! (holder and renew time) has not changed for a whole lease duration *as observed by the
//! candidate's own clock* (so clock skew between replicas does not matter); the holder renews
//! every retry period and gives up leading when it could not renew for the renew deadline.
//! Every write carries the resourceVersion it read, so two candidates can never both win.
//! On shutdown the holder releases the Lease (empty holder), letting a standby take over at
//! once instead of after a lease duration.
//!
//! Every call to the apiserver is bounded by the renew deadline: an apiserver that stops
//! answering must not keep a replica leading past its lease, since a hung renewal would
//! otherwise only be noticed once it returned.
//!
//! The elector owns the [`Fence`] every write of the controllers goes through: each successful
//! renewal grants it until the renew deadline counted from that attempt's start (inside the
//! lease others see), and losing or releasing the Lease revokes it before anything else
//! happens. [`lead_while`] ties the controllers' life to the lease: a terminated leader keeps
//! renewing while its controllers drain and releases the Lease only after they stopped; a
//! deposed one stops them and returns without waiting for in-flight work beyond a short bound.

use std::time::{Duration, Instant};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ObjectMeta, PostParams},
};
use tracing::{debug, info, warn};

use crate::fence::Fence;

/// client-go's jitter factor: the renew deadline must leave room for a jittered retry.
pub const JITTER_FACTOR: f64 = 1.2;

/// How long a deposed leader waits for its controllers to stop before it returns anyway: their
/// writes are already refused, so this only lets them end cleanly.
pub const DRAIN_AFTER_LOSS: Duration = Duration::from_secs(1);

/// How long a terminated operator lets its in-flight reconciles finish before it exits anyway.
/// Below the 30 s a pod is given between SIGTERM and SIGKILL, so a reconcile stuck on a call
/// that never answers cannot keep the process (and, with leader election, the lease) past it:
/// what it left undone is redone by the next leader from the declared state.
pub const DRAIN_ON_TERMINATION: Duration = Duration::from_secs(20);

/// How long the controllers may drain, when terminated and when deposed.
#[derive(Clone, Copy, Debug)]
pub struct Drains {
    /// After a termination signal (the lease is renewed meanwhile).
    pub on_termination: Duration,
    /// After the loss of the lease (writes are already refused).
    pub after_loss: Duration,
}

impl Default for Drains {
    fn default() -> Self {
        Self {
            on_termination: DRAIN_ON_TERMINATION,
            after_loss: DRAIN_AFTER_LOSS,
        }
    }
}

/// Waits for `work` (the controllers, asked to stop) for at most `limit`; `false`, with a
/// warning, when it had to be abandoned.
pub async fn drain(
    work: impl std::future::Future<Output = ()>,
    limit: Duration,
    why: &str,
) -> bool {
    if tokio::time::timeout(limit, work).await.is_ok() {
        return true;
    }
    warn!(after = ?limit, "{why}: in-flight reconciles abandoned");
    false
}

/// Why one election attempt failed.
#[derive(Debug, thiserror::Error)]
pub enum ElectionError {
    /// The apiserver refused or the connection broke.
    #[error(transparent)]
    Api(#[from] kube::Error),
    /// The apiserver did not answer in time.
    #[error("{call} of the lease did not answer within {after:?}")]
    Timeout {
        /// Which call hung.
        call: &'static str,
        /// How long it was given.
        after: Duration,
    },
}

/// Runs `call`, giving up on it at `deadline`.
async fn bounded<T>(
    call: &'static str,
    deadline: Instant,
    fut: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T, ElectionError> {
    let after = deadline.saturating_duration_since(Instant::now());
    match tokio::time::timeout(after, fut).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(ElectionError::Timeout { call, after }),
    }
}

/// Settings of the election.
#[derive(Debug, Clone)]
pub struct LeaseConfig {
    /// Namespace of the Lease.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's identity (the Pod name in a cluster).
    pub identity: String,
    /// How long a Lease not renewed stays valid.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it stops leading.
    pub renew_deadline: Duration,
    /// Pause between attempts.
    pub retry_period: Duration,
}

/// Leader election timings that cannot work (client-go refuses the same ones).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InvalidTimings {
    /// A timing is zero.
    #[error("{flag} must be greater than zero")]
    Zero {
        /// The flag setting it.
        flag: &'static str,
    },
    /// The lease would expire before the leader gives up renewing it.
    #[error(
        "--leader-election-lease-seconds ({lease:?}) must be greater than \
         --leader-election-renew-deadline-seconds ({renew:?}): a leader must stop writing \
         before a standby may take the lease"
    )]
    LeaseNotAfterRenewDeadline {
        /// The lease duration.
        lease: Duration,
        /// The renew deadline.
        renew: Duration,
    },
    /// Not even one jittered retry fits in the renew deadline.
    #[error(
        "--leader-election-renew-deadline-seconds ({renew:?}) must be greater than \
         {JITTER_FACTOR} x --leader-election-retry-seconds ({retry:?})"
    )]
    RenewDeadlineNotAfterRetry {
        /// The renew deadline.
        renew: Duration,
        /// The retry period.
        retry: Duration,
    },
}

impl LeaseConfig {
    /// Checks the timings as client-go does: lease duration > renew deadline >
    /// [`JITTER_FACTOR`] x retry period > 0.
    pub fn validate(&self) -> Result<(), InvalidTimings> {
        let named = [
            (self.lease_duration, "--leader-election-lease-seconds"),
            (
                self.renew_deadline,
                "--leader-election-renew-deadline-seconds",
            ),
            (self.retry_period, "--leader-election-retry-seconds"),
        ];
        if let Some((_, flag)) = named.iter().find(|(d, _)| d.is_zero()) {
            return Err(InvalidTimings::Zero { flag });
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(InvalidTimings::LeaseNotAfterRenewDeadline {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(InvalidTimings::RenewDeadlineNotAfterRetry {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }
}

/// Why [`Elector::hold`] returned.
#[derive(Debug, PartialEq, Eq)]
pub enum Held {
    /// The Lease could not be renewed within the renew deadline (or another replica took it).
    Lost,
    /// Shutdown was asked for.
    Stopped,
}

/// One replica's side of the election.
pub struct Elector {
    api: Api<Lease>,
    cfg: LeaseConfig,
    observed: Option<(Option<String>, Option<MicroTime>)>,
    observed_at: Instant,
    /// Start of the last attempt that left this replica holding the Lease: the renew time it
    /// wrote is no earlier, so counting the renew deadline from here stays inside the lease.
    renewed_at: Option<Instant>,
    /// The gate of the controllers' writes: granted by each success, revoked on loss.
    fence: Fence,
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl Elector {
    /// An elector for `cfg` in the cluster of `client`.
    pub fn new(client: Client, cfg: LeaseConfig) -> Elector {
        Elector {
            api: Api::namespaced(client, &cfg.namespace),
            cfg,
            observed: None,
            observed_at: Instant::now(),
            renewed_at: None,
            fence: Fence::waiting(),
        }
    }

    /// The fence this elector grants while it leads (shared: clones see the same state).
    pub fn fence(&self) -> Fence {
        self.fence.clone()
    }

    /// Leadership ended: writes are refused from now on.
    fn lose(&mut self) -> Held {
        self.fence.revoke();
        Held::Lost
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.cfg.lease_duration.as_secs().max(1)).unwrap_or(i32::MAX)
    }

    fn mine(&self, transitions: i32, acquired: Option<MicroTime>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.cfg.identity.clone()),
            lease_duration_seconds: Some(self.lease_seconds()),
            acquire_time: Some(acquired.unwrap_or_else(now)),
            renew_time: Some(now()),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }

    /// One attempt to take or renew the Lease, given at most the renew deadline; true when
    /// this replica holds it afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, ElectionError> {
        let deadline = Instant::now() + self.cfg.renew_deadline;
        self.attempt(deadline).await
    }

    /// One attempt to take or renew the Lease, each call abandoned at `deadline`.
    async fn attempt(&mut self, deadline: Instant) -> Result<bool, ElectionError> {
        let started = Instant::now();
        let held = self.attempt_calls(deadline).await?;
        if held {
            self.renewed_at = Some(started);
            self.fence.grant_until(started + self.cfg.renew_deadline);
        }
        Ok(held)
    }

    async fn attempt_calls(&mut self, deadline: Instant) -> Result<bool, ElectionError> {
        let found = bounded("get", deadline, self.api.get_opt(&self.cfg.name)).await?;
        let Some(mut lease) = found else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.mine(0, None)),
            };
            let pp = PostParams::default();
            let created = self.api.create(&pp, &lease);
            return match bounded("create", deadline, created).await {
                Ok(_) => Ok(true),
                Err(ElectionError::Api(kube::Error::Api(s))) if s.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let record = (holder.clone(), spec.renew_time.clone());
        if self.observed.as_ref() != Some(&record) {
            self.observed = Some(record);
            self.observed_at = Instant::now();
        }
        let transitions = spec.lease_transitions.unwrap_or(0);
        let new_spec = match holder.as_deref() {
            Some(h) if h == self.cfg.identity => self.mine(transitions, spec.acquire_time),
            Some(h) => {
                let duration = spec
                    .lease_duration_seconds
                    .and_then(|s| u64::try_from(s).ok())
                    .map(Duration::from_secs)
                    .unwrap_or(self.cfg.lease_duration);
                if self.observed_at.elapsed() < duration {
                    debug!(holder = h, "the lease is held by another replica");
                    return Ok(false);
                }
                info!(previous = h, "the lease expired; taking it over");
                self.mine(transitions.saturating_add(1), None)
            }
            None => self.mine(transitions.saturating_add(1), None),
        };
        lease.spec = Some(new_spec);
        let pp = PostParams::default();
        let replaced = self.api.replace(&self.cfg.name, &pp, &lease);
        match bounded("replace", deadline, replaced).await {
            Ok(_) => Ok(true),
            // Someone else wrote it first: they won this round.
            Err(ElectionError::Api(kube::Error::Api(s))) if s.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until this replica holds the Lease.
    pub async fn acquire(&mut self) {
        info!(lease = %self.cfg.name, identity = %self.cfg.identity, "waiting to lead");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => {
                    info!(lease = %self.cfg.name, identity = %self.cfg.identity, "leading");
                    return;
                }
                Ok(false) => {}
                Err(e) => warn!(error = %e, "leader election: reading the lease failed"),
            }
            tokio::time::sleep(self.cfg.retry_period).await;
        }
    }

    /// Renews the Lease every retry period until it is lost or `stop` completes. Returns
    /// [`Held::Lost`] no later than the renew deadline after the last successful renewal, even
    /// when the apiserver stops answering, with the fence revoked.
    pub async fn hold(&mut self, stop: impl std::future::Future<Output = ()>) -> Held {
        tokio::pin!(stop);
        loop {
            let renewed_at = *self.renewed_at.get_or_insert_with(Instant::now);
            let deadline = renewed_at + self.cfg.renew_deadline;
            // A retry period longer than what is left must not sleep past the deadline.
            let pause = self
                .cfg
                .retry_period
                .min(deadline.saturating_duration_since(Instant::now()));
            tokio::select! {
                () = &mut stop => return Held::Stopped,
                () = tokio::time::sleep(pause) => {}
            }
            if Instant::now() >= deadline {
                warn!(lease = %self.cfg.name, "the lease was not renewed within the renew deadline");
                return self.lose();
            }
            match self.attempt(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    warn!(lease = %self.cfg.name, "another replica holds the lease");
                    return self.lose();
                }
                Err(e) => warn!(error = %e, "leader election: renewing the lease failed"),
            }
        }
    }

    /// Gives the Lease up (if still held), so a standby takes over without waiting. Writes
    /// are refused from the start: nothing may be written once a standby can lead.
    pub async fn release(&mut self) {
        self.fence.revoke();
        // Shutdown must not hang on an apiserver that stopped answering either.
        let deadline = Instant::now() + self.cfg.renew_deadline;
        let Ok(Some(mut lease)) = bounded("get", deadline, self.api.get_opt(&self.cfg.name)).await
        else {
            return;
        };
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.cfg.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        let pp = PostParams::default();
        let replaced = self.api.replace(&self.cfg.name, &pp, &lease);
        match bounded("replace", deadline, replaced).await {
            Ok(_) => info!(lease = %self.cfg.name, "lease released"),
            Err(e) => warn!(error = %e, "releasing the lease failed"),
        }
    }
}

/// Runs `work` (the controllers) while this replica leads, renewing the Lease meanwhile.
///
/// On `terminate`, `stop` asks the work to drain, and the Lease keeps being renewed (the fence
/// stays granted) until the work has finished or `drains.on_termination` has passed; then the
/// Lease is released. When the Lease is lost, the fence is already revoked; `stop` is called
/// and the work gets at most `drains.after_loss` more before it is dropped, so a deposed leader
/// exits promptly instead of finishing a long fetch. Returns how leadership ended.
pub async fn lead_while(
    elector: &mut Elector,
    work: impl std::future::Future<Output = ()>,
    terminate: impl std::future::Future<Output = ()>,
    stop: impl Fn(),
    drains: Drains,
) -> Held {
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
    let stop = &stop;
    let working = async move {
        tokio::pin!(work);
        tokio::select! {
            () = &mut work => {}
            () = terminate => {
                info!("terminating: stopping the controllers; the lease is renewed until they have");
                stop();
                drain(&mut work, drains.on_termination, "terminating").await;
            }
        }
        // A dropped receiver means leadership already ended; nothing waits for this.
        let _ = done_tx.send(());
    };
    tokio::pin!(working);
    let (held, worked) = {
        let hold = elector.hold(async {
            let _ = done_rx.await;
        });
        tokio::pin!(hold);
        // Both are polled together: the controllers keep running while a renewal is under way.
        tokio::select! {
            held = &mut hold => (held, false),
            () = &mut working => (hold.await, true),
        }
    };
    match held {
        Held::Stopped => elector.release().await,
        Held::Lost => {
            warn!("leadership lost: writes are refused; stopping the controllers");
            stop();
            if !worked {
                drain(
                    working,
                    drains.after_loss,
                    "leadership lost (writes refused)",
                )
                .await;
            }
        }
    }
    held
}

#[cfg(test)]
mod tests {
    use std::sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    };

    use http_body_util::{BodyExt, Full};
    use hyper::{Request, Response, body::Bytes, service::service_fn};
    use hyper_util::rt::TokioIo;

    use super::*;

    /// A one-Lease apiserver that answers until `blackhole` is set, then accepts connections
    /// and reads requests but never answers them — a hung apiserver, not a refusing one. It
    /// also serves one ConfigMap, standing for everything the controllers write.
    #[derive(Default)]
    struct FakeApiserver {
        lease: Mutex<Option<serde_json::Value>>,
        version: Mutex<u64>,
        blackhole: AtomicBool,
        /// When the last write of the Lease was received.
        last_write: Mutex<Option<Instant>>,
        /// Lease requests from this User-Agent hang: that replica is cut off from the Lease.
        partitioned: Mutex<Option<String>>,
        /// When each write of the ConfigMap was received.
        writes: Mutex<Vec<Instant>>,
    }

    fn json(status: u16, body: &serde_json::Value) -> Response<Full<Bytes>> {
        let mut r = Response::new(Full::new(Bytes::from(body.to_string())));
        *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or_default();
        r.headers_mut().insert(
            hyper::header::CONTENT_TYPE,
            hyper::header::HeaderValue::from_static("application/json"),
        );
        r
    }

    impl FakeApiserver {
        async fn handle(&self, req: Request<hyper::body::Incoming>) -> Response<Full<Bytes>> {
            if self.blackhole.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            let method = req.method().clone();
            let agent = req
                .headers()
                .get(hyper::header::USER_AGENT)
                .and_then(|a| a.to_str().ok())
                .map(str::to_string);
            let config_map = req.uri().path().contains("/configmaps/");
            let body = req.into_body().collect().await.unwrap().to_bytes();
            if self.blackhole.load(Ordering::SeqCst) {
                std::future::pending::<()>().await;
            }
            if config_map {
                if method != hyper::Method::GET {
                    self.writes.lock().unwrap().push(Instant::now());
                }
                let cm = serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                    "metadata": {"name": "c", "namespace": "default"}});
                return json(200, &cm);
            }
            let cut_off = self.partitioned.lock().unwrap().clone();
            if cut_off.is_some() && cut_off == agent {
                std::future::pending::<()>().await;
            }
            if method == hyper::Method::GET {
                return match self.lease.lock().unwrap().clone() {
                    Some(lease) => json(200, &lease),
                    None => json(
                        404,
                        &serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "NotFound", "message": "not found",
                            "code": 404}),
                    ),
                };
            }
            *self.last_write.lock().unwrap() = Some(Instant::now());
            let mut lease: serde_json::Value = serde_json::from_slice(&body).unwrap();
            let mut version = self.version.lock().unwrap();
            *version += 1;
            lease["metadata"]["resourceVersion"] = serde_json::json!(version.to_string());
            *self.lease.lock().unwrap() = Some(lease.clone());
            json(
                if method == hyper::Method::POST {
                    201
                } else {
                    200
                },
                &lease,
            )
        }

        fn holder(&self) -> Option<String> {
            let lease = self.lease.lock().unwrap().clone()?;
            lease["spec"]["holderIdentity"].as_str().map(str::to_string)
        }

        fn writes_since(&self, t: Instant) -> usize {
            self.writes
                .lock()
                .unwrap()
                .iter()
                .filter(|w| **w >= t)
                .count()
        }
    }

    async fn serve(fake: Arc<FakeApiserver>) -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let fake = fake.clone();
                tokio::spawn(async move {
                    let svc = service_fn(move |req| {
                        let fake = fake.clone();
                        async move { Ok::<_, std::convert::Infallible>(fake.handle(req).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), svc)
                        .await;
                });
            }
        });
        addr
    }

    /// The client configuration of one component (`agent`) of a replica.
    fn config(addr: std::net::SocketAddr, agent: &'static str) -> kube::Config {
        let mut config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        config.headers.push((
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(agent),
        ));
        config
    }

    fn client(addr: std::net::SocketAddr, agent: &'static str) -> Client {
        Client::try_from(config(addr, agent)).unwrap()
    }

    /// A client whose writes go through `fence`, as the controllers' does.
    fn fenced(addr: std::net::SocketAddr, agent: &'static str, fence: Fence) -> Client {
        kube::client::ClientBuilder::try_from(config(addr, agent))
            .unwrap()
            .with_layer(&crate::fence::FenceLayer::new(fence))
            .build()
    }

    async fn start(fake: Arc<FakeApiserver>) -> Client {
        client(serve(fake).await, "elector")
    }

    fn lease_config(identity: &str) -> LeaseConfig {
        LeaseConfig {
            namespace: "default".into(),
            name: "lease".into(),
            identity: identity.into(),
            lease_duration: Duration::from_secs(3),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
        }
    }

    /// One write of a controller: a patch of the ConfigMap.
    async fn write(client: &Client) -> Result<(), kube::Error> {
        let api =
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "default");
        let patch = kube::api::Patch::Merge(serde_json::json!({"data": {"k": "v"}}));
        api.patch("c", &kube::api::PatchParams::default(), &patch)
            .await
            .map(drop)
    }

    /// A reconcile in flight: it reads, then is held up (a long fetch) until `release`, then
    /// writes.
    fn reconcile_in_flight(
        client: Client,
        release: Arc<tokio::sync::Notify>,
    ) -> tokio::task::JoinHandle<Result<(), kube::Error>> {
        tokio::spawn(async move {
            Api::<k8s_openapi::api::core::v1::ConfigMap>::namespaced(client.clone(), "default")
                .get("c")
                .await?;
            release.notified().await;
            write(&client).await
        })
    }

    /// `a` leads with controllers that ignore being stopped (stuck in a fetch): the task ends
    /// with how leadership ended and when; `lost_at` gets the time the controllers were stopped.
    fn lead_with_stuck_controllers(
        mut a: Elector,
        lost_at: Arc<Mutex<Option<Instant>>>,
    ) -> tokio::task::JoinHandle<(Held, Instant)> {
        tokio::spawn(async move {
            let stop = || *lost_at.lock().unwrap() = Some(Instant::now());
            let never = std::future::pending::<()>();
            let held = lead_while(
                &mut a,
                never,
                std::future::pending(),
                stop,
                Drains::default(),
            );
            (held.await, Instant::now())
        })
    }

    #[tokio::test]
    async fn no_write_reaches_the_apiserver_once_the_lease_is_lost() {
        let fake = Arc::new(FakeApiserver::default());
        let addr = serve(fake.clone()).await;
        let mut a = Elector::new(client(addr, "a-elector"), lease_config("a"));
        let fence = a.fence();
        let controllers = fenced(addr, "a-controllers", fence.clone());
        assert!(write(&controllers).await.is_err(), "a write before leading");
        tokio::time::timeout(Duration::from_secs(10), a.acquire())
            .await
            .unwrap();
        // Control: while A leads, its controllers' writes go through.
        write(&controllers).await.unwrap();
        assert_eq!(fake.writes.lock().unwrap().len(), 1);

        let release = Arc::new(tokio::sync::Notify::new());
        let reconcile = reconcile_in_flight(controllers.clone(), release.clone());
        // A's lease requests hang.
        let lost_at = Arc::new(Mutex::new(None));
        let leading = lead_with_stuck_controllers(a, lost_at.clone());
        *fake.partitioned.lock().unwrap() = Some("a-elector".into());
        let mut b = Elector::new(client(addr, "b-elector"), lease_config("b"));
        tokio::time::timeout(Duration::from_secs(20), b.acquire())
            .await
            .expect("B never took the lease");
        let b_leads_at = Instant::now();
        assert_eq!(fake.holder().as_deref(), Some("b"));
        let (held, returned_at) = tokio::time::timeout(Duration::from_secs(10), leading)
            .await
            .expect("A kept leading")
            .unwrap();
        assert_eq!(held, Held::Lost);
        let lost_at = lost_at
            .lock()
            .unwrap()
            .expect("A's controllers were not stopped");
        eprintln!(
            "A lost the lease {:?} before B led; lead_while returned {:?} after the loss",
            b_leads_at.duration_since(lost_at),
            returned_at.duration_since(lost_at)
        );
        assert!(lost_at < b_leads_at, "A stopped leading only after B led");
        assert!(
            returned_at.duration_since(lost_at) <= DRAIN_AFTER_LOSS + Duration::from_millis(500),
            "a deposed leader waited {:?} for its in-flight work",
            returned_at.duration_since(lost_at)
        );
        assert!(!fence.is_leading());

        // B leads; A's reconcile goes on.
        release.notify_one();
        let refused = reconcile.await.unwrap();
        assert!(refused.is_err(), "the deposed leader's write was accepted");
        assert!(!format!("{refused:?}").is_empty());
        assert!(write(&controllers).await.is_err());
        assert_eq!(
            fake.writes_since(lost_at),
            0,
            "writes reached the apiserver after A lost the lease"
        );
        // Control: only the fence kept them out, not the partition of A's lease requests.
        write(&client(addr, "a-controllers")).await.unwrap();
        assert_eq!(fake.writes_since(lost_at), 1);
    }

    #[tokio::test]
    async fn a_terminated_leader_renews_until_its_controllers_stopped_then_releases() {
        let fake = Arc::new(FakeApiserver::default());
        let addr = serve(fake.clone()).await;
        let cfg = lease_config("a");
        let mut a = Elector::new(client(addr, "a-elector"), cfg.clone());
        let fence = a.fence();
        tokio::time::timeout(Duration::from_secs(10), a.acquire())
            .await
            .unwrap();
        let (terminate, terminated) = tokio::sync::oneshot::channel::<()>();
        let asked_to_stop = Arc::new(AtomicBool::new(false));
        let drained = Arc::new(tokio::sync::Notify::new());
        let leading = tokio::spawn({
            let (asked, drained) = (asked_to_stop.clone(), drained.clone());
            async move {
                let stop = || asked.store(true, Ordering::SeqCst);
                // The controllers drain until the test lets them finish.
                let work = async move { drained.notified().await };
                let terminate = async {
                    let _ = terminated.await;
                };
                lead_while(&mut a, work, terminate, stop, Drains::default()).await
            }
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        terminate.send(()).unwrap();
        let terminated_at = Instant::now();
        // Draining for longer than the renew deadline: leadership holds only if renewed.
        tokio::time::sleep(cfg.renew_deadline + Duration::from_secs(1)).await;
        assert!(
            asked_to_stop.load(Ordering::SeqCst),
            "the controllers were not stopped"
        );
        let renewed = fake.last_write.lock().unwrap().unwrap();
        assert!(
            renewed > terminated_at + cfg.renew_deadline,
            "no renewal while the controllers drained"
        );
        assert!(
            fence.is_leading(),
            "the fence lapsed while the controllers drained"
        );
        assert_eq!(fake.holder().as_deref(), Some("a"));

        drained.notify_one();
        let held = tokio::time::timeout(Duration::from_secs(10), leading)
            .await
            .expect("the elector did not end after the controllers stopped")
            .unwrap();
        assert_eq!(held, Held::Stopped);
        assert_eq!(fake.holder(), None, "the lease was not released");
        assert!(!fence.is_leading(), "writes allowed after the release");
    }

    #[tokio::test]
    async fn a_terminated_leader_whose_controllers_never_stop_releases_after_the_drain() {
        let fake = Arc::new(FakeApiserver::default());
        let addr = serve(fake.clone()).await;
        let mut a = Elector::new(client(addr, "a-elector"), lease_config("a"));
        let fence = a.fence();
        tokio::time::timeout(Duration::from_secs(10), a.acquire())
            .await
            .unwrap();
        let drains = Drains {
            on_termination: Duration::from_secs(2),
            ..Drains::default()
        };
        let started = Instant::now();
        // A reconcile stuck on a call that never answers: the controllers never finish.
        let stuck = std::future::pending::<()>();
        let held = tokio::time::timeout(
            Duration::from_secs(15),
            lead_while(&mut a, stuck, async {}, || {}, drains),
        )
        .await
        .expect("a terminated leader waited for its stuck controllers without end");
        let took = started.elapsed();
        assert_eq!(held, Held::Stopped);
        assert!(
            took >= drains.on_termination,
            "returned after {took:?}, before the drain"
        );
        assert_eq!(fake.holder(), None, "the lease was not released");
        assert!(!fence.is_leading(), "writes allowed after the release");
    }

    #[test]
    fn timings_are_validated_as_client_go_does() {
        let secs = Duration::from_secs;
        let with = |lease, renew, retry| LeaseConfig {
            lease_duration: secs(lease),
            renew_deadline: secs(renew),
            retry_period: secs(retry),
            ..lease_config("a")
        };
        assert_eq!(with(15, 10, 2).validate(), Ok(()));
        assert_eq!(with(4, 3, 1).validate(), Ok(()));
        let err = with(10, 10, 2).validate().unwrap_err();
        assert!(matches!(
            err,
            InvalidTimings::LeaseNotAfterRenewDeadline { .. }
        ));
        assert!(
            err.to_string().contains("--leader-election-lease-seconds"),
            "{err}"
        );
        // client-go's jitter: 5 s is not more than 1.2 x 5 s, nor 6 s more than 1.2 x 5 s.
        for renew in [5, 6] {
            let err = with(15, renew, 5).validate().unwrap_err();
            assert!(
                matches!(err, InvalidTimings::RenewDeadlineNotAfterRetry { .. }),
                "{err}"
            );
            assert!(err.to_string().contains("--leader-election-retry-seconds"));
        }
        assert_eq!(
            with(15, 10, 0).validate(),
            Err(InvalidTimings::Zero {
                flag: "--leader-election-retry-seconds"
            })
        );
        assert!(with(0, 0, 0).validate().is_err());
    }

    #[tokio::test]
    async fn a_hung_apiserver_ends_leadership_within_the_renew_deadline() {
        let fake = Arc::new(FakeApiserver::default());
        let client = start(fake.clone()).await;
        let cfg = LeaseConfig {
            namespace: "default".into(),
            name: "lease".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(4),
            renew_deadline: Duration::from_secs(2),
            retry_period: Duration::from_millis(200),
        };
        let mut elector = Elector::new(client, cfg.clone());
        tokio::time::timeout(Duration::from_secs(10), elector.acquire())
            .await
            .unwrap();

        let holding = tokio::spawn(async move {
            let held = elector.hold(std::future::pending()).await;
            (held, Instant::now(), elector)
        });
        // A few renewals answered, then the apiserver hangs.
        tokio::time::sleep(Duration::from_millis(1000)).await;
        fake.blackhole.store(true, Ordering::SeqCst);
        let (held, lost_at, mut elector) = tokio::time::timeout(Duration::from_secs(20), holding)
            .await
            .expect("the elector kept leading on a hung apiserver")
            .unwrap();
        assert_eq!(held, Held::Lost);
        let last_write = fake.last_write.lock().unwrap().unwrap();
        let leading_after_renewal = lost_at.duration_since(last_write);
        let margin = Duration::from_millis(500);
        assert!(
            leading_after_renewal <= cfg.renew_deadline + margin,
            "leadership given up {leading_after_renewal:?} after the last renewal"
        );
        assert!(
            leading_after_renewal < cfg.lease_duration,
            "still leading {leading_after_renewal:?} after the last renewal, past the lease"
        );

        // Acquiring and releasing are bounded too.
        let started = Instant::now();
        let attempt = elector.try_acquire_or_renew().await;
        assert!(
            matches!(attempt, Err(ElectionError::Timeout { call: "get", .. })),
            "{attempt:?}"
        );
        assert!(started.elapsed() <= cfg.renew_deadline + margin);
        let started = Instant::now();
        elector.release().await;
        assert!(started.elapsed() <= cfg.renew_deadline + margin);
    }
}
