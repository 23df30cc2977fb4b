//! Default repositories of well-known providers (clusterctl's built-in list): a provider object
//! without fetchConfig fetches from the GitHub repository its kind and name map to.

use capi_operator_api::ProviderType;

/// Where a well-known provider's releases live.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DefaultRepository {
    /// GitHub `owner/repo`.
    pub repository: &'static str,
    /// Components file of its releases.
    pub components_file: &'static str,
}

use ProviderType::*;

// (type, name, repository, components file or "" for the type's default)
const KNOWN: &[(ProviderType, &str, &str, &str)] = &[
    (Core, "cluster-api", "kubernetes-sigs/cluster-api", ""),
    (
        Infrastructure,
        "linode-linode",
        "linode/cluster-api-provider-linode",
        "",
    ),
    (
        Infrastructure,
        "aws",
        "kubernetes-sigs/cluster-api-provider-aws",
        "",
    ),
    (
        Infrastructure,
        "azure",
        "kubernetes-sigs/cluster-api-provider-azure",
        "",
    ),
    (
        Infrastructure,
        "docker",
        "kubernetes-sigs/cluster-api",
        "infrastructure-components-development.yaml",
    ),
    (
        Infrastructure,
        "cloudscale-ch-cloudscale",
        "cloudscale-ch/cluster-api-provider-cloudscale",
        "",
    ),
    (
        Infrastructure,
        "cloudstack",
        "kubernetes-sigs/cluster-api-provider-cloudstack",
        "",
    ),
    (
        Infrastructure,
        "digitalocean",
        "kubernetes-sigs/cluster-api-provider-digitalocean",
        "",
    ),
    (
        Infrastructure,
        "gcp",
        "kubernetes-sigs/cluster-api-provider-gcp",
        "",
    ),
    (
        Infrastructure,
        "tinkerbell-tinkerbell",
        "tinkerbell/cluster-api-provider-tinkerbell",
        "",
    ),
    (
        Infrastructure,
        "metal3",
        "metal3-io/cluster-api-provider-metal3",
        "",
    ),
    (
        Infrastructure,
        "nested",
        "kubernetes-sigs/cluster-api-provider-nested",
        "",
    ),
    (Infrastructure, "oci", "oracle/cluster-api-provider-oci", ""),
    (
        Infrastructure,
        "openstack",
        "kubernetes-sigs/cluster-api-provider-openstack",
        "",
    ),
    (Infrastructure, "sidero", "siderolabs/sidero", ""),
    (
        Infrastructure,
        "vcd",
        "vmware/cluster-api-provider-cloud-director",
        "",
    ),
    (
        Infrastructure,
        "vsphere",
        "kubernetes-sigs/cluster-api-provider-vsphere",
        "",
    ),
    (
        Infrastructure,
        "maas",
        "spectrocloud/cluster-api-provider-maas",
        "",
    ),
    (
        Infrastructure,
        "coxedge",
        "coxedge/cluster-api-provider-coxedge",
        "",
    ),
    (
        Infrastructure,
        "byoh",
        "vmware-tanzu/cluster-api-provider-bringyourownhost",
        "",
    ),
    (
        Infrastructure,
        "harvester-harvester",
        "rancher-sandbox/cluster-api-provider-harvester",
        "",
    ),
    (
        Infrastructure,
        "hetzner",
        "syself/cluster-api-provider-hetzner",
        "",
    ),
    // In clusterctl's list from v1.10 to v1.14 (what users run), though the list this table
    // follows (../shared/reference) no longer names it.
    (
        Infrastructure,
        "hivelocity-hivelocity",
        "hivelocity/cluster-api-provider-hivelocity",
        "",
    ),
    (
        Infrastructure,
        "huawei",
        "HuaweiCloudDeveloper/cluster-api-provider-huawei",
        "",
    ),
    (
        Infrastructure,
        "outscale",
        "outscale/cluster-api-provider-outscale",
        "",
    ),
    (
        Infrastructure,
        "ibmcloud",
        "kubernetes-sigs/cluster-api-provider-ibmcloud",
        "",
    ),
    (
        Infrastructure,
        "nutanix",
        "nutanix-cloud-native/cluster-api-provider-nutanix",
        "",
    ),
    (Infrastructure, "kubekey", "kubesphere/kubekey", ""),
    (
        Infrastructure,
        "kubevirt",
        "kubernetes-sigs/cluster-api-provider-kubevirt",
        "",
    ),
    (
        Infrastructure,
        "vcluster",
        "loft-sh/cluster-api-provider-vcluster",
        "",
    ),
    (
        Infrastructure,
        "virtink",
        "smartxworks/cluster-api-provider-virtink",
        "",
    ),
    (
        Infrastructure,
        "proxmox",
        "ionos-cloud/cluster-api-provider-proxmox",
        "",
    ),
    (
        Infrastructure,
        "k0sproject-k0smotron",
        "k0sproject/k0smotron",
        "",
    ),
    (
        Infrastructure,
        "ionoscloud-ionoscloud",
        "ionos-cloud/cluster-api-provider-ionoscloud",
        "",
    ),
    (
        Infrastructure,
        "vultr-vultr",
        "vultr/cluster-api-provider-vultr",
        "",
    ),
    (
        Infrastructure,
        "opennebula",
        "OpenNebula/cluster-api-provider-opennebula",
        "",
    ),
    (
        Infrastructure,
        "scaleway",
        "scaleway/cluster-api-provider-scaleway",
        "",
    ),
    (
        Infrastructure,
        "metal-stack",
        "metal-stack/cluster-api-provider-metal-stack",
        "",
    ),
    (
        Infrastructure,
        "oxide",
        "oxidecomputer/cluster-api-provider-oxide",
        "",
    ),
    (
        Infrastructure,
        "kubeswift-io",
        "kubeswift-io/cluster-api-provider-kubeswift",
        "",
    ),
    (
        Infrastructure,
        "kairos-io-fleet",
        "kairos-io/cluster-api-provider-kairos-fleet",
        "",
    ),
    (Bootstrap, "kubeadm", "kubernetes-sigs/cluster-api", ""),
    (Bootstrap, "kubekey-k3s", "kubesphere/kubekey", ""),
    (
        Bootstrap,
        "talos",
        "siderolabs/cluster-api-bootstrap-provider-talos",
        "",
    ),
    (
        Bootstrap,
        "microk8s",
        "canonical/cluster-api-bootstrap-provider-microk8s",
        "",
    ),
    (Bootstrap, "rke2", "rancher/cluster-api-provider-rke2", ""),
    (
        Bootstrap,
        "k0sproject-k0smotron",
        "k0sproject/k0smotron",
        "",
    ),
    (
        Bootstrap,
        "canonical-kubernetes",
        "canonical/cluster-api-k8s",
        "",
    ),
    (
        Bootstrap,
        "kairos-io",
        "kairos-io/cluster-api-provider-kairos",
        "",
    ),
    (ControlPlane, "kubeadm", "kubernetes-sigs/cluster-api", ""),
    (ControlPlane, "kubekey-k3s", "kubesphere/kubekey", ""),
    (
        ControlPlane,
        "talos",
        "siderolabs/cluster-api-control-plane-provider-talos",
        "",
    ),
    (
        ControlPlane,
        "microk8s",
        "canonical/cluster-api-control-plane-provider-microk8s",
        "",
    ),
    (
        ControlPlane,
        "nested",
        "kubernetes-sigs/cluster-api-provider-nested",
        "",
    ),
    (
        ControlPlane,
        "kamaji",
        "clastix/cluster-api-control-plane-provider-kamaji",
        "",
    ),
    (
        ControlPlane,
        "rke2",
        "rancher/cluster-api-provider-rke2",
        "",
    ),
    (
        ControlPlane,
        "k0sproject-k0smotron",
        "k0sproject/k0smotron",
        "",
    ),
    (
        ControlPlane,
        "canonical-kubernetes",
        "canonical/cluster-api-k8s",
        "",
    ),
    (
        ControlPlane,
        "hosted-control-plane",
        "teutonet/cluster-api-provider-hosted-control-plane",
        "",
    ),
    (
        ControlPlane,
        "kairos-io",
        "kairos-io/cluster-api-provider-kairos",
        "",
    ),
    (
        Ipam,
        "in-cluster",
        "kubernetes-sigs/cluster-api-ipam-provider-in-cluster",
        "",
    ),
    (Ipam, "metal3", "metal3-io/ip-address-manager", ""),
    (
        Ipam,
        "nutanix",
        "nutanix-cloud-native/cluster-api-ipam-provider-nutanix",
        "",
    ),
    (
        Addon,
        "rancher-fleet",
        "rancher/cluster-api-addon-provider-fleet",
        "",
    ),
    (
        Addon,
        "helm",
        "kubernetes-sigs/cluster-api-addon-provider-helm",
        "",
    ),
    (
        Addon,
        "eitco-cdk8s",
        "eitco/cluster-api-addon-provider-cdk8s",
        "",
    ),
    (
        RuntimeExtension,
        "nutanix",
        "nutanix-cloud-native/cluster-api-runtime-extensions-nutanix",
        "runtime-extensions-components.yaml",
    ),
];

/// The default repository of a provider of type `t` named `name`, if it is a well-known one.
pub fn default_repository(t: ProviderType, name: &str) -> Option<DefaultRepository> {
    KNOWN
        .iter()
        .find(|(kt, kn, _, _)| *kt == t && *kn == name)
        .map(|(kt, _, repo, file)| DefaultRepository {
            repository: repo,
            components_file: if file.is_empty() {
                kt.components_file()
            } else {
                file
            },
        })
}

/// The names of clusterctl's well-known providers of type `t`, in its list's order.
pub fn known_names(t: ProviderType) -> Vec<&'static str> {
    KNOWN
        .iter()
        .filter(|(kt, ..)| *kt == t)
        .map(|(_, name, ..)| *name)
        .collect()
}

/// The components file of a provider's releases when its source does not name one: the
/// well-known provider's own (docker's `infrastructure-components-development.yaml`), else the
/// type's default.
pub fn components_file(t: ProviderType, name: &str) -> &'static str {
    default_repository(t, name)
        .map(|d| d.components_file)
        .unwrap_or_else(|| t.components_file())
}

/// The release URL (`https://github.com/{owner}/{repo}/releases`) of a well-known provider.
pub fn default_url(t: ProviderType, name: &str) -> Option<String> {
    default_repository(t, name).map(|r| format!("https://github.com/{}/releases", r.repository))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clusterctl_v1_14_names_map_to_their_repositories() {
        assert_eq!(
            default_url(Infrastructure, "hivelocity-hivelocity").as_deref(),
            Some("https://github.com/hivelocity/cluster-api-provider-hivelocity/releases")
        );
    }

    #[test]
    fn specification_names_map_to_their_repositories() {
        assert_eq!(
            default_url(Infrastructure, "aws").as_deref(),
            Some("https://github.com/kubernetes-sigs/cluster-api-provider-aws/releases")
        );
        assert_eq!(
            default_url(Infrastructure, "vsphere").as_deref(),
            Some("https://github.com/kubernetes-sigs/cluster-api-provider-vsphere/releases")
        );
        assert_eq!(
            default_repository(Core, "cluster-api").map(|r| r.components_file),
            Some("core-components.yaml")
        );
        assert_eq!(
            default_repository(ControlPlane, "kubeadm").map(|r| r.components_file),
            Some("control-plane-components.yaml")
        );
        assert_eq!(
            default_repository(Infrastructure, "docker").map(|r| r.components_file),
            Some("infrastructure-components-development.yaml")
        );
        assert_eq!(
            components_file(Infrastructure, "docker"),
            "infrastructure-components-development.yaml"
        );
        assert_eq!(
            components_file(Infrastructure, "myazure"),
            "infrastructure-components.yaml"
        );
        // Names are per type: kubeadm is no infrastructure provider, myazure is nobody's.
        assert_eq!(default_repository(Infrastructure, "kubeadm"), None);
        assert_eq!(default_repository(Infrastructure, "myazure"), None);
        // Every type has at least one entry and no (type, name) pair is listed twice.
        for t in ProviderType::ALL {
            assert!(KNOWN.iter().any(|(kt, ..)| *kt == t), "{t} has no default");
        }
        for (i, a) in KNOWN.iter().enumerate() {
            assert!(
                !KNOWN[i + 1..].iter().any(|b| a.0 == b.0 && a.1 == b.1),
                "{} {} twice",
                a.0,
                a.1
            );
        }
    }
}
