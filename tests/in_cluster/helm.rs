//! The chart: its previous release (0.2.0) installed from an OCI registry as its users have
//! it, upgraded to this one as released (`make helm-package`'s script, `helm push`, its CRDs
//! applied from the pulled artifact, then `helm upgrade` from `oci://`) with nothing lost;
//! `helm test`; the webhook's certificate renewed in place; and `helm rollback` to 0.2.0 as
//! docs/versioning.md's way back says.

use std::path::Path;

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use testenv::Cluster;

use crate::common;
use crate::install::Install;
use crate::{kubectl, previous, real_node_cluster, repo, run, this_release_image};

const RELEASE: &str = "ps";
const NS: &str = "ps-helm";

/// 0.2.0 from `oci://`, upgraded to this release from `oci://`, then back.
#[tokio::test]
async fn previous_chart_upgraded_from_oci_loses_nothing_and_rolls_back() -> Result<()> {
    let cluster = real_node_cluster("helm").await?;
    let previous_image = previous::push_image(&cluster).await?;
    let previous_chart = previous::push_chart(&cluster).await?;
    cluster.create_namespace(NS).await?;
    common::enforce_restricted(&cluster.client().await?, NS).await?;
    // The local cluster has no kube-proxy: the pods reach the API server by its address.
    let api_server = format!(
        "extraEnv[0].name=KUBERNETES_SERVICE_HOST,extraEnv[0].value={},\
         extraEnv[1].name=KUBERNETES_SERVICE_PORT,extraEnv[1].value={}",
        cluster.api_host, cluster.api_port
    );
    let (repository, _tag) = previous_image
        .rsplit_once(':')
        .context("an untagged image")?;
    // As its users installed it: Helm creates its CRDs (v1alpha1 alone) on this first install.
    let values = format!("{api_server},image.repository={repository}");
    let install_args = [
        "--version",
        previous::VERSION,
        "--plain-http",
        "--set-string",
        &values,
    ];
    testenv::helm::release(
        testenv::helm::Release::Install,
        cluster.kubeconfig(),
        RELEASE,
        Path::new(&previous_chart),
        NS,
        &install_args,
    )
    .await?;
    let install = Install {
        cluster: cluster.clone(),
        client: cluster.client().await?,
        ns: NS.into(),
        selector: format!("app.kubernetes.io/instance={RELEASE}"),
        deployment: format!("{RELEASE}-podset-operator"),
        lease: format!("{RELEASE}-podset-operator-leader"),
        metrics_reader: format!("{RELEASE}-podset-operator-metrics-reader"),
    };
    install.ready_with_leader().await?;
    let upgrade = async {
        let current = this_release_image(&cluster, "current").await?;
        let chart = oci_release(&cluster, &current).await?;
        let args = [
            "--version",
            &chart.version,
            "--plain-http",
            "--reset-values",
            "--set-string",
            &api_server,
        ];
        let upgrade = testenv::helm::Release::Upgrade;
        let url = Path::new(&chart.url);
        testenv::helm::release(upgrade, cluster.kubeconfig(), RELEASE, url, NS, &args).await?;
        Ok(current)
    };
    let (kept, current) = crate::upgrade::loses_nothing(&install, upgrade).await?;
    let deployment = install.api::<Deployment>().get(&install.deployment).await?;
    let spec = deployment
        .spec
        .and_then(|s| s.template.spec)
        .context("no pod spec")?;
    ensure!(
        spec.containers[0].image.as_deref() == Some(current.as_str()),
        "the upgrade runs {:?}, not the packaged {current}",
        spec.containers[0].image
    );
    helm_test(&cluster, RELEASE, NS).await?;
    let webhook = format!("{RELEASE}-podset-operator-webhook");
    let secret = format!("{webhook}-cert");
    crate::rotation::renews_without_restart(&install, &secret, &webhook, &kept.ns, "due-01")
        .await?;
    let rollback = async {
        let kc = cluster.kubeconfig().display().to_string();
        let args = ["rollback", RELEASE, "--namespace", NS, "--kubeconfig", &kc];
        testenv::helm::run(&args).await.map(drop)
    };
    // The previous release runs again from here on, and this one under its RBAC until it
    // is gone: the audit leaves that out.
    let going_back = std::time::SystemTime::now();
    let back = crate::downgrade::to_previous(&install, &kept, &previous_image, rollback).await;
    cluster.another_release_ran(going_back, std::time::SystemTime::now());
    back
}

/// `helm test`: the chart's check pod finds both CRDs served and each ready operator pod
/// answering /readyz from beside it.
async fn helm_test(cluster: &Cluster, release: &str, ns: &str) -> Result<()> {
    let kc = cluster.kubeconfig().display().to_string();
    let args = [
        "test",
        release,
        "--namespace",
        ns,
        "--kubeconfig",
        &kc,
        "--logs",
        "--timeout",
        "3m",
    ];
    let out = testenv::helm::run(&args).await?;
    for passed in [
        "ok: PodSets are served (app.example.com/v1beta1)",
        "ok: Ats are served (cnat.programming-kubernetes.info/v1beta1)",
        "answers /readyz on",
    ] {
        ensure!(
            out.contains(passed),
            "helm test did not say {passed:?}:\n{out}"
        );
    }
    println!("helm test passed:\n{out}");
    Ok(())
}

/// A chart released as a user releases it.
struct OciChart {
    url: String,
    version: String,
}

/// `make helm-package IMG=image CHART_REGISTRY=<registry>/charts` (its script), then the
/// CRDs of what was pushed applied server-side, as the README's Upgrade section says.
async fn oci_release(cluster: &Cluster, image: &str) -> Result<OciChart> {
    // CHART_VERSION's default in the Makefile: the chart's own.
    let chart_yaml = std::fs::read_to_string(repo().join("charts/podset-operator/Chart.yaml"))?;
    let version = chart_yaml
        .lines()
        .find_map(|l| l.strip_prefix("version: "))
        .context("Chart.yaml has no version")?
        .to_string();
    let dir = cluster.dir().join("dist");
    let dir = dir.display().to_string();
    run(
        "bash",
        &["hack/release.sh", "chart", image, &version, &dir],
        &[],
    )
    .await?;
    let tgz = format!("{dir}/podset-operator-{version}.tgz");
    let url = crate::push_chart(cluster, Path::new(&tgz)).await?;
    // `helm show crds` would do, but Helm 4 prints `Pulled:` and `Digest:` on its stdout.
    let untar = cluster.dir().join("dist/pulled");
    let into = untar.display().to_string();
    let pull = [
        "pull",
        &url,
        "--version",
        &version,
        "--plain-http",
        "--untar",
        "-d",
        &into,
    ];
    testenv::helm::run(&pull).await?;
    let file = untar.join("podset-operator/crds").display().to_string();
    let apply = ["apply", "--server-side", "--force-conflicts", "-f", &file];
    kubectl(cluster, &apply).await?;
    Ok(OciChart { url, version })
}
