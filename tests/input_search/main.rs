//! Input search (issue 31): PodSets and Ats generated from the CRDs' own schemas at both
//! versions, submitted to the real API server at their version (an At at v1alpha1 through the
//! cluster's conversion webhook). For every object it admits, the operator acts on it or says
//! why in a condition and a Warning event, writes about it a bounded number of times, never
//! crashes, stays ready, and still serves a canary PodSet and At after each batch; and the
//! object reads alike at both versions ([`readable`]). Without a cluster, [`round_trip`]
//! checks the At's conversion over objects drawn from both versions.
//!
//! `make test` runs the fixed sample (seeds 0..SAMPLE). `make input-search SEEDS=N` runs N
//! seeds from a fresh random start (`START=S` to choose); `make input-search SEED=S` replays
//! one. Each seed is one object, the same object on every run.

mod findings;
mod generate;
mod held;
mod readable;
mod round_trip;
mod values;
mod verdict;
mod writes;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result, bail};
use futures::future::join_all;
use generate::{Generated, Schemas};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;
use podset_operator::api::{At, PodSet};
use testenv::audit;
use testenv::harness::{Kind, PROMPTLY, TestNs, at, cluster_without_nodes, podset, poll_some};
use verdict::{Verdict, verdict};
use writes::too_many_writes;

/// The seeds `make test` runs.
const SAMPLE: u64 = 400;
/// Objects submitted together; each batch ends with a canary and the write count.
const BATCH: u64 = 40;

/// Which seeds to run, from the environment (see the module's doc).
fn seeds() -> Result<(u64, u64)> {
    let var = |name: &str| -> Result<Option<u64>> {
        std::env::var(name)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| v.parse().with_context(|| format!("{name}={v}")))
            .transpose()
    };
    if let Some(seed) = var("INPUT_SEARCH_SEED")? {
        return Ok((seed, 1));
    }
    match var("INPUT_SEARCH_SEEDS")? {
        Some(n) => Ok((
            var("INPUT_SEARCH_START")?.unwrap_or_else(|| fastrand::u64(..)),
            n,
        )),
        None => Ok((0, SAMPLE)),
    }
}

#[derive(Default)]
struct Tally {
    generated: u64,
    refused: BTreeMap<u16, u64>,
    acted: BTreeMap<String, u64>,
    reported: BTreeMap<String, u64>,
    /// The first seed of each outcome, to replay one.
    examples: BTreeMap<String, u64>,
    findings: Vec<String>,
    /// The objects showing a finding that stands ([`findings`]), by its words.
    open: BTreeMap<&'static str, Vec<u64>>,
    /// Every object admitted in the run, for the count of writes over the whole run.
    admitted: Vec<Generated>,
    batches: u64,
}

impl Tally {
    /// Counts `outcome` for `g`, at the version `g` was written at.
    fn count(
        map: &mut BTreeMap<String, u64>,
        examples: &mut BTreeMap<String, u64>,
        outcome: String,
        g: &Generated,
    ) {
        let outcome = format!("{outcome} ({} {})", g.kind.plural(), g.version);
        examples.entry(outcome.clone()).or_insert(g.seed);
        *map.entry(outcome).or_insert(0) += 1;
    }
}

#[tokio::test]
async fn objects_drawn_from_the_crd_schemas_are_refused_acted_on_or_reported() -> Result<()> {
    let (start, count) = seeds()?;
    let ns = TestNs::new_in(cluster_without_nodes().await?, "input-search").await?;
    let mut operator = ns.start_operator(&[]).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(ns.client.clone());
    let schemas = Schemas::new(
        &crds.get("podsets.app.example.com").await?,
        &crds.get("ats.cnat.programming-kubernetes.info").await?,
    );
    println!(
        "input search: seeds {start}..{} ({count}), from schemas of {:?} paths",
        start.wrapping_add(count),
        schemas.paths()
    );
    let not_ready = watch_readiness(operator.health_port).await?;
    let agent = podset_operator::client::user_agent(&operator.instance);
    let mut tally = Tally::default();
    let (begun, run_since) = (Instant::now(), SystemTime::now());
    let mut done = 0;
    while done < count {
        let n = BATCH.min(count - done);
        let seeds: Vec<u64> = (0..n).map(|i| start.wrapping_add(done + i)).collect();
        run_batch(&ns, &schemas, &agent, &seeds, &mut tally).await?;
        done += n;
        println!(
            "[{done}/{count}] {:.0?}: {} acted on, {} reported, {} refused, {} findings",
            begun.elapsed(),
            tally.acted.values().sum::<u64>(),
            tally.reported.values().sum::<u64>(),
            tally.refused.values().sum::<u64>(),
            tally.findings.len()
        );
    }
    // A loop that outlives its batch (writes about an object after it was deleted) shows only
    // over the whole run: each object's writes since the start, against its budget.
    let writes = audit::writes_by_object(ns.cluster.dir(), &agent, run_since)?;
    let all: Vec<&Generated> = tally.admitted.iter().collect();
    let canaries = CANARY_PODS * tally.batches;
    let whole_run = too_many_writes(&all, &writes, begun.elapsed(), canaries);
    tally.findings.extend(
        whole_run
            .into_iter()
            .map(|f| format!("over the whole run: {f}")),
    );
    let admitted = tally.generated - tally.refused.values().sum::<u64>();
    println!(
        "input search: {} generated, {admitted} admitted; acted on {:?}; reported {:?}; refused \
         by the API server {:?}; {} findings",
        tally.generated,
        tally.acted,
        tally.reported,
        tally.refused,
        tally.findings.len()
    );
    println!("a seed of each outcome: {:?}", tally.examples);
    for (finding, seeds) in &tally.open {
        println!("{finding}: {} objects, seeds {seeds:?}", seeds.len());
    }
    let unready = not_ready.load(Ordering::Relaxed);
    if unready > 0 {
        tally
            .findings
            .push(format!("/readyz answered other than 200 {unready} times"));
    }
    // Generated pod templates draw the API server's warnings (odd hostnames, deprecated
    // fields) on the operator's creates: expected, and logged. Exits and panics are not.
    operator.assert_healthy_but_warned(&[""]);
    assert!(
        tally.findings.is_empty(),
        "{} findings:\n{}",
        tally.findings.len(),
        tally.findings.join("\n")
    );
    Ok(())
}

/// Submits, judges and then deletes the objects of `seeds`; a canary checks that they did not
/// stop the operator for others.
async fn run_batch(
    ns: &TestNs,
    schemas: &Schemas,
    agent: &str,
    seeds: &[u64],
    tally: &mut Tally,
) -> Result<()> {
    let since = SystemTime::now();
    let began = Instant::now();
    let now = jiff::Timestamp::now();
    let objects: Vec<Generated> = seeds.iter().map(|&s| schemas.generate(s, now)).collect();
    tally.generated += objects.len() as u64;
    let answers = join_all(objects.iter().map(|g| submit(ns, g))).await;
    let mut admitted = Vec::new();
    for (g, answer) in objects.iter().zip(answers) {
        match answer? {
            Some(code) => *tally.refused.entry(code).or_insert(0) += 1,
            None => admitted.push(g),
        }
    }
    let judged = join_all(admitted.iter().map(|g| judge(ns, schemas, g))).await;
    for (g, judged) in admitted.iter().zip(judged) {
        if seeds.len() == 1 {
            println!("seed {}: {}\n{:#}\n{judged:?}", g.seed, g.how, g.body);
        }
        if let Ok((_, Some(open))) = &judged {
            tally.open.entry(open).or_default().push(g.seed);
        }
        match judged.map(|(verdict, _)| verdict) {
            Ok(Verdict::Acted(what)) => {
                Tally::count(&mut tally.acted, &mut tally.examples, what, g)
            }
            Ok(Verdict::Reported(reason)) => {
                Tally::count(&mut tally.reported, &mut tally.examples, reason, g)
            }
            Err(e) => tally.findings.push(finding(g, &format!("{e:#}"))),
        }
    }
    canary(ns, seeds[0]).await?;
    let writes = audit::writes_by_object(ns.cluster.dir(), agent, since)?;
    tally.findings.extend(too_many_writes(
        &admitted,
        &writes,
        began.elapsed(),
        CANARY_PODS,
    ));
    tally.admitted.extend(admitted.into_iter().cloned());
    tally.batches += 1;
    for kind in [Kind::PodSet, Kind::At] {
        delete_all(ns, kind).await?;
    }
    Ok(())
}

fn finding(g: &Generated, what: &str) -> String {
    format!(
        "seed {} ({:?} {}, {}): {what}\n  replay: make input-search SEED={}",
        g.seed, g.kind, g.name, g.how, g.seed
    )
}

/// POSTs the object as generated, at its version; the code of the API server's refusal, if it
/// refused.
async fn submit(ns: &TestNs, g: &Generated) -> Result<Option<u16>> {
    let created = (g.kind, g.version, None);
    match readable::send(ns, http::Method::POST, created, "", &g.body).await? {
        Some((code, message)) if code >= 500 => bail!("{code} from the API server: {message}"),
        refused => Ok(refused.map(|(code, _)| code)),
    }
}

/// The verdict on `g`, once it reads alike at both versions; and the open finding it shows,
/// if any.
async fn judge(
    ns: &TestNs,
    schemas: &Schemas,
    g: &Generated,
) -> Result<(Verdict, Option<&'static str>)> {
    let what = format!("the operator to act on or report {:?} {}", g.kind, g.name);
    let verdict = match poll_some(PROMPTLY, &what, || verdict(ns, g)).await {
        Ok(verdict) => verdict,
        Err(e) => {
            let now = readable::get(ns, g.kind, podset_operator::api::STORAGE_VERSION, &g.name);
            let status = now.await.map(|o| o.map(|o| o["status"].to_string()));
            bail!(
                "{e:#}; its status: {:.2000}",
                status.unwrap_or_default().unwrap_or_default()
            )
        }
    };
    let open = readable::readable(ns, schemas, g).await?;
    Ok((verdict, open))
}

/// A PodSet and an At made after the batch: the operator still serves others.
async fn canary(ns: &TestNs, seed: u64) -> Result<()> {
    let name = format!("canary-{seed:x}");
    let pp = PostParams::default();
    ns.api::<PodSet>().create(&pp, &podset(&name, 2)).await?;
    let past = "2020-01-01T00:00:00Z";
    ns.api::<At>()
        .create(&pp, &at(&name, past, "echo canary"))
        .await?;
    for kind in [Kind::PodSet, Kind::At] {
        let g = Generated {
            seed,
            kind,
            version: podset_operator::api::STORAGE_VERSION,
            name: name.clone(),
            body: Default::default(),
            how: "canary".into(),
        };
        let what = format!("the operator to act on the canary {kind:?}");
        match poll_some(PROMPTLY, &what, || verdict(ns, &g)).await? {
            Verdict::Acted(_) => {}
            other => bail!("the canary {kind:?} was not acted on: {other:?}"),
        }
    }
    Ok(())
}

/// The pods of each batch's canary PodSet, made by generateName.
const CANARY_PODS: u64 = 2;

/// Deletes every object of `kind`, raw: the typed API would decode the deleted objects.
async fn delete_all(ns: &TestNs, kind: Kind) -> Result<()> {
    let request = http::Request::delete(ns.url_of(kind)).body(Vec::new())?;
    ns.client.request_text(request).await?;
    Ok(())
}

async fn ready(port: u16) -> bool {
    let url = format!("http://127.0.0.1:{port}/readyz");
    reqwest::get(url).await.is_ok_and(|r| r.status() == 200)
}

/// Samples `/readyz` twice a second, once it first answered 200: how often it did not.
async fn watch_readiness(port: u16) -> Result<Arc<AtomicU64>> {
    poll_some(PROMPTLY, "/readyz 200", || async {
        Ok(ready(port).await.then_some(()))
    })
    .await?;
    let failures = Arc::new(AtomicU64::new(0));
    let counter = failures.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(Duration::from_millis(500));
        loop {
            every.tick().await;
            if !ready(port).await {
                counter.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    Ok(failures)
}
