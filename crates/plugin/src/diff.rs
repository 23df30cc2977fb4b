//! The `diff` command: what the operator would change on the live cluster for a provider. The
//! objects are rendered as the operator renders them ([`crate::desired`]); each one that exists
//! is server-side applied in a dry run under the operator's own field manager, so the apiserver
//! merges, defaults and drops fields exactly as it will when the operator applies, and the
//! answer is compared with the live object ([`classify`]). Objects the provider installed that
//! are no longer rendered are those the operator prunes. Exit status as `kubectl diff`: 0 for
//! no difference, 1 for differences, 2 for an error.

mod classify;

pub use classify::REDACTED;

use std::collections::BTreeSet;

use anyhow::Context;
use capi_cluster_io::{
    ApplyError, ObjKey, ServerSideApply, gvk_of,
    installed::{installed_objects, stale},
    key_of, recreatable,
    server_side_apply::{OPERATOR_FIELD_MANAGER, content_hash, with_hash},
};
use serde_json::Value;

use crate::{
    cluster::{Cluster, describe},
    desired::{self, Target, installed_version},
};

pub use classify::Changed;

/// Options of `diff`.
#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    target: Target,
}

/// What the operator would change for one provider.
#[derive(Debug, Default)]
pub struct Differences {
    /// Objects it would create.
    pub added: Vec<String>,
    /// Objects it would delete (prune).
    pub removed: Vec<String>,
    /// Objects it would change.
    pub changed: Vec<Changed>,
}

impl Differences {
    /// Whether nothing would change.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }
}

/// The live object `key`, if it exists; `None` also when its kind is not served yet (a CRD
/// the same release adds).
async fn live_object(
    io: &ServerSideApply,
    key: &ObjKey,
    obj: &Value,
) -> anyhow::Result<Option<Value>> {
    let r = match io.resolve(&gvk_of(obj)).await {
        Ok(r) => r,
        Err(ApplyError::MissingKind { .. }) => return Ok(None),
        Err(e) => return Err(e).context(format!("resolving {key}")),
    };
    let found = r
        .api(io.client(), Some(&key.namespace))
        .get_opt(&key.name)
        .await
        .with_context(|| format!("reading {key}"))?;
    Ok(found.map(serde_json::to_value).transpose()?)
}

/// The change the operator's apply of `obj` would make to the live object, found by a dry run.
async fn compare(
    io: &ServerSideApply,
    obj: &Value,
) -> anyhow::Result<Result<Option<Changed>, ObjKey>> {
    let key = key_of(obj)?;
    let Some(live) = live_object(io, &key, obj).await? else {
        return Ok(Err(key));
    };
    // The body the operator applies, its content hash label included.
    let body = with_hash(obj, &content_hash(obj));
    let after = match io.dry_run_object(&key, &body).await {
        Ok(after) => after,
        // The operator deletes and creates again such an object (a Deployment whose selector
        // changes): shown as a change of the whole object.
        Err(ApplyError::Refused { message, .. })
            if recreatable(&key) && message.contains("field is immutable") =>
        {
            return Ok(Ok(
                classify::classify(&key.to_string(), &live, obj)?.map(classify::Changed::replaced)
            ));
        }
        Err(e) => return Err(e).with_context(|| format!("dry-run apply of {key}")),
    };
    let mut after = serde_json::to_value(after)?;
    // A dry run answers without apiVersion and kind on some paths; the live object's stand.
    for field in ["apiVersion", "kind"] {
        if let (Some(m), Some(v)) = (after.as_object_mut(), live.get(field)) {
            m.entry(field).or_insert_with(|| v.clone());
        }
    }
    Ok(Ok(classify::classify(&key.to_string(), &live, &after)?))
}

/// What the operator would change for `p`, given the objects it renders.
pub async fn differences(
    cluster: &Cluster,
    p: &capi_operator_api::AnyProvider,
    objects: &[Value],
    upgrading: bool,
) -> anyhow::Result<Differences> {
    let io = ServerSideApply::new(cluster.client.clone(), OPERATOR_FIELD_MANAGER);
    let mut out = Differences::default();
    for obj in objects {
        match compare(&io, obj).await? {
            Err(key) => out.added.push(key.to_string()),
            Ok(Some(c)) => out.changed.push(c),
            Ok(None) => {}
        }
    }
    let desired: BTreeSet<ObjKey> = objects.iter().filter_map(|o| key_of(o).ok()).collect();
    let installed = installed_objects(&cluster.client, p)
        .await
        .context("listing the provider's installed objects")?
        .iter()
        .filter_map(|o| key_of(o).ok())
        .map(|k| (k, (), false))
        .collect();
    let removed = stale(
        installed,
        &desired,
        |k| k.kind.as_str(),
        p.spec.paused,
        upgrading,
    );
    out.removed = removed
        .into_iter()
        .map(|(k, (), _)| k.to_string())
        .collect();
    Ok(out)
}

/// Prints the differences for `what`.
fn print(what: &str, d: &Differences) {
    say!("{what}");
    for a in &d.added {
        say!("+ added    {a}");
    }
    for r in &d.removed {
        say!("- removed  {r}");
    }
    for c in &d.changed {
        if c.replaced {
            say!(
                "~ replaced {} (an immutable field changes: deleted and created again)",
                c.object
            );
        } else {
            say!("~ changed  {}", c.object);
        }
        if !c.secret_keys.is_empty() {
            say!(
                "    Secret keys (values not shown): {}",
                c.secret_keys.join(", ")
            );
        }
        for line in c.diff.lines() {
            say!("    {line}");
        }
    }
    let restarts: Vec<&str> = d
        .changed
        .iter()
        .filter(|c| c.restarts)
        .map(|c| c.object.as_str())
        .collect();
    if !restarts.is_empty() {
        say!("Restart (pod template changes): {}", restarts.join(", "));
    }
    for c in d.changed.iter().filter(|c| !c.crd_versions.is_empty()) {
        say!("CRD versions: {}: {}", c.object, c.crd_versions.join("; "));
    }
    for c in d.changed.iter().filter(|c| !c.webhooks.is_empty()) {
        say!("Webhooks move: {}: {}", c.object, c.webhooks.join("; "));
    }
}

/// Runs `diff`; whether there are differences.
pub async fn run(args: &Args, cluster: &Cluster) -> anyhow::Result<bool> {
    let (p, live) = desired::provider(cluster, &args.target).await?;
    let installed = installed_version(live.as_ref());
    let rendered = desired::render(cluster, &p, installed, &args.target).await?;
    let upgrading = installed != Some(rendered.version.as_str());
    let d = differences(cluster, &p, &rendered.objects, upgrading).await?;
    if d.is_empty() {
        eprintln!("{}: no differences ({})", describe(&p), rendered.version);
        return Ok(false);
    }
    let versions = match installed {
        Some(v) if v == rendered.version => format!("at {v}"),
        Some(v) => format!("{v} -> {}", rendered.version),
        None => format!("not installed -> {}", rendered.version),
    };
    print(&format!("{}: {versions}", describe(&p)), &d);
    Ok(true)
}
