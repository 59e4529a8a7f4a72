//! One manifest, or kustomize: the previous release's install.yaml (0.2.0), upgraded by this
//! release's (`make build-installer`'s script) as the README says, with nothing lost; then
//! this release's walkthrough; `make deploy-local`'s script rolls it to a new image tag while
//! Ats are read at both versions; and it is uninstalled as the README says.

use anyhow::Result;

use crate::install::Install;
use crate::{gone, kubectl, previous, real_node_cluster, run, this_release_image};

const NS: &str = "podset-operator-system";
const DEPLOYMENT: &str = "podset-operator-controller-manager";

/// 0.2.0's install.yaml, then this release's, then a rollout, then the uninstall.
#[tokio::test]
async fn previous_install_yaml_upgraded_by_this_one_loses_nothing() -> Result<()> {
    let cluster = real_node_cluster("kustomize").await?;
    let previous_image = previous::push_image(&cluster).await?;
    let previous_yaml = previous::install_yaml(&cluster, &previous_image)?;
    let previous_yaml = previous_yaml.display().to_string();
    kubectl(&cluster, &["apply", "--server-side", "-f", &previous_yaml]).await?;
    // The README's step for a cluster without kube-proxy: the API server's address.
    let host = format!("KUBERNETES_SERVICE_HOST={}", cluster.api_host);
    let port = format!("KUBERNETES_SERVICE_PORT={}", cluster.api_port);
    let deployment = format!("deployment/{DEPLOYMENT}");
    let set_env = ["-n", NS, "set", "env", &deployment, &host, &port];
    kubectl(&cluster, &set_env).await?;
    let install = Install {
        cluster: cluster.clone(),
        client: cluster.client().await?,
        ns: NS.into(),
        selector: "app.kubernetes.io/name=podset-operator".into(),
        deployment: DEPLOYMENT.into(),
        lease: "podset-operator-leader".into(),
        metrics_reader: podset_operator::rbac::METRICS_READER_ROLE.into(),
    };
    install.ready_with_leader().await?;

    let out = cluster.dir().join("dist/install.yaml");
    let out = out.display().to_string();
    let upgrade = async {
        let image = this_release_image(&cluster, "current").await?;
        run("bash", &["hack/release.sh", "installer", &image, &out], &[]).await?;
        // CRDs first: kustomize puts them at the head of the file.
        kubectl(&cluster, &["apply", "--server-side", "-f", &out]).await?;
        Ok(())
    };
    let (kept, ()) = crate::upgrade::loses_nothing(&install, upgrade).await?;
    install.prove().await?;

    // An image tag change, by `make deploy-local`'s script: config/default with a new tag.
    let dir = cluster.dir().display().to_string();
    let env = [("CLUSTER_DIR", dir.as_str()), ("IMAGE_TAG", "rolled")];
    let roll = async {
        {
            let _build = crate::IMAGE_BUILD.lock().await;
            run("bash", &["hack/deploy-local.sh"], &env).await?;
        }
        crate::upgrade::rolled_out(&install).await
    };
    crate::reads::none_refused(&kept.ns, "due-01", "a rollout", roll).await?;

    // As the README's Uninstall says: the operator stops first (its pods gone, so the leader
    // released its Lease), while its RBAC is still there; the audit check found the release
    // refused (403) when one delete took the Role with the pods.
    let stop = [
        "-n",
        NS,
        "delete",
        &deployment,
        "--cascade=foreground",
        "--wait=true",
    ];
    kubectl(&cluster, &stop).await?;
    kubectl(&cluster, &["delete", "-f", &out, "--ignore-not-found"]).await?;
    gone(&install).await
}
