//! Readiness, liveness and startup probes, run as kubelet interprets them.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use k8s_openapi::{
    api::core::v1::{Container, Probe},
    apimachinery::pkg::util::intstr::IntOrString,
};
use tokio::task::JoinHandle;

use crate::events::Recorder;

/// What the probes of one container run have found so far.
#[derive(Debug, Default)]
pub struct Health {
    /// The startup probe has succeeded (or there is none).
    pub started: AtomicBool,
    /// The readiness probe's current result.
    pub ready: AtomicBool,
    /// The liveness or startup probe failed for good: the container must be restarted.
    pub kill: AtomicBool,
}

/// Where the probes of one container reach it.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pod's IP (default host of httpGet and tcpSocket).
    pub ip: String,
    /// The container's process, whose namespaces exec probes join.
    pub pid: u32,
    /// The container.
    pub container: Container,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Startup,
    Readiness,
    Liveness,
}

/// Starts the container's probes; abort the handles when the container stops.
pub fn start(target: Target, events: Recorder) -> (Arc<Health>, Vec<JoinHandle<()>>) {
    let c = &target.container;
    let health = Arc::new(Health::default());
    health
        .started
        .store(c.startup_probe.is_none(), Ordering::SeqCst);
    health
        .ready
        .store(c.readiness_probe.is_none(), Ordering::SeqCst);
    let mut tasks = Vec::new();
    let probes = [
        (Kind::Startup, &c.startup_probe),
        (Kind::Readiness, &c.readiness_probe),
        (Kind::Liveness, &c.liveness_probe),
    ];
    for (kind, probe) in probes {
        if let Some(p) = probe.clone() {
            let (t, h, e) = (target.clone(), health.clone(), events.clone());
            tasks.push(tokio::spawn(run(kind, p, t, h, e)));
        }
    }
    (health, tasks)
}

fn secs(v: Option<i32>, default: i32) -> Duration {
    Duration::from_secs(v.unwrap_or(default).max(0) as u64)
}

async fn run(kind: Kind, p: Probe, target: Target, health: Arc<Health>, events: Recorder) {
    // Readiness and liveness start only once the startup probe has passed.
    while kind != Kind::Startup && !health.started.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    tokio::time::sleep(secs(p.initial_delay_seconds, 0)).await;
    let period = secs(p.period_seconds, 10).max(Duration::from_secs(1));
    let timeout = secs(p.timeout_seconds, 1).max(Duration::from_secs(1));
    let failure_threshold = p.failure_threshold.unwrap_or(3).max(1);
    let success_threshold = p.success_threshold.unwrap_or(1).max(1);
    let (mut successes, mut failures) = (0, 0);
    loop {
        match check(&p, &target, timeout).await {
            Ok(()) => {
                successes += 1;
                failures = 0;
                if successes >= success_threshold {
                    match kind {
                        Kind::Startup => {
                            health.started.store(true, Ordering::SeqCst);
                            return;
                        }
                        Kind::Readiness => health.ready.store(true, Ordering::SeqCst),
                        Kind::Liveness => {}
                    }
                }
            }
            Err(why) => {
                successes = 0;
                failures += 1;
                events.warning("Unhealthy", format!("{kind:?} probe failed: {why}"));
                if failures >= failure_threshold {
                    match kind {
                        Kind::Readiness => health.ready.store(false, Ordering::SeqCst),
                        Kind::Startup | Kind::Liveness => {
                            health.kill.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
        }
        tokio::time::sleep(period).await;
    }
}

fn port(port: &IntOrString, c: &Container) -> Result<u16, String> {
    match port {
        IntOrString::Int(n) => u16::try_from(*n).map_err(|_| format!("bad port {n}")),
        IntOrString::String(name) => c
            .ports
            .iter()
            .flatten()
            .find(|p| p.name.as_deref() == Some(name))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .ok_or_else(|| format!("no container port named {name:?}")),
    }
}

async fn check(p: &Probe, t: &Target, timeout: Duration) -> Result<(), String> {
    if let Some(h) = &p.http_get {
        let port = port(&h.port, &t.container)?;
        let host = h.host.clone().unwrap_or_else(|| t.ip.clone());
        let scheme = h.scheme.as_deref().unwrap_or("HTTP").to_lowercase();
        let path = h.path.as_deref().unwrap_or("/");
        let url = format!("{scheme}://{host}:{port}{path}");
        let client = reqwest::Client::builder()
            .danger_accept_invalid_certs(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy()
            .timeout(timeout)
            .build()
            .map_err(|e| e.to_string())?;
        let mut req = client.get(&url);
        for hd in h.http_headers.iter().flatten() {
            req = req.header(&hd.name, &hd.value);
        }
        let resp = req.send().await.map_err(|e| format!("Get {url:?}: {e}"))?;
        let code = resp.status().as_u16();
        return if (200..400).contains(&code) {
            Ok(())
        } else {
            Err(format!("HTTP probe failed with statuscode: {code}"))
        };
    }
    if let Some(s) = &p.tcp_socket {
        let port = port(&s.port, &t.container)?;
        let host = s.host.clone().unwrap_or_else(|| t.ip.clone());
        return match tokio::time::timeout(
            timeout,
            tokio::net::TcpStream::connect((host.as_str(), port)),
        )
        .await
        {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("dial tcp {host}:{port}: {e}")),
            Err(_) => Err(format!("dial tcp {host}:{port}: timeout")),
        };
    }
    if let Some(e) = &p.exec {
        let cmd = e.command.clone().unwrap_or_default();
        let run = tokio::process::Command::new("nsenter")
            .arg("-t")
            .arg(t.pid.to_string())
            .args(["-n", "-m", "--"])
            .args(&cmd)
            .kill_on_drop(true)
            .output();
        return match tokio::time::timeout(timeout, run).await {
            Ok(Ok(out)) if out.status.success() => Ok(()),
            Ok(Ok(out)) => Err(format!(
                "command {cmd:?} exited with {}: {}",
                out.status,
                String::from_utf8_lossy(&out.stdout).trim()
            )),
            Ok(Err(e)) => Err(format!("running {cmd:?}: {e}")),
            Err(_) => Err(format!("command {cmd:?} timed out")),
        };
    }
    if p.grpc.is_some() {
        return Err("grpc probes are not supported by the process node".into());
    }
    Ok(())
}
