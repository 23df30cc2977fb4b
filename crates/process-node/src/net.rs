//! Pod networking: one Linux bridge in the host network namespace holding the gateway address,
//! and per pod a network namespace joined to it by a veth pair. Driven through `ip`.

use std::{
    collections::BTreeMap,
    net::Ipv4Addr,
    path::{Path, PathBuf},
};

use tokio::sync::Mutex;

use crate::error::{Error, Result, io};

/// The node's pod network.
#[derive(Debug)]
pub struct Network {
    bridge: String,
    prefix: [u8; 3],
    netns_prefix: String,
    veth_prefix: String,
    ipam_file: PathBuf,
    // Pod UID → last octet, persisted so a restarted agent gives a pod its address back.
    ipam: Mutex<BTreeMap<String, u8>>,
}

/// One pod's network namespace and address.
#[derive(Debug, Clone)]
pub struct PodNet {
    /// Name under /run/netns.
    pub netns: String,
    /// The pod's address.
    pub ip: Ipv4Addr,
    host_veth: String,
}

impl PodNet {
    /// Path of the namespace file, for `setns`.
    pub fn netns_path(&self) -> PathBuf {
        Path::new("/run/netns").join(&self.netns)
    }
}

/// A short stable hash, so interface names derived from a bridge name stay within 15 bytes.
fn short_hash(s: &str) -> String {
    let h = s.bytes().fold(0xcbf29ce484222325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100000001b3)
    });
    format!("{:05x}", h & 0xfffff)
}

/// Runs `ip ARGS`; an error carries its stderr.
pub async fn ip(args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new("ip")
        .args(args)
        .output()
        .await
        .map_err(io("running ip"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(Error::Ip {
            args: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        })
    }
}

impl Network {
    /// A network on `bridge` for `cidr` (an IPv4 /24), with its allocations in `state_dir`.
    pub fn new(bridge: &str, cidr: &str, state_dir: &Path) -> Result<Network> {
        let bad = || Error::Network(format!("--pod-cidr {cidr:?}: expected an IPv4 /24"));
        let (addr, len) = cidr.split_once('/').ok_or_else(bad)?;
        let addr: Ipv4Addr = addr.parse().map_err(|_| bad())?;
        if len != "24" || bridge.is_empty() || bridge.len() > 15 {
            return Err(bad());
        }
        let o = addr.octets();
        let ipam_file = state_dir.join("ipam.json");
        let ipam = std::fs::read(&ipam_file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let hash = short_hash(bridge);
        Ok(Network {
            bridge: bridge.to_string(),
            prefix: [o[0], o[1], o[2]],
            netns_prefix: format!("cpn-{bridge}-"),
            veth_prefix: format!("vp{hash}"),
            ipam_file,
            ipam: Mutex::new(ipam),
        })
    }

    /// The bridge's address: the node's InternalIP and the pods' default gateway.
    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c] = self.prefix;
        Ipv4Addr::new(a, b, c, 1)
    }

    /// Removes namespaces and veths of a previous run, then creates the bridge.
    pub async fn start(&self) -> Result<()> {
        self.remove_pod_interfaces().await;
        if ip(&["link", "show", "dev", &self.bridge]).await.is_err() {
            ip(&["link", "add", &self.bridge, "type", "bridge"]).await?;
        }
        let gw = format!("{}/24", self.gateway());
        ip(&["addr", "replace", &gw, "dev", &self.bridge]).await?;
        ip(&["link", "set", &self.bridge, "up"]).await?;
        Ok(())
    }

    /// Removes every pod namespace, veth and the bridge.
    pub async fn stop(&self) {
        self.remove_pod_interfaces().await;
        let _ = ip(&["link", "del", &self.bridge]).await;
    }

    async fn remove_pod_interfaces(&self) {
        if let Ok(list) = ip(&["netns", "list"]).await {
            for ns in list.lines().filter_map(|l| l.split_whitespace().next()) {
                if ns.starts_with(&self.netns_prefix) {
                    let _ = ip(&["netns", "del", ns]).await;
                }
            }
        }
        if let Ok(list) = ip(&["-o", "link", "show"]).await {
            for name in list.lines().filter_map(|l| l.split(": ").nth(1)) {
                let name = name.split('@').next().unwrap_or(name);
                if name.starts_with(&self.veth_prefix) {
                    let _ = ip(&["link", "del", name]).await;
                }
            }
        }
    }

    /// The pod's last octet: the one it already holds, else `requested` (which must lie in this
    /// node's /24 and be free, as a CNI's fixed-address annotation demands), else the lowest free.
    async fn allocate(&self, uid: &str, requested: Option<Ipv4Addr>) -> Result<u8> {
        let mut ipam = self.ipam.lock().await;
        let octet = match (ipam.get(uid), requested) {
            (Some(o), _) => *o,
            (None, Some(want)) => {
                let o = want.octets();
                if o[..3] != self.prefix || !(2..=254).contains(&o[3]) {
                    return Err(Error::Network(format!(
                        "requested address {want} is not a pod address of {}",
                        self.bridge
                    )));
                }
                if ipam.values().any(|held| *held == o[3]) {
                    return Err(Error::Network(format!(
                        "requested address {want} is in use by another pod"
                    )));
                }
                ipam.insert(uid.to_string(), o[3]);
                o[3]
            }
            (None, None) => {
                let used: Vec<u8> = ipam.values().copied().collect();
                let free = (2..=254u8).find(|o| !used.contains(o)).ok_or_else(|| {
                    Error::Network(format!("no free address left on {}", self.bridge))
                })?;
                ipam.insert(uid.to_string(), free);
                free
            }
        };
        self.persist(&ipam)?;
        Ok(octet)
    }

    fn persist(&self, ipam: &BTreeMap<String, u8>) -> Result<()> {
        let tmp = self.ipam_file.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(ipam)?).map_err(io("writing ipam state"))?;
        std::fs::rename(&tmp, &self.ipam_file).map_err(io("writing ipam state"))
    }

    /// Creates the pod's namespace, veth pair, address and default route; `requested` is the
    /// address the pod asks for (see [`requested_address`]).
    pub async fn add_pod(&self, uid: &str, requested: Option<Ipv4Addr>) -> Result<PodNet> {
        let octet = self.allocate(uid, requested).await?;
        let [a, b, c] = self.prefix;
        let net = PodNet {
            netns: format!("{}{octet}", self.netns_prefix),
            ip: Ipv4Addr::new(a, b, c, octet),
            host_veth: format!("{}{octet:02x}", self.veth_prefix),
        };
        // A leftover of a crashed attempt would make every step below fail.
        let _ = ip(&["netns", "del", &net.netns]).await;
        let _ = ip(&["link", "del", &net.host_veth]).await;
        let peer = format!("{}{octet:02x}p", self.veth_prefix);
        let ns = net.netns.as_str();
        ip(&["netns", "add", ns]).await?;
        ip(&[
            "link",
            "add",
            &net.host_veth,
            "type",
            "veth",
            "peer",
            "name",
            &peer,
        ])
        .await?;
        ip(&["link", "set", &peer, "netns", ns]).await?;
        ip(&["link", "set", &net.host_veth, "master", &self.bridge, "up"]).await?;
        ip(&["-n", ns, "link", "set", &peer, "name", "eth0"]).await?;
        // The MAC follows from the address (as Docker's bridge does): a pod that gets an address
        // back (a fixed one, or a restarted agent's) keeps its MAC, so the neighbour caches of
        // the host and of other pods stay right instead of pointing at a deleted veth until
        // they expire.
        ip(&["-n", ns, "link", "set", "eth0", "address", &mac_of(net.ip)]).await?;
        ip(&[
            "-n",
            ns,
            "addr",
            "add",
            &format!("{}/24", net.ip),
            "dev",
            "eth0",
        ])
        .await?;
        ip(&["-n", ns, "link", "set", "eth0", "up"]).await?;
        ip(&["-n", ns, "link", "set", "lo", "up"]).await?;
        let gw = self.gateway().to_string();
        ip(&["-n", ns, "route", "add", "default", "via", &gw]).await?;
        Ok(net)
    }

    /// Removes the pod's namespace and veth and frees its address.
    pub async fn remove_pod(&self, uid: &str, net: Option<&PodNet>) {
        if let Some(net) = net {
            let _ = ip(&["netns", "del", &net.netns]).await;
            let _ = ip(&["link", "del", &net.host_veth]).await;
        }
        let mut ipam = self.ipam.lock().await;
        if ipam.remove(uid).is_some()
            && let Err(e) = self.persist(&ipam)
        {
            tracing::warn!(error = %e, "persisting address release");
        }
    }
}

/// The locally administered MAC of a pod address: 02:42 and the address's four bytes.
pub fn mac_of(ip: Ipv4Addr) -> String {
    let [a, b, c, d] = ip.octets();
    format!("02:42:{a:02x}:{b:02x}:{c:02x}:{d:02x}")
}

/// The pod annotation asking for a fixed address, as Calico's CNI reads it: a JSON list of
/// addresses. Providers whose endpoints are built from their own pod IP (Cluster API's in-memory
/// provider) need the same address after a restart or upgrade.
pub const FIXED_ADDRESS_ANNOTATION: &str = "cni.projectcalico.org/ipAddrs";

/// The IPv4 address `annotations` ask for, if any; a malformed value is an error the pod's
/// events carry.
pub fn requested_address(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<Ipv4Addr>> {
    let Some(value) = annotations.and_then(|a| a.get(FIXED_ADDRESS_ANNOTATION)) else {
        return Ok(None);
    };
    let bad = || {
        Error::Network(format!(
            "annotation {FIXED_ADDRESS_ANNOTATION}={value:?}: expected a JSON list holding one IPv4 address"
        ))
    };
    let list: Vec<String> = serde_json::from_str(value).map_err(|_| bad())?;
    list.iter()
        .find_map(|a| a.parse::<Ipv4Addr>().ok())
        .map(Some)
        .ok_or_else(bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_fit_in_ifnamsiz() {
        let n = Network::new(
            "cpn0123456789ab",
            "10.213.7.0/24",
            Path::new("/nonexistent"),
        )
        .unwrap();
        assert!(format!("{}ffp", n.veth_prefix).len() <= 15);
        assert_eq!(n.gateway(), Ipv4Addr::new(10, 213, 7, 1));
        assert!(Network::new("b", "10.0.0.0/16", Path::new("/x")).is_err());
    }

    #[test]
    fn mac_follows_the_address() {
        assert_eq!(mac_of(Ipv4Addr::new(10, 213, 7, 200)), "02:42:0a:d5:07:c8");
    }

    #[test]
    fn fixed_address_annotation() {
        let with =
            |v: &str| BTreeMap::from([(FIXED_ADDRESS_ANNOTATION.to_string(), v.to_string())]);
        assert_eq!(requested_address(None).unwrap(), None);
        assert_eq!(
            requested_address(Some(&with(r#"["10.1.2.9"]"#))).unwrap(),
            Some(Ipv4Addr::new(10, 1, 2, 9))
        );
        assert!(requested_address(Some(&with("10.1.2.9"))).is_err());
        assert!(requested_address(Some(&with(r#"["fd00::1"]"#))).is_err());
    }

    #[tokio::test]
    async fn fixed_address_is_kept_for_its_pod_and_refused_to_another() {
        let dir = std::env::temp_dir().join(format!("cpn-ipam-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let n = Network::new("cpntest", "10.9.8.0/24", &dir).unwrap();
        let want = Some(Ipv4Addr::new(10, 9, 8, 77));
        assert_eq!(n.allocate("a", want).await.unwrap(), 77);
        assert_eq!(n.allocate("a", None).await.unwrap(), 77);
        let taken = n.allocate("b", want).await.unwrap_err().to_string();
        assert!(taken.contains("in use by another pod"), "{taken}");
        let outside = n.allocate("c", Some(Ipv4Addr::new(10, 9, 9, 5))).await;
        assert!(outside.is_err());
        assert_eq!(n.allocate("b", None).await.unwrap(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
