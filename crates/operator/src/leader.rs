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

    /// One attempt to take or renew the Lease; true when this replica holds it afterwards.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, kube::Error> {
        let Some(mut lease) = self.api.get_opt(&self.cfg.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.cfg.name.clone()),
                    namespace: Some(self.cfg.namespace.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.mine(0, None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
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
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => Ok(true),
            // Someone else wrote it first: they won this round.
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
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

    /// Renews the Lease every retry period until it is lost or `stop` completes.
    pub async fn hold(&mut self, stop: impl std::future::Future<Output = ()>) -> Held {
        tokio::pin!(stop);
        let mut last_renew = Instant::now();
        loop {
            tokio::select! {
                _ = &mut stop => return Held::Stopped,
                _ = tokio::time::sleep(self.cfg.retry_period) => {}
            }
            match self.try_acquire_or_renew().await {
                Ok(true) => last_renew = Instant::now(),
                Ok(false) => {
                    warn!(lease = %self.cfg.name, "another replica holds the lease");
                    return Held::Lost;
                }
                Err(e) => warn!(error = %e, "leader election: renewing the lease failed"),
            }
            if last_renew.elapsed() > self.cfg.renew_deadline {
                return Held::Lost;
            }
        }
    }

    /// Gives the Lease up (if still held), so a standby takes over without waiting.
    pub async fn release(&mut self) {
        let Ok(Some(mut lease)) = self.api.get_opt(&self.cfg.name).await else {
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
        match self
            .api
            .replace(&self.cfg.name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => info!(lease = %self.cfg.name, "lease released"),
            Err(e) => warn!(error = %e, "releasing the lease failed"),
        }
    }
}
