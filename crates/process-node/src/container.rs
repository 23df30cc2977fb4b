//! One container's life: start, exit, back-off, and how kubelet reports each state.

use std::{
    io::{Read, Seek, SeekFrom, Write},
    path::Path,
    sync::{Arc, atomic::Ordering},
    time::{Duration, Instant},
};

use jiff::Timestamp;
use k8s_openapi::{api::core::v1::Container, apimachinery::pkg::apis::meta::v1::Time};
use serde_json::{Value, json};
use tokio::task::JoinHandle;

use crate::probe::Health;

/// How a run ended.
#[derive(Debug, Clone)]
pub struct Term {
    /// Exit code (128 + signal for a killed process).
    pub code: i32,
    /// `Completed`, `Error`.
    pub reason: String,
    /// Termination message.
    pub message: Option<String>,
    /// When it started.
    pub started_at: Timestamp,
    /// When it ended.
    pub finished_at: Timestamp,
    /// Its process id.
    pub pid: u32,
}

/// A running process.
#[derive(Debug)]
pub struct Run {
    /// The child.
    pub child: tokio::process::Child,
    /// Its process id (and process group).
    pub pid: u32,
    /// When it started.
    pub started_at: Timestamp,
    /// When it started, for the back-off reset.
    pub since: Instant,
    /// Where this run's output begins in the log file.
    pub log_offset: u64,
    /// Set once it was asked to stop: when to SIGKILL it.
    pub kill_deadline: Option<Instant>,
    /// Its probes.
    pub health: Arc<Health>,
    /// The probe tasks, aborted when the run ends.
    pub probes: Vec<JoinHandle<()>>,
}

/// The container's state, as in ContainerState.
#[derive(Debug)]
pub enum State {
    /// Not running; starts once `until` has passed (never when `None` and `hold`).
    Waiting {
        /// Kubelet's reason.
        reason: String,
        /// And message.
        message: String,
        /// Earliest next start.
        until: Instant,
    },
    /// Running.
    Running(Run),
    /// Ended for good (no restart).
    Terminated(Term),
}

/// A container of the pod.
#[derive(Debug)]
pub struct Ctr {
    /// Its spec.
    pub spec: Container,
    /// An init container.
    pub init: bool,
    /// Times it was restarted.
    pub restarts: i32,
    /// It ran at least once.
    pub ever_started: bool,
    /// Current state.
    pub state: State,
    /// The previous run's end.
    pub last: Option<Term>,
    /// Next back-off delay; `None` until the first exit (kubelet restarts that one at once).
    pub backoff: Option<Duration>,
    /// Consecutive failures to map the image.
    pub pull_failures: u32,
    /// The binary standing in for the image, once resolved.
    pub binary: Option<String>,
}

impl Ctr {
    /// A container that has not started yet.
    pub fn new(spec: Container, init: bool) -> Ctr {
        Ctr {
            spec,
            init,
            restarts: 0,
            ever_started: false,
            state: State::Waiting {
                reason: "ContainerCreating".into(),
                message: String::new(),
                until: Instant::now(),
            },
            last: None,
            backoff: None,
            pull_failures: 0,
            binary: None,
        }
    }

    /// Running, started and ready.
    pub fn ready(&self) -> bool {
        match &self.state {
            State::Running(r) => {
                r.kill_deadline.is_none()
                    && r.health.started.load(Ordering::SeqCst)
                    && r.health.ready.load(Ordering::SeqCst)
            }
            State::Terminated(t) => self.init && t.code == 0,
            State::Waiting { .. } => false,
        }
    }

    /// An init container that finished successfully.
    pub fn completed(&self) -> bool {
        matches!(&self.state, State::Terminated(t) if t.code == 0)
    }

    /// The containerStatuses entry.
    pub fn status(&self) -> Value {
        let image = self.spec.image.clone().unwrap_or_default();
        let image_id = self
            .binary
            .as_ref()
            .map(|b| format!("process://{b}"))
            .unwrap_or_default();
        let (state, started, pid) = match &self.state {
            State::Waiting {
                reason, message, ..
            } => {
                let mut w = json!({"reason": reason});
                if !message.is_empty() {
                    w["message"] = json!(message);
                }
                (json!({"waiting": w}), false, None)
            }
            State::Running(r) => (
                json!({"running": {"startedAt": time(r.started_at)}}),
                r.health.started.load(Ordering::SeqCst),
                Some(r.pid),
            ),
            State::Terminated(t) => (json!({"terminated": term_json(t)}), false, Some(t.pid)),
        };
        let mut s = json!({
            "name": self.spec.name,
            "image": image,
            "imageID": image_id,
            "ready": self.ready(),
            "started": started,
            "restartCount": self.restarts,
            "state": state,
            "lastState": self.last.as_ref().map(|t| json!({"terminated": term_json(t)})).unwrap_or(json!({})),
        });
        if let Some(pid) = pid {
            s["containerID"] = json!(format!("process://{pid}"));
        }
        s
    }
}

/// Kubernetes' JSON time.
pub fn time(t: Timestamp) -> Value {
    serde_json::to_value(Time(t)).unwrap_or(Value::Null)
}

fn term_json(t: &Term) -> Value {
    let mut v = json!({
        "exitCode": t.code,
        "reason": t.reason,
        "startedAt": time(t.started_at),
        "finishedAt": time(t.finished_at),
        "containerID": format!("process://{}", t.pid),
    });
    if let Some(m) = &t.message {
        v["message"] = json!(m);
    }
    v
}

/// The end of this run's log as kubelet's FallbackToLogsOnError takes it: the last 80 lines,
/// at most 2048 bytes.
pub fn log_tail(log: &Path, offset: u64) -> String {
    let mut buf = Vec::new();
    if let Ok(mut f) = std::fs::File::open(log) {
        let len = f.metadata().map(|m| m.len()).unwrap_or(0);
        let start = offset.max(len.saturating_sub(2048));
        if f.seek(SeekFrom::Start(start)).is_ok() {
            let _ = f.read_to_end(&mut buf);
        }
    }
    let text = String::from_utf8_lossy(&buf);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(80)..].join("\n")
}

/// Appends a marker line, so restarts are visible in the log; returns where the run begins.
pub fn mark_log(log: &Path, line: &str) -> std::io::Result<(std::fs::File, u64)> {
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    writeln!(f, "{line}")?;
    let offset = f.metadata()?.len();
    Ok((f, offset))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tail_keeps_the_last_80_lines_of_this_run() {
        let p = std::env::temp_dir().join(format!("cpn-tail-{}", std::process::id()));
        std::fs::write(&p, "old run\n").unwrap();
        let (_, off) = mark_log(&p, "--- restart").unwrap();
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        for i in 0..100 {
            writeln!(f, "line {i}").unwrap();
        }
        let tail = log_tail(&p, off);
        assert!(tail.ends_with("line 99"));
        assert!(!tail.contains("restart"));
        assert!(tail.lines().count() <= 80);
        std::fs::remove_file(p).unwrap();
    }
}
