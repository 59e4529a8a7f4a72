//! `podset-operator`: runs the PodSet and At controllers, or prints their manifests.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand, ValueEnum};
use podset_operator::client::{self, ControllerWrites};
use podset_operator::clock::Clock;
use podset_operator::controller::{Exported, Settings};
use podset_operator::fence::Fence;
use podset_operator::flags;
use podset_operator::http::{self, MetricsSecurity};
use podset_operator::metrics::Metrics;
use podset_operator::operator::{Election, Operator};
use podset_operator::scope::Scope;
use podset_operator::telemetry::{self, LogFormat};
use podset_operator::webhook::keeper::{Provisioned, Service};
use podset_operator::webhook::{self, Certificate};
use podset_operator::{api, migrate};
use tokio_util::sync::CancellationToken;
use tracing::{error, info, warn};

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
    Run(Box<RunArgs>),
    /// Print every CRD as YAML, for `kubectl apply --server-side -f -`.
    Crds,
    /// Check an installed operator from a pod beside it (the chart's `helm test`): both CRDs
    /// are served and every ready operator pod answers /readyz.
    Check(podset_operator::check::Check),
    /// Rewrite every stored PodSet and At at a version and trim the CRDs' storedVersions to it,
    /// as `cmctl upgrade migrate-api-version` does: after an upgrade, to v1beta1 (the operator's
    /// leader does this itself when it watches every namespace); before going back to a release
    /// that knows only v1alpha1, `--to v1alpha1`, which first makes it the storage version.
    /// Uses the kubeconfig's credentials: they must read and write every PodSet and At, and the
    /// CRDs (docs/versioning.md).
    Migrate(Migrate),
    /// Write a manifest's PodSets and Ats at another version, offline, as the conversion
    /// webhook would (`kubectl convert` knows only built-in kinds).
    Convert(podset_operator::convert::Convert),
    /// Write the generated CRD and RBAC manifests (config/, charts/) below a directory.
    Manifests {
        /// The repository root.
        #[arg(long, default_value = ".")]
        root: PathBuf,
    },
}

#[derive(clap::Args)]
struct Migrate {
    /// The version to store every object at.
    #[arg(long, default_value = api::STORAGE_VERSION, value_parser = [api::STORAGE_VERSION, api::DEPRECATED_VERSION])]
    to: String,
    /// Go back to v1alpha1 even though some Ats that have not run yet use what v1alpha1
    /// cannot express: a release that knows only v1alpha1 runs their v1alpha1 form.
    #[arg(long)]
    force: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Which {
    Podset,
    At,
}

#[derive(clap::Args)]
struct RunArgs {
    /// Watch only these namespaces (names separated by commas; each needs the manager's
    /// Role); empty watches all namespaces.
    #[arg(long, env = "WATCH_NAMESPACE", default_value = "", value_parser = Scope::parse)]
    namespace: Scope,

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
    #[arg(long, env = "CONCURRENCY", default_value_t = 64)]
    concurrency: u16,

    /// At reconciles in flight at once (0 = unbounded). Ats due together start breadth-first:
    /// each waits for the write window in turn, so every due At's create leaves before any
    /// At's later writes; a bound below the number due at once makes the last ones wait for
    /// whole reconciles of the first.
    #[arg(long, env = "AT_CONCURRENCY", default_value_t = 1024)]
    at_concurrency: u16,

    /// Seconds between looks at a converged PodSet though nothing changed: the watch triggers
    /// only on spec changes, so a status overwritten by someone else (a deposed leader's late
    /// write) is corrected then. A look at a PodSet that is as it should be writes nothing.
    #[arg(long, env = "RESYNC_PERIOD_SECONDS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86_400))]
    resync_period_seconds: u64,

    /// API requests that change state (create, patch, delete) in flight at once (1 to
    /// 10000); more wait their turn in the operator rather than draw 429s from the API server.
    #[arg(long, env = "MAX_MUTATING_REQUESTS", default_value_t = 64,
        value_parser = clap::value_parser!(u64).range(1..=10_000))]
    max_mutating_requests: u64,

    /// Address of the /metrics endpoint: IP:PORT, or :PORT for every interface, IPv4 and IPv6.
    #[arg(long, env = "METRICS_BIND_ADDRESS", default_value = ":8443", value_parser = flags::bind_address)]
    metrics_bind_address: SocketAddr,

    /// Serve /metrics over HTTPS to callers whose bearer token the API server authenticates
    /// (TokenReview) and allows `get` on `/metrics` (SubjectAccessReview). `false` serves
    /// plain HTTP to anyone who can reach the port: for local development only.
    #[arg(long, env = "METRICS_SECURE", default_value_t = true, action = clap::ArgAction::Set)]
    metrics_secure: bool,

    /// Directory holding the metrics TLS certificate and key (`tls.crt`, `tls.key`, as a
    /// `kubernetes.io/tls` Secret mounts them); unset, a self-signed one is made at start.
    #[arg(long, env = "METRICS_CERT_DIR")]
    metrics_cert_dir: Option<PathBuf>,

    /// Address of the conversion webhook (HTTPS, `POST /convert`), which the API server calls
    /// to convert an At between v1alpha1 and v1beta1: IP:PORT, or :PORT. Served only with a
    /// certificate: `--webhook-cert-dir`, or one provisioned for `--webhook-service`.
    #[arg(long, env = "WEBHOOK_BIND_ADDRESS", default_value = ":9443", value_parser = flags::bind_address)]
    webhook_bind_address: SocketAddr,

    /// Directory holding the webhook's certificate and key (`tls.crt`, `tls.key`: a mounted
    /// Secret, cert-manager's), read again when they change. With `--webhook-service`, the At
    /// CRD is pointed at that Service trusting the `ca.crt` beside them (as cert-manager's CA
    /// injector would make it).
    #[arg(long, env = "WEBHOOK_CERT_DIR")]
    webhook_cert_dir: Option<PathBuf>,

    /// The Service in front of the replicas' webhooks, in the operator's namespace: the
    /// operator points the At CRD's conversion at it, and, without `--webhook-cert-dir`,
    /// makes and renews the webhook's certificate for its names (in `--webhook-cert-secret`)
    /// with its CA as the CRD's `caBundle`.
    #[arg(long, env = "WEBHOOK_SERVICE", value_parser = flags::lease_name)]
    webhook_service: Option<String>,

    /// The Secret, in the operator's namespace, holding the certificates provisioned for
    /// `--webhook-service`.
    #[arg(long, env = "WEBHOOK_CERT_SECRET", default_value = "podset-operator-webhook-cert",
        value_parser = flags::lease_name)]
    webhook_cert_secret: String,

    /// The operator's own namespace (the downward API's `metadata.namespace`); default: the
    /// mounted ServiceAccount's.
    #[arg(long, env = "POD_NAMESPACE", value_parser = flags::namespace)]
    pod_namespace: Option<String>,

    /// As leader, write back every PodSet and At still stored at an older version, at the
    /// storage version, then (watching every namespace) trim the CRDs' storedVersions: what an
    /// upgrade leaves, migrated without a step of the user's (docs/versioning.md).
    #[arg(long, env = "MIGRATE_STORAGE", default_value_t = true, action = clap::ArgAction::Set)]
    migrate_storage: bool,

    /// Address of the /livez and /readyz probe endpoints: IP:PORT, or :PORT.
    #[arg(
        long,
        env = "HEALTH_PROBE_BIND_ADDRESS",
        default_value = ":8081",
        value_parser = flags::bind_address
    )]
    health_probe_bind_address: SocketAddr,

    /// Elect a leader among replicas on a Lease; only the leader runs the controllers.
    #[arg(long, env = "LEADER_ELECT", default_value_t = false)]
    leader_elect: bool,

    /// With --leader-elect, a standby keeps its pod cache synced (a watch of the operator's
    /// pods: memory as the leader's, no writes), so that it acts within a second of winning
    /// the Lease instead of listing every pod first. `false`: a standby holds nothing.
    #[arg(long, env = "WARM_STANDBY", default_value_t = true, action = clap::ArgAction::Set)]
    warm_standby: bool,

    /// Name of the leader-election Lease.
    #[arg(
        long,
        env = "LEADER_ELECTION_ID",
        default_value = "podset-operator-leader",
        value_parser = flags::lease_name
    )]
    leader_election_id: String,

    /// Namespace of the Lease; default: the operator's own (in a pod), else `default`.
    #[arg(long, env = "LEADER_ELECTION_NAMESPACE", value_parser = flags::namespace)]
    leader_election_namespace: Option<String>,

    /// Lease duration in seconds (2 to 3600): how soon a standby takes over from a leader
    /// that died, and how long a new Lease's creator waits before it leads.
    #[arg(long, env = "LEASE_DURATION_SECONDS", default_value_t = 15,
        value_parser = clap::value_parser!(u64).range(2..=3600))]
    lease_duration_seconds: u64,

    /// How long, after SIGTERM, in-flight reconciles may take before the process exits (0 to
    /// 3600).
    #[arg(long, env = "SHUTDOWN_TIMEOUT_SECONDS", default_value_t = 10,
        value_parser = clap::value_parser!(u64).range(0..=3600))]
    shutdown_timeout_seconds: u64,

    /// Log format: json lines, or text for a terminal.
    #[arg(long, env = "LOG_FORMAT", value_enum, default_value = "json")]
    log_format: LogFormat,

    /// Log level (`info`, `warning`, `WARN`, ...) or filter, as RUST_LOG:
    /// `warn,podset_operator=debug`; anything else is refused.
    #[arg(long, env = "LOG_LEVEL", default_value = "info", value_parser = flags::log_filter)]
    log_level: String,

    /// This instance's name in events and the Lease (the pod name in a cluster).
    #[arg(long, env = "POD_NAME", default_value_t = podset_operator::leader::default_identity(),
        value_parser = flags::instance)]
    instance: String,
}

/// The namespace of the pod we run in, from the mounted ServiceAccount.
fn own_namespace() -> Option<String> {
    std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
        .ok()
        .map(|s| s.trim().to_string())
}

/// jemalloc: at 100,000 pods it holds 6 MiB less than glibc's malloc for the same heap
/// (BENCHMARKS.md). Without the `jemalloc` feature (heap profiles), the system's malloc.
#[cfg(feature = "jemalloc")]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc's options, read before `main` (`_RJEM_MALLOC_CONF` in the environment overrides
/// them). One arena, not four a CPU: the operator's few workers share it through their
/// thread caches, and each more arena keeps partly used pages of its own. Freed pages go back
/// to the system at once: kept for reuse (jemalloc's default, 10 s), the pages an initial
/// list of 100,000 pods decodes and drops raised the restart's peak by 14 MiB (BENCHMARKS.md),
/// and a memory limit must cover that peak.
#[cfg(feature = "jemalloc")]
#[unsafe(export_name = "_rjem_malloc_conf")]
static MALLOC_CONF: Option<&'static std::ffi::c_char> =
    Some(unsafe { &*c"narenas:1,dirty_decay_ms:0,muzzy_decay_ms:0".as_ptr() });

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => {
            print!("{}", podset_operator::api::crds_yaml());
            Ok(())
        }
        Command::Manifests { root } => {
            for path in podset_operator::manifests::write(&root)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
        Command::Run(args) => run(*args).await,
        Command::Migrate(m) => migrate_storage(m).await,
        Command::Convert(c) => c.run(),
        Command::Check(check) => podset_operator::check::main(check).await,
    }
}

/// The operator's clients (see `podset_operator::client`) for the kubeconfig's cluster: the
/// controllers', behind `fence`, and one for the Lease and the metrics reviews.
struct Clients {
    controllers: kube::Client,
    own: kube::Client,
}

async fn clients(metrics: Arc<Metrics>, args: &RunArgs, fence: Fence) -> anyhow::Result<Clients> {
    let config = kube::Config::infer()
        .await
        .context("finding Kubernetes credentials (kubeconfig or in-cluster)")?;
    let controller_writes = ControllerWrites {
        max_in_flight: usize::try_from(args.max_mutating_requests)?,
        fence,
    };
    let build = |controller_writes| {
        client::build(
            config.clone(),
            &args.instance,
            metrics.clone(),
            controller_writes,
        )
    };
    Ok(Clients {
        controllers: build(Some(controller_writes))?,
        own: build(None)?,
    })
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    telemetry::init(args.log_format, &args.log_level)?;
    let exported = Exported::default();
    let shutdown = CancellationToken::new();
    tokio::spawn(cancel_on_signal(shutdown.clone()));
    tokio::spawn(podset_operator::memory::release_every(
        podset_operator::memory::RELEASE_EVERY,
    ));

    let fence = match args.leader_elect {
        true => Fence::closed(),
        false => Fence::always_open(),
    };
    let clients = clients(exported.metrics.clone(), &args, fence.clone()).await?;
    let stop_http = CancellationToken::new();
    let health_addr = http::serve_probes(
        args.health_probe_bind_address,
        exported.health.clone(),
        stop_http.clone(),
    )
    .await
    .with_context(|| format!("serving probes on {}", args.health_probe_bind_address))?;
    let security = if args.metrics_secure {
        MetricsSecurity::Secure {
            cert_dir: args.metrics_cert_dir.clone(),
            client: clients.own.clone(),
        }
    } else {
        warn!("serving /metrics in plain HTTP to anyone who can reach it (--metrics-secure=false)");
        MetricsSecurity::Plain
    };
    let metrics_addr = http::serve_metrics(
        args.metrics_bind_address,
        exported.metrics.registry(exported.pods.clone()),
        security,
        stop_http.clone(),
    )
    .await
    .with_context(|| format!("serving metrics on {}", args.metrics_bind_address))?;
    let webhook_addr = serve_webhook(&args, &clients.own, &shutdown, &stop_http).await?;
    let settings = Settings {
        scope: args.namespace.clone(),
        podset: args.controllers.contains(&Which::Podset),
        at: args.controllers.contains(&Which::At),
        concurrency: args.concurrency,
        at_concurrency: args.at_concurrency,
        resync: Duration::from_secs(args.resync_period_seconds),
        instance: args.instance.clone(),
        clock: Clock::system(),
    };
    info!(
        target: podset_operator::telemetry::START_TARGET,
        namespace = %settings.scope,
        podset = settings.podset,
        at = settings.at,
        %metrics_addr,
        metrics_secure = args.metrics_secure,
        %health_addr,
        webhook_addr = webhook_addr.map(|a| a.to_string()),
        leader_elect = args.leader_elect,
        "starting"
    );

    let election = args.leader_elect.then(|| Election {
        namespace: args
            .leader_election_namespace
            .clone()
            .or_else(own_namespace)
            .unwrap_or_else(|| "default".into()),
        name: args.leader_election_id.clone(),
        duration: Duration::from_secs(args.lease_duration_seconds),
    });
    let operator = Operator {
        controllers: clients.controllers,
        lease: clients.own,
        fence,
        settings,
        exported,
        election,
        warm_standby: args.warm_standby,
        migrate_storage: args.migrate_storage,
        shutdown_timeout: Duration::from_secs(args.shutdown_timeout_seconds),
    };
    let result = operator.run(shutdown).await;
    if webhook_addr.is_some() {
        info!(drain = ?webhook::DRAIN, "stopped; still serving the conversion webhook while endpoints drop this replica");
        tokio::time::sleep(webhook::DRAIN).await;
    }
    stop_http.cancel();
    match &result {
        Ok(()) => info!("stopped"),
        Err(e) => error!(error = format!("{e:#}"), "stopped with an error"),
    }
    result
}

/// `podset-operator migrate`: every PodSet and At stored at `--to`, the CRDs' storedVersions
/// trimmed to it.
async fn migrate_storage(m: Migrate) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("finding Kubernetes credentials (kubeconfig)")?;
    if m.to == api::DEPRECATED_VERSION {
        let richer = migrate::richer_than_v1alpha1(&client).await?;
        if !richer.is_empty() && !m.force {
            anyhow::bail!(
                "these Ats have not run and use what v1alpha1 cannot express; a release that \
                 knows only v1alpha1 would run their v1alpha1 form (the command line and image) \
                 and ignore the rest: let them run, delete them, or pass --force: {}",
                richer.join(", ")
            );
        }
        for kind in migrate::KINDS {
            migrate::store_at(&client, kind, &m.to).await?;
        }
    }
    for kind in migrate::KINDS {
        let done = migrate::migrate(&client, kind, &m.to, &Scope::All).await?;
        println!(
            "{}: {} written back at {}; storedVersions [{}]",
            kind.crd, done.rewritten, m.to, m.to
        );
    }
    Ok(())
}

/// Serves the conversion webhook if it has a certificate, once it has it: until then the
/// process is not ready, as the API server could not call it. Its address, if served.
async fn serve_webhook(
    args: &RunArgs,
    client: &kube::Client,
    shutdown: &CancellationToken,
    stop: &CancellationToken,
) -> anyhow::Result<Option<SocketAddr>> {
    let service = match &args.webhook_service {
        Some(name) => Some(Service {
            namespace: args.pod_namespace.clone().or_else(own_namespace).context(
                "--webhook-service names a Service of the operator's namespace: run in a pod, \
                 or set POD_NAMESPACE",
            )?,
            name: name.clone(),
        }),
        None => None,
    };
    let certificate = match (&args.webhook_cert_dir, service) {
        (Some(dir), service) => Certificate::Mounted(dir.clone(), service),
        (None, Some(service)) => Certificate::Provisioned(Provisioned {
            secret: args.webhook_cert_secret.clone(),
            service,
        }),
        (None, None) => {
            info!(
                "no conversion webhook: give --webhook-service or --webhook-cert-dir to serve one"
            );
            return Ok(None);
        }
    };
    let addr = args.webhook_bind_address;
    webhook::serve(addr, certificate, client.clone(), shutdown, stop.clone())
        .await
        .with_context(|| format!("serving the conversion webhook on {addr}"))
}

async fn cancel_on_signal(token: CancellationToken) {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        biased;
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
    info!("shutdown signal received");
    token.cancel();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// jemalloc read the options the binary gives it.
    #[cfg(feature = "jemalloc")]
    #[test]
    fn the_allocator_runs_with_one_arena_and_gives_freed_pages_back_at_once() {
        fn read<T: Default>(name: &std::ffi::CStr) -> T {
            let mut value = T::default();
            let mut len = std::mem::size_of::<T>();
            // SAFETY: `value` is of the type jemalloc documents for the option, `len` its size.
            let rc = unsafe {
                tikv_jemalloc_sys::mallctl(
                    name.as_ptr(),
                    (&raw mut value).cast(),
                    &mut len,
                    std::ptr::null_mut(),
                    0,
                )
            };
            assert_eq!(rc, 0, "{name:?}");
            value
        }
        assert_eq!(read::<u32>(c"opt.narenas"), 1);
        assert_eq!(read::<isize>(c"opt.dirty_decay_ms"), 0);
        assert_eq!(read::<isize>(c"opt.muzzy_decay_ms"), 0);
    }

    fn run(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(["podset-operator", "run"].iter().chain(args))
    }

    /// Issue 26: an unbounded lease duration wrapped in the Lease's i32 field, and twice it
    /// could overflow.
    #[test]
    fn a_lease_duration_outside_2_to_3600_seconds_is_refused() {
        for bad in ["0", "1", "3601", "18446744073709551615"] {
            let flag = format!("--lease-duration-seconds={bad}");
            assert!(run(&[&flag]).is_err(), "{bad} accepted");
        }
        for good in ["2", "15", "3600"] {
            let flag = format!("--lease-duration-seconds={good}");
            assert!(run(&[&flag]).is_ok(), "{good} refused");
        }
    }
}
