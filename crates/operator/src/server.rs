//! The operator's HTTP endpoints: `/livez`, `/readyz` and `/metrics`.

use std::{
    convert::Infallible,
    net::SocketAddr,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
};

use http_body_util::Full;
use hyper::{Request, Response, StatusCode, body::Bytes, service::service_fn};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, warn};

use crate::metrics::Metrics;

/// What `/readyz` reports on.
#[derive(Debug, Default)]
pub struct Health {
    /// The caches of installed objects are filled.
    pub caches_synced: AtomicBool,
    /// The leader election loop runs (or leader election is off).
    pub election_running: AtomicBool,
}

impl Health {
    /// Ready: caches synced and the election loop running.
    pub fn ready(&self) -> bool {
        self.caches_synced.load(Ordering::SeqCst) && self.election_running.load(Ordering::SeqCst)
    }
}

fn reply(status: StatusCode, content_type: &str, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    if let Ok(v) = hyper::header::HeaderValue::from_str(content_type) {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

fn route(path: &str, health: &Health, metrics: &Metrics) -> Response<Full<Bytes>> {
    match path {
        "/livez" | "/healthz" => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" if health.ready() => reply(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let why = if health.caches_synced.load(Ordering::SeqCst) {
                "leader election not running\n"
            } else {
                "caches not synced\n"
            };
            reply(StatusCode::SERVICE_UNAVAILABLE, "text/plain", why.into())
        }
        "/metrics" => reply(
            StatusCode::OK,
            "text/plain; version=0.0.4; charset=utf-8",
            metrics.render(),
        ),
        _ => reply(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

/// Binds `addr` now (so a taken port fails start-up) and serves the endpoints on it.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> std::io::Result<impl std::future::Future<Output = ()>> {
    let listener = TcpListener::bind(addr).await?;
    Ok(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    warn!(error = %e, "accepting a connection on the health/metrics port");
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                }
            };
            let health = health.clone();
            let metrics = metrics.clone();
            tokio::spawn(async move {
                let svc = service_fn(move |req: Request<hyper::body::Incoming>| {
                    let r = route(req.uri().path(), &health, &metrics);
                    async move { Ok::<_, Infallible>(r) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), svc)
                    .await
                {
                    debug!(error = %e, "health/metrics connection");
                }
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_needs_caches_and_election() {
        let h = Health::default();
        let m = Metrics::default();
        assert_eq!(
            route("/readyz", &h, &m).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        h.caches_synced.store(true, Ordering::SeqCst);
        assert_eq!(
            route("/readyz", &h, &m).status(),
            StatusCode::SERVICE_UNAVAILABLE
        );
        h.election_running.store(true, Ordering::SeqCst);
        assert_eq!(route("/readyz", &h, &m).status(), StatusCode::OK);
        assert_eq!(route("/livez", &h, &m).status(), StatusCode::OK);
        assert_eq!(route("/nope", &h, &m).status(), StatusCode::NOT_FOUND);
    }
}
