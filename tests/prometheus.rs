//! A real Prometheus (built from the Go module proxy) scrapes the operator's HTTPS `/metrics`
//! with a ServiceAccount token, as a user's would, and evaluates the shipped alert rules:
//! after the walkthroughs (a PodSet scaled, an At run on a real node) every dashboard panel
//! has data, the At lateness histogram holds the At, and `PodsetOperatorDown` fires within its
//! `for` window once the operator is stopped.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::api::PostParams;
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::monitoring::{JOB, dashboard};
use serde_json::Value;
use testenv::harness::{
    PROMPTLY, TestNs, at, cluster_with_real_node, converged, podset, poll_some,
};
use testenv::{Process, free_port};

/// Scrapes and rule evaluations every second: the test waits on them.
const EVERY: &str = "1s";

/// Prometheus on `port`, scraping the operator on `metrics_port` with `token_file`, and
/// evaluating the shipped rules.
fn start_prometheus(
    dir: &Path,
    port: u16,
    metrics_port: u16,
    token_file: &Path,
) -> Result<Process> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let rules = root.join("config/prometheus/podset-operator.rules.yaml");
    let config = serde_json::json!({
        "global": { "scrape_interval": EVERY, "evaluation_interval": EVERY },
        "rule_files": [rules],
        "scrape_configs": [{
            "job_name": JOB,
            "scheme": "https",
            "authorization": { "credentials_file": token_file },
            // The operator's certificate is self-signed (no --metrics-cert-dir).
            "tls_config": { "insecure_skip_verify": true },
            "static_configs": [{ "targets": [format!("127.0.0.1:{metrics_port}")] }],
        }],
    });
    let config_file = dir.join("prometheus.yml");
    std::fs::write(&config_file, serde_yaml::to_string(&config)?)?;
    let binary = testenv::versions::prometheus_bin_dir().join("prometheus");
    let args = vec![
        format!("--config.file={}", config_file.display()),
        format!(
            "--storage.tsdb.path={}",
            dir.join("prometheus-data").display()
        ),
        format!("--web.listen-address=127.0.0.1:{port}"),
    ];
    let mut process = Process::new("prometheus", binary, args, dir);
    process
        .start()
        .context("starting prometheus (make test builds it)")?;
    Ok(process)
}

/// Asks Prometheus `query` now: the result vector.
async fn query(port: u16, query: &str) -> Result<Vec<Value>> {
    let url = format!("http://127.0.0.1:{port}/api/v1/query");
    let body = reqwest::Client::new()
        .get(url)
        .query(&[("query", query)])
        .send()
        .await?
        .text()
        .await?;
    let answer: Value = serde_json::from_str(&body)?;
    ensure!(answer["status"] == "success", "{query}: {answer}");
    Ok(answer["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// The dashboard's panels none of whose queries return anything, with their queries.
async fn empty_panels(port: u16) -> Result<Vec<(&'static str, Vec<String>)>> {
    let mut empty = Vec::new();
    for (title, queries) in dashboard::panel_queries() {
        let mut answered = false;
        for q in &queries {
            answered |= !query(port, q).await?.is_empty();
        }
        if !answered {
            empty.push((title, queries));
        }
    }
    Ok(empty)
}

async fn firing(port: u16, alert: &str) -> Result<bool> {
    let url = format!("http://127.0.0.1:{port}/api/v1/alerts");
    let answer: Value = serde_json::from_str(&reqwest::get(url).await?.text().await?)?;
    let alerts = answer["data"]["alerts"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(alerts
        .iter()
        .any(|a| a["labels"]["alertname"] == alert && a["state"] == "firing"))
}

#[tokio::test]
async fn a_real_prometheus_sees_every_panel_and_the_operator_down_alert_fires() -> Result<()> {
    let ns = TestNs::new_in(cluster_with_real_node().await?, "prometheus").await?;
    let token = ns.scraper().await?;
    let mut op = ns.start_operator(&[]).await?;
    let dir = tempfile::tempdir_in(ns.cluster.dir())?;
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token)?;
    let port = free_port()?;
    let _prometheus = start_prometheus(dir.path(), port, op.metrics_port, &token_file)?;

    // The walkthroughs: a PodSet of 3, and the At of the seed, run on the real node.
    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("podset-sample", 3))
        .await?;
    converged(&ns, "podset-sample", 3).await?;
    let ats = ns.api::<At>();
    ats.create(
        &PostParams::default(),
        &at("example-at", "2019-04-12T10:12:00Z", "echo YAY"),
    )
    .await?;
    poll_some(PROMPTLY, "the At DONE", || async {
        let phase = ats.get("example-at").await?.status.and_then(|s| s.phase);
        Ok((phase == Some(AtPhase::Done)).then_some(()))
    })
    .await?;

    poll_some(
        PROMPTLY,
        "the At's lateness and outcome scraped",
        || async {
            let late = query(port, "podset_operator_at_lateness_seconds_count").await?;
            let done = query(
                port,
                r#"podset_operator_at_outcomes_total{verdict="succeeded"}"#,
            )
            .await?;
            let value = |r: &[Value]| {
                r.first()
                    .and_then(|s| s["value"][1].as_str())
                    .map(String::from)
            };
            Ok(
                (value(&late).as_deref() == Some("1") && value(&done).as_deref() == Some("1"))
                    .then_some(()),
            )
        },
    )
    .await?;
    // Each panel fills once Prometheus has scraped twice since its series appeared.
    let filled = poll_some(PROMPTLY, "every dashboard panel with data", || async {
        Ok(empty_panels(port).await?.is_empty().then_some(()))
    })
    .await;
    if let Err(e) = filled {
        anyhow::bail!("{e:#}: still empty {:#?}", empty_panels(port).await?);
    }
    ensure!(!firing(port, "PodsetOperatorDown").await?, "down while up");

    // Stopped: `up` turns 0, and the alert fires once that held its 2 minutes.
    op.kill();
    poll_some(
        Duration::from_secs(150),
        "PodsetOperatorDown firing within its 2 minutes",
        || async { Ok(firing(port, "PodsetOperatorDown").await?.then_some(())) },
    )
    .await?;
    Ok(())
}
