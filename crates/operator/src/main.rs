//! `capi-provider-operator`: the operator binary and its helper commands.

// A function is read at once: longer than clippy.toml's threshold (80 lines) fails the build.

use std::{path::PathBuf, process::ExitCode};

use anyhow::Context;
use clap::{Parser, Subcommand};

use capi_provider_operator::{apidocs, argocd, controller, crds, leader, metrics, render, server};

/// Declarative lifecycle operator for Cluster API providers.
#[derive(Parser, Debug)]
#[command(name = "capi-provider-operator", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the version of this binary.
    Version,
    /// Render a provider object (any of the seven kinds) into the objects the operator would
    /// apply, or list the variables its release uses.
    Render {
        /// The provider object, as a user would apply it.
        #[arg(short = 'f', long = "file")]
        file: PathBuf,
        /// Resolve releases from a local directory in clusterctl's local-repository layout,
        /// DIR/<label>/<version>/<file> (label as in cluster.x-k8s.io/provider).
        #[arg(long)]
        repository: Option<PathBuf>,
        /// KEY=VALUE lines standing for the provider Secret's data.
        #[arg(long)]
        variables: Option<PathBuf>,
        /// Print each variable of the release (and of the additional manifests) with its
        /// default, or (required).
        #[arg(long)]
        list_variables: bool,
        /// Additional manifests, standing for spec.additionalManifests: either the ConfigMap
        /// itself (one ConfigMap document with a data.manifests key, which is used) or the
        /// manifests as plain multi-document YAML.
        #[arg(long, value_name = "FILE")]
        additional_manifests: Option<PathBuf>,
    },
    /// Run the operator: one controller per provider kind, against the cluster of the current
    /// kubeconfig (or the in-cluster service account).
    Run(Box<RunArgs>),
    /// Print the API reference (Markdown) generated from the CRD field docs.
    ApiDocs,
    /// Print the argocd-cm ConfigMap entries that teach Argo CD the health of every provider kind.
    ArgocdHealth,
    /// Print the CustomResourceDefinitions of the seven provider kinds, in this operator's API
    /// and in cluster-api-operator's v1alpha2, as YAML, or write one file per CRD into a
    /// directory.
    Crds {
        /// Write `<plural>.<group>.yaml` files into this directory instead of printing.
        #[arg(long)]
        output_dir: Option<PathBuf>,
    },
}

/// Flags of `run`.
#[derive(clap::Args, Debug)]
struct RunArgs {
    /// GitHub API base URL (GitHub Enterprise, or a local GitHub-compatible server).
    #[arg(long, env = "CAPI_OPERATOR_GITHUB_API_URL")]
    github_api_url: Option<String>,
    /// API hosts (`host` or `host:port`, comma-separated) the operator's GITHUB_TOKEN may be
    /// sent to besides api.github.com and --github-api-url's host: GitHub Enterprise servers
    /// trusted with it. A provider on any other host gets only its own Secret's token.
    #[arg(long, env = "CAPI_OPERATOR_GITHUB_TOKEN_HOSTS", value_delimiter = ',')]
    github_token_hosts: Vec<String>,
    /// A PEM file of certificate authorities every release source trusts besides the public
    /// roots: a TLS-intercepting proxy's or an internal mirror's CA, mounted from a ConfigMap.
    /// Without it, $SSL_CERT_FILE is read when set (as Go and OpenSSL programs do).
    #[arg(long, env = "CAPI_OPERATOR_CA_BUNDLE")]
    ca_bundle: Option<std::path::PathBuf>,
    /// Seconds before re-checking a provider stuck on a configuration problem.
    #[arg(long, default_value_t = 300)]
    config_retry_seconds: u64,
    /// Seconds between periodic re-checks of a healthy provider.
    #[arg(long, default_value_t = 1800)]
    sync_period_seconds: u64,
    /// Seconds between two checks of which newer releases a provider's source offers
    /// (status.availableVersions; also checked after each install or upgrade). 0 turns the
    /// check off.
    #[arg(long, default_value_t = 21600)]
    version_check_seconds: u64,
    /// Concurrent reconciles per provider kind.
    #[arg(long, default_value_t = 4)]
    concurrency: u16,
    /// Log format: text or json.
    #[arg(long, default_value = "text", value_parser = ["text", "json"])]
    log_format: String,
    /// Watch provider objects in this namespace only (default: every namespace). The core
    /// provider must then live in it too.
    #[arg(long, env = "CAPI_OPERATOR_NAMESPACE")]
    watch_namespace: Option<String>,
    /// Address of /metrics, e.g. ":8080" (default "0": off).
    #[arg(long, default_value = "0")]
    metrics_bind_address: String,
    /// Address of /livez and /readyz, e.g. ":8081" (default "0": off). The same address as
    /// the metrics one serves everything on one port.
    #[arg(long, default_value = "0")]
    health_probe_bind_address: String,
    /// Elect a leader among replicas on a coordination.k8s.io Lease; only the leader reconciles.
    #[arg(long)]
    leader_elect: bool,
    /// Bring the provider CRDs to this operator's schema at startup (Helm never upgrades a
    /// chart's CRDs); a CRD written by a newer operator is left alone.
    #[arg(long)]
    manage_crds: bool,
    /// Keep clusterctl's inventory (providers.clusterctl.cluster.x-k8s.io) for the providers the
    /// operator installs, so clusterctl upgrade plan, describe and move see them; the CRD is
    /// created when absent. `false` removes the entries the operator wrote.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    clusterctl_inventory: bool,
    /// API groups of the provider objects served, comma-separated: this operator's
    /// management.cluster.x-k8s.io and kubernetes-sigs/cluster-api-operator's
    /// operator.cluster.x-k8s.io (v1alpha2). A group whose CRDs the cluster lacks is skipped
    /// with a warning; --manage-crds installs the CRDs of the groups served.
    #[arg(
        long,
        value_delimiter = ',',
        default_value = "management.cluster.x-k8s.io,operator.cluster.x-k8s.io",
        value_parser = parse_group
    )]
    served_groups: Vec<capi_operator_api::ProviderApi>,
    /// Namespace of the leader election Lease (default: the Pod's namespace, else "default").
    #[arg(long, env = "POD_NAMESPACE")]
    leader_election_namespace: Option<String>,
    /// Name of the leader election Lease.
    #[arg(long, default_value = "capi-provider-operator")]
    leader_election_id: String,
    /// Seconds a lease not renewed stays valid.
    #[arg(long, default_value_t = 15)]
    leader_election_lease_seconds: u64,
    /// Seconds the leader keeps trying to renew before it stops leading.
    #[arg(long, default_value_t = 10)]
    leader_election_renew_deadline_seconds: u64,
    /// Seconds between leader election attempts.
    #[arg(long, default_value_t = 2)]
    leader_election_retry_seconds: u64,
    /// MiB of memory for fetching and rendering releases, shared by all providers: a release
    /// that does not fit waits for others to finish. Default: the container's memory limit less
    /// 64 MiB (at least a quarter of it), or 512 MiB without a limit.
    #[arg(long, env = "CAPI_OPERATOR_RELEASE_MEMORY_MIB")]
    release_memory_mib: Option<u64>,
    /// Registry and path every provider image is pulled from instead of its own (clusterctl's
    /// `images: all: repository`); the image name, tag and digest are kept.
    #[arg(long, env = "CAPI_OPERATOR_IMAGE_MIRROR", value_name = "REPOSITORY")]
    image_mirror: Option<String>,
    /// Secrets (comma-separated names) added to the imagePullSecrets of every provider
    /// Deployment; each must exist in the provider's namespace.
    #[arg(long, env = "CAPI_OPERATOR_IMAGE_PULL_SECRETS", value_delimiter = ',')]
    image_pull_secrets: Vec<String>,
    /// A ConfigMap (NAME in the operator's namespace, or NAMESPACE/NAME) whose `images` key
    /// (clusterctl's `images:` map) and `imagePullSecrets` key (a list of names) go over
    /// --image-mirror and --image-pull-secrets. Watched: a change renders every provider again.
    #[arg(
        long,
        env = "CAPI_OPERATOR_IMAGE_MIRROR_CONFIG",
        value_name = "CONFIGMAP"
    )]
    image_mirror_config: Option<String>,
    /// Use the --image-mirror-config ConfigMap only when it carries the labels
    /// `app.kubernetes.io/instance=RELEASE` and `app.kubernetes.io/name=capi-provider-operator`
    /// (as the chart renders it); any other is refused on every provider, nothing of it used.
    #[arg(
        long,
        env = "CAPI_OPERATOR_IMAGE_MIRROR_CONFIG_OWNER",
        value_name = "RELEASE",
        requires = "image_mirror_config"
    )]
    image_mirror_config_owner: Option<String>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Version => {
            println!("capi-provider-operator {}", env!("CARGO_PKG_VERSION"));
            Ok(())
        }
        Command::Crds { output_dir } => write_crds(output_dir),
        Command::ApiDocs => {
            print!("{}", apidocs::render()?);
            Ok(())
        }
        Command::ArgocdHealth => {
            print!("{}", argocd::config_map());
            Ok(())
        }
        Command::Run(args) => run_operator(*args),
        Command::Render {
            file,
            repository,
            variables,
            list_variables,
            additional_manifests,
        } => render::run(&render::Args {
            file: &file,
            repository: repository.as_deref(),
            variables: variables.as_deref(),
            list_variables,
            additional_manifests: additional_manifests.as_deref(),
        }),
    }
}

/// A provider API by its group name.
fn parse_group(group: &str) -> Result<capi_operator_api::ProviderApi, String> {
    capi_operator_api::ProviderApi::from_group(group.trim()).ok_or_else(|| {
        format!(
            "{group:?} is not a provider API group: use {} or {}",
            capi_operator_api::GROUP,
            capi_operator_api::v1alpha2::GROUP
        )
    })
}

/// Trusts `--ca-bundle` (a start failure when unreadable or empty: the admin asked for it) or,
/// without it, $SSL_CERT_FILE (only a warning then: it may be set for other programs).
fn trust_ca_bundle(flag: Option<&std::path::Path>) -> anyhow::Result<()> {
    let from_env = std::env::var_os("SSL_CERT_FILE").map(std::path::PathBuf::from);
    let Some(path) = flag.map(std::path::Path::to_path_buf).or(from_env) else {
        return Ok(());
    };
    let trusted = std::fs::read(&path)
        .map_err(anyhow::Error::from)
        .and_then(|pem| Ok(capi_release_sources::trust::trust_process_wide(&pem)?));
    match trusted {
        Ok(n) => {
            tracing::info!(file = %path.display(), certificates = n, "release sources trust the CA bundle");
            Ok(())
        }
        Err(e) if flag.is_some() => {
            Err(e.context(format!("reading the CA bundle {}", path.display())))
        }
        Err(e) => {
            tracing::warn!(file = %path.display(), error = %e, "SSL_CERT_FILE not used");
            Ok(())
        }
    }
}

/// Logs to stderr, filtered by `RUST_LOG` (info by default), as JSON or text.
fn init_logging(format: &str) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let filter = capi_provider_operator::logging::filter(rust_log.as_deref());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
}

fn run_operator(args: RunArgs) -> anyhow::Result<()> {
    init_logging(&args.log_format);
    trust_ca_bundle(args.ca_bundle.as_deref())?;
    let secs = std::time::Duration::from_secs;
    let own_namespace = args
        .leader_election_namespace
        .clone()
        .unwrap_or_else(|| "default".into());
    let leader_election = args.leader_elect.then(|| leader::LeaseConfig {
        namespace: own_namespace.clone(),
        name: args.leader_election_id.clone(),
        identity: identity(),
        lease_duration: secs(args.leader_election_lease_seconds),
        renew_deadline: secs(args.leader_election_renew_deadline_seconds),
        retry_period: secs(args.leader_election_retry_seconds),
    });
    if let Some(l) = &leader_election {
        l.validate().context("invalid leader election timings")?;
    }
    let opts = controller::Options {
        github_api_url: args.github_api_url,
        github_token: std::env::var("GITHUB_TOKEN").ok().filter(|t| !t.is_empty()),
        github_token_hosts: args
            .github_token_hosts
            .iter()
            .map(|h| h.trim().to_ascii_lowercase())
            .filter(|h| !h.is_empty())
            .collect(),
        config_retry: secs(args.config_retry_seconds),
        resync: secs(args.sync_period_seconds),
        version_check: secs(args.version_check_seconds),
        concurrency: args.concurrency,
        namespace: args.watch_namespace,
        leader_election,
        metrics: std::sync::Arc::default(),
        health: std::sync::Arc::default(),
        clusterctl_inventory: args.clusterctl_inventory,
        apis: args.served_groups.clone(),
        memory_budget: std::sync::Arc::new(release_memory(args.release_memory_mib)),
        image_mirror: capi_components::mirror::ImageMirror::all(
            args.image_mirror.as_deref(),
            &args.image_pull_secrets,
        )?,
        image_mirror_config: args
            .image_mirror_config
            .as_deref()
            .map(|c| match c.split_once('/') {
                Some((ns, name)) => (ns.to_string(), name.to_string()),
                None => (own_namespace.clone(), c.to_string()),
            }),
        image_mirror_owner: args.image_mirror_config_owner.clone(),
        // Replaced by the operator's own key once connected (hash_key::load_or_create).
        config_hash_key: controller::Options::default().config_hash_key,
    };
    let metrics_addr = bind_address(&args.metrics_bind_address)?;
    let health_addr = bind_address(&args.health_probe_bind_address)?;
    // One thread: the work is waiting on the apiserver and release sources; a single thread
    // keeps one malloc arena, so memory freed after rendering a large release is reused rather
    // than held per worker.
    let mut builder = tokio::runtime::Builder::new_current_thread();
    metrics::LoopClock::install(builder.enable_all(), opts.metrics.clone());
    let runtime = builder.build().context("starting the async runtime")?;
    let result = runtime.block_on(async move {
        for (addr, what) in [(metrics_addr, "metrics"), (health_addr, "health probes")] {
            let Some(addr) = addr else { continue };
            if Some(addr) == metrics_addr && what == "health probes" {
                // One listener serves every endpoint when both flags name the same address.
                continue;
            }
            let server = server::serve(addr, opts.health.clone(), opts.metrics.clone())
                .await
                .with_context(|| format!("listening for {what} on {addr}"))?;
            tracing::info!(%addr, "serving {what}");
            tokio::spawn(server);
        }
        connect_and_run(args.manage_crds, &own_namespace, opts).await
    });
    // A deposed leader exits at once: nothing it still runs (a release being read from disk)
    // may hold the process up, and its writes are refused anyway.
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// Connects, brings the CRDs to this operator's schema (`--manage-crds`), reads the config
/// hash key of `own_namespace` and runs the controllers.
async fn connect_and_run(
    manage_crds: bool,
    own_namespace: &str,
    mut opts: controller::Options,
) -> anyhow::Result<()> {
    let config = connect().await?;
    let client =
        kube::Client::try_from(config.clone()).context("creating the Kubernetes client")?;
    if manage_crds {
        crds::ensure(&client, &opts.apis)
            .await
            .context("bringing the provider CRDs to this operator's schema")?;
    }
    opts.config_hash_key =
        capi_provider_operator::hash_key::load_retrying(&client, own_namespace).await;
    controller::run(config, opts).await
}

/// What the operator's Kubernetes API requests say in User-Agent: audit logs and API priority
/// and fairness then tell its requests from other clients'.
pub const USER_AGENT: &str = concat!("capi-provider-operator/", env!("CARGO_PKG_VERSION"));

/// The Kubernetes client configuration (kubeconfig or in-cluster), naming the operator in every
/// request's User-Agent (kube sends none of its own).
async fn connect() -> anyhow::Result<kube::Config> {
    let mut config = kube::Config::infer()
        .await
        .context("connecting to the cluster (kubeconfig or in-cluster config)")?;
    config.headers.push((
        http::header::USER_AGENT,
        http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(config)
}

/// Parses a bind address; "0" (or empty) turns the endpoint off.
fn bind_address(s: &str) -> anyhow::Result<Option<std::net::SocketAddr>> {
    if s.is_empty() || s == "0" {
        return Ok(None);
    }
    let s = s
        .strip_prefix(':')
        .map(|p| format!("0.0.0.0:{p}"))
        .unwrap_or_else(|| s.to_string());
    s.parse()
        .map(Some)
        .with_context(|| format!("invalid bind address {s:?}"))
}

/// The release memory budget: `--release-memory-mib`, else sized from the cgroup's limit.
fn release_memory(mib: Option<u64>) -> controller::budget::Budget {
    use controller::budget;
    let bytes = match mib {
        Some(m) => m.saturating_mul(1024 * 1024),
        None => budget::from_limit(budget::cgroup_memory_limit()),
    };
    tracing::info!(mib = bytes / (1024 * 1024), "release memory budget");
    budget::Budget::new(bytes)
}

/// This replica's identity in leader election: the Pod name, else host name and process id.
fn identity() -> String {
    let host = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_string())
        })
        .unwrap_or_else(|| "capi-provider-operator".into());
    format!("{host}_{}", std::process::id())
}

fn write_crds(output_dir: Option<PathBuf>) -> anyhow::Result<()> {
    let mut crds = capi_operator_api::crd::all_crds()?;
    crds.extend(capi_operator_api::v1alpha2::all_crds()?);
    match output_dir {
        None => {
            print!("{}", capi_yaml::to_multi_doc(&crds)?);
        }
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            for crd in &crds {
                let name = crd.metadata.name.clone().unwrap_or_default();
                let path = dir.join(format!("{name}.yaml"));
                let text = format!(
                    "# Generated by `capi-provider-operator crds`; do not edit.\n{}",
                    capi_yaml::to_multi_doc(std::slice::from_ref(crd))?
                );
                std::fs::write(&path, text)
                    .with_context(|| format!("writing {}", path.display()))?;
            }
        }
    }
    Ok(())
}
