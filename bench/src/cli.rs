//! The command line and the sizes of a run.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    about = "Benchmarks and soak test of podset-operator on a local Kubernetes control plane"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub bench: BenchArgs,
}

#[derive(Subcommand)]
pub enum Command {
    /// Random scaling of 50 PodSets plus random pod deletions; RSS sampled over time.
    Soak {
        #[arg(long, default_value_t = 20)]
        minutes: u64,
        #[arg(long, default_value = "target/release/podset-operator")]
        operator: PathBuf,
    },
    /// A real node: time to Ready, pod start latency, At lateness, kubelet + containerd RSS.
    Node {
        #[arg(long, default_value = "target/release/podset-operator")]
        operator: PathBuf,
        /// Pods created at once for the start latency.
        #[arg(long, default_value_t = 20)]
        pods: usize,
    },
}

#[derive(clap::Args, Clone)]
pub struct BenchArgs {
    /// The operator binary to measure (build it with --release for real figures).
    #[arg(long, default_value = "target/release/podset-operator")]
    pub operator: PathBuf,
    /// Repetitions of each measurement; medians are reported.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Tiny sizes, one run: checks the harness, not the speed.
    #[arg(long)]
    pub smoke: bool,
    /// Only these scenarios (w1,w2,w3,w4,w5,conversion,decode,apf,at,failover,failover-w5,
    /// blackhole). conversion: the At conversion webhook at 1,000 reads a second against the
    /// same reads unconverted.
    /// decode: W5's 10,000 PodSets relisted, decoded as the operator does and did. apf is W2
    /// with the operator and the ReplicaSet controller (default QPS) each as its own user alone
    /// in a tight API Priority and Fairness level (3 seats), with the 429s and requests served in
    /// that level. failover is W4 with two of each worker on a Lease: the leader killed, then
    /// stopped, and a new object's time to converge each time. blackhole: every connection the
    /// operator or the ReplicaSet controller (QPS 1000) has open goes silent (a fault proxy),
    /// then 20 objects of 3 are timed from the fault to converged. failover and blackhole run
    /// in --smoke only when named here. failover-w5 (only when named): failover's kill at W5,
    /// with the new leader's peak memory through the takeover.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<String>,
    /// Only these targets (operator, replicaset, replicaset-qps1000, floor, cronjob-qps1000:
    /// the CronJob baseline of scenario at, not in --smoke; failover's operator-cold and
    /// operator-warm, or operator for both).
    #[arg(long, value_delimiter = ',')]
    pub targets: Vec<String>,
    /// CSV output.
    #[arg(long, default_value = "target/bench/results.csv")]
    pub csv: PathBuf,
    /// Save a CPU profile of the API server, taken over this many seconds from the start of each
    /// W1/W2/W4 measurement, below target/bench/profiles, and its CPU split by request kind
    /// and object (printed, and beside it as .txt; `go tool pprof -top` reads the rest).
    #[arg(long)]
    pub profile_seconds: Option<u64>,
    /// Record a heap profile of the operator with heaptrack during each W1/W2/W4/W5 run, up to
    /// its steady reading, below target/bench/heap (build with `--profile profiling` for the
    /// call sites' names, and `--no-default-features`: heaptrack sees only malloc, not
    /// jemalloc).
    #[arg(long)]
    pub heap_profile: bool,
}

/// The sizes of a run.
pub struct Sizes {
    pub w1_replicas: i32,
    pub w2_objects: usize,
    pub w2_replicas: i32,
    pub w3_objects: usize,
    pub w3_toggles: usize,
    pub w3_high: i32,
    pub w4_objects: usize,
    pub w4_replicas: i32,
    pub w5_objects: usize,
    pub w5_replicas: i32,
    pub ats: usize,
    pub idle_window: Duration,
    pub steady_wait: Duration,
}

impl Sizes {
    pub fn new(smoke: bool) -> Self {
        if smoke {
            Self {
                w1_replicas: 3,
                w2_objects: 4,
                w2_replicas: 2,
                w3_objects: 3,
                w3_toggles: 2,
                w3_high: 3,
                w4_objects: 5,
                w4_replicas: 3,
                w5_objects: 6,
                w5_replicas: 2,
                ats: 5,
                idle_window: Duration::from_secs(3),
                steady_wait: Duration::from_secs(1),
            }
        } else {
            Self {
                w1_replicas: 10,
                w2_objects: 200,
                w2_replicas: 5,
                w3_objects: 100,
                w3_toggles: 4,
                w3_high: 10,
                w4_objects: 1000,
                w4_replicas: 10,
                w5_objects: 10_000,
                w5_replicas: 10,
                ats: 500,
                idle_window: Duration::from_secs(60),
                steady_wait: Duration::from_secs(15),
            }
        }
    }
}
