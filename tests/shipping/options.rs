//! Chart options beyond the install's core (`manifests.rs`): the replicas' topology spread, the
//! metrics NetworkPolicy (and its kustomize twin), the ServiceMonitor's verified TLS, the
//! editor and viewer roles for people, the listeners' dual-stack addresses, and the `helm test` hook.

use super::*;

/// `kubectl kustomize DIR`, as documents.
async fn kustomize(dir: &str) -> Result<Vec<Value>> {
    let kubectl = testenv::versions::kubectl();
    documents(&run(&kubectl.to_string_lossy(), &["kustomize", dir]).await?)
}

/// The default spread: one replica a node, preferred, counting the pods `selector` selects.
fn spread_over_hosts(selector: &Value) -> Value {
    json!([{
        "maxSkew": 1,
        "topologyKey": "kubernetes.io/hostname",
        "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": selector},
        "matchLabelKeys": ["pod-template-hash"],
    }])
}

/// The pod template of the (one) Deployment.
fn pod_spec(docs: &[Value]) -> Result<&Value> {
    Ok(&find(docs, "Deployment", "")?["spec"]["template"]["spec"])
}

/// What the Deployment selects its pods by.
fn pod_selector(docs: &[Value]) -> Result<&Value> {
    Ok(&find(docs, "Deployment", "")?["spec"]["selector"]["matchLabels"])
}

#[tokio::test]
async fn replicas_spread_over_nodes_unless_told_otherwise() -> Result<()> {
    let docs = render(&[]).await?;
    let selector = pod_selector(&docs)?.clone();
    assert_eq!(selector["app.kubernetes.io/component"], "manager");
    assert_eq!(
        pod_spec(&docs)?["topologySpreadConstraints"],
        spread_over_hosts(&selector)
    );
    // The kustomize layout's Deployment alike.
    let kustomized = kustomize("config/default").await?;
    assert_eq!(
        pod_spec(&kustomized)?["topologySpreadConstraints"],
        spread_over_hosts(pod_selector(&kustomized)?)
    );
    let docs = render(&["--set-json", "topologySpreadConstraints=[]"]).await?;
    assert!(pod_spec(&docs)?["topologySpreadConstraints"].is_null());
    // A constraint of one's own keeps its selector.
    let zone = json!({
        "maxSkew": 2,
        "topologyKey": "topology.kubernetes.io/zone",
        "whenUnsatisfiable": "DoNotSchedule",
        "labelSelector": {"matchLabels": {"team": "a"}},
    });
    let set = format!("topologySpreadConstraints=[{zone}]");
    let docs = render(&["--set-json", &set]).await?;
    assert_eq!(pod_spec(&docs)?["topologySpreadConstraints"], json!([zone]));
    Ok(())
}

#[tokio::test]
async fn the_listeners_bind_every_address_of_both_families() -> Result<()> {
    let docs = render(&["--set", "metrics.port=9444,healthProbe.port=9081"]).await?;
    let args = &pod_spec(&docs)?["containers"][0]["args"];
    let args: Vec<&str> = args
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert!(args.contains(&"--metrics-bind-address=:9444"), "{args:?}");
    assert!(
        args.contains(&"--health-probe-bind-address=:9081"),
        "{args:?}"
    );
    assert!(!args.iter().any(|a| a.contains("0.0.0.0")), "{args:?}");
    Ok(())
}

#[tokio::test]
async fn the_metrics_network_policy_only_when_asked_for() -> Result<()> {
    assert!(find(&render(&[]).await?, "NetworkPolicy", "").is_err());
    let docs = render(&["--set", "networkPolicy.enabled=true"]).await?;
    let policy = &find(&docs, "NetworkPolicy", "-metrics")?["spec"];
    assert_eq!(policy["podSelector"]["matchLabels"], *pod_selector(&docs)?);
    assert_eq!(policy["policyTypes"], json!(["Ingress"]));
    assert_eq!(
        policy["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}, "podSelector": {}}],
            "ports": [{"port": 8443, "protocol": "TCP"}],
        }, check_ingress(8081), webhook_ingress(9443)])
    );
    // Chosen pods of the release's own namespace, on another port.
    let docs = render(&[
        "--set",
        "networkPolicy.enabled=true,metrics.port=9444,healthProbe.port=9081",
        "--set-json",
        r#"networkPolicy.metrics={"namespaceSelector":null,"podSelector":{"matchLabels":{"app":"prometheus"}}}"#,
    ])
    .await?;
    let policy = &find(&docs, "NetworkPolicy", "-metrics")?["spec"];
    assert_eq!(
        policy["ingress"],
        json!([{
            "from": [{"podSelector": {"matchLabels": {"app": "prometheus"}}}],
            "ports": [{"port": 9444, "protocol": "TCP"}],
        }, check_ingress(9081), webhook_ingress(9443)])
    );
    Ok(())
}

/// The policy's second rule: `helm test`'s check pod, of this release, on the probe port.
fn check_ingress(port: u16) -> Value {
    let check = json!({
        "app.kubernetes.io/name": "podset-operator",
        "app.kubernetes.io/instance": "ps",
        "app.kubernetes.io/component": "check",
    });
    json!({
        "from": [{"podSelector": {"matchLabels": check}}],
        "ports": [{"port": port, "protocol": "TCP"}],
    })
}

/// The policy's last rule: the conversion webhook, from anywhere (the API server's addresses
/// are no pod's).
fn webhook_ingress(port: u16) -> Value {
    json!({"ports": [{"port": port, "protocol": "TCP"}]})
}

/// `helm test`'s hook: the operator's image running `check` against this release's manager
/// pods on its probe port, as a ServiceAccount bound to the generated check rules only,
/// with the manager's security contexts (it runs in a namespace that enforces `restricted`).
#[tokio::test]
async fn helm_test_checks_the_release_with_the_generated_rules_only() -> Result<()> {
    let only = ["--show-only", "templates/tests/check.yaml"];
    let set = ["--set", "healthProbe.port=9081,image.tag=1.2.3"];
    let chart = chart().display().to_string();
    let args = [
        &["template", "ps", &chart, "--namespace", "ops"][..],
        &only,
        &set,
    ]
    .concat();
    let docs = documents(&testenv::helm::run(&args).await?)?;
    let deployment = render(&set).await?;
    let manager = find(&deployment, "Deployment", "")?;
    for doc in &docs {
        let hook = &doc["metadata"]["annotations"];
        assert_eq!(hook["helm.sh/hook"], "test", "{doc}");
        assert_eq!(
            hook["helm.sh/hook-delete-policy"],
            "before-hook-creation,hook-succeeded"
        );
    }
    let role = find(&docs, "Role", "-check")?;
    assert_eq!(
        role["rules"],
        generated(podset_operator::rbac::check_rules())
    );
    let binding = find(&docs, "RoleBinding", "-check")?;
    assert_eq!(binding["roleRef"]["name"], role["metadata"]["name"]);
    let pod = &find(&docs, "Pod", "-check")?["spec"];
    assert_eq!(pod["serviceAccountName"], binding["subjects"][0]["name"]);
    assert_eq!(pod["restartPolicy"], "Never");
    let template = &manager["spec"]["template"];
    assert_eq!(pod["securityContext"], template["spec"]["securityContext"]);
    let (check, run) = (&pod["containers"][0], &template["spec"]["containers"][0]);
    assert_eq!(check["image"], run["image"]);
    assert_eq!(check["securityContext"], run["securityContext"]);
    // Every operator pod, whether or not its version serves the webhook.
    let labels = template["metadata"]["labels"].as_object().expect("labels");
    let mut selector: Vec<String> = labels
        .iter()
        .filter(|(k, _)| *k != "podset-operator.example.com/webhook")
        .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
        .collect();
    selector.sort();
    assert_eq!(
        check["args"],
        json!([
            "check",
            format!("--selector={}", selector.join(",")),
            "--probe-port=9081"
        ])
    );
    Ok(())
}

/// kubebuilder's config/network-policy: outside config/default, selecting its Deployment's
/// pods, on its metrics port, in its namespace.
#[tokio::test]
async fn kustomize_network_policy_is_apart_and_selects_the_manager() -> Result<()> {
    let default = kustomize("config/default").await?;
    assert!(find(&default, "NetworkPolicy", "").is_err());
    let docs = kustomize("config/network-policy").await?;
    assert_kinds(&docs, &["NetworkPolicy"]);
    let policy = &docs[0];
    assert_eq!(policy["metadata"]["namespace"], "podset-operator-system");
    let spec = &policy["spec"];
    assert_eq!(spec["podSelector"]["matchLabels"], *pod_selector(&default)?);
    let container = &pod_spec(&default)?["containers"][0];
    let metrics = container["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .find(|p| p["name"] == "metrics")
        .expect("a metrics port");
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{"namespaceSelector": {"matchLabels": {"metrics": "enabled"}}}],
            "ports": [{"port": metrics["containerPort"], "protocol": "TCP"}],
        }])
    );
    Ok(())
}

#[tokio::test]
async fn the_service_monitor_verifies_a_given_certificate() -> Result<()> {
    let tls = |docs: &[Value]| -> Result<Value> {
        Ok(find(docs, "ServiceMonitor", "")?["spec"]["endpoints"][0]["tlsConfig"].clone())
    };
    let docs = render(&["--set", "metrics.serviceMonitor.enabled=true"]).await?;
    assert_eq!(tls(&docs)?, json!({"insecureSkipVerify": true}));
    let docs = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,metrics.certSecret=metrics-tls",
    ])
    .await?;
    let service = find(&docs, "Service", "-metrics")?;
    let name = service["metadata"]["name"].as_str().expect("a name");
    assert_eq!(
        tls(&docs)?,
        json!({
            "ca": {"secret": {"name": "metrics-tls", "key": "ca.crt"}},
            "serverName": format!("{name}.ops.svc"),
        })
    );
    Ok(())
}

/// What kubebuilder's roles for people grant on a resource of `group`: exactly these rules.
fn user_rules(group: &str, plural: &str, access: &str) -> Value {
    let verbs = match access {
        "editor" => json!([
            "create", "delete", "get", "list", "patch", "update", "watch"
        ]),
        _ => json!(["get", "list", "watch"]),
    };
    json!([
        {"apiGroups": [group], "resources": [plural], "verbs": verbs},
        {"apiGroups": [group], "resources": [format!("{plural}/status")], "verbs": ["get"]},
    ])
}

const CUSTOM_RESOURCES: [(&str, &str, &str); 2] = [
    ("podset", "app.example.com", "podsets"),
    ("at", "cnat.programming-kubernetes.info", "ats"),
];

/// The aggregation labels of a role: which built-in ClusterRoles take it in.
fn aggregated_to(role: &Value) -> BTreeSet<String> {
    let labels = role["metadata"]["labels"]
        .as_object()
        .cloned()
        .unwrap_or_default();
    labels
        .iter()
        .filter(|(_, v)| *v == "true")
        .filter_map(|(k, _)| k.strip_prefix("rbac.authorization.k8s.io/aggregate-to-"))
        .map(String::from)
        .collect()
}

fn want_aggregated(access: &str) -> BTreeSet<String> {
    let to: &[&str] = if access == "editor" {
        &["admin", "edit"]
    } else {
        &["view"]
    };
    to.iter().map(|s| s.to_string()).collect()
}

/// Every editor and viewer role of `docs`, named `<prefix><kind>-<access><suffix>`, grants
/// exactly its rules and is aggregated as `aggregate` says.
fn assert_user_roles(docs: &[Value], prefix: &str, suffix: &str, aggregate: bool) -> Result<()> {
    for (kind, group, plural) in CUSTOM_RESOURCES {
        for access in ["editor", "viewer"] {
            let name = format!("{prefix}{kind}-{access}{suffix}");
            let role = docs
                .iter()
                .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == name.as_str())
                .with_context(|| format!("no ClusterRole {name}"))?;
            assert_eq!(role["rules"], user_rules(group, plural, access), "{name}");
            let want = if aggregate {
                want_aggregated(access)
            } else {
                BTreeSet::new()
            };
            assert_eq!(aggregated_to(role), want, "{name}");
        }
    }
    Ok(())
}

#[tokio::test]
async fn editor_and_viewer_roles_are_aggregated_into_the_built_in_ones() -> Result<()> {
    for scope in [&[][..], &["--set-string", "watchNamespace=team-a"][..]] {
        let docs = render(scope).await?;
        assert_user_roles(&docs, "ps-podset-operator-", "", true)?;
        // Generated from the Rust code, as the operator's own rules.
        for role in rbac::user_roles() {
            let rendered = find(&docs, "ClusterRole", &format!("-{}", role.name()))?;
            assert_rules(rendered, &generated(role.rules));
        }
    }
    let docs = render(&["--set", "userRoles.aggregate=false"]).await?;
    assert_user_roles(&docs, "ps-podset-operator-", "", false)?;
    let docs = render(&["--set", "userRoles.enabled=false"]).await?;
    for access in ["-editor", "-viewer"] {
        assert!(find(&docs, "ClusterRole", access).is_err(), "{access}");
    }
    // kubebuilder's config/rbac/<kind>_editor_role.yaml and _viewer_role.yaml, in make deploy.
    assert_user_roles(
        &kustomize("config/default").await?,
        "podset-operator-",
        "-role",
        true,
    )
}
