//! The chart and the kustomize layout as rendered, without installing them: the kinds, RBAC
//! and Deployment each scope and option must ship.

use super::*;

#[tokio::test]
async fn chart_lints_and_renders_both_scopes() -> Result<()> {
    for values in [
        &[][..],
        &["--set-string", "watchNamespace=team-a"][..],
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true,leaderElection.enabled=false",
        ][..],
    ] {
        testenv::helm::lint(&chart(), values)
            .await
            .context("helm lint")?;
    }

    // Cluster-wide: the manager rules in a ClusterRole, bound cluster-wide.
    let docs = render(&[]).await?;
    assert_kinds(
        &docs,
        &[
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ],
    );
    assert_rules(
        find(&docs, "ClusterRole", "-manager")?,
        &generated(rbac::rules()),
    );
    let crb = find(&docs, "ClusterRoleBinding", "-manager")?;
    assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb["subjects"][0]["namespace"], "ops");
    let leader = find(&docs, "Role", "-leader-election")?;
    assert_eq!(leader["metadata"]["namespace"], "ops");
    assert_rules(leader, &generated(rbac::leader_election_rules()));
    let deploy = find(&docs, "Deployment", "podset-operator")?;
    assert_hardened_deployment(deploy);
    assert_eq!(env_value(deploy, "WATCH_NAMESPACE"), Some(""));
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "")?["spec"]["minAvailable"],
        1
    );
    assert_eq!(
        find(&docs, "Service", "-metrics")?["spec"]["ports"][0]["port"],
        8443
    );
    assert_metrics_rbac(&docs, "ops")?;

    // One namespace: the manager rules in a Role + RoleBinding there; cluster-wide, only the
    // metrics reviews (TokenReviews and SubjectAccessReviews have no namespace), the At CRD's
    // conversion (CRDs have none either; that CRD alone, by name) and the roles for people
    // (bound per namespace).
    let docs = render(&["--set-string", "watchNamespace=team-a"]).await?;
    let mut cluster_wide = BTreeSet::from([
        "ClusterRole/ps-podset-operator-metrics-auth".to_string(),
        "ClusterRole/ps-podset-operator-metrics-reader".to_string(),
        "ClusterRoleBinding/ps-podset-operator-metrics-auth".to_string(),
        "ClusterRole/ps-podset-operator-conversion".to_string(),
        "ClusterRoleBinding/ps-podset-operator-conversion".to_string(),
        "ClusterRole/ps-podset-operator-migration".to_string(),
        "ClusterRoleBinding/ps-podset-operator-migration".to_string(),
    ]);
    cluster_wide.extend(
        rbac::user_roles()
            .iter()
            .map(|r| format!("ClusterRole/ps-podset-operator-{}", r.name())),
    );
    assert_eq!(cluster_wide_names(&docs), cluster_wide);
    assert_metrics_rbac(&docs, "ops")?;
    let role = find(&docs, "Role", "-manager")?;
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert_rules(role, &generated(rbac::rules()));
    let rb = find(&docs, "RoleBinding", "-manager")?;
    assert_eq!(rb["metadata"]["namespace"], "team-a");
    assert_eq!(rb["roleRef"]["kind"], "Role");
    assert_eq!(rb["subjects"][0]["namespace"], "ops");
    assert_rules(
        find(&docs, "Role", "-leader-election")?,
        &generated(rbac::leader_election_rules()),
    );
    let deploy = find(&docs, "Deployment", "podset-operator")?;
    assert_hardened_deployment(deploy);
    assert_eq!(env_value(deploy, "WATCH_NAMESPACE"), Some("team-a"));

    // A list: the same Role and RoleBinding in each namespace, still nothing more cluster-wide.
    let listed = render(&["--set-string", "watchNamespace=team-a\\,team-b"]).await?;
    assert_eq!(cluster_wide_names(&listed), cluster_wide);
    for kind in ["Role", "RoleBinding"] {
        let manager =
            |d: &&Value| d["kind"] == kind && d["metadata"]["name"] == "ps-podset-operator-manager";
        let namespaces: Vec<&Value> = (listed.iter().filter(manager))
            .map(|d| &d["metadata"]["namespace"])
            .collect();
        assert_eq!(namespaces, ["team-a", "team-b"], "{kind}");
    }
    let deploy = find(&listed, "Deployment", "podset-operator")?;
    assert_eq!(env_value(deploy, "WATCH_NAMESPACE"), Some("team-a,team-b"));

    // The ServiceMonitor only when asked for; no leader-election Role without election.
    let docs = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,leaderElection.enabled=false,replicaCount=1,podDisruptionBudget.enabled=false",
    ])
    .await?;
    let sm = find(&docs, "ServiceMonitor", "podset-operator")?;
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    let endpoint = &sm["spec"]["endpoints"][0];
    assert_eq!(endpoint["port"], "metrics");
    assert_eq!(endpoint["scheme"], "https");
    assert_eq!(
        endpoint["bearerTokenFile"],
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    );
    assert_eq!(endpoint["tlsConfig"]["insecureSkipVerify"], true);
    assert!(find(&docs, "Role", "-leader-election").is_err());
    let args = &find(&docs, "Deployment", "podset-operator")?["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    assert!(
        !args
            .as_array()
            .expect("args")
            .contains(&json!("--leader-elect"))
    );

    // A mounted certificate, verified by the ServiceMonitor.
    let docs = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.certSecret=metrics-tls",
    ])
    .await?;
    let pod = &find(&docs, "Deployment", "podset-operator")?["spec"]["template"]["spec"];
    assert_eq!(pod["volumes"][0]["secret"]["secretName"], "metrics-tls");
    let mount = &pod["containers"][0]["volumeMounts"][0];
    assert_eq!(mount["readOnly"], true);
    let cert_dir = format!(
        "--metrics-cert-dir={}",
        mount["mountPath"].as_str().unwrap()
    );
    assert!(
        pod["containers"][0]["args"]
            .as_array()
            .expect("args")
            .contains(&json!(cert_dir)),
        "{pod}"
    );
    let tls =
        &find(&docs, "ServiceMonitor", "podset-operator")?["spec"]["endpoints"][0]["tlsConfig"];
    assert!(tls["insecureSkipVerify"].is_null(), "{tls}");
    assert_eq!(tls["ca"]["secret"]["name"], "metrics-tls");

    // Plain metrics, for development: no reviews, so no cluster-wide RBAC for them.
    let docs = render(&[
        "--set",
        "metrics.secure=false,metrics.serviceMonitor.enabled=true",
    ])
    .await?;
    assert!(find(&docs, "ClusterRole", "-metrics-auth").is_err());
    assert!(find(&docs, "ClusterRole", "-metrics-reader").is_err());
    let deploy = find(&docs, "Deployment", "podset-operator")?;
    assert!(
        deploy["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .expect("args")
            .contains(&json!("--metrics-secure=false"))
    );
    let sm = find(&docs, "ServiceMonitor", "podset-operator")?;
    assert!(sm["spec"]["endpoints"][0]["scheme"].is_null(), "{sm}");
    Ok(())
}

/// The metrics-auth ClusterRole bound to the operator's account (in `ns`), and the
/// metrics-reader ClusterRole bound to no one, both with the generated rules.
fn assert_metrics_rbac(docs: &[Value], ns: &str) -> Result<()> {
    assert_rules(
        find(docs, "ClusterRole", "-metrics-auth")?,
        &generated(rbac::metrics_auth_rules()),
    );
    assert_rules(
        find(docs, "ClusterRole", "-metrics-reader")?,
        &generated(rbac::metrics_reader_rules()),
    );
    let binding = find(docs, "ClusterRoleBinding", "-metrics-auth")?;
    assert!(
        binding["roleRef"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-metrics-auth"))
    );
    assert_eq!(binding["subjects"][0]["namespace"], ns);
    assert!(
        binding["subjects"][0]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("podset-operator"))
    );
    let readers = docs.iter().filter(|d| {
        d["roleRef"]["name"]
            .as_str()
            .is_some_and(|n| n.ends_with("-metrics-reader"))
    });
    assert_eq!(
        readers.count(),
        0,
        "metrics-reader is for the admin to bind"
    );
    Ok(())
}

/// `Kind/name` of every object without a namespace.
fn cluster_wide_names(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter(|d| d["metadata"]["namespace"].is_null())
        .map(|d| {
            format!(
                "{}/{}",
                d["kind"].as_str().unwrap_or(""),
                d["metadata"]["name"].as_str().unwrap_or("")
            )
        })
        .collect()
}

/// What the chart refuses (`tests/shipping/matrix.rs`), checked in the kustomize layout: one
/// active replica, a disruption budget a drain can satisfy, a shutdown within the grace
/// period, two ports.
fn runs_right(deploy: &Value, pdb: &Value) {
    let spec = &deploy["spec"]["template"]["spec"];
    let args: Vec<&str> = spec["containers"][0]["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let replicas = deploy["spec"]["replicas"].as_i64().unwrap_or(1);
    assert!(
        replicas <= 1 || args.contains(&"--leader-elect"),
        "{replicas} replicas, no election"
    );
    let min = pdb["spec"]["minAvailable"]
        .as_i64()
        .expect("an integer minAvailable");
    assert!(
        min < replicas,
        "minAvailable {min} of {replicas}: drains blocked"
    );
    let flag = |name: &str| {
        args.iter()
            .find_map(|a| a.strip_prefix(&format!("--{name}=")))
            .map(str::to_string)
    };
    // The chart's grace check: the reconciles, the Lease's release, 2 s to exit.
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
    let seconds =
        |name: &str, default: i64| flag(name).map_or(default, |s| s.parse().expect("a number"));
    let shutdown = seconds("shutdown-timeout-seconds", 10);
    let release = (2 * seconds("lease-duration-seconds", 15) + 2) / 3; // rounded up
    assert!(
        shutdown + release + 2 <= grace,
        "shutdown {shutdown} s and release {release} s not within the {grace} s grace"
    );
    let port = |name: &str, default: &str| flag(name).unwrap_or_else(|| default.to_string());
    assert_ne!(
        port("metrics-bind-address", ":8443"),
        port("health-probe-bind-address", ":8081")
    );
}

#[tokio::test]
async fn kustomize_default_renders_the_generated_manifests() -> Result<()> {
    let out = run(
        &testenv::versions::kubectl().to_string_lossy(),
        &["kustomize", "config/default"],
    )
    .await?;
    let docs = documents(&out)?;
    assert_kinds(
        &docs,
        &[
            "ClusterRole",
            "ClusterRoleBinding",
            "CustomResourceDefinition",
            "Deployment",
            "Namespace",
            "PodDisruptionBudget",
            "Role",
            "RoleBinding",
            "Service",
            "ServiceAccount",
        ],
    );
    for d in &docs {
        if d["metadata"]["namespace"].is_string() {
            assert_eq!(d["metadata"]["namespace"], "podset-operator-system", "{d}");
        }
    }
    assert_rules(
        find(&docs, "ClusterRole", "podset-operator-manager")?,
        &generated(rbac::rules()),
    );
    assert_rules(
        find(&docs, "Role", "podset-operator-leader-election")?,
        &generated(rbac::leader_election_rules()),
    );
    assert_metrics_rbac(&docs, "podset-operator-system")?;
    let deploy = find(&docs, "Deployment", "controller-manager")?;
    assert_hardened_deployment(deploy);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "podset-operator:0.1.0"
    );
    runs_right(deploy, find(&docs, "PodDisruptionBudget", "")?);
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "")?["apiVersion"],
        "policy/v1"
    );
    for binding in ["ClusterRoleBinding", "RoleBinding"] {
        let b = find(&docs, binding, "")?;
        assert_eq!(b["subjects"][0]["namespace"], "podset-operator-system");
        assert_eq!(b["subjects"][0]["name"], "podset-operator");
    }
    let crds: BTreeSet<&str> = docs
        .iter()
        .filter(|d| d["kind"] == "CustomResourceDefinition")
        .filter_map(|d| d["metadata"]["name"].as_str())
        .collect();
    assert_eq!(
        crds,
        BTreeSet::from([
            "podsets.app.example.com",
            "ats.cnat.programming-kubernetes.info"
        ])
    );
    Ok(())
}

/// The alert rules and the dashboard only when asked for, as generated, with the release's
/// metrics Service as their `job` (what its ServiceMonitor's scrapes are labelled).
#[tokio::test]
async fn the_chart_ships_the_alert_rules_and_dashboard_for_its_own_metrics_service() -> Result<()> {
    use podset_operator::monitoring::{alerts, dashboard};
    let docs = render(&[]).await?;
    assert!(find(&docs, "PrometheusRule", "podset-operator").is_err());
    assert!(find(&docs, "ConfigMap", "-dashboard").is_err());
    let docs = render(&[
        "--set",
        "metrics.prometheusRule.enabled=true,metrics.prometheusRule.labels.release=kps,metrics.prometheusRule.runbookBaseURL=https://wiki.example/podset,metrics.dashboard.enabled=true",
    ])
    .await?;
    let service = find(&docs, "Service", "-metrics")?["metadata"]["name"].clone();
    let job = format!(r#"job="{}""#, service.as_str().expect("a name"));
    let rule = find(&docs, "PrometheusRule", "podset-operator")?;
    assert_eq!(rule["metadata"]["labels"]["release"], "kps");
    let rules = rule["spec"]["groups"][0]["rules"]
        .as_array()
        .expect("rules");
    assert_eq!(rules.len(), alerts::alerts().len());
    for (rendered, alert) in rules.iter().zip(alerts::alerts()) {
        assert_eq!(rendered["alert"], alert.name);
        let expr = rendered["expr"].as_str().expect("expr");
        assert_eq!(
            expr,
            alert.expr.replace(r#"job="podset-operator-metrics""#, &job)
        );
    }
    let map = find(&docs, "ConfigMap", "-dashboard")?;
    assert_eq!(map["metadata"]["labels"]["grafana_dashboard"], "1");
    let model: Value =
        serde_json::from_str(map["data"]["podset-operator.json"].as_str().expect("json"))?;
    let exprs: Vec<&str> = model["panels"]
        .as_array()
        .expect("panels")
        .iter()
        .flat_map(|p| p["targets"].as_array().expect("targets"))
        .map(|t| t["expr"].as_str().expect("expr"))
        .collect();
    assert_eq!(exprs.len(), dashboard::queries().len());
    assert!(exprs.iter().all(|e| e.contains(&job)), "{exprs:#?}");
    Ok(())
}
