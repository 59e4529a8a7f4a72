//! Issue 31, item 4: the chart over the values users change. Each combination that makes
//! sense renders and passes a server-side dry run on the local cluster, and its Deployment
//! says what was asked; each that would render valid YAML and run wrong (two active
//! controllers, a drain blocked for good, a shutdown cut short, two servers on one port, a
//! lease the operator refuses) is refused by the chart with what to change.

use anyhow::{Result, ensure};
use futures::{StreamExt, stream};
use serde_json::Value;
use testenv::Cluster;

use super::{chart, cluster, kubectl, unique};
use crate::render::{documents, find};

/// `--set` strings that make sense, each with an argument its Deployment must carry (or
/// `None`).
#[rustfmt::skip]
const TAKEN: &[(&str, Option<&str>)] = &[
    ("replicaCount=2", Some("--leader-elect")),
    (
        "replicaCount=3,podDisruptionBudget.minAvailable=2",
        Some("--leader-elect"),
    ),
    ("replicaCount=2,podDisruptionBudget.minAvailable=50%", None),
    ("replicaCount=1,podDisruptionBudget.enabled=false", None),
    (
        "replicaCount=1,leaderElection.enabled=false,podDisruptionBudget.enabled=false",
        None,
    ),
    (
        "leaderElection.leaseName=custom-lease",
        Some("--leader-election-id=custom-lease"),
    ),
    (
        "leaderElection.leaseDurationSeconds=60,terminationGracePeriodSeconds=60",
        Some("--lease-duration-seconds=60"),
    ),
    (
        "terminationGracePeriodSeconds=60,shutdownTimeoutSeconds=45",
        Some("--shutdown-timeout-seconds=45"),
    ),
    (
        "metrics.port=9444,healthProbe.port=9081",
        Some("--metrics-bind-address=:9444"),
    ),
    ("metrics.secure=false", Some("--metrics-secure=false")),
    (
        "metrics.certSecret=metrics-tls",
        Some("--metrics-cert-dir=/etc/podset-operator/metrics-certs"),
    ),
    ("metrics.service.enabled=false", None),
    ("webhook.port=9555", Some("--webhook-bind-address=:9555")),
    ("webhook.enabled=false", None),
    ("networkPolicy.enabled=true,metrics.port=9444,healthProbe.port=9081", None),
    ("networkPolicy.metrics.namespaceSelector=null,networkPolicy.enabled=true", None),
    ("userRoles.aggregate=false", None),
    ("resources=null", None),
    ("watchNamespace=NS", None), // NS: the test's namespace, which must exist
];

/// `--set` strings the chart refuses, each with a part of its message.
#[rustfmt::skip]
const REFUSED: &[(&str, &str)] = &[
    (
        "replicaCount=2,leaderElection.enabled=false",
        "2 operators would act",
    ),
    ("replicaCount=1", "no operator pod could ever be evicted"),
    (
        "replicaCount=2,podDisruptionBudget.minAvailable=2",
        "no operator pod could ever be evicted",
    ),
    (
        "podDisruptionBudget.minAvailable=100%",
        "no operator pod could ever be evicted",
    ),
    (
        "shutdownTimeoutSeconds=30",
        "Raise terminationGracePeriodSeconds to at least 42.",
    ),
    (
        "terminationGracePeriodSeconds=5",
        "is below the 22 s a stop may take",
    ),
    // 10 s of reconciles, up to 40 s to release a 60 s Lease and 2 s to exit: not in 30 s.
    (
        "leaderElection.leaseDurationSeconds=60",
        "plus the Lease's release (up to 40 s",
    ),
    ("metrics.port=8081", "could not bind it"),
    ("webhook.port=8443", "the webhook could not bind it"),
    (
        "leaderElection.leaseDurationSeconds=1",
        "at '/leaderElection/leaseDurationSeconds'",
    ),
    (
        "metrics.serviceMonitor.enabled=true,metrics.service.enabled=false",
        "needs metrics.service.enabled",
    ),
];

/// The chart rendered as release `ps` in `ns` with `set`.
async fn render(ns: &str, set: &str) -> Result<Vec<Value>> {
    documents(&testenv::helm::template("ps", &chart(), ns, &["--set", set]).await?)
}

/// Whether the Deployment of `docs` carries `arg`.
fn has_arg(docs: &[Value], arg: &str) -> Result<bool> {
    let deploy = find(docs, "Deployment", "podset-operator")?;
    let args = &deploy["spec"]["template"]["spec"]["containers"][0]["args"];
    Ok(args.as_array().is_some_and(|a| a.iter().any(|v| v == arg)))
}

/// Renders `set`, checks its Deployment carries `arg`, and dry-runs it on the server.
async fn taken(cluster: &Cluster, ns: &str, set: &str, arg: Option<&str>) -> Result<()> {
    let docs = render(ns, set).await?;
    if let Some(arg) = arg {
        ensure!(has_arg(&docs, arg)?, "the Deployment lacks {arg}");
    }
    // No ServiceMonitor CRD here; everything else goes to the API server.
    let yaml: Vec<String> = docs
        .iter()
        .filter(|d| d["kind"] != "ServiceMonitor")
        .map(serde_yaml::to_string)
        .collect::<Result<_, _>>()?;
    let file = tempfile::Builder::new()
        .suffix(".yaml")
        .tempfile_in(cluster.dir())?;
    std::fs::write(file.path(), yaml.join("---\n"))?;
    let path = file.path().display().to_string();
    let dry_run = [
        "apply",
        "--server-side",
        "--force-conflicts",
        "--dry-run=server",
        "-f",
        &path,
    ];
    kubectl(cluster.kubeconfig(), &dry_run).await?;
    Ok(())
}

/// Whether the chart refuses `set` saying `part`.
async fn refused(ns: &str, set: &str, part: &str) -> Result<(), String> {
    match render(ns, set).await {
        Ok(_) => Err("rendered".to_string()),
        Err(e) if format!("{e:#}").contains(part) => Ok(()),
        Err(e) => Err(format!("refused, but not saying {part:?}: {e:#}")),
    }
}

#[tokio::test]
async fn the_chart_dry_runs_what_makes_sense_and_refuses_what_runs_wrong() -> Result<()> {
    // Helm runs as a process each time: four at once.
    const AT_ONCE: usize = 4;
    let cluster = cluster().await?;
    let ns = unique("chart-matrix");
    cluster.create_namespace(&ns).await?;
    let (cluster, ns) = (&cluster, ns.as_str());
    let taken: Vec<_> = stream::iter(TAKEN.iter().map(|(set, arg)| async move {
        let set = set.replace("=NS", &format!("={ns}"));
        let verdict = taken(cluster, ns, &set, *arg)
            .await
            .map_err(|e| format!("{e:#}"));
        (
            set,
            verdict.map(|()| "rendered, dry run passed".to_string()),
        )
    }))
    .buffered(AT_ONCE)
    .collect()
    .await;
    let refused: Vec<_> = stream::iter(REFUSED.iter().map(|(set, part)| async move {
        let verdict = refused(ns, set, part).await;
        (
            set.to_string(),
            verdict.map(|()| format!("refused: ...{part}...")),
        )
    }))
    .buffered(AT_ONCE)
    .collect()
    .await;
    let mut failures = Vec::new();
    for (set, verdict) in taken.iter().chain(&refused) {
        let said = verdict.as_ref().unwrap_or_else(|e| e);
        println!("{set:<80} {said}");
        if verdict.is_err() {
            failures.push(format!("{set}: {said}"));
        }
    }
    ensure!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}
