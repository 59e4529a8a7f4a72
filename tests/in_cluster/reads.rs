//! A client of either version while the webhook's replicas change (a rollout) or its
//! certificate renews: it reads Ats through the API server at v1alpha1 (converted by the
//! webhook: they are stored at v1beta1) and at v1beta1, a GET and a list at each, every
//! [`EVERY`]; none may be refused. The reads and their latency are printed, a line a second.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use kube::api::{Api, ListParams};
use podset_operator::api::At;
use podset_operator::api::at::v1alpha1;
use tokio::time::MissedTickBehavior;
use tokio_util::sync::CancellationToken;

use crate::common::TestNs;

const EVERY: Duration = Duration::from_millis(100);
const KINDS_OF_READ: [&str; 4] = [
    "get v1alpha1",
    "list v1alpha1",
    "get v1beta1",
    "list v1beta1",
];

/// One read: when it began (from the reader's start), which, how long it took, and the
/// refusal if refused.
struct Read {
    at: Duration,
    what: &'static str,
    took: Duration,
    refused: Option<String>,
}

/// Runs `change` while a reader reads the Ats of `ns` (At `name` for the GETs); fails if a
/// read was refused. Prints the reads; returns what `change` did and how many reads there were.
pub async fn none_refused<T>(
    ns: &TestNs,
    name: &str,
    what: &str,
    change: impl Future<Output = Result<T>>,
) -> Result<(T, usize)> {
    let stop = CancellationToken::new();
    let apis = (ns.api::<v1alpha1::At>(), ns.api::<At>());
    let reader = tokio::spawn(read_until(apis, name.to_string(), stop.clone()));
    let changed = change.await;
    stop.cancel();
    let reads = reader.await?;
    let changed = changed?;
    print(what, &reads);
    let refused: Vec<String> = reads
        .iter()
        .filter_map(|r| Some(format!("+{:.1?} {}: {}", r.at, r.what, r.refused.as_ref()?)))
        .collect();
    ensure!(
        refused.is_empty(),
        "{} of {} reads refused during {what}:\n{}",
        refused.len(),
        reads.len(),
        refused.join("\n")
    );
    ensure!(!reads.is_empty(), "no read during {what}");
    Ok((changed, reads.len()))
}

async fn read_until(
    (alpha, beta): (Api<v1alpha1::At>, Api<At>),
    name: String,
    stop: CancellationToken,
) -> Vec<Read> {
    let began = Instant::now();
    let mut reads = Vec::new();
    let mut tick = tokio::time::interval(EVERY);
    tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
    let all = ListParams::default();
    while !stop.is_cancelled() {
        tokio::select! {
            _ = tick.tick() => {}
            _ = stop.cancelled() => break,
        }
        for what in KINDS_OF_READ {
            let at = began.elapsed();
            let result = match what {
                "get v1alpha1" => alpha.get(&name).await.map(drop),
                "list v1alpha1" => alpha.list(&all).await.map(drop),
                "get v1beta1" => beta.get(&name).await.map(drop),
                _ => beta.list(&all).await.map(drop),
            };
            let took = began.elapsed() - at;
            let refused = result.err().map(|e| e.to_string());
            reads.push(Read {
                at,
                what,
                took,
                refused,
            });
        }
    }
    reads
}

/// A line a second: the reads begun in it, refused ones, and the slowest of each kind; then
/// the latency's median, 99th percentile and maximum.
fn print(what: &str, reads: &[Read]) {
    let mut lines = vec![format!(
        "reads during {what} (second: reads, refused, slowest {})",
        KINDS_OF_READ.join(" / ")
    )];
    let seconds = reads.last().map_or(0, |r| r.at.as_secs());
    for second in 0..=seconds {
        let these: Vec<&Read> = reads.iter().filter(|r| r.at.as_secs() == second).collect();
        let refused = these.iter().filter(|r| r.refused.is_some()).count();
        let slowest: Vec<String> = KINDS_OF_READ
            .iter()
            .map(|kind| {
                let most = these
                    .iter()
                    .filter(|r| r.what == *kind)
                    .map(|r| r.took)
                    .max();
                most.map_or("-".into(), |d| format!("{:.1?}", d))
            })
            .collect();
        lines.push(format!(
            "  {second:>3}s: {:>3} reads, {refused} refused, {}",
            these.len(),
            slowest.join(" / ")
        ));
    }
    let mut took: Vec<Duration> = reads.iter().map(|r| r.took).collect();
    took.sort();
    let at = |q: f64| took.get(((took.len() as f64 - 1.0) * q).round() as usize);
    lines.push(format!(
        "  {} reads, {} refused; latency median {:?}, p99 {:?}, max {:?}",
        reads.len(),
        reads.iter().filter(|r| r.refused.is_some()).count(),
        at(0.5),
        at(0.99),
        took.last()
    ));
    println!("{}", lines.join("\n"));
}
