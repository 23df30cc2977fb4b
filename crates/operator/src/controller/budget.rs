//! One memory budget for the releases being fetched and rendered, across every provider and
//! every controller. A large release costs several times its size while it is fetched (the
//! response, the text, the cache write) and rendered (the parsed objects); up to 4 reconciles
//! per kind of 14 kinds may do that at once, and a few large ones together would exceed the
//! pod's memory limit — the kill then restarts the same work, a crash loop. Each install pass
//! holds a share of the budget from before its fetch until it ends (the rendered objects live
//! until the apply is done); a pass that does not fit waits.

use std::{collections::HashMap, sync::Arc, sync::Mutex};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Memory a release takes per byte of its text while it is fetched and rendered: the fetched
/// copies, the substituted text, the scalars' text in the parsed objects and the finalized
/// copies. Measured with the node cost below (docs/performance.md, "The memory budget").
pub const COST_PER_BYTE: u64 = 4;

/// Memory a release takes per YAML node it parses to, on top of the bytes: the JSON value, its
/// map or list slot and the copies of the objects the render makes. A node-dense text (a list
/// of `- 0`, 4 bytes a node) costs far more per byte than a real release. Measured (see
/// [`COST_PER_BYTE`]).
pub const COST_PER_NODE: u64 = 240;

/// Bytes substitution may add to a release's text (checked while it expands, see
/// [`ReleaseCost::limits`]): many times what real variables add (credentials, certificates,
/// a few KiB), charged to every release.
pub const EXPANSION_ALLOWANCE: u64 = 2 * MIB;

/// Bytes one `${...}` expression may expand to: a Secret, where variables come from, holds
/// at most 1 MiB in all.
pub const MAX_VALUE_BYTES: usize = 1024 * 1024;

/// Nodes substituted values may add to those the release's text has (a variable holding YAML).
pub const NODE_ALLOWANCE: u64 = 16 * 1024;

/// What rendering a release costs, from its text as fetched: its bytes and the YAML nodes it
/// parses to. The model: `COST_PER_BYTE × (bytes + EXPANSION_ALLOWANCE) + COST_PER_NODE ×
/// (nodes + NODE_ALLOWANCE)`; the render is held to it by [`ReleaseCost::limits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReleaseCost {
    /// Bytes of the release's text (components and metadata).
    pub bytes: u64,
    /// YAML nodes of the components (0 when they are not YAML before substitution: the
    /// parse is then held to [`NODE_ALLOWANCE`]).
    pub nodes: u64,
}

impl ReleaseCost {
    /// The cost of `release`: its size and its nodes, counted without building them.
    pub fn of(release: &capi_release::Release) -> ReleaseCost {
        let bytes = release.components.len() + release.metadata.len();
        let nodes = capi_components::pipeline::count_nodes(&release.components).unwrap_or(0);
        ReleaseCost {
            bytes: bytes as u64,
            nodes,
        }
    }

    /// The memory the render takes at most, in bytes.
    pub fn memory(&self) -> u64 {
        let bytes = self.bytes.saturating_add(EXPANSION_ALLOWANCE);
        let nodes = self.nodes.saturating_add(NODE_ALLOWANCE);
        bytes
            .saturating_mul(COST_PER_BYTE)
            .saturating_add(nodes.saturating_mul(COST_PER_NODE))
    }

    /// What the render may build, so it stays within [`ReleaseCost::memory`]: substitution
    /// adds at most [`EXPANSION_ALLOWANCE`] (intermediate values included) and
    /// [`MAX_VALUE_BYTES`] per expression, the parse at most [`NODE_ALLOWANCE`] nodes more
    /// than counted.
    pub fn limits(&self) -> capi_components::pipeline::RenderLimits {
        let nodes = self.nodes.saturating_add(NODE_ALLOWANCE);
        capi_components::pipeline::RenderLimits {
            substitution: capi_envsubst::Limits {
                max_expansion: EXPANSION_ALLOWANCE as usize,
                max_value: MAX_VALUE_BYTES,
            },
            max_nodes: usize::try_from(nodes).unwrap_or(usize::MAX),
        }
    }
}

/// What a pass reserves before its release's size is known (a release never fetched by this
/// process): enough for a release several times the size of the real core provider's.
pub const UNKNOWN_RELEASE_COST: u64 = 64 * MIB;

/// Memory kept out of the budget for everything else: the caches of providers and installed
/// objects, the HTTP clients, the runtime (the operator's RSS after installing the real
/// providers is about 40 MiB).
pub const RESERVE: u64 = 64 * MIB;

/// The budget when the container has no memory limit.
pub const WITHOUT_LIMIT: u64 = 512 * MIB;

const MIB: u64 = 1024 * 1024;
const KIB: u64 = 1024;

/// The shared budget, counted in KiB.
#[derive(Debug)]
pub struct Budget {
    permits: Arc<Semaphore>,
    total_kib: u32,
    /// The cost of each release this process fetched, by provider and version.
    known: Mutex<HashMap<String, u64>>,
}

/// A share of the budget, given back when dropped.
#[derive(Debug)]
pub struct Share {
    // `None` only if the semaphore were closed, which it never is.
    permit: Option<OwnedSemaphorePermit>,
}

impl Share {
    /// The bytes this share holds.
    pub fn bytes(&self) -> u64 {
        self.held() as u64 * KIB
    }

    fn held(&self) -> usize {
        self.permit
            .as_ref()
            .map_or(0, tokio::sync::OwnedSemaphorePermit::num_permits)
    }
}

fn kib(bytes: u64) -> u32 {
    u32::try_from(bytes.div_ceil(KIB))
        .unwrap_or(u32::MAX)
        .max(1)
}

impl Budget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> Budget {
        let total_kib = kib(bytes);
        Budget {
            permits: Arc::new(Semaphore::new(total_kib as usize)),
            total_kib,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The budget's size in bytes.
    pub fn total(&self) -> u64 {
        u64::from(self.total_kib) * KIB
    }

    /// The bytes free now.
    pub fn available(&self) -> u64 {
        self.permits.available_permits() as u64 * KIB
    }

    /// Waits for `bytes` of the budget. A request larger than the whole budget waits for all
    /// of it, so such a release is processed alone rather than never.
    pub async fn acquire(&self, bytes: u64) -> Share {
        let n = kib(bytes).min(self.total_kib);
        if self.permits.available_permits() < n as usize {
            tracing::debug!(
                wanted_mib = u64::from(n) / 1024,
                free_mib = self.available() / MIB,
                "waiting for release memory"
            );
        }
        Share {
            permit: self.permits.clone().acquire_many_owned(n).await.ok(),
        }
    }

    /// Brings `share` to `bytes`: gives back the excess, or takes more. Taking more never
    /// waits while holding part of the budget (two passes each holding some and waiting for
    /// the rest would wait forever): when the rest is not free at once, the share is given back
    /// and the whole is waited for.
    pub async fn resize(&self, mut share: Share, bytes: u64) -> Share {
        let want = kib(bytes).min(self.total_kib) as usize;
        let held = share.held();
        if want <= held {
            // Dropping the split part gives it back.
            drop(share.permit.as_mut().and_then(|p| p.split(held - want)));
            return share;
        }
        let more = u32::try_from(want - held).unwrap_or(u32::MAX);
        if let Some(p) = share.permit.as_mut()
            && let Ok(extra) = self.permits.clone().try_acquire_many_owned(more)
        {
            p.merge(extra);
            return share;
        }
        drop(share);
        self.acquire(bytes).await
    }

    /// What a pass reserves before fetching `version` for provider `key`.
    pub fn estimate(&self, key: &str, version: &str) -> u64 {
        self.known
            .lock()
            .ok()
            .and_then(|k| k.get(&format!("{key}@{version}")).copied())
            .unwrap_or(UNKNOWN_RELEASE_COST)
    }

    /// Records the memory `cost` of the release fetched for `key` at `version`; returns it.
    pub fn learn(&self, key: &str, version: &str, cost: &ReleaseCost) -> u64 {
        let cost = cost.memory();
        if let Ok(mut k) = self.known.lock() {
            k.insert(format!("{key}@{version}"), cost);
        }
        cost
    }
}

impl Default for Budget {
    fn default() -> Budget {
        Budget::new(WITHOUT_LIMIT)
    }
}

/// The process's memory limit from its cgroup (v2, then v1); `None` when unlimited. The cgroup
/// is the one /proc/self/cgroup names (the root of a container's cgroup namespace is its own).
pub fn cgroup_memory_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    let read = |p: &str| std::fs::read_to_string(format!("/sys/fs/cgroup{p}")).ok();
    limit_files(&own)
        .iter()
        .find_map(|f| read(f))
        .and_then(|text| parse_limit(&text))
}

/// The limit files to read under /sys/fs/cgroup, first found wins: the process's own cgroup
/// (v2, then v1), then the mount's root. A container on cgroup v1 without a cgroup namespace
/// (containerd on a v1 host) has the host's path in /proc/self/cgroup while its
/// /sys/fs/cgroup/memory is its own cgroup mounted alone, found only at the root.
fn limit_files(own: &str) -> Vec<String> {
    let (v2, v1) = cgroup_paths(own);
    vec![
        format!("{v2}/memory.max"),
        format!("/memory{v1}/memory.limit_in_bytes"),
        "/memory.max".to_string(),
        "/memory/memory.limit_in_bytes".to_string(),
    ]
}

/// The process's cgroup v2 path and v1 memory controller path, from /proc/self/cgroup ("" for
/// the root when not found).
fn cgroup_paths(own: &str) -> (String, String) {
    let mut v2 = String::new();
    let mut v1 = String::new();
    for line in own.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let path = path.trim_end_matches('/').to_string();
        if id == "0" && controllers.is_empty() {
            v2 = path;
        } else if controllers.split(',').any(|c| c == "memory") {
            v1 = path;
        }
    }
    (v2, v1)
}

/// A cgroup limit file's value: "max" (v2) and v1's near-`i64::MAX` page-rounded value mean
/// no limit.
fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    // v1 writes 9223372036854771712 when unlimited; no host has an exabyte of memory.
    (v < (1 << 60)).then_some(v)
}

/// The budget for a container limited to `limit` bytes (`None`: no limit): the limit less
/// [`RESERVE`], and never less than a quarter of the limit.
pub fn from_limit(limit: Option<u64>) -> u64 {
    match limit {
        Some(l) => l.saturating_sub(RESERVE).max(l / 4),
        None => WITHOUT_LIMIT,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn settles() {
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn requests_beyond_the_budget_wait_until_shares_are_given_back() {
        let b = Arc::new(Budget::new(100 * MIB));
        let first = b.acquire(60 * MIB).await;
        let second = b.acquire(30 * MIB).await;
        let waiting = tokio::spawn({
            let b = b.clone();
            async move { b.acquire(20 * MIB).await.bytes() }
        });
        settles().await;
        assert!(
            !waiting.is_finished(),
            "90 of 100 MiB held: 20 more must wait"
        );
        drop(second);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(got.ok().and_then(Result::ok), Some(20 * MIB));
        assert_eq!(
            b.available(),
            40 * MIB,
            "the finished task gave its share back"
        );
        drop(first);
        assert_eq!(b.available(), 100 * MIB);
    }

    #[tokio::test]
    async fn a_request_larger_than_the_budget_proceeds_alone() {
        let b = Arc::new(Budget::new(100 * MIB));
        let small = b.acquire(10 * MIB).await;
        let large = tokio::spawn({
            let b = b.clone();
            async move {
                let s = b.acquire(500 * MIB).await;
                let alone = b.available() == 0;
                (s.bytes(), alone)
            }
        });
        settles().await;
        assert!(!large.is_finished(), "it waits for the whole budget");
        drop(small);
        let got = tokio::time::timeout(Duration::from_secs(5), large).await;
        assert_eq!(got.ok().and_then(Result::ok), Some((100 * MIB, true)));
    }

    #[tokio::test]
    async fn growing_shares_never_wait_while_holding_part() {
        let b = Arc::new(Budget::new(100 * MIB));
        // Both passes reserved an estimate, then learned they need most of the budget: if each
        // kept its estimate while waiting for the rest, neither would ever proceed.
        let one = b.acquire(30 * MIB).await;
        let two = b.acquire(30 * MIB).await;
        let grow = |share: Share| {
            let b = b.clone();
            tokio::spawn(async move {
                let s = b.resize(share, 80 * MIB).await;
                tokio::task::yield_now().await;
                s.bytes()
            })
        };
        let (a, c) = (grow(one), grow(two));
        let both = tokio::time::timeout(Duration::from_secs(5), async {
            (a.await.ok(), c.await.ok())
        })
        .await;
        assert_eq!(both.ok(), Some((Some(80 * MIB), Some(80 * MIB))));
        assert_eq!(b.available(), 100 * MIB);
    }

    #[tokio::test]
    async fn shrinking_gives_the_excess_back() {
        let b = Budget::new(100 * MIB);
        let s = b.acquire(64 * MIB).await;
        let s = b.resize(s, 7 * MIB).await;
        assert_eq!(s.bytes(), 7 * MIB);
        assert_eq!(b.available(), 93 * MIB);
    }

    #[test]
    fn the_budget_follows_the_cgroup_limit() {
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None);
        assert_eq!(parse_limit("268435456\n"), Some(256 * MIB));
        assert_eq!(from_limit(Some(256 * MIB)), 192 * MIB);
        assert_eq!(
            from_limit(Some(64 * MIB)),
            16 * MIB,
            "a quarter of a small limit"
        );
        assert_eq!(from_limit(None), WITHOUT_LIMIT);
    }

    #[test]
    fn a_v1_container_without_a_cgroup_namespace_reads_the_mount_root() {
        let own = "4:memory:/kubepods/pod1/op\n0::/kubepods/pod1/op\n";
        assert_eq!(
            limit_files(own),
            [
                "/kubepods/pod1/op/memory.max",
                "/memory/kubepods/pod1/op/memory.limit_in_bytes",
                "/memory.max",
                "/memory/memory.limit_in_bytes",
            ]
        );
    }

    #[test]
    fn the_cgroup_is_the_process_own() {
        let v1 = "4:memory:/pods/op\n0::/\n";
        assert_eq!(cgroup_paths(v1), (String::new(), "/pods/op".to_string()));
        let v2 = "0::/kubepods/pod1/op\n";
        assert_eq!(
            cgroup_paths(v2),
            ("/kubepods/pod1/op".to_string(), String::new())
        );
    }

    #[test]
    fn estimates_learn_a_release_cost() {
        let b = Budget::new(100 * MIB);
        assert_eq!(b.estimate("core", "v1.16.0"), UNKNOWN_RELEASE_COST);
        let release = ReleaseCost {
            bytes: 23_266_239,
            nodes: 1_000_000,
        };
        let cost = b.learn("core", "v1.16.0", &release);
        assert_eq!(
            cost,
            COST_PER_BYTE * (23_266_239 + EXPANSION_ALLOWANCE)
                + COST_PER_NODE * (1_000_000 + NODE_ALLOWANCE)
        );
        assert_eq!(b.estimate("core", "v1.16.0"), cost);
    }

    #[test]
    fn nodes_cost_as_well_as_bytes() {
        let text = "apiVersion: v1\nkind: List\nitems:\n".to_string() + &"- 0\n".repeat(1000);
        let release = capi_release::Release {
            version: "v1.0.0".into(),
            metadata: String::new(),
            components: text.clone(),
        };
        let cost = ReleaseCost::of(&release);
        assert_eq!(cost.bytes, text.len() as u64);
        assert_eq!(cost.nodes, 1 + 6 + 1000);
        assert!(
            cost.memory() - ReleaseCost { nodes: 0, ..cost }.memory() >= 1000 * COST_PER_NODE,
            "the nodes are charged"
        );
        assert_eq!(cost.limits().max_nodes as u64, 1007 + NODE_ALLOWANCE);
    }
}
