//! The previous release (0.2.0: v1alpha1 alone, no webhook) as its users have it: its image,
//! its chart and its install.yaml, made from its commit by hack/build-previous-release.sh and
//! checked in under tests/in_cluster/releases/ (their README says why). Both name the image
//! [`PLACEHOLDER`], which the tests replace with the cluster registry's copy.

use std::path::PathBuf;

use anyhow::{Context as _, Result, ensure};
use testenv::Cluster;

use podset_operator::webhook::keeper::AT_CRD;

use crate::{kubectl, repo, run};

/// The previous release's chart version.
pub const VERSION: &str = "0.2.0";
/// The image its chart and install.yaml name (hack/build-previous-release.sh's).
const PLACEHOLDER: &str = "podset-operator:0.2.0";

fn artifact(name: &str) -> PathBuf {
    repo()
        .join("tests/in_cluster/releases")
        .join(VERSION)
        .join(name)
}

/// Pushes its image to the cluster's registry; how pods name it (`localhost:PORT/podset-operator:0.2.0`).
pub async fn push_image(cluster: &Cluster) -> Result<String> {
    let registry = cluster.registry().context("no registry")?;
    let archive = artifact("podset-operator.tar");
    testenv::registry::push(registry, &archive, PLACEHOLDER).await?;
    cluster.image_ref(PLACEHOLDER).context("no registry")
}

/// Its install.yaml, running `image`, written into the cluster's directory.
pub fn install_yaml(cluster: &Cluster, image: &str) -> Result<PathBuf> {
    let text = std::fs::read_to_string(artifact("install.yaml"))?;
    let placed = format!("image: {PLACEHOLDER}\n");
    ensure!(
        text.matches(&placed).count() == 1,
        "the previous install.yaml runs no {PLACEHOLDER}"
    );
    let out = cluster.dir().join(format!("install-{VERSION}.yaml"));
    std::fs::write(&out, text.replace(&placed, &format!("image: {image}\n")))?;
    Ok(out)
}

/// Pushes its chart to the cluster's registry, as `helm push` does for its users; the
/// chart's `oci://` address.
pub async fn push_chart(cluster: &Cluster) -> Result<String> {
    let tgz = artifact(&format!("podset-operator-{VERSION}.tgz"));
    crate::push_chart(cluster, &tgz).await
}

/// Applies its CRDs (v1alpha1 alone) from its chart, server-side, the At's conversion
/// webhook turned off first, as the way back says.
pub async fn apply_crds(cluster: &Cluster) -> Result<()> {
    let off = r#"[{"op": "replace", "path": "/spec/conversion", "value": {"strategy": "None"}}]"#;
    let patch = ["patch", "crd", AT_CRD, "--type=json", "-p", off];
    kubectl(cluster, &patch).await?;
    let into = cluster.dir().join(format!("chart-{VERSION}"));
    std::fs::create_dir_all(&into)?;
    let tgz = artifact(&format!("podset-operator-{VERSION}.tgz"));
    let (tgz, dir) = (tgz.display().to_string(), into.display().to_string());
    run("tar", &["-xzf", &tgz, "-C", &dir], &[]).await?;
    let crds = into.join("podset-operator/crds").display().to_string();
    let apply = ["apply", "--server-side", "--force-conflicts", "-f", &crds];
    kubectl(cluster, &apply).await.map(drop)
}
