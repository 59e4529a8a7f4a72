//! The chart's values as a user sets them: every one typed by values.schema.json (a wrong
//! type or an unknown key refused, the error naming where) and listed in the chart's README;
//! and the grace period that must hold a whole stop.

use super::*;

/// Values handed to Kubernetes as they are: their own keys are Kubernetes', not the chart's.
const PASSED_THROUGH: &[&str] = &[
    "podSecurityContext",
    "securityContext",
    "resources",
    "networkPolicy.metrics.namespaceSelector",
    "networkPolicy.metrics.podSelector",
];

/// Every value of values.yaml by dotted path, descending into the chart's own objects.
fn value_paths(value: &Value, prefix: &str, paths: &mut Vec<String>) {
    let Some(map) = value.as_object() else { return };
    for (key, child) in map {
        let path = if prefix.is_empty() {
            key.clone()
        } else {
            format!("{prefix}.{key}")
        };
        if !PASSED_THROUGH.contains(&path.as_str()) {
            value_paths(child, &path, paths);
        }
        paths.push(path);
    }
}

fn chart_file(name: &str) -> Result<String> {
    std::fs::read_to_string(chart().join(name)).with_context(|| format!("reading {name}"))
}

/// The schema's node for a dotted path, following `$ref`s.
fn schema_node<'a>(schema: &'a Value, path: &str) -> Option<&'a Value> {
    let resolve = |node: &'a Value| match node["$ref"].as_str() {
        Some(r) => schema.pointer(r.trim_start_matches('#')),
        None => Some(node),
    };
    path.split('.').try_fold(schema, |node, key| {
        resolve(resolve(node)?["properties"].get(key)?)
    })
}

/// Whether an object the node types refuses unknown keys (each object of a `oneOf`).
fn closed(schema: &Value, node: &Value) -> bool {
    if let Some(r) = node["$ref"].as_str() {
        return schema
            .pointer(r.trim_start_matches('#'))
            .is_some_and(|n| closed(schema, n));
    }
    match node["oneOf"].as_array() {
        Some(alternatives) => alternatives
            .iter()
            .filter(|a| a["type"] != "null")
            .all(|a| closed(schema, a)),
        None => node["additionalProperties"] == false,
    }
}

#[test]
fn every_value_is_typed_by_the_schema_and_listed_in_the_readme() -> Result<()> {
    let values: Value = serde_yaml::from_str(&chart_file("values.yaml")?)?;
    let schema: Value = serde_json::from_str(&chart_file("values.schema.json")?)?;
    let readme = chart_file("README.md")?;
    let mut paths = Vec::new();
    value_paths(&values, "", &mut paths);
    assert!(paths.len() > 40, "{paths:?}");
    let untyped: Vec<&String> = paths
        .iter()
        .filter(|p| {
            schema_node(&schema, p).is_none_or(|n| n.as_object().is_none_or(|o| o.is_empty()))
        })
        .collect();
    assert!(untyped.is_empty(), "not in values.schema.json: {untyped:?}");
    // The README's table lists each value the chart reads whole (not the objects above).
    let has_children = |p: &str| paths.iter().any(|q| q.starts_with(&format!("{p}.")));
    let undocumented: Vec<&String> = paths
        .iter()
        .filter(|p| !has_children(p) && !readme.contains(&format!("`{p}`")))
        .collect();
    assert!(
        undocumented.is_empty(),
        "not in the chart's README: {undocumented:?}"
    );
    // Each object of the chart's own refuses keys it does not know.
    let mut open = Vec::new();
    for path in &paths {
        let node = schema_node(&schema, path).expect("typed");
        let own_object = values
            .pointer(&format!("/{}", path.replace('.', "/")))
            .is_some_and(|v| v.as_object().is_some_and(|o| !o.is_empty()));
        if own_object && !closed(&schema, node) {
            open.push(path);
        }
    }
    assert!(open.is_empty(), "objects taking unknown keys: {open:?}");
    assert_eq!(schema["additionalProperties"], false);
    Ok(())
}

/// `--set` strings the schema refuses, each with where its error must point.
#[rustfmt::skip]
const MISTYPED: &[(&str, &str)] = &[
    ("replicaCount=two", "at '/replicaCount': got string, want integer"),
    ("replicaCount=0", "at '/replicaCount'"),
    ("replicas=3", "additional properties 'replicas' not allowed"),
    ("metrics.servicemonitor.enabled=true", "at '/metrics': additional properties 'servicemonitor' not allowed"),
    ("metrics.port=70000", "at '/metrics/port'"),
    ("healthProbe.port=0", "at '/healthProbe/port'"),
    ("leaderElection.leaseDurationSeconds=1", "at '/leaderElection/leaseDurationSeconds'"),
    ("leaderElection.leaseDurationSeconds=3601", "at '/leaderElection/leaseDurationSeconds'"),
    ("shutdownTimeoutSeconds=-1", "at '/shutdownTimeoutSeconds'"),
    ("logFormat=xml", "at '/logFormat'"),
    ("controllers=cron", "at '/controllers'"),
    ("watchNamespace=Team_A", "at '/watchNamespace'"),
    ("watchNamespace=team-a\\,Team_B", "at '/watchNamespace'"),
    ("watchNamespace=team-a\\,", "at '/watchNamespace'"),
    ("podDisruptionBudget.minAvailable=150%", "at '/podDisruptionBudget/minAvailable'"),
    ("topologySpreadConstraints[0].maxSkew=1", "at '/topologySpreadConstraints/0': missing properties"),
    ("userRoles.enabled=yes", "at '/userRoles/enabled'"),
];

#[tokio::test]
async fn the_schema_refuses_a_wrong_type_or_an_unknown_key_naming_it() -> Result<()> {
    let mut wrong = Vec::new();
    for (set, says) in MISTYPED {
        match render(&["--set", set]).await {
            Ok(_) => wrong.push(format!("{set}: rendered")),
            Err(e) if format!("{e:#}").contains(says) => {}
            Err(e) => wrong.push(format!("{set}: refused, but not saying {says:?}: {e:#}")),
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // helm lint checks the same schema.
    let lint = testenv::helm::lint(&chart(), &["--set", "replicaCount=two"]).await;
    let error = format!("{:#}", lint.expect_err("lint passed a string replicaCount"));
    assert!(error.contains("at '/replicaCount'"), "{error}");
    // What the operator takes renders: both controllers' spellings, a percentage, the bounds.
    render(&[
        "--set-string",
        "controllers=at,podDisruptionBudget.minAvailable=50%",
        "--set",
        "leaderElection.leaseDurationSeconds=2,metrics.port=65535,healthProbe.port=1",
        "--set",
        "logFormat=text,resources=null,networkPolicy.metrics.namespaceSelector=null",
    ])
    .await?;
    Ok(())
}

/// A stop is the reconciles' shutdown timeout, the Lease's release (up to two thirds of the
/// lease, rounded up), and 2 s to exit: the grace period must hold it, or the kubelet kills
/// the leader before it released the Lease and the standby waits the lease out.
#[tokio::test]
async fn the_grace_period_must_hold_the_shutdown_and_the_leases_release() -> Result<()> {
    for (set, needed) in [
        ("terminationGracePeriodSeconds=21", 22), // 10 + 10 + 2
        ("leaderElection.leaseDurationSeconds=60", 52), // 10 + 40 + 2
        (
            "leaderElection.leaseDurationSeconds=16,terminationGracePeriodSeconds=22",
            23,
        ), // 10 + 11 + 2
        ("shutdownTimeoutSeconds=30", 42),
        (
            "leaderElection.enabled=false,replicaCount=1,podDisruptionBudget.enabled=false,terminationGracePeriodSeconds=11",
            12,
        ),
    ] {
        let error = format!("{:#}", render(&["--set", set]).await.expect_err(set));
        for says in [
            format!("is below the {needed} s a stop may take"),
            format!("Raise terminationGracePeriodSeconds to at least {needed}."),
        ] {
            assert!(error.contains(&says), "{set}: {error}");
        }
    }
    for set in [
        "terminationGracePeriodSeconds=22",
        "leaderElection.leaseDurationSeconds=60,terminationGracePeriodSeconds=52",
        "leaderElection.leaseDurationSeconds=16,terminationGracePeriodSeconds=23",
        "leaderElection.enabled=false,replicaCount=1,podDisruptionBudget.enabled=false,terminationGracePeriodSeconds=12",
    ] {
        let docs = render(&["--set", set]).await.context(set)?;
        let grace = set.rsplit('=').next().expect("a value").parse::<i64>()?;
        let pod = &find(&docs, "Deployment", "podset-operator")?["spec"]["template"]["spec"];
        assert_eq!(pod["terminationGracePeriodSeconds"], grace, "{set}");
    }
    Ok(())
}
