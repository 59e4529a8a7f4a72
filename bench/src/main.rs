//! `podset-bench`: the PodSet and At operators measured against the ReplicaSet controller
//! (kube-controller-manager from the same Kubernetes source, replicaset controller only) and the
//! API floor, each on a fresh local control plane, medians over repeated runs. Prints a table
//! and writes CSV. `--smoke` runs tiny sizes once (as `make test` does, so the harness cannot
//! rot); `soak` runs the soak test.

mod cli;
mod env;
mod floor;
mod heap;
mod node;
mod pprof;
mod report;
mod scenario;
mod soak;
mod system;
mod workload;

use anyhow::Result;
use clap::Parser;
use cli::{Cli, Command};

pub(crate) const NS: &str = "bench";

#[tokio::main]
async fn main() -> Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Some(Command::Soak { minutes, operator }) => soak::soak(minutes, operator).await,
        Some(Command::Node { operator, pods }) => node::node(operator, pods).await,
        None => scenario::bench(cli.bench).await,
    }
}
