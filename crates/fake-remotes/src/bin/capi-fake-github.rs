//! `capi-fake-github --dir DIR [--listen 127.0.0.1:PORT] --repo OWNER/REPO=LABEL[,LABEL...]...`
//! serves releases kept in clusterctl's local-repository layout through GitHub's releases API
//! (and GitLab's generic-packages file URLs), for the demo and for trying the operator by hand.
//! Prints the URL it listens on as its first line of output, then serves until killed.

use std::{io::Write, path::PathBuf};

use capi_fake_remotes::FakeServer;
use clap::Parser;

/// Command-line arguments.
#[derive(Debug, Parser)]
#[command(
    name = "capi-fake-github",
    about = "Serves DIR/<label>/<version>/<file> releases through a local GitHub-compatible releases API"
)]
struct Args {
    /// Release directory in clusterctl's local-repository layout.
    #[arg(long)]
    dir: PathBuf,
    /// Address to listen on (loopback; port 0 picks a free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    listen: String,
    /// A repository and the labels (subdirectories of DIR) its releases are made of.
    #[arg(
        long = "repo",
        value_name = "OWNER/REPO=LABEL[,LABEL...]",
        required = true
    )]
    repos: Vec<String>,
}

fn parse_repo(spec: &str) -> Result<(String, Vec<String>), String> {
    let (repo, labels) = spec
        .split_once('=')
        .ok_or_else(|| format!("--repo {spec:?}: expected OWNER/REPO=LABEL[,LABEL...]"))?;
    let labels: Vec<String> = labels
        .split(',')
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    if !repo.contains('/') || labels.is_empty() {
        return Err(format!(
            "--repo {spec:?}: expected OWNER/REPO=LABEL[,LABEL...]"
        ));
    }
    Ok((repo.to_string(), labels))
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    if !args.dir.is_dir() {
        return Err(format!("--dir {}: not a directory", args.dir.display()).into());
    }
    let repos = args
        .repos
        .iter()
        .map(|s| parse_repo(s))
        .collect::<Result<Vec<_>, _>>()?;
    let labels: Vec<Vec<&str>> = repos
        .iter()
        .map(|(_, l)| l.iter().map(String::as_str).collect())
        .collect();
    let spec: Vec<(&str, &[&str])> = repos
        .iter()
        .zip(&labels)
        .map(|((r, _), l)| (r.as_str(), l.as_slice()))
        .collect();
    let server = FakeServer::start_on(&args.dir, &spec, &args.listen).await?;
    // Scripts read the first line to learn the port, so it goes out at once.
    let mut out = std::io::stdout().lock();
    writeln!(out, "{}", server.url())?;
    out.flush()?;
    drop(out);
    eprintln!(
        "serving {} from {} (assets redirect host {})",
        repos
            .iter()
            .map(|(r, l)| format!("{r}={}", l.join(",")))
            .collect::<Vec<_>>()
            .join(" "),
        args.dir.display(),
        server.asset_url()
    );
    std::future::pending::<()>().await;
    Ok(())
}
