//! `kubectl-capi_providers`: a kubectl plugin (`kubectl capi-providers ...`) for the
//! capi-provider-operator, built on the same components engine as the operator.
//!
//! - `init`: installs the operator (the release manifest of the plugin's version, built in),
//!   cert-manager and the providers named, with their variables in a Secret; `--wait` follows
//!   them until Ready.
//! - `delete`: deletes providers (by name or `--all`), their deletionPolicy from clusterctl's
//!   `--include-crd`/`--include-namespace`, and waits until they are gone.
//! - `upgrade plan` / `upgrade apply [--contract vX]`: versions within and across contracts;
//!   a contract change runs pause → upgrade → unpause.
//! - `preload`: writes or applies the air-gapped ConfigMaps of releases; `--images` lists the
//!   images to mirror.
//! - `migrate`: adopts providers installed by clusterctl, without reinstalling them.
//! - `verify`: checks a release against the provider contracts.
//! - `describe`: a release's variables (with defaults) and images.
//! - `render`: the objects the operator would apply for a provider, from every source it reads;
//!   `diff`: what it would change on the live cluster (exit 1 on differences, as `kubectl diff`).
//! - `move`: moves the management cluster to another one (providers, their inputs, then
//!   `clusterctl move`, then the source's providers retired), refusing when the sides differ.
//! - `publish`: pushes a release directory as an OCI artifact `fetchConfig.oci` reads.
//! - `completion`: shell completion scripts; `krew-manifest`: the krew manifest of this build.

// The project rule: no function over 80 lines (threshold in the workspace clippy.toml).

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Prints a line on standard output; a closed output (`| head`) ends the program quietly.
macro_rules! say {
    ($($t:tt)*) => {
        $crate::say_line(format_args!($($t)*))
    };
}

mod certmanager;
mod cluster;
mod delete;
mod describe;
mod desired;
mod diff;
mod examples;
mod init;
mod krew;
mod migrate;
mod mirror;
mod moving;
mod operator;
mod output;
mod preload;
mod progress;
mod providers;
mod publish;
mod release;
mod upgrade;
mod vars;
mod verify;

/// Manage Cluster API providers through the capi-provider-operator.
#[derive(Parser, Debug)]
#[command(name = "kubectl capi-providers", bin_name = "kubectl capi-providers", version, about, long_about = None, after_help = examples::ROOT)]
struct Cli {
    #[command(flatten)]
    cluster: cluster::ClusterFlags,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Install the operator (unless it runs already), cert-manager and the providers named
    /// (core, bootstrap, control-plane, infrastructure, ipam, runtime-extension, addon), with
    /// their variables in a Secret.
    #[command(after_help = examples::INIT)]
    Init(Box<init::Args>),
    /// Delete providers as `clusterctl delete` does: --include-crd/--include-namespace set
    /// their deletionPolicy to Purge; waits until they are gone.
    #[command(after_help = examples::DELETE)]
    Delete(Box<delete::Args>),
    /// Plan or apply provider upgrades.
    #[command(subcommand, after_help = examples::UPGRADE)]
    Upgrade(upgrade::Command),
    /// Fetch releases and write or apply the ConfigMaps fetchConfig.selector reads
    /// (air-gapped installs).
    #[command(after_help = examples::PRELOAD)]
    Preload(Box<preload::Args>),
    /// Adopt providers installed by clusterctl into provider objects of the operator, with no
    /// reinstall and no controller restart.
    #[command(after_help = examples::MIGRATE)]
    Migrate(Box<migrate::Args>),
    /// Check a release's components against the Cluster API provider contracts.
    #[command(after_help = examples::VERIFY)]
    Verify(Box<verify::Args>),
    /// Show a release's variables with their defaults, and its images (what `clusterctl
    /// generate provider --describe` shows; a workload cluster is described by `clusterctl
    /// describe cluster`, which this is not).
    #[command(after_help = examples::DESCRIBE)]
    Describe(Box<describe::Args>),
    /// Show the objects the operator would apply for a provider: its release from the source
    /// it names, its variables Secret and additional manifests read from the cluster.
    #[command(after_help = examples::RENDER)]
    Render(Box<desired::RenderArgs>),
    /// Show what the operator would change on the live cluster for a provider (objects added,
    /// removed, changed; restarts, CRD versions, webhooks). Exit status 0: no differences,
    /// 1: differences, 2: an error.
    #[command(after_help = examples::DIFF)]
    Diff(Box<diff::Args>),
    /// Move the management cluster to another one: declare the providers there, wait for
    /// Ready, `clusterctl move` the Clusters, retire the source's providers. Refuses when the
    /// two sides' versions or contracts differ.
    #[command(after_help = examples::MOVE)]
    Move(Box<moving::Args>),
    /// Push a release directory (metadata.yaml, components, ...) as an OCI artifact that a
    /// provider's fetchConfig.oci reads, tagged with its version.
    #[command(after_help = examples::PUBLISH)]
    Publish(Box<publish::Args>),
    /// Print a shell completion script for kubectl-capi_providers.
    #[command(after_help = examples::COMPLETION)]
    Completion {
        /// The shell.
        #[arg(value_enum)]
        shell: CompletionShell,
    },
    /// Print the krew plugin manifest of this build (version, archives and their SHA-256).
    #[command(after_help = examples::KREW_MANIFEST)]
    KrewManifest(krew::Args),
}

/// The shells `completion` writes scripts for.
#[derive(clap::ValueEnum, Debug, Clone, Copy)]
enum CompletionShell {
    Bash,
    Zsh,
    Fish,
}

/// Writes the completion script of `shell` on standard output. The script completes the
/// binary's own name: a name with a space (`kubectl capi-providers`) cannot be completed.
fn print_completion(shell: CompletionShell) {
    use clap::CommandFactory;
    let shell = match shell {
        CompletionShell::Bash => clap_complete::Shell::Bash,
        CompletionShell::Zsh => clap_complete::Shell::Zsh,
        CompletionShell::Fish => clap_complete::Shell::Fish,
    };
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, krew::BIN, &mut std::io::stdout());
}

/// A failure already reported on standard output (verify findings, diff's differences): exit 1
/// without more.
#[derive(Debug)]
struct Reported;

impl std::fmt::Display for Reported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("reported")
    }
}

impl std::error::Error for Reported {}

fn main() -> ExitCode {
    let cli = Cli::parse();
    // As `kubectl diff`: 1 means differences, so an error of `diff` exits 2.
    let error_code = if matches!(cli.command, Command::Diff(_)) {
        ExitCode::from(2)
    } else {
        ExitCode::FAILURE
    };
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return error_code;
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.is::<Reported>() => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e:#}");
            error_code
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<()> {
    match cli.command {
        Command::Init(args) => init::run(&args, &cli.cluster).await,
        Command::Delete(args) => delete::run(&args, &cli.cluster).await,
        Command::Upgrade(cmd) => upgrade::run(&cmd, &cli.cluster).await,
        Command::Preload(args) => preload::run(&args, &cli.cluster).await,
        Command::Migrate(args) => migrate::run(&args, &cli.cluster).await,
        Command::Verify(args) => {
            let outcome = verify::run(&args).await?;
            if outcome.errors > 0 {
                eprintln!("verify: {} contract errors", outcome.errors);
                return Err(Reported.into());
            }
            Ok(())
        }
        Command::Describe(args) => describe::run(&args, &cli.cluster).await,
        Command::Render(args) => {
            let cluster = cluster::Cluster::connect(&cli.cluster).await?;
            desired::run_render(&args, &cluster).await
        }
        Command::Diff(args) => {
            let cluster = cluster::Cluster::connect(&cli.cluster).await?;
            if diff::run(&args, &cluster).await? {
                return Err(Reported.into());
            }
            Ok(())
        }
        Command::Move(args) => moving::run(&args, &cli.cluster).await,
        Command::Publish(args) => publish::run(&args).await,
        Command::Completion { shell } => {
            print_completion(shell);
            Ok(())
        }
        Command::KrewManifest(args) => krew::run(&args),
    }
}

/// Writes one line to standard output, exiting quietly when the reader has gone away.
pub fn say_line(args: std::fmt::Arguments<'_>) {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{args}").is_err() {
        std::process::exit(0);
    }
}

/// Parses a duration: `90`, `90s`, `10m`, `1h`.
pub fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    let s = s.trim();
    let (num, unit) = match s.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 90s, 10m)"))?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{s:?} is not a duration (e.g. 90s, 10m)")),
    };
    Ok(std::time::Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("90"), Ok(std::time::Duration::from_secs(90)));
        assert_eq!(
            parse_duration("2m"),
            Ok(std::time::Duration::from_secs(120))
        );
        assert!(parse_duration("2d").is_err() && parse_duration("m").is_err());
    }

    /// Every command's help, subcommands included, shows examples.
    #[test]
    fn every_help_has_examples() {
        use clap::CommandFactory;
        fn walk(cmd: &mut clap::Command, path: &str, missing: &mut Vec<String>) {
            let path = format!("{path} {}", cmd.get_name());
            if !cmd.render_long_help().to_string().contains("Examples:") {
                missing.push(path.clone());
            }
            // clap's own `help` subcommand only prints the others' help.
            for sub in cmd.get_subcommands_mut().filter(|s| s.get_name() != "help") {
                walk(sub, &path, missing);
            }
        }
        let mut missing = Vec::new();
        let mut cli = Cli::command();
        cli.build();
        for sub in cli.get_subcommands_mut().filter(|s| s.get_name() != "help") {
            walk(sub, "", &mut missing);
        }
        if !Cli::command()
            .render_long_help()
            .to_string()
            .contains("Examples:")
        {
            missing.push("(root)".into());
        }
        assert!(missing.is_empty(), "help without examples: {missing:?}");
    }

    #[test]
    fn the_cli_is_well_formed() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
