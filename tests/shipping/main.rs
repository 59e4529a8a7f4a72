//! Shipping: the Helm chart (lint, render, install, uninstall with real Helm v4) and the
//! kustomize layout (`kubectl apply --server-side -k`), on a real local control plane, with the
//! RBAC proof by `kubectl auth can-i` as the operator's ServiceAccount.
//!
//! Helm is the helm CLI hack/build-kubernetes.sh builds, through [`testenv::helm`], as the
//! in-cluster tests and a user run it.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use podset_operator::rbac;
use serde_json::{Value, json};
use testenv::{Cluster, Options, poll, poll_some};

mod access;
mod matrix;
mod metrics;
mod render;
mod wait;

use access::*;
use metrics::Installed;
use render::*;
use wait::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn chart() -> PathBuf {
    repo().join("charts/podset-operator")
}

/// The kustomize test deletes the CRDs on undeploy, which the Helm tests' CRD checks must not
/// see: it runs alone, the Helm tests side by side.
static CRDS: tokio::sync::RwLock<()> = tokio::sync::RwLock::const_new(());

/// One control plane for this test binary: scheduler and two hollow nodes, and no CRDs: the
/// Helm chart and kustomize install them.
async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("two-nodes", || Options::default().with_nodes(2)).await
}

/// A name unique to this test process.
fn unique(prefix: &str) -> String {
    format!("{prefix}-{}", std::process::id() % 100_000)
}

async fn run(program: &str, args: &[&str]) -> Result<String> {
    testenv::run_command(repo(), program, args, &[]).await
}

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let kc = kubeconfig.display().to_string();
    let mut full = vec!["--kubeconfig", kc.as_str()];
    full.extend_from_slice(args);
    run(&testenv::versions::kubectl().to_string_lossy(), &full).await
}

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
    // metrics reviews (TokenReviews and SubjectAccessReviews have no namespace).
    let docs = render(&["--set-string", "watchNamespace=team-a"]).await?;
    assert_eq!(
        cluster_wide_names(&docs),
        BTreeSet::from([
            "ClusterRole/ps-podset-operator-metrics-auth".to_string(),
            "ClusterRole/ps-podset-operator-metrics-reader".to_string(),
            "ClusterRoleBinding/ps-podset-operator-metrics-auth".to_string(),
        ])
    );
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
    let sm = find(&docs, "ServiceMonitor", "podset-operator")?;
    assert_eq!(
        sm["spec"]["endpoints"][0]["tlsConfig"]["insecureSkipVerify"],
        false
    );

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
    let grace = spec["terminationGracePeriodSeconds"].as_i64().unwrap_or(30);
    let shutdown: i64 =
        flag("shutdown-timeout-seconds").map_or(10, |s| s.parse().expect("a number"));
    assert!(
        shutdown < grace,
        "shutdown {shutdown} s not within the {grace} s grace"
    );
    let port = |name: &str, default: &str| flag(name).unwrap_or_else(|| default.to_string());
    assert_ne!(
        port("metrics-bind-address", "0.0.0.0:8443"),
        port("health-probe-bind-address", "0.0.0.0:8081")
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

/// The cluster-wide RBAC of secure metrics, as `kubectl get -o name` lists them.
fn metrics_rbac_objects(fullname: &str) -> Vec<String> {
    vec![
        format!("clusterrole.rbac.authorization.k8s.io/{fullname}-metrics-auth"),
        format!("clusterrole.rbac.authorization.k8s.io/{fullname}-metrics-reader"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{fullname}-metrics-auth"),
    ]
}

/// A Helm release installed with real Helm into its own namespace.
struct Release {
    kc: PathBuf,
    name: &'static str,
    ns: String,
    fullname: String,
    selector: String,
}

impl Release {
    /// Installs the chart with `values` (helm flags) and waits for the release's
    /// objects, the chart's CRDs, and both replicas scheduled and Running on hollow nodes.
    async fn install(cluster: &Cluster, name: &'static str, values: &[&str]) -> Result<Self> {
        let ns = unique(name);
        cluster.create_namespace(&ns).await?;
        let release = Self {
            kc: cluster.kubeconfig().to_path_buf(),
            name,
            fullname: format!("{name}-podset-operator"),
            selector: format!("app.kubernetes.io/instance={name}"),
            ns,
        };
        testenv::helm::release(
            testenv::helm::Release::Install,
            &release.kc,
            name,
            &chart(),
            &release.ns,
            values,
        )
        .await?;
        wait_objects(&release.kc, &release.ns, &release.objects(), true).await?;
        wait_crds_established(&release.kc).await?;
        wait_pods_scheduled(&release.kc, &release.ns, &release.selector).await?;
        Ok(release)
    }

    /// The release's objects in its namespace, as `kind/name`.
    fn objects(&self) -> Vec<String> {
        let f = &self.fullname;
        vec![
            format!("deployment/{f}"),
            format!("serviceaccount/{f}"),
            format!("role/{f}-leader-election"),
            format!("rolebinding/{f}-leader-election"),
            format!("poddisruptionbudget/{f}"),
            format!("service/{f}-metrics"),
        ]
    }

    fn service_account(&self) -> (&str, &str) {
        (&self.ns, &self.fullname)
    }

    /// `helm uninstall`, then every object of the release gone: its own, `elsewhere`
    /// (namespace, objects), and the Deployment's pods.
    async fn uninstall(&self, elsewhere: &[(&str, Vec<String>)]) -> Result<()> {
        testenv::helm::uninstall(&self.kc, self.name, &self.ns).await?;
        wait_objects(&self.kc, &self.ns, &self.objects(), false).await?;
        for (ns, objects) in elsewhere {
            wait_objects(&self.kc, ns, objects, false).await?;
        }
        wait_no_pods(&self.kc, &self.ns, &self.selector).await
    }
}

#[tokio::test]
async fn helm_install_cluster_wide_then_uninstall() -> Result<()> {
    let _crds = CRDS.read().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let other = unique("helm-cw-other");
    cluster.create_namespace(&other).await?;
    let release = Release::install(&cluster, "ps-cw", &[]).await?;
    let (ns, fullname) = (&release.ns, &release.fullname);
    let mut cluster_objects = vec![
        format!("clusterrole/{fullname}-manager"),
        format!("clusterrolebinding/{fullname}-manager"),
    ];
    cluster_objects.extend(metrics_rbac_objects(fullname));
    wait_objects(kc, "", &cluster_objects, true).await?;

    // RBAC: the manager rules in every namespace, leases in its own, nothing more.
    let sa = release.service_account();
    for watched in [ns.as_str(), other.as_str()] {
        assert_manager_rights(kc, sa, watched).await?;
    }
    assert_can(kc, sa, "list", "pods", &["--all-namespaces"]).await?;
    assert_can(kc, sa, "create", "leases.coordination.k8s.io", &["-n", ns]).await?;
    assert_cannot(
        kc,
        sa,
        "create",
        "leases.coordination.k8s.io",
        &["-n", &other],
    )
    .await?;
    assert_least_privilege(kc, sa, &[ns, &other]).await?;

    release.uninstall(&[("", cluster_objects)]).await?;
    assert_cannot(kc, sa, "create", "pods", &["-n", &other]).await?;
    Ok(())
}

#[tokio::test]
async fn helm_install_single_namespace_then_uninstall() -> Result<()> {
    let _crds = CRDS.read().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let watched = unique("helm-ns-watched");
    let other = unique("helm-ns-other");
    for n in [&watched, &other] {
        cluster.create_namespace(n).await?;
    }
    let watch = format!("watchNamespace={watched}");
    let release = Release::install(&cluster, "ps-ns", &["--set-string", &watch]).await?;
    let (ns, fullname) = (&release.ns, &release.fullname);
    let watched_objects = vec![
        format!("role/{fullname}-manager"),
        format!("rolebinding/{fullname}-manager"),
    ];
    wait_objects(kc, &watched, &watched_objects, true).await?;
    let metrics_objects = metrics_rbac_objects(fullname);
    wait_objects(kc, "", &metrics_objects, true).await?;
    let out = kubectl(
        kc,
        &["get", "clusterroles,clusterrolebindings", "-o", "name"],
    )
    .await?;
    let cluster_wide: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(fullname.as_str()))
        .collect();
    assert_eq!(
        cluster_wide, metrics_objects,
        "a namespaced install made more cluster-wide RBAC than the metrics reviews need"
    );
    let deploy = kubectl(kc, &["get", "deployment", fullname, "-n", ns, "-o", "json"]).await?;
    let deploy: Value = serde_json::from_str(&deploy)?;
    assert_eq!(
        env_value(&deploy, "WATCH_NAMESPACE"),
        Some(watched.as_str())
    );

    // RBAC: the manager rules in the watched namespace only.
    let sa = release.service_account();
    assert_manager_rights(kc, sa, &watched).await?;
    assert_can(kc, sa, "create", "leases.coordination.k8s.io", &["-n", ns]).await?;
    for elsewhere in [ns.as_str(), other.as_str()] {
        let scope = ["-n", elsewhere];
        assert_cannot(kc, sa, "create", "pods", &scope).await?;
        assert_cannot(kc, sa, "list", "pods", &scope).await?;
        assert_cannot(kc, sa, "list", "podsets.app.example.com", &scope).await?;
        assert_cannot(kc, sa, "patch", "podsets.app.example.com/status", &scope).await?;
    }
    assert_cannot(kc, sa, "list", "pods", &["--all-namespaces"]).await?;
    assert_cannot(
        kc,
        sa,
        "create",
        "leases.coordination.k8s.io",
        &["-n", &watched],
    )
    .await?;
    assert_least_privilege(kc, sa, &[ns, &watched, &other]).await?;

    let installed = Installed::start(&cluster, sa.0, fullname, sa.1).await?;
    installed
        .assert_metrics_guarded(&cluster, ns, &format!("{fullname}-metrics-reader"))
        .await?;
    drop(installed);

    release
        .uninstall(&[(&watched, watched_objects), ("", metrics_objects)])
        .await
}

/// `kubectl apply --server-side -k config/default`, as `make deploy` runs it, with the kubectl
/// of the cluster's own version.
#[tokio::test]
async fn kustomize_deploy_installs_everything_then_undeploy() -> Result<()> {
    let _crds = CRDS.write().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let ns = "podset-operator-system";
    kubectl(kc, &["apply", "--server-side", "-k", "config/default"]).await?;

    wait_crds_established(kc).await?;
    let objects: Vec<String> = [
        "serviceaccount/podset-operator",
        "role/podset-operator-leader-election",
        "rolebinding/podset-operator-leader-election",
        "deployment/podset-operator-controller-manager",
        "poddisruptionbudget/podset-operator-controller-manager",
        "service/podset-operator-metrics",
    ]
    .map(String::from)
    .into();
    wait_objects(kc, ns, &objects, true).await?;
    let cluster_objects: Vec<String> = [
        "namespace/podset-operator-system",
        "clusterrole/podset-operator-manager",
        "clusterrolebinding/podset-operator-manager",
    ]
    .map(String::from)
    .into_iter()
    .chain(metrics_rbac_objects("podset-operator"))
    .collect();
    wait_objects(kc, "", &cluster_objects, true).await?;
    let selector = "app.kubernetes.io/name=podset-operator,app.kubernetes.io/component=manager";
    wait_pods_scheduled(kc, ns, selector).await?;

    let sa = (ns, "podset-operator");
    let other = unique("kustomize-other");
    cluster.create_namespace(&other).await?;
    assert_manager_rights(kc, sa, &other).await?;
    assert_can(kc, sa, "create", "leases.coordination.k8s.io", &["-n", ns]).await?;
    assert_least_privilege(kc, sa, &[ns, &other]).await?;

    let deployment = "podset-operator-controller-manager";
    let installed = Installed::start(&cluster, ns, deployment, "podset-operator").await?;
    installed
        .assert_metrics_guarded(&cluster, ns, "podset-operator-metrics-reader")
        .await?;
    drop(installed);

    // `make undeploy`; the namespace's own deletion is left to the namespace controller.
    kubectl(
        kc,
        &[
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-k",
            "config/default",
        ],
    )
    .await?;
    wait_objects(kc, "", &cluster_objects[1..], false).await?;
    Ok(())
}
