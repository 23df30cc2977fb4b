//! Fencing: only the leader writes. Every request the controllers send goes through
//! [`FenceLayer`]; a write (any method but GET, HEAD and OPTIONS) is refused before it leaves the
//! process unless the [`Fence`] says this replica leads, and a write in flight when leadership
//! ends is dropped. A deposed leader (lease lost, renew deadline passed) can therefore never
//! apply, prune or write a status after the standby may have taken over, whatever its
//! in-flight reconciles were doing.
//!
//! Leadership is a deadline, not a flag: the elector grants it until the end of the renew
//! deadline counted from its last successful renewal, so a replica whose renewals stop
//! answering stops writing at that deadline even before its elector notices. Once revoked, a
//! fence stays revoked for the life of the process: a replica that lost the lease must start
//! afresh (and campaign again) before it writes anything.

use std::{
    future::Future,
    pin::Pin,
    sync::Arc,
    task::{Context, Poll},
    time::Instant,
};

use http::{Method, Request};
use tokio::sync::watch;

/// Why a request was not sent.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
#[error("not the leader: write to {path} refused (leadership ended or not yet held)")]
pub struct NotLeader {
    /// The path of the refused request.
    pub path: String,
}

/// Whether this replica may write, and until when.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Term {
    /// No leader election: this process is the only writer.
    Unfenced,
    /// Leading until the instant (the renew deadline after the last renewal).
    Until(Instant),
    /// Not leading yet.
    Waiting,
    /// Leadership ended; never leading again in this process.
    Revoked,
}

/// The leadership state every write checks. Cheap to clone; clones share the state.
#[derive(Debug, Clone)]
pub struct Fence {
    term: Arc<watch::Sender<Term>>,
}

impl Fence {
    /// A fence that always lets writes through: leader election is off.
    pub fn unfenced() -> Fence {
        Fence {
            term: Arc::new(watch::Sender::new(Term::Unfenced)),
        }
    }

    /// A fence that refuses writes until [`Fence::grant_until`].
    pub fn waiting() -> Fence {
        Fence {
            term: Arc::new(watch::Sender::new(Term::Waiting)),
        }
    }

    /// Leadership held (or renewed) until `deadline`. Ignored once revoked.
    pub fn grant_until(&self, deadline: Instant) {
        self.term.send_if_modified(|t| match t {
            Term::Revoked | Term::Unfenced => false,
            _ => {
                *t = Term::Until(deadline);
                true
            }
        });
    }

    /// Leadership ended: writes are refused from now on, in-flight ones dropped.
    pub fn revoke(&self) {
        self.term.send_replace(Term::Revoked);
    }

    /// Whether a write may be sent now.
    pub fn is_leading(&self) -> bool {
        match *self.term.borrow() {
            Term::Unfenced => true,
            Term::Until(t) => Instant::now() < t,
            Term::Waiting | Term::Revoked => false,
        }
    }

    /// Whether leadership was revoked (as opposed to not held yet).
    pub fn is_revoked(&self) -> bool {
        *self.term.borrow() == Term::Revoked
    }

    /// Resolves when leadership ends (revoked, or its deadline passed without a renewal).
    pub async fn ended(&self) {
        let mut rx = self.term.subscribe();
        loop {
            let term = *rx.borrow_and_update();
            match term {
                Term::Unfenced => std::future::pending::<()>().await,
                Term::Waiting | Term::Revoked => return,
                Term::Until(t) => {
                    tokio::select! {
                        () = tokio::time::sleep_until(t.into()) => {
                            if *rx.borrow() == Term::Until(t) {
                                return;
                            }
                        }
                        changed = rx.changed() => {
                            if changed.is_err() {
                                return;
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Whether a request changes anything on the apiserver.
pub fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// The tower layer that fences writes (see the module docs).
#[derive(Debug, Clone)]
pub struct FenceLayer {
    fence: Fence,
}

impl FenceLayer {
    /// A layer checking `fence` before every write.
    pub fn new(fence: Fence) -> FenceLayer {
        FenceLayer { fence }
    }
}

impl<S> tower::Layer<S> for FenceLayer {
    type Service = Fenced<S>;

    fn layer(&self, inner: S) -> Fenced<S> {
        Fenced {
            inner,
            fence: self.fence.clone(),
        }
    }
}

/// A service whose writes pass only while the fence says this replica leads.
#[derive(Debug, Clone)]
pub struct Fenced<S> {
    inner: S,
    fence: Fence,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl<S, B> tower::Service<Request<B>> for Fenced<S>
where
    S: tower::Service<Request<B>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
    S::Response: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        if !is_write(req.method()) {
            let call = self.inner.call(req);
            return Box::pin(async move { call.await.map_err(Into::into) });
        }
        let refused = || -> BoxError {
            Box::new(NotLeader {
                path: req.uri().path().to_string(),
            })
        };
        if !self.fence.is_leading() {
            let e = refused();
            return Box::pin(std::future::ready(Err(e)));
        }
        let e = refused();
        let fence = self.fence.clone();
        let call = self.inner.call(req);
        Box::pin(async move {
            // Biased, the lease's end first: a write whose lease ended before it was first
            // polled is never sent (an unbiased select! picks at random, so it sometimes was,
            // and a seeded fault run did not replay exactly).
            tokio::select! {
                biased;
                // Dropping the call closes its connection: the apiserver may still have
                // received the write, but nothing more of it is sent or waited for.
                () = fence.ended() => Err(e),
                r = call => r.map_err(Into::into),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::{
        convert::Infallible,
        sync::atomic::{AtomicUsize, Ordering},
        time::Duration,
    };

    use tower::{Layer, Service, ServiceExt};

    use super::*;

    type Svc = tower::util::BoxCloneService<Request<()>, (), Infallible>;

    /// A server that answers after `delay` and counts the requests it answered.
    fn counting(sent: Arc<AtomicUsize>, delay: Duration) -> Svc {
        Svc::new(tower::service_fn(move |_req: Request<()>| {
            let sent = sent.clone();
            async move {
                tokio::time::sleep(delay).await;
                sent.fetch_add(1, Ordering::SeqCst);
                Ok::<_, Infallible>(())
            }
        }))
    }

    /// Whether a request of `method` went through.
    async fn send(svc: &mut Fenced<Svc>, method: Method) -> bool {
        let req = Request::builder()
            .method(method)
            .uri("/api/v1/namespaces/ns/configmaps/c")
            .body(())
            .unwrap_or_default();
        match svc.ready().await {
            Ok(s) => s.call(req).await.is_ok(),
            Err(_) => false,
        }
    }

    #[tokio::test]
    async fn writes_pass_only_while_leading_and_reads_always() {
        let sent = Arc::new(AtomicUsize::new(0));
        let fence = Fence::waiting();
        let mut svc = FenceLayer::new(fence.clone()).layer(counting(sent.clone(), Duration::ZERO));
        assert!(
            !send(&mut svc, Method::PATCH).await,
            "a write before leading"
        );
        assert!(send(&mut svc, Method::GET).await, "reads are never fenced");
        fence.grant_until(Instant::now() + Duration::from_secs(60));
        assert!(send(&mut svc, Method::DELETE).await);
        fence.revoke();
        fence.grant_until(Instant::now() + Duration::from_secs(60));
        assert!(!send(&mut svc, Method::POST).await, "revoked for good");
        assert!(fence.is_revoked());
        assert_eq!(
            sent.load(Ordering::SeqCst),
            2,
            "one read and one write reached the server"
        );
    }

    #[tokio::test]
    async fn a_passed_deadline_refuses_and_an_in_flight_write_is_dropped() {
        let sent = Arc::new(AtomicUsize::new(0));
        let fence = Fence::waiting();
        fence.grant_until(Instant::now() + Duration::from_millis(50));
        let slow = counting(sent.clone(), Duration::from_millis(500));
        let mut svc = FenceLayer::new(fence.clone()).layer(slow);
        let started = Instant::now();
        assert!(!send(&mut svc, Method::PUT).await);
        assert!(
            started.elapsed() < Duration::from_millis(400),
            "dropped at the deadline"
        );
        assert!(!fence.is_leading());
        assert!(!send(&mut svc, Method::PATCH).await);
        assert_eq!(sent.load(Ordering::SeqCst), 0);
        assert!(Fence::unfenced().is_leading());
    }
}
