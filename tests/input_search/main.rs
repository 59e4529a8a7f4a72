//! Input search (issue 31): PodSets and Ats generated from the CRDs' own schemas, submitted
//! to the real API server. For every object it admits, the operator acts on it or says why
//! in a condition and a Warning event, writes about it a bounded number of times, never
//! crashes, stays ready, and still serves a canary PodSet and At after each batch.
//!
//! `make test` runs the fixed sample (seeds 0..SAMPLE). `make input-search SEEDS=N` runs N
//! seeds from a fresh random start (`START=S` to choose); `make input-search SEED=S` replays
//! one. Each seed is one object, the same object on every run.

mod generate;
mod verdict;

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
    /// Every object admitted in the run, for the count of writes over the whole run.
    admitted: Vec<Generated>,
    batches: u64,
}

impl Tally {
    fn count(
        map: &mut BTreeMap<String, u64>,
        examples: &mut BTreeMap<String, u64>,
        outcome: String,
        g: &Generated,
    ) {
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
        "input search: seeds {start}..{} ({count}), from schemas of {:?} (PodSet, At) paths",
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
    let judged = join_all(admitted.iter().map(|g| judge(ns, g))).await;
    for (g, judged) in admitted.iter().zip(judged) {
        if seeds.len() == 1 {
            println!("seed {}: {}\n{:#}\n{judged:?}", g.seed, g.how, g.body);
        }
        match judged {
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

/// POSTs the object as generated; the code of the API server's refusal, if it refused.
async fn submit(ns: &TestNs, g: &Generated) -> Result<Option<u16>> {
    let body = g.body.to_string().into_bytes();
    let refused = ns.post_raw(g.kind, body);
    match refused.await? {
        Some((code, message)) if code >= 500 => bail!("{code} from the API server: {message}"),
        refused => Ok(refused.map(|(code, _)| code)),
    }
}

async fn judge(ns: &TestNs, g: &Generated) -> Result<Verdict> {
    let what = format!("the operator to act on or report {:?} {}", g.kind, g.name);
    poll_some(PROMPTLY, &what, || verdict(ns, g)).await
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
            name: name.clone(),
            body: Default::default(),
            how: "canary".into(),
        };
        match judge(ns, &g).await? {
            Verdict::Acted(_) => {}
            other => bail!("the canary {kind:?} was not acted on: {other:?}"),
        }
    }
    Ok(())
}

/// The pods of each batch's canary PodSet, made by generateName.
const CANARY_PODS: u64 = 2;

/// Writes about each object beyond what acting on it and retrying with backoff may take: a
/// hot loop. Pods created by generateName carry no name yet: they count for all PodSets,
/// with `canary_pods` more.
fn too_many_writes(
    admitted: &[&Generated],
    writes: &BTreeMap<(String, String), u64>,
    elapsed: Duration,
    canary_pods: u64,
) -> Vec<String> {
    // Backoff doubles from 1 s: retries within `elapsed` are about log2 of it.
    let retries = 2 + (elapsed.as_secs_f64() + 1.0).log2().ceil() as u64;
    let mut per_object: BTreeMap<&str, u64> = BTreeMap::new();
    let mut unnamed_pods = 0;
    for ((resource, name), n) in writes {
        let about = match resource.as_str() {
            "events" => name.rsplit_once('.').map_or(name.as_str(), |(o, _)| o),
            "pods" if name.is_empty() => {
                unnamed_pods += n;
                continue;
            }
            "pods" => name.strip_suffix("-pod").unwrap_or(name),
            _ => name,
        };
        *per_object.entry(about).or_insert(0) += n;
    }
    let replicas = |g: &Generated| g.body["spec"]["replicas"].as_u64().unwrap_or(1).min(10);
    let mut found = Vec::new();
    let mut pod_budget = 0;
    for g in admitted {
        let budget = replicas(g) + 4 + 3 * retries;
        pod_budget += replicas(g) + retries;
        let sent = per_object.get(g.name.as_str()).copied().unwrap_or(0);
        if sent > budget {
            found.push(finding(g, &format!("{sent} writes in {elapsed:.0?}")));
        }
    }
    if unnamed_pods > pod_budget + canary_pods {
        found.push(format!(
            "{unnamed_pods} pod creates in {elapsed:.0?} for a batch that needs {pod_budget}"
        ));
    }
    found
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn podset(seed: u64, replicas: u64) -> Generated {
        let name = format!("in-{seed:x}");
        Generated {
            seed,
            kind: Kind::PodSet,
            body: serde_json::json!({"metadata": {"name": name}, "spec": {"replicas": replicas}}),
            name,
            how: "test".into(),
        }
    }

    fn writes(list: &[(&str, &str, u64)]) -> BTreeMap<(String, String), u64> {
        list.iter()
            .map(|(r, n, c)| ((r.to_string(), n.to_string()), *c))
            .collect()
    }

    #[test]
    fn writes_are_counted_for_the_object_they_are_about_and_a_hot_loop_is_found() {
        let (a, b) = (podset(10, 3), podset(11, 1));
        let elapsed = Duration::from_secs(5);
        let acting = writes(&[
            ("pods", "", 4),
            ("podsets", "in-a", 2),
            ("events", "in-a.18b2f", 1),
            ("events", "in-b.18b2f", 6),
            ("podsets", "in-b", 6),
        ]);
        assert!(too_many_writes(&[&a, &b], &acting, elapsed, CANARY_PODS).is_empty());
        let looping = writes(&[("podsets", "in-b", 40), ("events", "in-b.1", 1)]);
        let found = too_many_writes(&[&a, &b], &looping, elapsed, CANARY_PODS);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].starts_with("seed 11 "), "{found:?}");
        let creating = writes(&[("pods", "", 60)]);
        assert_eq!(
            too_many_writes(&[&a, &b], &creating, elapsed, CANARY_PODS).len(),
            1
        );
    }
}
