//! The shipped alert rules and dashboard, checked by promtool (built from the Go module proxy
//! as the cluster is): the rules load, each alert fires once its condition held its `for` and
//! not before nor otherwise (tests/alerts/podset-operator.rules.test.yaml), and every
//! dashboard query parses.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, ensure};
use podset_operator::monitoring::{alerts, dashboard};
use serde_yaml::Value;

const RULES: &str = "config/prometheus/podset-operator.rules.yaml";
const RULE_TESTS: &str = "tests/alerts/podset-operator.rules.test.yaml";

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn promtool() -> PathBuf {
    testenv::versions::prometheus_bin_dir().join("promtool")
}

/// `promtool ARGS...` in the repository root: its stdout, or an error with all it said.
fn run_promtool(args: &[&str]) -> Result<String> {
    let out = Command::new(promtool())
        .args(args)
        .current_dir(root())
        .output()
        .with_context(|| format!("running {} (make test builds it)", promtool().display()))?;
    let said = format!(
        "promtool {}: {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.success(), "{said}");
    Ok(said)
}

#[test]
fn the_alert_rules_load_and_each_fires_when_and_only_when_it_should() -> Result<()> {
    run_promtool(&["check", "rules", RULES])?;
    run_promtool(&["test", "rules", RULE_TESTS])?;
    Ok(())
}

/// Every alert has a case where it fires and one where it does not: a new alert without
/// its tests fails here.
#[test]
fn every_alert_is_tested_firing_and_not_firing() -> Result<()> {
    let tests: Value = serde_yaml::from_str(&std::fs::read_to_string(root().join(RULE_TESTS))?)?;
    let cases: Vec<&Value> = tests["tests"]
        .as_sequence()
        .context("tests")?
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().into_iter().flatten())
        .collect();
    for alert in alerts::alerts() {
        let of_it = |firing: bool| {
            cases.iter().any(|c| {
                c["alertname"].as_str() == Some(alert.name)
                    && c["exp_alerts"]
                        .as_sequence()
                        .is_some_and(|a| a.is_empty() != firing)
            })
        };
        ensure!(of_it(true), "{}: no case where it fires", alert.name);
        ensure!(of_it(false), "{}: no case where it does not", alert.name);
    }
    Ok(())
}

/// Each dashboard query, as a recording rule promtool checks: a typo in a panel fails here
/// (what each returns against a real Prometheus is for the end-to-end test).
#[test]
fn every_dashboard_query_parses() -> Result<()> {
    let rules: Vec<serde_json::Value> = dashboard::queries()
        .into_iter()
        .enumerate()
        .map(|(i, expr)| serde_json::json!({ "record": format!("dashboard:query_{i}"), "expr": expr }))
        .collect();
    let file = tempfile::NamedTempFile::new()?;
    let groups = serde_json::json!({ "groups": [{ "name": "dashboard", "rules": rules }] });
    std::fs::write(file.path(), serde_yaml::to_string(&groups)?)?;
    let checked = run_promtool(&["check", "rules", &file.path().to_string_lossy()])?;
    ensure!(
        checked.contains(&format!("{} rules found", dashboard::queries().len())),
        "{checked}"
    );
    Ok(())
}
