//! The operator as it ships: its own image (built offline by hack/build-image.sh) running as
//! two pods on a real node, in a namespace that enforces the restricted Pod Security
//! Standard, upgraded from the previous release (tests/in_cluster/releases/) as
//! docs/versioning.md says, with nothing lost, by its install.yaml (kustomize.rs) and by its
//! chart from an OCI registry (helm.rs). Then this release: both replicas Ready through their
//! probes, exactly one holds the Lease, PodSets converge, deleting the leader's pod hands the
//! Lease over within its duration, JSON logs, /metrics in the cluster (install.rs); every
//! object readable at both versions and migrated to v1beta1 (versions.rs); no conversion
//! refused while the Deployment rolls (reads.rs) or the webhook's certificate renews
//! (rotation.rs); and the way back (downgrade.rs).

mod downgrade;
mod helm;
mod install;
mod kustomize;
mod previous;
mod reads;
mod rotation;
mod upgrade;
mod versions;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, Result};
use k8s_openapi::api::apps::v1::Deployment;
// The harness as `common` (once tests/common/), for every module here.
use testenv::harness as common;
use testenv::{Cluster, Options};

use install::Install;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

async fn real_node_cluster(key: &'static str) -> Result<Arc<Cluster>> {
    testenv::shared(key, || Options::default().with_real_nodes(1)).await
}

async fn run(program: &str, args: &[&str], env: &[(&str, &str)]) -> Result<String> {
    testenv::run_command(repo(), program, args, env).await
}

/// kubectl against the cluster, from the repository.
async fn kubectl(cluster: &Cluster, args: &[&str]) -> Result<String> {
    let kc = cluster.kubeconfig().display().to_string();
    run(
        "kubectl",
        &[&["--kubeconfig", kc.as_str()][..], args].concat(),
        &[],
    )
    .await
}

/// One image build at a time: both tests build it, and hack/build-static.sh writes one
/// output path.
static IMAGE_BUILD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// This release's image, built by hack/build-image.sh and pushed to the cluster's registry
/// as `podset-operator:TAG`; how pods name it.
async fn this_release_image(cluster: &Cluster, tag: &str) -> Result<String> {
    let archive: PathBuf = cluster.dir().join("podset-operator.tar");
    {
        let _build = IMAGE_BUILD.lock().await;
        let out = archive.display().to_string();
        run("bash", &["hack/build-image.sh", &out], &[]).await?;
    }
    let registry = cluster.registry().context("no registry")?;
    let repo = format!("podset-operator:{tag}");
    testenv::registry::push(registry, &archive, &repo).await?;
    cluster.image_ref(&repo).context("no registry")
}

/// Pushes the chart archive `tgz` to the cluster's registry by the script of `make
/// helm-package CHART_REGISTRY=...`, as a chart's users `helm push`; its `oci://` address.
async fn push_chart(cluster: &Cluster, tgz: &Path) -> Result<String> {
    let registry = cluster.registry().context("no registry")?;
    let to = format!("{registry}/charts");
    let tgz = tgz.display().to_string();
    let plain = [("PLAIN_HTTP", "1")];
    let push = ["hack/release.sh", "push-chart", &tgz, &to];
    run("bash", &push, &plain).await?;
    Ok(format!("oci://{to}/podset-operator"))
}

/// Waits until `install`'s Deployment is gone.
async fn gone(install: &Install) -> Result<()> {
    let deployments = install.api::<Deployment>();
    common::poll(Duration::from_secs(60), "the Deployment gone", || async {
        Ok(deployments.get_opt(&install.deployment).await?.is_none())
    })
    .await
}
