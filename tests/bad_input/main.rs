//! Bad input (issue 6): 60+ malformed PodSets and Ats. Each is refused by the API server's
//! schema or reported by the operator in a condition and a Warning event, and the operator
//! never crashes or hot-loops on any of them.

mod cases;
mod unreadable;

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use cases::{Case, Expect, Kind, cases};
use futures::future::join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use testenv::harness::{
    PROMPTLY, TestNs, cluster_without_nodes, condition, ensure_runs_command, poll_some,
};

async fn shared_ns(prefix: &str) -> Result<TestNs> {
    TestNs::new_in(cluster_without_nodes().await?, prefix).await
}

/// POSTs the raw body; the error's code and message if the API server refuses it.
async fn submit(ns: &TestNs, c: &Case) -> Result<Option<(u16, String)>> {
    ns.post_raw(
        c.kind,
        cases::api_version(c.kind),
        c.body.clone().into_bytes(),
    )
    .await
}

/// Waits for what the operator should make of an accepted object; a description of it.
async fn handled(ns: &TestNs, c: &Case) -> Result<String> {
    let what = format!("{:?} {:.40}: {:?}", c.kind, c.name, c.expect);
    match c.kind {
        Kind::PodSet => {
            let api = ns.api::<PodSet>();
            poll_some(PROMPTLY, &what, || async {
                let ps = api.get(&c.name).await?;
                let status = ps.status.clone().unwrap_or_default();
                let seen = match &c.expect {
                    Expect::Available(n) => {
                        let pods = ns.pods_of(&ps.uid().unwrap()).await?;
                        let mut names: Vec<_> = pods.iter().map(|p| p.name_any()).collect();
                        names.sort();
                        (status.available_replicas == *n
                            && pods.len() == *n as usize
                            && status.pod_names == names
                            && status.observed_generation == ps.metadata.generation)
                            .then(|| format!("{n} pods available"))
                    }
                    Expect::ReplicaFailure(part) => condition(&ps, CONDITION_REPLICA_FAILURE)
                        .filter(|c| c.0 == "True" && c.2.contains(part))
                        .filter(|_| status.available_replicas == 0)
                        .map(|c| format!("ReplicaFailure {}: {}", c.1, c.2)),
                    other => bail!("no PodSet outcome {other:?}"),
                };
                let warned = match &c.expect {
                    Expect::ReplicaFailure(_) if c.event => {
                        ns.warned(&c.name, "FailedCreate", "").await?
                    }
                    _ => true,
                };
                match seen {
                    Some(seen) if !warned => {
                        bail!("no FailedCreate Warning event, though the status says {seen}")
                    }
                    seen => Ok(seen),
                }
            })
            .await
        }
        Kind::At => {
            let api = ns.api::<At>();
            poll_some(PROMPTLY, &what, || async {
                let at = api.get(&c.name).await?;
                let status = at.status.clone().unwrap_or_default();
                Ok(match &c.expect {
                    Expect::Running if status.phase == Some(AtPhase::Running) => {
                        let pod = ns.api::<Pod>().get(&format!("{}-pod", c.name)).await?;
                        ensure_runs_command(&pod, at.spec.shell_line().unwrap_or_default())?;
                        Some("RUNNING, the pod's command intact".to_string())
                    }
                    Expect::Pending => {
                        (status.phase == Some(AtPhase::Pending)).then(|| "PENDING".to_string())
                    }
                    _ => None,
                })
            })
            .await
        }
    }
}

/// Checks that the stored object lacks the pruned fields.
async fn pruned(ns: &TestNs, c: &Case) -> Result<()> {
    if c.pruned.is_empty() {
        return Ok(());
    }
    let stored = ns.get_raw(c.kind, &c.name).await?;
    for pointer in c.pruned {
        if stored.pointer(pointer).is_some() {
            bail!("{pointer} was stored, not pruned");
        }
    }
    Ok(())
}

fn short(s: &str, n: usize) -> String {
    let s = s.replace('\n', " ");
    if s.chars().count() <= n {
        s
    } else {
        format!("{}...", s.chars().take(n).collect::<String>())
    }
}

#[tokio::test]
async fn bad_input_is_refused_or_reported_and_never_crashes_the_operator() -> Result<()> {
    let ns = shared_ns("bad-input").await?;
    let mut operator = ns.start_operator(&[]).await?;
    let cases = cases();
    assert!(cases.len() >= 30);
    let mut outcomes: BTreeMap<usize, (bool, String)> = BTreeMap::new();
    let mut accepted = Vec::new();
    for (i, c) in cases.iter().enumerate() {
        match (submit(&ns, c).await?, &c.expect) {
            (Some((code, message)), Expect::Refused(want, part)) => {
                let ok = code == *want && message.contains(part);
                outcomes.insert(i, (ok, format!("refused {code}: {message}")));
            }
            (Some((code, message)), _) => {
                outcomes.insert(i, (false, format!("refused {code}: {message}")));
            }
            (None, Expect::Refused(..)) => {
                outcomes.insert(i, (false, "accepted".into()));
            }
            (None, _) => accepted.push(i),
        }
    }
    let checks = accepted.iter().map(|&i| {
        let (ns, c) = (&ns, &cases[i]);
        async move {
            let outcome = async {
                pruned(ns, c).await?;
                handled(ns, c).await
            };
            (i, outcome.await)
        }
    });
    for (i, result) in join_all(checks).await {
        let seen = match result {
            Ok(s) => (true, format!("accepted; {s}")),
            Err(e) => (false, format!("accepted; {e:#}")),
        };
        outcomes.insert(i, seen);
    }

    println!("{:<34} {:<6} {:<4} outcome", "case", "kind", "ok");
    for (i, (ok, outcome)) in &outcomes {
        let c = &cases[*i];
        println!(
            "{:<34} {:<6} {:<4} {}",
            c.what,
            format!("{:?}", c.kind),
            if *ok { "yes" } else { "NO" },
            short(outcome, 150)
        );
    }
    // A dotted PodSet name gives its pods dotted names, which the API server admits with a
    // warning that they make odd hostnames: the operator logs it, as it should.
    operator.assert_healthy_but_warned(&["a DNS label is recommended"]);
    let failed: Vec<_> = outcomes
        .iter()
        .filter(|(_, (ok, _))| !ok)
        .map(|(i, (_, outcome))| {
            format!(
                "{:?} {}: expected {:?}, got {}",
                cases[*i].kind,
                cases[*i].what,
                cases[*i].expect,
                short(outcome, 300)
            )
        })
        .collect();
    assert!(
        failed.is_empty(),
        "unexpected outcomes:\n{}",
        failed.join("\n")
    );
    Ok(())
}
