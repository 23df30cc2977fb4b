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
        }
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
    /// when the apiserver stops answering.
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
                _ = &mut stop => return Held::Stopped,
                _ = tokio::time::sleep(pause) => {}
            }
            if Instant::now() >= deadline {
                warn!(lease = %self.cfg.name, "the lease was not renewed within the renew deadline");
                return Held::Lost;
            }
            match self.attempt(deadline).await {
                Ok(true) => {}
                Ok(false) => {
                    warn!(lease = %self.cfg.name, "another replica holds the lease");
                    return Held::Lost;
                }
                Err(e) => warn!(error = %e, "leader election: renewing the lease failed"),
            }
        }
    }

    /// Gives the Lease up (if still held), so a standby takes over without waiting.
    pub async fn release(&mut self) {
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
    /// and reads requests but never answers them — a hung apiserver, not a refusing one.
    #[derive(Default)]
    struct FakeApiserver {
        lease: Mutex<Option<serde_json::Value>>,
        version: Mutex<u64>,
        blackhole: AtomicBool,
        /// When the last write of the Lease was received.
        last_write: Mutex<Option<Instant>>,
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
            let body = req.into_body().collect().await.unwrap().to_bytes();
            if self.blackhole.load(Ordering::SeqCst) {
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
    }

    async fn start(fake: Arc<FakeApiserver>) -> Client {
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
        let url = format!("http://{addr}").parse().unwrap();
        Client::try_from(kube::Config::new(url)).unwrap()
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
