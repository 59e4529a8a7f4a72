//! The benchmark scenarios and which of them run.

mod apf;
mod at;
mod blackhole;
mod converge;
mod conversion;
mod cronjob;
mod decode;
mod failover;
mod lateness;
mod lease;
mod storm;

use anyhow::Result;

use crate::cli::{BenchArgs, Sizes};
use crate::env::Target;
use crate::report::{Row, check_invariants, repeat, repeat_each, report};
use at::at_run;
use blackhole::blackhole_run;
use converge::{Work, converge_run};
use conversion::conversion_run;
use decode::decode_run;
use failover::{Pair, Scale, failover_run};
use storm::storm_run;

fn wanted(args: &BenchArgs, scenario: &str) -> bool {
    args.only.is_empty() || args.only.iter().any(|s| s == scenario)
}

fn targets<const N: usize>(args: &BenchArgs, all: [Target; N]) -> Vec<Target> {
    all.into_iter()
        .filter(|t| args.targets.is_empty() || args.targets.iter().any(|k| k == t.key()))
        .collect()
}

pub async fn bench(args: BenchArgs) -> Result<()> {
    let s = Sizes::new(args.smoke);
    let runs = if args.smoke { 1 } else { args.runs };
    let mut rows: Vec<Row> = Vec::new();
    let qps = Target::ReplicaSet(Some(1000));
    let all_targets = [
        Target::Operator,
        Target::ReplicaSet(None),
        qps,
        Target::Floor,
    ];
    if wanted(&args, "w1") {
        for t in targets(&args, all_targets) {
            rows.push(
                repeat(runs, "W1 1x10 cold", t.label(), || {
                    let work = Work::of("w1", 1, s.w1_replicas);
                    converge_run(t, &args, &s, work)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "w2") {
        for t in targets(&args, all_targets) {
            // The idle window is long: measured on each target's first run only.
            let mut first = true;
            let run = || {
                let work = Work {
                    idle: std::mem::take(&mut first),
                    ..Work::of("w2", s.w2_objects, s.w2_replicas)
                };
                converge_run(t, &args, &s, work)
            };
            rows.push(repeat(runs, "W2 200x5", t.label(), run).await?);
        }
    }
    if wanted(&args, "w3") {
        for t in targets(&args, [Target::Operator, qps]) {
            rows.push(
                repeat(runs, "W3 storm 100x(1<->10)", t.label(), || {
                    storm_run(t, &args, &s)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "w4") {
        // Each a median of `runs`, as issue 48 asks of the control plane's CPU per pod.
        for t in targets(&args, [Target::Operator, qps, Target::Floor]) {
            rows.push(
                repeat(runs, "W4 1000x10", t.label(), || {
                    let work = Work::of("w4", s.w4_objects, s.w4_replicas);
                    converge_run(t, &args, &s, work)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "w5") {
        // The ReplicaSet controller at its default QPS would take most of an hour here.
        for t in targets(&args, [Target::Operator, qps]) {
            rows.push(
                repeat(1.min(runs), "W5 10000x10", t.label(), || {
                    let work = Work {
                        restart: true,
                        ..Work::of("w5", s.w5_objects, s.w5_replicas)
                    };
                    converge_run(t, &args, &s, work)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "conversion") {
        let run = || conversion_run(&args);
        rows.extend(repeat_each(runs, conversion::SCENARIO, run).await?);
    }
    if wanted(&args, "decode") {
        let run = || decode_run(&args, &s);
        rows.extend(repeat_each(runs, decode::SCENARIO, run).await?);
    }
    if wanted(&args, "apf") {
        // W2 again, each controller as its own user alone in a level of about 3 seats: how
        // each copes with the API server's 429s (client-side limits alone decide W2 above).
        for t in targets(&args, [Target::Operator, Target::ReplicaSet(None), qps]) {
            rows.push(
                repeat(runs, "APF W2 200x5, 3 seats", t.label(), || {
                    let work = Work {
                        tight: true,
                        ..Work::of("apf", s.w2_objects, s.w2_replicas)
                    };
                    converge_run(t, &args, &s, work)
                })
                .await?,
            );
        }
    }
    if wanted(&args, "at") {
        // The CronJob baseline waits up to a minute for its due time: not in the smoke run.
        let at_targets = targets(&args, [Target::Operator, Target::CronJob])
            .into_iter()
            .filter(|&t| !args.smoke || t == Target::Operator);
        for t in at_targets {
            rows.push(
                repeat(runs, "At 500 same second", t.label(), || {
                    at_run(t, &args, &s)
                })
                .await?,
            );
        }
    }
    // failover's runs wait out lease durations, a minute or so a pair, and blackhole's the
    // detection of dead connections, tens of seconds: in the smoke run (make test) only when
    // asked for. failover-w5 converges 100,000 pods for each pair, ten minutes a pair on 2
    // cores: only when asked for.
    let asked = |scenario: &str| args.only.iter().any(|s| s == scenario);
    let failover_w4 = wanted(&args, "failover") && (!args.smoke || asked("failover"));
    let scales = [(failover_w4, Scale::W4), (asked("failover-w5"), Scale::W5)];
    let mut failover = Vec::new();
    for (_, scale) in scales.into_iter().filter(|(run, _)| *run) {
        for pair in Pair::ALL.into_iter().filter(|p| p.wanted(&args.targets)) {
            let what = format!("Failover {} / {}", scale.name(), pair.label());
            let run = || failover_run(pair, scale, &args, &s);
            failover.extend(repeat_each(runs, &what, run).await?);
        }
    }
    if !failover.is_empty() {
        // Each measurement's rows together, the pairs in order.
        let order = [
            failover::KILL,
            failover::RELEASE,
            failover::HANDOVER,
            failover::KILL_W5,
        ];
        failover.sort_by_key(|r| order.iter().position(|&o| o == r.scenario));
        rows.extend(failover);
    }
    if wanted(&args, "blackhole") && (!args.smoke || asked("blackhole")) {
        for t in targets(&args, [Target::Operator, qps]) {
            let run = || blackhole_run(t, &args);
            rows.push(repeat(runs, blackhole::SCENARIO, t.label(), run).await?);
        }
    }
    report(&rows, &args)?;
    check_invariants(&rows, &s)
}
