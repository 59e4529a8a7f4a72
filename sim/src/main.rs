//! `podset-sim`: runs the simulation over many seeds (`make sim SEEDS=N`), or replays one with
//! its trace (`make sim SEED=S`).
//!
//! Each seed runs in a process of its own: some libraries keep process-wide state that a run
//! draws on (hashbrown's default hasher counts its hashers in a global), so a seed run after
//! others in one process could take another path than the same seed replayed alone.

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use podset_sim::faults::Fault;
use podset_sim::run::{self, Options, Report};

#[derive(Parser)]
#[command(
    about = "The operator's deterministic simulation: seeded faults, invariants at every step"
)]
struct Cli {
    /// Replay this one seed, printing its trace.
    #[arg(long, conflicts_with = "seeds")]
    seed: Option<u64>,
    /// Run this many seeds.
    #[arg(long, default_value_t = 100)]
    seeds: u64,
    /// The first seed of the range; a fresh random one when unset (printed first).
    #[arg(long)]
    start: Option<u64>,
    /// Threads running seeds at once; default: one per core.
    #[arg(long)]
    threads: Option<usize>,
    /// Write every failing seed and what it broke to this file, a line each.
    #[arg(long)]
    failures: Option<std::path::PathBuf>,
    /// Run this one seed and print its report as JSON (how a search runs each seed).
    #[arg(long, hide = true)]
    child: Option<u64>,
}

fn main() {
    let cli = Cli::parse();
    if let Some(seed) = cli.child {
        let report = run::run(seed, &Options::default());
        println!(
            "{}",
            serde_json::to_string(&report).expect("a report serializes")
        );
        return;
    }
    let ok = match cli.seed {
        Some(seed) => replay(seed),
        None => search(&cli),
    };
    std::process::exit(if ok { 0 } else { 1 });
}

fn replay(seed: u64) -> bool {
    let report = run::run(
        seed,
        &Options {
            trace: true,
            ..Options::default()
        },
    );
    for line in &report.trace {
        println!("{line}");
    }
    println!();
    summarize(std::slice::from_ref(&report), Duration::ZERO);
    !report.failed()
}

fn search(cli: &Cli) -> bool {
    let start = cli.start.unwrap_or_else(|| fastrand::u64(..u64::MAX / 2));
    let total = cli.seeds;
    println!(
        "podset-sim: {total} seeds from {start} (again: make sim SEEDS={total} START={start})"
    );
    let threads = cli
        .threads
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let next = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel::<Report>();
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            let (next, tx) = (next.clone(), tx.clone());
            std::thread::spawn(move || {
                loop {
                    let i = next.fetch_add(1, Ordering::SeqCst);
                    if i >= total {
                        return;
                    }
                    let report = in_a_process(start + i);
                    if tx.send(report).is_err() {
                        return;
                    }
                }
            })
        })
        .collect();
    drop(tx);
    let began = Instant::now();
    let mut reports = Vec::new();
    for report in rx {
        // Said as found, not only at the end: a search of hours shows its failures at once.
        if report.failed() {
            let why = report.violations.join("; ");
            eprintln!(
                "\nseed {} fails: {why} (replay: make sim SEED={})",
                report.seed, report.seed
            );
        }
        reports.push(report);
        progress(&reports, total, began.elapsed());
    }
    for w in workers {
        let _ = w.join();
    }
    eprintln!();
    summarize(&reports, began.elapsed());
    if let Some(path) = &cli.failures {
        let lines: String = reports
            .iter()
            .filter(|r| r.failed())
            .map(|r| format!("{}\t{}\n", r.seed, r.violations.join("; ")))
            .collect();
        if let Err(e) = std::fs::write(path, lines) {
            eprintln!("podset-sim: writing {}: {e}", path.display());
        }
    }
    reports.iter().all(|r| !r.failed())
}

/// Runs `seed` in a child process of this binary (`--child`).
fn in_a_process(seed: u64) -> Report {
    let failed = |why: String| Report {
        seed,
        violations: vec![why],
        ..Report::default()
    };
    let exe = match this_binary() {
        Ok(exe) => exe,
        Err(e) => return failed(format!("finding this binary: {e}")),
    };
    let output = std::process::Command::new(exe)
        .args(["--child", &seed.to_string()])
        .stderr(std::process::Stdio::inherit())
        .output();
    match output {
        Ok(out) if out.status.success() => serde_json::from_slice(&out.stdout)
            .unwrap_or_else(|e| failed(format!("reading the seed's report: {e}"))),
        Ok(out) => failed(format!("the seed's process ended with {}", out.status)),
        Err(e) => failed(format!("starting the seed's process: {e}")),
    }
}

/// This binary as it runs. A rebuild during a long search replaces the file its path names,
/// and the seeds after would run other code, or none (the path gone for a moment): on Linux
/// `/proc/self/exe` names the running image still.
fn this_binary() -> std::io::Result<std::path::PathBuf> {
    let running = std::path::Path::new("/proc/self/exe");
    if running.exists() {
        return Ok(running.into());
    }
    std::env::current_exe()
}

/// A bar redrawn in place on a terminal; a line every tenth of the way in a log.
fn progress(reports: &[Report], total: u64, elapsed: Duration) {
    use std::io::IsTerminal;
    let done = reports.len() as u64;
    let terminal = std::io::stderr().is_terminal();
    let every = if terminal { 10 } else { (total / 10).max(1) };
    if !done.is_multiple_of(every) && done != total {
        return;
    }
    let failing = reports.iter().filter(|r| r.failed()).count();
    let width = 40;
    let filled = (done * width / total.max(1)) as usize;
    eprint!(
        "{}[{}{}] {done}/{total} seeds, {failing} failing, {:.1} s{}",
        if terminal { "\r" } else { "" },
        "#".repeat(filled),
        ".".repeat(width as usize - filled),
        elapsed.as_secs_f64(),
        if terminal { "" } else { "\n" },
    );
    let _ = std::io::stderr().flush();
}

fn summarize(reports: &[Report], elapsed: Duration) {
    let mut faults: BTreeMap<Fault, u64> = BTreeMap::new();
    for r in reports {
        for (f, n) in &r.faults {
            *faults.entry(*f).or_default() += n;
        }
    }
    let sum = |f: fn(&Report) -> u64| reports.iter().map(f).sum::<u64>();
    let simulated: Duration = reports.iter().map(|r| r.simulated).sum();
    println!(
        "seeds: {}   invariant checks: {}   requests: {}   simulated: {:.1} h in {:.1} s",
        reports.len(),
        sum(|r| r.checks),
        sum(|r| r.requests),
        simulated.as_secs_f64() / 3600.0,
        elapsed.as_secs_f64()
    );
    let injected: u64 = faults.values().sum();
    println!("faults injected: {injected}");
    for (fault, n) in &faults {
        println!("  {fault:?}: {n}");
    }
    if let Some(slowest) = reports
        .iter()
        .filter(|r| r.converged_after.is_some())
        .max_by_key(|r| r.converged_after)
    {
        println!(
            "slowest convergence after the faults: {:.1} s (seed {}; bound {:?})",
            slowest.converged_after.unwrap_or_default().as_secs_f64(),
            slowest.seed,
            run::LIVENESS_BOUND
        );
    }
    let failing: Vec<&Report> = reports.iter().filter(|r| r.failed()).collect();
    println!("failing seeds: {}", failing.len());
    for r in failing.iter().take(25) {
        println!("  seed {}: {}", r.seed, r.violations.join("; "));
        println!("    replay: make sim SEED={}", r.seed);
    }
}
