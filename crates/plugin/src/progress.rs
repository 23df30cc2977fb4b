//! Waiting for providers to reach a state, with a progress display: one line per provider
//! each time its state changes, with the time elapsed.

use std::time::{Duration, Instant};

use anyhow::bail;
use capi_operator_api::{
    AnyProvider, ProviderApi, ProviderType,
    conditions::{PAUSED, PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED, READY, SPEC_TRANSLATED},
};

use crate::cluster::Cluster;

/// The state waited for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Want {
    /// Ready=True.
    Ready,
    /// Paused=True (reason Paused): the Deployments are scaled to zero.
    Paused,
    /// ProviderInstalled=True.
    Installed,
}

/// A provider to wait for.
#[derive(Debug, Clone)]
pub struct Target {
    /// Its API.
    pub api: ProviderApi,
    /// Its type.
    pub provider_type: ProviderType,
    /// Its namespace.
    pub namespace: String,
    /// Its name.
    pub name: String,
    /// The version that must be installed, if any.
    pub version: Option<String>,
    /// The state.
    pub want: Want,
}

impl Target {
    /// A target for `p`.
    pub fn of(p: &AnyProvider, version: Option<&str>, want: Want) -> Target {
        Target {
            api: p.api,
            provider_type: p.provider_type,
            namespace: p.namespace().to_string(),
            name: p.name().to_string(),
            version: version.map(str::to_string),
            want,
        }
    }

    fn describe(&self) -> String {
        format!(
            "{} {}/{}",
            self.provider_type.kind(),
            self.namespace,
            self.name
        )
    }
}

fn short(s: &str) -> String {
    let one_line = s.replace('\n', " ");
    if one_line.chars().count() > 140 {
        format!("{}...", one_line.chars().take(140).collect::<String>())
    } else {
        one_line
    }
}

/// Whether `p` is in the state `t` asks for, and a line describing where it is.
pub fn state(t: &Target, p: Option<&AnyProvider>) -> (bool, String) {
    let Some(p) = p else {
        return (false, "not found".into());
    };
    let Some(status) = &p.status else {
        return (false, "waiting for the operator".into());
    };
    // A v1alpha2 object's status may still be cluster-api-operator's; only this operator
    // writes SpecTranslated.
    if p.api == ProviderApi::ClusterApiOperator && status.condition(SPEC_TRANSLATED).is_none() {
        return (false, "waiting for the operator to take it over".into());
    }
    let installed = status.installed_version.as_deref().unwrap_or("-");
    if status.observed_generation.unwrap_or(0) < p.metadata.generation.unwrap_or(0) {
        return (
            false,
            format!("{installed}, waiting for the operator to see the change"),
        );
    }
    let cond = |ty: &str| status.condition(ty);
    // The first condition that explains a wait.
    let blocking = [PREFLIGHT_CHECK_PASSED, PROVIDER_INSTALLED]
        .into_iter()
        .filter_map(cond)
        .find(|c| c.status != "True");
    let version_ok = t
        .version
        .as_deref()
        .is_none_or(|v| status.installed_version.as_deref() == Some(v));
    let (ty, done) = match t.want {
        Want::Ready => (READY, status.is_true(READY)),
        Want::Paused => (
            PAUSED,
            cond(PAUSED).is_some_and(|c| c.status == "True" && c.reason == "Paused"),
        ),
        Want::Installed => (PROVIDER_INSTALLED, status.is_true(PROVIDER_INSTALLED)),
    };
    let shown = match (blocking, done && version_ok) {
        (Some(b), false) => Some(b),
        _ => cond(ty),
    };
    let detail = match shown {
        Some(c) if c.message.is_empty() => format!("{} {} ({})", c.type_, c.status, c.reason),
        Some(c) => format!(
            "{} {} ({}: {})",
            c.type_,
            c.status,
            c.reason,
            short(&c.message)
        ),
        None => format!("{ty} unknown"),
    };
    (done && version_ok, format!("{installed}, {detail}"))
}

/// Waits until every target is in its state, printing progress to standard error; fails after
/// `timeout` with the last state of each.
pub async fn wait(
    cluster: &Cluster,
    targets: &[Target],
    timeout: Duration,
    what: &str,
) -> anyhow::Result<()> {
    let start = Instant::now();
    let mut last: Vec<Option<String>> = vec![None; targets.len()];
    eprintln!(
        "waiting for {what} ({} providers, timeout {}s)",
        targets.len(),
        timeout.as_secs()
    );
    loop {
        let mut all = true;
        for (i, t) in targets.iter().enumerate() {
            let p = cluster
                .provider_of(t.api, t.provider_type, &t.namespace, &t.name)
                .await?;
            let (done, line) = state(t, p.as_ref());
            all &= done;
            let line = format!(
                "{}: {}{line}",
                t.describe(),
                if done { "done, " } else { "" }
            );
            if last.get(i).and_then(|l| l.as_ref()) != Some(&line) {
                eprintln!("[{:>4}s] {line}", start.elapsed().as_secs());
                if let Some(l) = last.get_mut(i) {
                    *l = Some(line);
                }
            }
        }
        if all {
            eprintln!("[{:>4}s] {what}: done", start.elapsed().as_secs());
            return Ok(());
        }
        if start.elapsed() >= timeout {
            let lines: Vec<String> = last.into_iter().flatten().collect();
            bail!(
                "timed out after {}s waiting for {what}:\n  {}",
                timeout.as_secs(),
                lines.join("\n  ")
            );
        }
        tokio::time::sleep(Duration::from_millis(1000)).await;
    }
}
