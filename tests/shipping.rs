//! Shipping: the Helm chart (lint, render, install, uninstall with real Helm v4) and the
//! kustomize layout (`kubectl apply --server-side -k`), on a real local control plane, with the
//! RBAC proof by `kubectl auth can-i` as the operator's ServiceAccount.
//!
//! Helm runs through hack/helm.py on the helm-python-sdk venv that `make helm-sdk` makes
//! (`HELM_PYTHON` overrides the interpreter).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result, bail, ensure};
use serde_json::{Value, json};
use testenv::{Cluster, Options, poll};

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
    let out = tokio::process::Command::new(program)
        .args(args)
        .current_dir(repo())
        .kill_on_drop(true)
        .output()
        .await
        .with_context(|| format!("running {program}"))?;
    if !out.status.success() {
        bail!(
            "{program} {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8(out.stdout)?)
}

/// hack/helm.py under the helm-python-sdk venv.
async fn helm(args: &[&str]) -> Result<String> {
    let python = std::env::var("HELM_PYTHON").unwrap_or_else(|_| {
        repo()
            .join(".local/helm-venv/bin/python")
            .display()
            .to_string()
    });
    ensure!(
        Path::new(&python).exists(),
        "{python} is missing: run `make helm-sdk` (it installs helm-python-sdk)"
    );
    let mut full = vec!["hack/helm.py"];
    full.extend_from_slice(args);
    run(&python, &full).await
}

async fn kubectl(kubeconfig: &Path, args: &[&str]) -> Result<String> {
    let kc = kubeconfig.display().to_string();
    let mut full = vec!["--kubeconfig", kc.as_str()];
    full.extend_from_slice(args);
    run("kubectl", &full).await
}

/// Every object of a YAML stream, as JSON values.
fn documents(yaml: &str) -> Result<Vec<Value>> {
    let mut docs = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let value: Value = serde::Deserialize::deserialize(doc)?;
        if !value.is_null() {
            docs.push(value);
        }
    }
    Ok(docs)
}

fn kinds(docs: &[Value]) -> BTreeSet<String> {
    docs.iter()
        .filter_map(|d| d["kind"].as_str().map(String::from))
        .collect()
}

fn find<'a>(docs: &'a [Value], kind: &str, name_suffix: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| {
            d["kind"] == kind
                && d["metadata"]["name"]
                    .as_str()
                    .is_some_and(|n| n.ends_with(name_suffix))
        })
        .with_context(|| format!("no {kind} *{name_suffix} rendered"))
}

fn generated_rules() -> Value {
    serde_json::to_value(podset_operator::rbac::rules()).expect("rules serialize")
}

fn generated_leader_rules() -> Value {
    serde_json::to_value(podset_operator::rbac::leader_election_rules()).expect("rules serialize")
}

/// The rules exactly as generated: same rules, same order (the templates include the file).
fn assert_rules(role: &Value, want: &Value) {
    assert_eq!(
        &role["rules"], want,
        "{} {} does not carry the generated rules",
        role["kind"], role["metadata"]["name"]
    );
}

/// What every install path must ship: 2 replicas, the hardening, the probes, the ports and
/// POD_NAME from the downward API.
fn assert_hardened_deployment(deploy: &Value) {
    let spec = &deploy["spec"];
    assert_eq!(spec["replicas"], 2, "two replicas: {deploy}");
    let pod = &spec["template"]["spec"];
    assert_eq!(pod["automountServiceAccountToken"], true);
    assert!(
        pod["serviceAccountName"]
            .as_str()
            .is_some_and(|s| s.ends_with("podset-operator")),
        "its own ServiceAccount: {pod}"
    );
    let psc = &pod["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert!(
        psc["runAsUser"].as_i64().is_some_and(|u| u > 0),
        "non-root uid: {psc}"
    );
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    let containers = pod["containers"].as_array().expect("containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"], false);
    assert_eq!(sc["readOnlyRootFilesystem"], true);
    assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
    for kind in ["requests", "limits"] {
        for res in ["cpu", "memory"] {
            assert!(
                c["resources"][kind][res].is_string(),
                "{kind}.{res} set: {c}"
            );
        }
    }
    let args: Vec<&str> = c["args"]
        .as_array()
        .expect("args")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(args.first(), Some(&"run"), "{args:?}");
    assert!(args.contains(&"--leader-elect"), "{args:?}");
    let pod_name = c["env"]
        .as_array()
        .expect("env")
        .iter()
        .find(|e| e["name"] == "POD_NAME")
        .expect("POD_NAME set");
    assert_eq!(
        pod_name["valueFrom"]["fieldRef"]["fieldPath"],
        "metadata.name"
    );
    let ports: Vec<(i64, &str)> = c["ports"]
        .as_array()
        .expect("ports")
        .iter()
        .map(|p| {
            (
                p["containerPort"].as_i64().unwrap_or(0),
                p["name"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert!(ports.contains(&(8080, "metrics")), "{ports:?}");
    assert!(ports.contains(&(8081, "health")), "{ports:?}");
    for (probe, path) in [("livenessProbe", "/livez"), ("readinessProbe", "/readyz")] {
        assert_eq!(c[probe]["httpGet"]["path"], path);
        assert_eq!(c[probe]["httpGet"]["port"], "health");
    }
}

fn env_value<'a>(deploy: &'a Value, name: &str) -> Option<&'a str> {
    deploy["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()?
        .iter()
        .find(|e| e["name"] == name)?["value"]
        .as_str()
}

async fn render(args: &[&str]) -> Result<Vec<Value>> {
    let chart = chart().display().to_string();
    let mut full = vec![
        "template",
        chart.as_str(),
        "--name",
        "ps",
        "--namespace",
        "ops",
    ];
    full.extend_from_slice(args);
    documents(&helm(&full).await?)
}

#[tokio::test]
async fn chart_lints_and_renders_both_scopes() -> Result<()> {
    let chart = chart().display().to_string();
    for values in [
        &[][..],
        &["--set-string", "watchNamespace=team-a"][..],
        &[
            "--set",
            "metrics.serviceMonitor.enabled=true,leaderElection.enabled=false",
        ][..],
    ] {
        let mut args = vec!["lint", chart.as_str(), "--strict"];
        args.extend_from_slice(values);
        helm(&args).await.context("helm lint")?;
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
    assert_rules(find(&docs, "ClusterRole", "-manager")?, &generated_rules());
    let crb = find(&docs, "ClusterRoleBinding", "-manager")?;
    assert_eq!(crb["roleRef"]["kind"], "ClusterRole");
    assert_eq!(crb["subjects"][0]["namespace"], "ops");
    let leader = find(&docs, "Role", "-leader-election")?;
    assert_eq!(leader["metadata"]["namespace"], "ops");
    assert_rules(leader, &generated_leader_rules());
    let deploy = find(&docs, "Deployment", "podset-operator")?;
    assert_hardened_deployment(deploy);
    assert_eq!(env_value(deploy, "WATCH_NAMESPACE"), Some(""));
    assert_eq!(
        find(&docs, "PodDisruptionBudget", "")?["spec"]["minAvailable"],
        1
    );
    assert_eq!(
        find(&docs, "Service", "-metrics")?["spec"]["ports"][0]["port"],
        8080
    );

    // One namespace: Role + RoleBinding there, nothing cluster-wide.
    let docs = render(&["--set-string", "watchNamespace=team-a"]).await?;
    let kinds_ns = kinds(&docs);
    assert!(!kinds_ns.contains("ClusterRole"), "{kinds_ns:?}");
    assert!(!kinds_ns.contains("ClusterRoleBinding"), "{kinds_ns:?}");
    let role = find(&docs, "Role", "-manager")?;
    assert_eq!(role["metadata"]["namespace"], "team-a");
    assert_rules(role, &generated_rules());
    let rb = find(&docs, "RoleBinding", "-manager")?;
    assert_eq!(rb["metadata"]["namespace"], "team-a");
    assert_eq!(rb["roleRef"]["kind"], "Role");
    assert_eq!(rb["subjects"][0]["namespace"], "ops");
    assert_rules(
        find(&docs, "Role", "-leader-election")?,
        &generated_leader_rules(),
    );
    let deploy = find(&docs, "Deployment", "podset-operator")?;
    assert_hardened_deployment(deploy);
    assert_eq!(env_value(deploy, "WATCH_NAMESPACE"), Some("team-a"));

    // The ServiceMonitor only when asked for; no leader-election Role without election.
    let docs = render(&[
        "--set",
        "metrics.serviceMonitor.enabled=true,leaderElection.enabled=false,replicaCount=1",
    ])
    .await?;
    let sm = find(&docs, "ServiceMonitor", "podset-operator")?;
    assert_eq!(sm["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(sm["spec"]["endpoints"][0]["port"], "metrics");
    assert!(find(&docs, "Role", "-leader-election").is_err());
    let args = &find(&docs, "Deployment", "podset-operator")?["spec"]["template"]["spec"]["containers"]
        [0]["args"];
    assert!(
        !args
            .as_array()
            .expect("args")
            .contains(&json!("--leader-elect"))
    );
    Ok(())
}

#[tokio::test]
async fn kustomize_default_renders_the_generated_manifests() -> Result<()> {
    let out = run("kubectl", &["kustomize", "config/default"]).await?;
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
        &generated_rules(),
    );
    assert_rules(
        find(&docs, "Role", "podset-operator-leader-election")?,
        &generated_leader_rules(),
    );
    let deploy = find(&docs, "Deployment", "controller-manager")?;
    assert_hardened_deployment(deploy);
    assert_eq!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"],
        "podset-operator:0.1.0"
    );
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

/// `kubectl auth can-i` as the ServiceAccount `ns/sa`; `scope` is `-n NS` or `--all-namespaces`.
async fn can_i(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<bool> {
    let user = format!("--as=system:serviceaccount:{}:{}", sa.0, sa.1);
    // `resource/subresource` becomes `resource --subresource=subresource`.
    let (resource, sub) = what.split_once('/').unwrap_or((what, ""));
    let sub = format!("--subresource={sub}");
    let mut args = vec!["auth", "can-i", verb, resource, user.as_str()];
    if sub.len() > "--subresource=".len() {
        args.push(&sub);
    }
    args.extend_from_slice(scope);
    let kc = kc.display().to_string();
    let mut full = vec!["--kubeconfig", kc.as_str()];
    full.extend_from_slice(&args);
    let out = tokio::process::Command::new("kubectl")
        .args(&full)
        .output()
        .await?;
    let answer = String::from_utf8_lossy(&out.stdout).trim().to_string();
    match answer.as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => bail!(
            "kubectl {} answered {answer:?}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ),
    }
}

/// Polls until the ServiceAccount may do it (RBAC caches catch up in moments).
async fn assert_can(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<()> {
    poll(
        Duration::from_secs(30),
        &format!("{}/{} may {verb} {what} {scope:?}", sa.0, sa.1),
        || can_i(kc, sa, verb, what, scope),
    )
    .await
}

async fn assert_cannot(
    kc: &Path,
    sa: (&str, &str),
    verb: &str,
    what: &str,
    scope: &[&str],
) -> Result<()> {
    ensure!(
        !can_i(kc, sa, verb, what, scope).await?,
        "{}/{} may {verb} {what} {scope:?}, and must not",
        sa.0,
        sa.1
    );
    Ok(())
}

/// What the operator must never be able to do, wherever it is installed.
async fn assert_least_privilege(kc: &Path, sa: (&str, &str), namespaces: &[&str]) -> Result<()> {
    for ns in namespaces {
        let scope = ["-n", ns];
        for verb in ["get", "list", "watch"] {
            assert_cannot(kc, sa, verb, "secrets", &scope).await?;
        }
        for verb in ["get", "list", "create", "update", "patch", "delete"] {
            assert_cannot(kc, sa, verb, "deployments.apps", &scope).await?;
        }
        assert_cannot(kc, sa, "update", "pods", &scope).await?;
        assert_cannot(kc, sa, "create", "podsets.app.example.com", &scope).await?;
        assert_cannot(kc, sa, "delete", "podsets.app.example.com", &scope).await?;
    }
    for verb in ["create", "update", "patch", "delete"] {
        for what in [
            "customresourcedefinitions.apiextensions.k8s.io",
            "mutatingwebhookconfigurations.admissionregistration.k8s.io",
            "validatingwebhookconfigurations.admissionregistration.k8s.io",
            "clusterroles.rbac.authorization.k8s.io",
            "clusterrolebindings.rbac.authorization.k8s.io",
        ] {
            assert_cannot(kc, sa, verb, what, &[]).await?;
        }
    }
    assert_cannot(kc, sa, "list", "secrets", &["--all-namespaces"]).await?;
    Ok(())
}

/// What the operator needs in a namespace it watches.
async fn assert_manager_rights(kc: &Path, sa: (&str, &str), ns: &str) -> Result<()> {
    let scope = ["-n", ns];
    for verb in ["get", "list", "watch", "create", "delete"] {
        assert_can(kc, sa, verb, "pods", &scope).await?;
    }
    for verb in ["list", "watch"] {
        assert_can(kc, sa, verb, "podsets.app.example.com", &scope).await?;
        assert_can(kc, sa, verb, "ats.cnat.programming-kubernetes.info", &scope).await?;
    }
    assert_can(kc, sa, "patch", "podsets.app.example.com/status", &scope).await?;
    assert_can(
        kc,
        sa,
        "patch",
        "ats.cnat.programming-kubernetes.info/status",
        &scope,
    )
    .await?;
    assert_can(
        kc,
        sa,
        "update",
        "podsets.app.example.com/finalizers",
        &scope,
    )
    .await?;
    assert_can(kc, sa, "create", "events.events.k8s.io", &scope).await
}

/// Waits for the objects (`kind/name`) in `ns` ("" for cluster-scoped) to exist, or be gone.
async fn wait_objects(kc: &Path, ns: &str, objects: &[String], present: bool) -> Result<()> {
    for obj in objects {
        let what = format!(
            "{obj} in {ns:?} {}",
            if present { "present" } else { "gone" }
        );
        poll(Duration::from_secs(90), &what, || async {
            let mut args = vec!["get", obj.as_str(), "--ignore-not-found", "-o", "name"];
            if !ns.is_empty() {
                args.extend_from_slice(&["-n", ns]);
            }
            let out = kubectl(kc, &args).await?;
            Ok(out.trim().is_empty() != present)
        })
        .await?;
    }
    Ok(())
}

/// Both replicas of the Deployment scheduled onto (hollow) nodes.
async fn wait_pods_scheduled(kc: &Path, ns: &str, selector: &str) -> Result<()> {
    poll(
        Duration::from_secs(120),
        &format!("2 pods {selector} in {ns} scheduled and Running"),
        || async {
            let out = kubectl(kc, &["get", "pods", "-n", ns, "-l", selector, "-o", "json"]).await?;
            let list: Value = serde_json::from_str(&out)?;
            let items = list["items"].as_array().cloned().unwrap_or_default();
            let running = items
                .iter()
                .filter(|p| {
                    p["spec"]["nodeName"]
                        .as_str()
                        .is_some_and(|n| !n.is_empty())
                        && p["status"]["phase"] == "Running"
                })
                .count();
            Ok(running == 2)
        },
    )
    .await
}

async fn wait_no_pods(kc: &Path, ns: &str, selector: &str) -> Result<()> {
    poll(
        Duration::from_secs(120),
        &format!("pods {selector} in {ns} gone"),
        || async {
            let out = kubectl(kc, &["get", "pods", "-n", ns, "-l", selector, "-o", "name"]).await?;
            Ok(out.trim().is_empty())
        },
    )
    .await
}

/// Both CRDs of the operator Established.
async fn wait_crds_established(kc: &Path) -> Result<()> {
    for crd in [
        "podsets.app.example.com",
        "ats.cnat.programming-kubernetes.info",
    ] {
        let crd = format!("crd/{crd}");
        kubectl(
            kc,
            &["wait", "--for=condition=Established", "--timeout=60s", &crd],
        )
        .await?;
    }
    Ok(())
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
    /// Installs the chart with `values` (hack/helm.py flags) and waits for the release's
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
        let chart = chart().display().to_string();
        let mut args = vec!["install", chart.as_str()];
        args.extend_from_slice(values);
        helm(&release.with_target(&args)).await?;
        wait_objects(&release.kc, &release.ns, &release.objects(), true).await?;
        wait_crds_established(&release.kc).await?;
        wait_pods_scheduled(&release.kc, &release.ns, &release.selector).await?;
        Ok(release)
    }

    fn with_target<'a>(&'a self, args: &[&'a str]) -> Vec<&'a str> {
        let mut full = args.to_vec();
        let kc = self.kc.to_str().expect("utf-8 kubeconfig path");
        full.extend_from_slice(&[
            "--name",
            self.name,
            "--namespace",
            &self.ns,
            "--kubeconfig",
            kc,
        ]);
        full
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
        helm(&self.with_target(&["uninstall"])).await?;
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
    let cluster_objects = vec![
        format!("clusterrole/{fullname}-manager"),
        format!("clusterrolebinding/{fullname}-manager"),
    ];
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
    let out = kubectl(
        kc,
        &["get", "clusterroles,clusterrolebindings", "-o", "name"],
    )
    .await?;
    assert!(
        !out.contains(fullname.as_str()),
        "a namespaced install made cluster-wide RBAC:\n{out}"
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

    release.uninstall(&[(&watched, watched_objects)]).await
}

/// `kubectl apply --server-side -k config/default`, as `make deploy` runs it. Kubernetes 1.20
/// serves PodDisruptionBudgets only as policy/v1beta1, so against this control plane the test
/// applies config/k8s-1.20: config/default with that one apiVersion patched (the test above
/// checks config/default's own rendering).
#[tokio::test]
async fn kustomize_deploy_installs_everything_then_undeploy() -> Result<()> {
    let _crds = CRDS.write().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let ns = "podset-operator-system";
    kubectl(kc, &["apply", "--server-side", "-k", "config/k8s-1.20"]).await?;

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
    .into();
    wait_objects(kc, "", &cluster_objects, true).await?;
    let selector = "app.kubernetes.io/name=podset-operator,app.kubernetes.io/component=manager";
    wait_pods_scheduled(kc, ns, selector).await?;

    let sa = (ns, "podset-operator");
    let other = unique("kustomize-other");
    cluster.create_namespace(&other).await?;
    assert_manager_rights(kc, sa, &other).await?;
    assert_can(kc, sa, "create", "leases.coordination.k8s.io", &["-n", ns]).await?;
    assert_least_privilege(kc, sa, &[ns, &other]).await?;

    // `make undeploy`; the namespace's own deletion is left to the namespace controller.
    kubectl(
        kc,
        &[
            "delete",
            "--ignore-not-found",
            "--wait=false",
            "-k",
            "config/k8s-1.20",
        ],
    )
    .await?;
    wait_objects(kc, "", &cluster_objects[1..], false).await?;
    Ok(())
}

/// Fails unless the documents hold exactly these kinds.
fn assert_kinds(docs: &[Value], want: &[&str]) {
    let want: BTreeSet<String> = want.iter().map(|k| k.to_string()).collect();
    assert_eq!(kinds(docs), want);
}
