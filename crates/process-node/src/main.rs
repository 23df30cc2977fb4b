//! `capi-process-node`: registers a Node and runs the Pods scheduled to it as local processes.

use std::{net::SocketAddr, path::PathBuf, sync::Arc, time::Duration};

use capi_process_node::{
    agent,
    error::{Error, Result, io},
    net::Network,
    node::{self, NodeInfo},
    pod::Shared,
    trampoline,
};
use clap::Parser;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{
    Client, Config,
    config::{KubeConfigOptions, Kubeconfig},
};

/// Runs the Pods bound to one Node as local processes (needs root).
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Kubeconfig of the cluster.
    #[arg(long)]
    kubeconfig: PathBuf,
    /// Name of the Node to register.
    #[arg(long)]
    node_name: String,
    /// Directory for volumes, logs and address allocations.
    #[arg(long)]
    state_dir: PathBuf,
    /// The images file mapping images to binaries.
    #[arg(long)]
    images: PathBuf,
    /// The pods' IPv4 /24; its first address goes on the bridge.
    #[arg(long)]
    pod_cidr: String,
    /// The Linux bridge to create (at most 15 characters).
    #[arg(long)]
    bridge: String,
    /// First crash back-off, in seconds (kubelet: 10).
    #[arg(long, default_value_t = 10)]
    initial_backoff: u64,
    /// Maximum crash back-off, in seconds (kubelet: 300).
    #[arg(long, default_value_t = 300)]
    max_backoff: u64,
    /// Upper bound on a pod's termination grace period, in seconds.
    #[arg(long, default_value_t = 30)]
    max_grace: u64,
}

fn main() -> std::process::ExitCode {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some(trampoline::SUBCOMMAND) {
        let e = trampoline::run(argv.get(2).map(String::as_str).unwrap_or("{}"));
        eprintln!("capi-process-node: starting the container failed: {e}");
        return std::process::ExitCode::from(127);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = Args::parse();
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("capi-process-node: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!(error = %e, "capi-process-node failed");
            std::process::ExitCode::FAILURE
        }
    }
}

async fn client(path: &PathBuf) -> Result<(Client, SocketAddr)> {
    let kc = Kubeconfig::read_from(path)?;
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default()).await?;
    let host = config.cluster_url.host().unwrap_or("127.0.0.1").to_string();
    let port = config.cluster_url.port_u16().unwrap_or(443);
    let target = tokio::net::lookup_host((host.as_str(), port))
        .await
        .map_err(io(format!("resolving {host}")))?
        .next()
        .ok_or_else(|| Error::Network(format!("{host} has no address")))?;
    Ok((Client::try_from(config)?, target))
}

async fn run(args: Args) -> Result<()> {
    for sub in ["logs", "pods"] {
        std::fs::create_dir_all(args.state_dir.join(sub)).map_err(io("creating the state dir"))?;
    }
    let (client, api_target) = client(&args.kubeconfig).await?;
    let net = Network::new(&args.bridge, &args.pod_cidr, &args.state_dir)?;
    net.start().await?;
    let info = NodeInfo {
        name: args.node_name.clone(),
        ip: net.gateway(),
        started: Time(jiff::Timestamp::now()),
    };
    if let Err(e) = node::register(&client, &info).await {
        net.stop().await;
        return Err(e);
    }
    tracing::info!(node = %info.name, ip = %info.ip, "registered; running pods");
    let heartbeat = tokio::spawn(heartbeats(client.clone(), info.clone()));
    let shared = Arc::new(Shared {
        client,
        node: args.node_name,
        node_ip: info.ip.to_string(),
        net,
        state_dir: args.state_dir,
        images: args.images,
        api_target,
        backoff_initial: Duration::from_secs(args.initial_backoff),
        backoff_max: Duration::from_secs(args.max_backoff),
        max_grace: Duration::from_secs(args.max_grace),
    });
    agent::run(shared.clone(), shutdown_signal()).await;
    heartbeat.abort();
    shared.net.stop().await;
    tracing::info!("stopped every pod and removed the pod network");
    Ok(())
}

async fn heartbeats(client: Client, info: NodeInfo) {
    loop {
        tokio::time::sleep(node::HEARTBEAT).await;
        if let Err(e) = node::heartbeat(&client, &info).await {
            tracing::warn!(error = %e, "node heartbeat");
        }
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        return std::future::pending().await;
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    tracing::info!("stopping");
}
