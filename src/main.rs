//! `podset-operator`: runs the PodSet and At controllers, or prints their CRDs.

use std::sync::Arc;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use podset_operator::controller::{self, Settings};
use podset_operator::metrics::Metrics;
use podset_operator::telemetry::{self, LogFormat};
use tokio_util::sync::CancellationToken;
use tracing::info;

#[derive(Parser)]
#[command(
    version,
    about = "Kubernetes operator for PodSets (app.example.com) and Ats (cnat.programming-kubernetes.info)"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the controllers against the kubeconfig's cluster, or in-cluster config.
    Run(RunArgs),
    /// Print every CRD as YAML, for `kubectl apply --server-side -f -`.
    Crds,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Podset,
    At,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only this namespace; empty watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "")]
    namespace: String,

    /// Which controllers to run.
    #[arg(
        long,
        env = "CONTROLLERS",
        value_enum,
        value_delimiter = ',',
        default_value = "podset,at"
    )]
    controllers: Vec<Which>,

    /// Reconciles in flight at once, per controller (0 = unbounded).
    #[arg(long, env = "CONCURRENCY", default_value_t = 16)]
    concurrency: u16,

    /// Log format: json lines, or text for a terminal.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    log_format: LogFormat,

    /// Log filter, as RUST_LOG: `info`, `debug`, `podset_operator=debug,kube=warn`.
    #[arg(long, env = "LOG_LEVEL", default_value = "info")]
    log_level: String,

    /// This instance's name in events and leases (the pod name in a cluster).
    #[arg(long, env = "POD_NAME", default_value_t = default_instance())]
    instance: String,
}

fn default_instance() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "podset-operator".into())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", podset_operator::api::crds_yaml());
            Ok(())
        }
        Command::Run(args) => run(args).await,
    }
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level)?;
    let client = kube::Client::try_default()
        .await
        .context("connecting to Kubernetes (kubeconfig or in-cluster)")?;
    let settings = Settings {
        namespace: Some(args.namespace.clone()).filter(|ns| !ns.is_empty()),
        podset: args.controllers.contains(&Which::Podset),
        at: args.controllers.contains(&Which::At),
        concurrency: args.concurrency,
        instance: args.instance.clone(),
    };
    info!(
        namespace = settings.namespace.as_deref().unwrap_or("<all>"),
        podset = settings.podset,
        at = settings.at,
        "starting"
    );
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    controller::run(client, settings, Arc::new(Metrics::default()), shutdown).await?;
    info!("stopped");
    Ok(())
}

async fn cancel_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    info!("shutdown signal received");
    token.cancel();
}
