//! Measurements, their medians, the printed table and CSV, and the invariants every run must show.

use anyhow::{Context, Result, bail};

use crate::cli::{BenchArgs, Sizes};
use crate::env::Target;
use crate::system::median;

/// One measurement.
#[derive(Clone, Debug, Default)]
pub struct Sample {
    pub seconds: f64,
    pub pods: usize,
    pub mutations: f64,
    /// Measured on a target's first run only (the window is long).
    pub idle_writes_per_min: Option<f64>,
    pub max_pods: usize,
    pub peak_rss_mib: f64,
    pub steady_rss_mib: f64,
    pub cpu_seconds: f64,
    /// CPU seconds of the API server and etcd while the work was done.
    pub control_plane_cpu: f64,
    /// The operator's time from a restart to ready, after converging (W5).
    pub restart_seconds: f64,
    /// Its peak and steady RSS after that restart.
    pub restart_rss_mib: (f64, f64),
    /// The requests the API server rejected (429) and dispatched in the controller's own
    /// priority level (scenario apf).
    pub level_rejected: Option<f64>,
    pub level_dispatched: Option<f64>,
    pub note: String,
    /// Named figures of a scenario's own, printed after the note (their medians in the table).
    pub figures: Vec<(&'static str, f64)>,
}

/// A note and figures as the table's note column shows them.
fn noted(note: &str, figures: impl IntoIterator<Item = (&'static str, f64)>) -> String {
    let figures: Vec<String> = figures
        .into_iter()
        .map(|(name, value)| format!("{name} {value:.1}"))
        .collect();
    [note.to_string(), figures.join(", ")]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub struct Row {
    pub scenario: &'static str,
    pub target: String,
    pub samples: Vec<Sample>,
}

impl Row {
    fn med(&self, f: impl Fn(&Sample) -> f64) -> f64 {
        median(&self.samples.iter().map(f).collect::<Vec<_>>())
    }

    /// The median of a figure some samples lack, or "-" if all do (0 is a figure here).
    fn med_some(&self, f: impl Fn(&Sample) -> Option<f64>, digits: usize) -> String {
        let values: Vec<f64> = self.samples.iter().filter_map(f).collect();
        if values.is_empty() {
            "-".into()
        } else {
            format!("{:.digits$}", median(&values))
        }
    }

    /// The first note any sample has, then the medians of the samples' figures.
    fn note(&self) -> String {
        let mut names: Vec<&'static str> = Vec::new();
        for (name, _) in self.samples.iter().flat_map(|s| &s.figures) {
            if !names.contains(name) {
                names.push(name);
            }
        }
        let figure = |name| {
            let of = |s: &Sample| s.figures.iter().find(|(n, _)| *n == name).map(|f| f.1);
            // median() skips the NaN of a sample without the figure.
            self.med(|s| of(s).unwrap_or(f64::NAN))
        };
        let note = self.samples.iter().map(|s| &s.note).find(|n| !n.is_empty());
        let figures = names.into_iter().map(|name| (name, figure(name)));
        noted(note.map_or("", |n| n.as_str()), figures)
    }
}

pub async fn repeat<F, Fut>(
    runs: usize,
    scenario: &'static str,
    target: String,
    mut f: F,
) -> Result<Row>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Sample>>,
{
    let what = format!("{scenario} / {target}");
    let mut rows = repeat_each(runs, &what, || {
        let (run, target) = (f(), target.clone());
        async move { Ok(vec![(scenario, target, run.await?)]) }
    })
    .await?;
    Ok(rows.pop().unwrap_or(Row {
        scenario,
        target,
        samples: Vec::new(),
    }))
}

/// As [`repeat`], for a run that measures several things: `f` returns a (scenario, target,
/// sample) for each; one row per scenario and target, in their first run's order.
pub async fn repeat_each<F, Fut>(runs: usize, what: &str, mut f: F) -> Result<Vec<Row>>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Vec<(&'static str, String, Sample)>>>,
{
    let mut rows: Vec<Row> = Vec::new();
    for run in 1..=runs {
        eprintln!("[bench] {what}: run {run} of {runs}");
        let samples = f().await.with_context(|| format!("{what}, run {run}"))?;
        let several = samples.len() > 1;
        for (scenario, target, sample) in samples {
            let label = match several {
                true => format!("{scenario} / {target}: "),
                false => String::new(),
            };
            let note = noted(&sample.note, sample.figures.iter().copied());
            eprintln!("[bench]   {label}{:.3} s {note}", sample.seconds);
            match rows
                .iter_mut()
                .find(|r| r.scenario == scenario && r.target == target)
            {
                Some(row) => row.samples.push(sample),
                None => rows.push(Row {
                    scenario,
                    target,
                    samples: vec![sample],
                }),
            }
        }
    }
    Ok(rows)
}

/// The ratios the issue asks for, against baselines of the same run: the row whose target is
/// `base`, or starts with it (scenario failover's "replicaset (qps 1000) x2").
fn ratio(
    rows: &[Row],
    scenario: &str,
    target: &str,
    base: &str,
    figure: fn(&Sample) -> f64,
) -> Option<f64> {
    let find = |matches: &dyn Fn(&str) -> bool| {
        rows.iter()
            .find(|r| r.scenario == scenario && matches(&r.target))
            .map(|r| r.med(figure))
    };
    Some(find(&|t| t == target)? / find(&|t| t.starts_with(base))?).filter(|x| x.is_finite())
}

/// The control plane's CPU seconds per 1,000 pods converged: a controller's cost to the API
/// server and etcd, whatever its wall time (issue 48).
fn cpu_per_1000_pods(s: &Sample) -> f64 {
    s.control_plane_cpu * 1000.0 / s.pods.max(1) as f64
}

pub fn report(rows: &[Row], args: &BenchArgs) -> Result<()> {
    let header = [
        "scenario",
        "target",
        "runs",
        "pods",
        "median s",
        "x replicaset(qps1000)",
        "x floor",
        "mutating/pod",
        "idle writes/min",
        "max pods/object",
        "peak RSS MiB",
        "steady RSS MiB",
        "CPU s",
        "apiserver+etcd CPU s",
        "apiserver+etcd CPU s per 1000 pods",
        "CPU x replicaset(qps1000)",
        "CPU x floor",
        "restart to ready s",
        "after restart: peak/steady RSS MiB",
        "APF 429s",
        "APF dispatched",
        "note",
    ];
    let mut table = vec![header.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for r in rows {
        let fmt = |v: f64, digits: usize| {
            if v.is_finite() && v != 0.0 {
                format!("{v:.digits$}")
            } else {
                "-".into()
            }
        };
        let note = r.note();
        let (rs, floor) = (
            Target::ReplicaSet(Some(1000)).label(),
            Target::Floor.label(),
        );
        let x = |base: &str, figure| {
            ratio(rows, r.scenario, &r.target, base, figure)
                .map(|x| format!("{x:.2}"))
                .unwrap_or("-".into())
        };
        table.push(vec![
            r.scenario.to_string(),
            r.target.clone(),
            r.samples.len().to_string(),
            r.samples.last().map_or(0, |s| s.pods).to_string(),
            format!("{:.3}", r.med(|s| s.seconds)),
            x(&rs, |s| s.seconds),
            x(&floor, |s| s.seconds),
            fmt(r.med(|s| s.mutations), 2),
            r.med_some(|s| s.idle_writes_per_min, 1),
            if r.scenario.starts_with("W3") {
                r.med(|s| s.max_pods as f64).to_string()
            } else {
                "-".into()
            },
            fmt(r.med(|s| s.peak_rss_mib), 1),
            fmt(r.med(|s| s.steady_rss_mib), 1),
            fmt(r.med(|s| s.cpu_seconds), 2),
            fmt(r.med(|s| s.control_plane_cpu), 2),
            fmt(r.med(cpu_per_1000_pods), 2),
            x(&rs, cpu_per_1000_pods),
            x(&floor, cpu_per_1000_pods),
            fmt(r.med(|s| s.restart_seconds), 2),
            format!(
                "{}/{}",
                fmt(r.med(|s| s.restart_rss_mib.0), 1),
                fmt(r.med(|s| s.restart_rss_mib.1), 1)
            ),
            r.med_some(|s| s.level_rejected, 0),
            r.med_some(|s| s.level_dispatched, 0),
            note,
        ]);
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|c| table.iter().map(|row| row[c].len()).max().unwrap_or(0))
        .collect();
    for row in &table {
        let line: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        println!("| {} |", line.join(" | "));
    }
    if let Some(dir) = args.csv.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let csv: Vec<String> = table
        .iter()
        .map(|row| {
            row.iter()
                .map(|c| format!("\"{}\"", c.replace('"', "'")))
                .collect::<Vec<_>>()
                .join(",")
        })
        .collect();
    std::fs::write(&args.csv, csv.join("\n") + "\n")?;
    eprintln!("[bench] wrote {}", args.csv.display());
    Ok(())
}

/// Correctness the benchmarks must show whatever the timings: never more pods than the spec,
/// never a duplicate At pod.
pub fn check_invariants(rows: &[Row], s: &Sizes) -> Result<()> {
    for r in rows {
        for sample in &r.samples {
            if r.scenario.starts_with("W3") && sample.max_pods > s.w3_high as usize {
                bail!(
                    "{} / {}: an object had {} pods, over its spec of {}",
                    r.scenario,
                    r.target,
                    sample.max_pods,
                    s.w3_high
                );
            }
            // Duplicates of the CronJob baseline are its figures, not the operator's fault.
            let operator = r.target == Target::Operator.label();
            if r.scenario.starts_with("At") && operator && sample.max_pods > 0 {
                bail!("{}: {} duplicate pods", r.scenario, sample.max_pods);
            }
        }
    }
    eprintln!("[bench] invariants hold: no object over its spec, no duplicate At pod");
    Ok(())
}
