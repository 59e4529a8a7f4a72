//! decode: a relist of W5's 10,000 PodSets as the operator's watch reads it (issue 48, item
//! 4). The harness creates them, writes each a converged status, and fetches the list's pages
//! (500 objects each, as the watcher asks) from the API server; then it decodes those pages as
//! the operator does (each object once, from its text) and as it did before (each object into
//! a `Value`, then into its type), the one after the other, in the same run.

use std::time::Instant;

use anyhow::{Result, ensure};
use kube::core::ObjectList;
use podset_operator::api::PodSet;
use podset_operator::api::decoded::Decoded;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::{Value, json};

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::Env;
use crate::report::Sample;
use crate::system::median;
use crate::workload::{self, Kind, names};

pub const SCENARIO: &str = "Relist decode W5 10000 PodSets";
/// The watcher's page size (kube-runtime's default).
const PAGE: usize = 500;
/// Decodes of the whole list per way, in turn: their median is the run's figure.
const DECODES: usize = 5;

/// The way every PodSet the watch read was decoded before: the whole object into a `Value`,
/// then the `Value` into its type.
#[derive(Clone)]
struct TwoPass(Option<PodSet>);

impl<'de> Deserialize<'de> for TwoPass {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let value = Value::deserialize(deserializer)?;
        Ok(TwoPass(serde_path_to_error::deserialize(&value).ok()))
    }
}

pub async fn decode_run(
    args: &BenchArgs,
    s: &Sizes,
) -> Result<Vec<(&'static str, String, Sample)>> {
    let env = Env::without_worker(&args.operator).await?;
    let objects = names("d", s.w5_objects);
    workload::create_all(&env.client, NS, Kind::PodSet, &objects, s.w5_replicas).await?;
    let replicas = s.w5_replicas;
    workload::write_status_all(&env.client, NS, Kind::PodSet, &objects, |name| {
        converged(name, replicas)
    })
    .await?;
    let pages = workload::list_pages(&env.client, NS, Kind::PodSet, PAGE).await?;
    let bytes: usize = pages.iter().map(String::len).sum();
    let (mut once, mut twice) = (Vec::new(), Vec::new());
    for _ in 0..DECODES {
        once.push(decode::<Decoded<PodSet>>(&pages, objects.len(), |d| {
            matches!(d, Decoded::Read(_))
        })?);
        twice.push(decode::<TwoPass>(&pages, objects.len(), |d| d.0.is_some())?);
    }
    let sample = |seconds: f64| Sample {
        seconds,
        pods: objects.len(),
        note: "objects, not pods".into(),
        figures: vec![
            ("list MiB", bytes as f64 / (1 << 20) as f64),
            ("ms per 1000 objects", seconds * 1e6 / objects.len() as f64),
        ],
        ..Sample::default()
    };
    let (once, twice) = (median(&once), median(&twice));
    let mut now = sample(once);
    now.figures.push(("x before", once / twice));
    Ok(vec![
        (SCENARIO, "podset-operator: each object once".into(), now),
        (
            SCENARIO,
            "before: a Value, then the type".into(),
            sample(twice),
        ),
    ])
}

/// Decodes every page as the list type the watcher reads, each object as `T`: the seconds it
/// took. Every object must come out as `read` says a good one does.
fn decode<T: DeserializeOwned + Clone>(
    pages: &[String],
    objects: usize,
    read: fn(&T) -> bool,
) -> Result<f64> {
    let start = Instant::now();
    let mut good = 0;
    for page in pages {
        let list: ObjectList<T> = serde_json::from_str(page)?;
        good += list.items.iter().filter(|item| read(item)).count();
    }
    let seconds = start.elapsed().as_secs_f64();
    ensure!(good == objects, "{good} of {objects} PodSets read");
    Ok(seconds)
}

/// A converged PodSet's status, as the operator writes it.
fn converged(name: &str, replicas: i32) -> Value {
    let pods: Vec<String> = (0..replicas)
        .map(|i| format!("{name}-pod{i:05x}"))
        .collect();
    json!({
        "podNames": pods,
        "availableReplicas": replicas,
        "observedGeneration": 1,
        "selector": format!("app={name}"),
        "conditions": [{
            "type": "Available", "status": "True", "reason": "Available",
            "message": format!("{replicas} of {replicas} pods available"),
            "lastTransitionTime": "2026-11-29T00:00:00Z", "observedGeneration": 1,
        }],
    })
}
