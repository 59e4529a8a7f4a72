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
mod certmanager;
mod manifests;
mod matrix;
mod metrics;
mod options;
mod release;
mod render;
mod user;
mod values;
mod wait;

use access::*;
use metrics::Installed;
use release::{Release, crd_rbac_objects, metrics_rbac_objects, user_role_objects};
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
    cluster_objects.extend(crd_rbac_objects(fullname));
    cluster_objects.extend(user_role_objects(fullname));
    wait_objects(kc, "", &cluster_objects, true).await?;
    assert_user_roles_aggregated(kc, &other).await?;

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

/// `watchNamespace` a list of two: the manager rules in each, nowhere else.
#[tokio::test]
async fn helm_install_namespace_list_then_uninstall() -> Result<()> {
    let _crds = CRDS.read().await;
    let cluster = cluster().await?;
    let kc = cluster.kubeconfig();
    let (watched, second) = (unique("helm-ns-watched"), unique("helm-ns-second"));
    let other = unique("helm-ns-other");
    for n in [&watched, &second, &other] {
        cluster.create_namespace(n).await?;
    }
    // helm's --set splits on commas; an escaped one stays in the value.
    let watch = format!("watchNamespace={watched}\\,{second}");
    let release = Release::install(&cluster, "ps-ns", &["--set-string", &watch]).await?;
    let (ns, fullname) = (&release.ns, &release.fullname);
    let watched_objects = vec![
        format!("role/{fullname}-manager"),
        format!("rolebinding/{fullname}-manager"),
    ];
    for n in [&watched, &second] {
        wait_objects(kc, n, &watched_objects, true).await?;
    }
    // Cluster-wide: the metrics reviews' RBAC, the At CRD's conversion (by name), and the
    // roles for people (bound per namespace).
    let mut metrics_objects = metrics_rbac_objects(fullname);
    metrics_objects.extend(crd_rbac_objects(fullname));
    metrics_objects.extend(user_role_objects(fullname));
    wait_objects(kc, "", &metrics_objects, true).await?;
    let out = kubectl(
        kc,
        &["get", "clusterroles,clusterrolebindings", "-o", "name"],
    )
    .await?;
    let cluster_wide: BTreeSet<&str> = out
        .lines()
        .filter(|l| l.contains(fullname.as_str()))
        .collect();
    assert_eq!(
        cluster_wide,
        metrics_objects.iter().map(String::as_str).collect(),
        "a namespaced install made more cluster-wide RBAC than the metrics reviews, the At CRD's conversion and the roles for people"
    );
    let deploy = kubectl(kc, &["get", "deployment", fullname, "-n", ns, "-o", "json"]).await?;
    let deploy: Value = serde_json::from_str(&deploy)?;
    let list = format!("{watched},{second}");
    assert_eq!(env_value(&deploy, "WATCH_NAMESPACE"), Some(list.as_str()));

    // RBAC: the manager rules in the watched namespaces only.
    let sa = release.service_account();
    assert_manager_rights(kc, sa, &watched).await?;
    assert_manager_rights(kc, sa, &second).await?;
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
    assert_least_privilege(kc, sa, &[ns, &watched, &second, &other]).await?;

    let installed = Installed::start(&cluster, sa.0, fullname, sa.1).await?;
    installed
        .assert_metrics_guarded(&cluster, ns, &format!("{fullname}-metrics-reader"))
        .await?;
    drop(installed);

    let (in_second, uninstalled) = (watched_objects.clone(), metrics_objects);
    release
        .uninstall(&[
            (&watched, watched_objects),
            (&second, in_second),
            ("", uninstalled),
        ])
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
