//! The examples every command's `--help` ends with, as kubectl's commands show them.

/// Examples of the plugin as a whole.
pub const ROOT: &str = "Examples:
  # Install the core, kubeadm bootstrap and control-plane providers and wait until Ready
  kubectl capi-providers init --core cluster-api:v1.12.0 --bootstrap kubeadm:v1.12.0 \\
    --control-plane kubeadm:v1.12.0 --wait

  # What an upgrade would change
  kubectl capi-providers upgrade plan";

/// Examples of `diff`.
pub const DIFF: &str = "Examples:
  # What the operator would change for the provider object in a file (exit 1: differences)
  kubectl capi-providers diff -f core-provider.yaml

  # What upgrading the installed provider cluster-api to v1.12.1 would change
  kubectl capi-providers diff cluster-api --version v1.12.1";

/// Examples of `move`.
pub const MOVE: &str = "Examples:
  # What moving to the cluster of target.kubeconfig would do (nothing is changed)
  kubectl capi-providers move --to-kubeconfig target.kubeconfig --dry-run

  # Move the providers and every Cluster, with clusterctl v1.12+ from a path
  kubectl capi-providers move --to-kubeconfig target.kubeconfig --clusterctl ./clusterctl

  # Back up the Clusters to a directory, then restore them into another cluster (clusterctl's
  # move --to-directory / --from-directory)
  kubectl capi-providers move --to-directory backup
  kubectl --kubeconfig other.kubeconfig capi-providers move --from-directory backup";

/// Examples of `render`.
pub const RENDER: &str = "Examples:
  # The objects the operator applies for a provider in the cluster, from its own source
  kubectl capi-providers render cluster-api

  # For a provider object in a file, at another version
  kubectl capi-providers render -f core-provider.yaml --version v1.12.1";

/// Examples of `init`.
pub const INIT: &str = "Examples:
  # From nothing, as clusterctl: the operator (of this plugin's version), cert-manager, and the
  # providers; on a first run core cluster-api, bootstrap kubeadm and control-plane kubeadm are
  # added unless providers of their type are named (or --no-default-providers)
  kubectl capi-providers init -i docker --wait

  # Versions and a variables file; the operator of another release
  kubectl capi-providers init --core cluster-api:v1.12.0 -b kubeadm:v1.12.0 -c kubeadm:v1.12.0 \\
    -i docker:v1.12.0 --variables vars.env --operator-version v0.1.0 --wait

  # Providers and cert-manager preloaded into ConfigMaps (air-gapped)
  kubectl capi-providers preload --core cluster-api:v1.12.0 --cert-manager --apply
  kubectl capi-providers init --preloaded --core cluster-api:v1.12.0 --no-default-providers

  # Another cert-manager version than clusterctl's default, or none at all
  kubectl capi-providers init --cert-manager-version v1.18.2
  kubectl capi-providers init --skip-cert-manager";

/// Examples of `delete`.
pub const DELETE: &str = "Examples:
  # An infrastructure provider; its CRDs and namespace stay (deletionPolicy Block)
  kubectl capi-providers delete --infrastructure docker

  # Everything, the core provider last, with CRDs and namespaces (deletionPolicy Purge)
  kubectl capi-providers delete --all --include-crd --include-namespace --timeout 10m";

/// Examples of `publish`.
pub const PUBLISH: &str = "Examples:
  # Tagged v1.12.0 after the directory; credentials from OCI_USERNAME/OCI_PASSWORD
  kubectl capi-providers publish releases/infrastructure-docker/v1.12.0 \\
    --to oci://registry.example.internal/capi/infrastructure-docker

  # A provider then reads it with fetchConfig.oci: registry.example.internal/capi/infrastructure-docker";

/// Examples of `upgrade`.
pub const UPGRADE: &str = "Examples:
  kubectl capi-providers upgrade plan
  kubectl capi-providers upgrade apply --contract v1beta2";

/// Examples of `upgrade plan`.
pub const UPGRADE_PLAN: &str = "Examples:
  # The table of versions and contracts
  kubectl capi-providers upgrade plan

  # The same as JSON
  kubectl capi-providers upgrade plan -o json";

/// Examples of `upgrade apply`.
pub const UPGRADE_APPLY: &str = "Examples:
  # The newest release of the current contract, waiting until Ready
  kubectl capi-providers upgrade apply --wait

  # Move to another contract (pause, upgrade, unpause)
  kubectl capi-providers upgrade apply --contract v1beta2

  # Chosen providers only, each to a version of its contract (as clusterctl)
  kubectl capi-providers upgrade apply --core cluster-api:v1.12.1 -i docker:v1.12.1 --wait";

/// Examples of `preload`.
pub const PRELOAD: &str = "Examples:
  # Apply the releases' ConfigMaps to the cluster
  kubectl capi-providers preload --core cluster-api:v1.12.0 --apply

  # Write them to a file and list the images to mirror
  kubectl capi-providers preload --core cluster-api:v1.12.0 --output-file releases.yaml --images";

/// Examples of `migrate`.
pub const MIGRATE: &str = "Examples:
  # Check only
  kubectl capi-providers migrate --preloaded --dry-run

  # Adopt the providers clusterctl installed
  kubectl capi-providers migrate --preloaded";

/// Examples of `verify`.
pub const VERIFY: &str = "Examples:
  # A provider's release
  kubectl capi-providers verify --infrastructure aws:v2.8.1

  # A components file, findings as JSON
  kubectl capi-providers verify --components infrastructure-components.yaml \\
    --metadata metadata.yaml --version v1.0.0 -o json";

/// Examples of `describe`.
pub const DESCRIBE: &str = "Examples:
  # Variables, defaults and images of a release
  kubectl capi-providers describe --infrastructure aws:v2.8.1

  # From a local repository, as YAML
  kubectl capi-providers describe --repository ./repo --core cluster-api -o yaml";

/// Examples of `completion`.
pub const COMPLETION: &str = "Examples:
  # bash, for this shell
  source <(kubectl-capi_providers completion bash)

  # zsh, installed
  kubectl-capi_providers completion zsh > \"${fpath[1]}/_kubectl-capi_providers\"";

/// Examples of `krew-manifest`.
pub const KREW_MANIFEST: &str = "Examples:
  kubectl-capi_providers krew-manifest \\
    --uri-template 'https://example.invalid/releases/v{version}/kubectl-capi_providers-{os}-{arch}.tar.gz' \\
    --archive linux/amd64=dist/kubectl-capi_providers-linux-amd64.tar.gz > capi-providers.yaml";
