//! The operator as it ships: its own image (built offline by hack/build-image.sh) running as
//! two pods on a real node, installed by kustomize (`make deploy-local`, the very script) and
//! by the Helm chart (its previous release, then upgraded to this one as released: an OCI
//! artifact in the cluster's registry). Both replicas become Ready through their probes, exactly one holds the
//! Lease, PodSets converge, deleting the leader's pod hands the Lease over within its
//! duration, the logs are JSON lines, and /metrics answers in the cluster. Both install into a
//! namespace that enforces the restricted Pod Security Standard, which the pods meet.

mod upgrade;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use common::{TestNs, converged, poll_some};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
// The harness as `common` (once tests/common/), for this file and upgrade.rs.
use testenv::harness as common;
use testenv::{Cluster, Options};

/// The Lease duration of both installs (their default).
const LEASE_DURATION: Duration = Duration::from_secs(15);

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

/// An installed operator: its namespace, its pods' selector, its Lease.
#[derive(Clone)]
struct Install {
    cluster: Arc<Cluster>,
    client: kube::Client,
    ns: String,
    selector: String,
    deployment: String,
    lease: String,
    /// The installed ClusterRole that allows `get /metrics`.
    metrics_reader: String,
}

impl Install {
    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Who holds the Lease ("" for no one).
    async fn holder(&self) -> Result<String> {
        Ok(self
            .api::<Lease>()
            .get_opt(&self.lease)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default())
    }

    /// The operator's pods that are not terminating.
    async fn live_pods(&self) -> Result<Vec<Pod>> {
        let selected = ListParams::default().labels(&self.selector);
        Ok(self
            .api::<Pod>()
            .list(&selected)
            .await?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect())
    }

    /// Waits for both replicas Ready (their readiness probes, through the kubelet) and the
    /// Lease held by one of them; returns the holder.
    async fn ready_with_leader(&self) -> Result<String> {
        let deployments = self.api::<Deployment>();
        poll_some(
            Duration::from_secs(180),
            "2 Ready replicas and a leader",
            || async {
                let d = deployments.get(&self.deployment).await?;
                let ready = d.status.and_then(|s| s.ready_replicas).unwrap_or(0);
                let names: Vec<String> = self
                    .live_pods()
                    .await?
                    .iter()
                    .filter(|p| pod_ready(p))
                    .map(ResourceExt::name_any)
                    .collect();
                let holder = self.holder().await?;
                let ok = ready == 2 && names.len() == 2 && names.contains(&holder);
                Ok(ok.then_some(holder))
            },
        )
        .await
    }

    /// The whole walkthrough, against this install.
    async fn prove(&self) -> Result<()> {
        let namespace = Api::<Namespace>::all(self.client.clone())
            .get(&self.ns)
            .await?;
        ensure!(
            namespace.labels().get("pod-security.kubernetes.io/enforce")
                == Some(&"restricted".to_string()),
            "namespace {} does not enforce the restricted Pod Security Standard",
            self.ns
        );
        let leader = self.ready_with_leader().await?;
        let ns = TestNs::new_in(self.cluster.clone(), "in-cluster").await?;
        let podsets = ns.api::<PodSet>();
        podsets
            .create(&PostParams::default(), &common::podset("before", 2))
            .await?;
        converged(&ns, "before", 2).await?;

        let began = Instant::now();
        let pods = self.api::<Pod>();
        pods.delete(&leader, &DeleteParams::default()).await?;
        let next = poll_some(
            LEASE_DURATION,
            "the Lease handed to the other replica",
            || async {
                let holder = self.holder().await?;
                if holder.is_empty() {
                    return Ok(None);
                }
                let live = pods
                    .get_opt(&holder)
                    .await?
                    .is_some_and(|p| p.metadata.deletion_timestamp.is_none());
                Ok((holder != leader && live).then_some(holder))
            },
        )
        .await?;
        println!(
            "{}: the Lease went from {leader} to {next} in {:?} after the leader's pod was deleted",
            self.deployment,
            began.elapsed()
        );
        podsets
            .create(&PostParams::default(), &common::podset("after", 3))
            .await?;
        converged(&ns, "after", 3).await?;
        at_walkthrough(&ns).await?;

        self.assert_json_logs(&next).await?;
        self.assert_metrics_in_cluster(&ns, &next).await
    }

    async fn assert_json_logs(&self, pod: &str) -> Result<()> {
        let log = self.api::<Pod>().logs(pod, &LogParams::default()).await?;
        ensure!(log.lines().count() > 0, "no log from {pod}");
        for line in log.lines() {
            let v: serde_json::Value = serde_json::from_str(line)
                .with_context(|| format!("a log line of {pod} is not JSON: {line}"))?;
            ensure!(v.get("level").is_some(), "no level in {line}");
        }
        ensure!(
            log.contains("became the leader"),
            "{pod} never said it leads:\n{log}"
        );
        Ok(())
    }

    /// Through the API server's pod proxy, /metrics is reachable and refuses the anonymous
    /// caller (the API server does not forward credentials); scraped at the pod's IP, over
    /// the node's bridge, with the token of a ServiceAccount bound to the installed
    /// metrics-reader ClusterRole, it answers, as Prometheus scrapes it.
    async fn assert_metrics_in_cluster(&self, ns: &TestNs, pod: &str) -> Result<()> {
        let path = format!(
            "/api/v1/namespaces/{}/pods/https:{pod}:8443/proxy/metrics",
            self.ns
        );
        let (status, body) = self.cluster.get_raw(&path).await?;
        ensure!(
            status == 401 && body.contains("send a Kubernetes bearer token"),
            "/metrics through the pod proxy: expected the operator's 401, got {status}: {body}"
        );
        let ip = self
            .api::<Pod>()
            .get(pod)
            .await?
            .status
            .and_then(|s| s.pod_ip)
            .context("the leader has no pod IP")?;
        ns.create_service_account("scraper").await?;
        ns.bind_cluster_role("scraper", self.metrics_reader.clone())
            .await?;
        let token = ns
            .cluster
            .service_account_token(&ns.name, "scraper")
            .await?;
        let ip: std::net::IpAddr = ip.parse()?;
        // RBAC bindings reach the operator's SubjectAccessReview within moments.
        let log = poll_some(
            Duration::from_secs(30),
            "an allowed scrape of the pod",
            || async {
                let (status, body) = testenv::get_metrics_from(ip, 8443, Some(&token)).await?;
                Ok((status == 200).then_some(body))
            },
        )
        .await?;
        ensure!(
            log.contains("podset_operator_build_info")
                && log.contains(r#"controller_runtime_reconcile_total{controller="podset""#),
            "no operator metrics in the scrape:\n{log}"
        );
        Ok(())
    }
}

/// The At walkthrough: `echo YAY` due in the past runs at once on the real node, the At ends
/// DONE and succeeded, and its pod's log says YAY.
async fn at_walkthrough(ns: &TestNs) -> Result<()> {
    let ats = ns.api::<At>();
    let at = common::at("example-at", "2019-04-12T10:12:00Z", "echo YAY");
    ats.create(&PostParams::default(), &at).await?;
    let done = poll_some(
        Duration::from_secs(120),
        "the At walkthrough DONE",
        || async {
            let status = ats.get("example-at").await?.status.unwrap_or_default();
            Ok((status.phase == Some(AtPhase::Done)).then_some(status))
        },
    )
    .await?;
    ensure!(
        done.succeeded == Some(true),
        "the At did not succeed: {done:?}"
    );
    let pod = done.pod_name.context("a DONE At names no pod")?;
    let log = ns.api::<Pod>().logs(&pod, &LogParams::default()).await?;
    ensure!(log == "YAY\n", "the At's pod logged {log:?}, not YAY");
    Ok(())
}

fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// `make deploy-local`'s script against this test's cluster, upgraded with nothing lost, then
/// its `undeploy`; then the same image installed from `dist/install.yaml`.
#[tokio::test]
async fn kustomize_install_from_the_local_image_runs_in_the_cluster() -> Result<()> {
    let cluster = real_node_cluster("kustomize").await?;
    let dir = cluster.dir().display().to_string();
    let env = [("CLUSTER_DIR", dir.as_str())];
    {
        let _build = IMAGE_BUILD.lock().await;
        run("bash", &["hack/deploy-local.sh"], &env).await?;
    }
    let install = Install {
        cluster: cluster.clone(),
        client: cluster.client().await?,
        ns: "podset-operator-system".into(),
        selector: "app.kubernetes.io/name=podset-operator".into(),
        deployment: "podset-operator-controller-manager".into(),
        lease: "podset-operator-leader".into(),
        metrics_reader: podset_operator::rbac::METRICS_READER_ROLE.into(),
    };
    install.prove().await?;
    // The same script with a new tag: config/default (CRDs first in kustomize's order) rolls
    // the Deployment.
    let upgrade = async {
        let _build = IMAGE_BUILD.lock().await;
        let env = [env[0], ("IMAGE_TAG", "upgraded")];
        run("bash", &["hack/deploy-local.sh"], &env).await.map(drop)
    };
    upgrade::loses_nothing(&install, upgrade).await?;
    run("bash", &["hack/deploy-local.sh", "undeploy"], &env).await?;
    gone(&install).await?;
    let image = cluster
        .image_ref("podset-operator")
        .context("no registry")?;
    let archive = cluster.dir().join("podset-operator.tar");
    let registry = cluster.registry().context("no registry")?;
    testenv::registry::push(registry, &archive, "podset-operator:installer").await?;
    one_manifest(&install, &format!("{image}:installer")).await
}

async fn gone(install: &Install) -> Result<()> {
    let deployments = install.api::<Deployment>();
    common::poll(Duration::from_secs(60), "the Deployment gone", || async {
        Ok(deployments.get_opt(&install.deployment).await?.is_none())
    })
    .await
}

/// The README's install by one manifest: `make build-installer IMG=...` (its script), then
/// `kubectl apply --server-side -f dist/install.yaml`, the API server's address set as the
/// README says for a cluster without kube-proxy; both walkthroughs pass; then it is
/// uninstalled as the README says.
async fn one_manifest(install: &Install, image: &str) -> Result<()> {
    let cluster = &install.cluster;
    let out = cluster
        .dir()
        .join("dist/install.yaml")
        .display()
        .to_string();
    run("bash", &["hack/release.sh", "installer", image, &out], &[]).await?;
    kubectl(cluster, &["apply", "--server-side", "-f", &out]).await?;
    let host = format!("KUBERNETES_SERVICE_HOST={}", cluster.api_host);
    let port = format!("KUBERNETES_SERVICE_PORT={}", cluster.api_port);
    let deployment = format!("deployment/{}", install.deployment);
    let set_env = ["-n", &install.ns, "set", "env", &deployment, &host, &port];
    kubectl(cluster, &set_env).await?;
    install.prove().await?;
    // As the README's Uninstall says: the operator stops first (its pods gone, so the leader
    // released its Lease), while its RBAC is still there; the audit check found the release
    // refused (403) when one delete took the Role with the pods.
    let stop = [
        "-n",
        &install.ns,
        "delete",
        &deployment,
        "--cascade=foreground",
        "--wait=true",
    ];
    kubectl(cluster, &stop).await?;
    kubectl(cluster, &["delete", "-f", &out, "--ignore-not-found"]).await?;
    gone(install).await
}

/// The chart's previous release, packaged from the chart as stop 51 landed it (a165bf3),
/// as a user who installed it then has it.
fn previous_chart() -> PathBuf {
    repo().join("tests/in_cluster/charts/podset-operator-0.1.0.tgz")
}

/// The previous release of the chart, then an upgrade to this one by its release artifacts
/// alone: the chart `make helm-package` packages with the image, pushed as an OCI artifact
/// to the cluster's registry, its CRDs applied from that artifact, `helm upgrade` from
/// `oci://` resetting to its values. Nothing is lost on the way, and `helm test` passes.
#[tokio::test]
async fn helm_upgrade_from_the_previous_chart_to_the_oci_release_loses_nothing() -> Result<()> {
    let cluster = real_node_cluster("helm").await?;
    let archive: PathBuf = cluster.dir().join("podset-operator.tar");
    {
        let _build = IMAGE_BUILD.lock().await;
        let out = archive.display().to_string();
        run("bash", &["hack/build-image.sh", &out], &[]).await?;
    }
    let registry = cluster.registry().context("no registry")?;
    testenv::registry::push(registry, &archive, "podset-operator:previous").await?;
    let image = cluster
        .image_ref("podset-operator")
        .context("no registry")?;
    let ns = "ps-helm";
    cluster.create_namespace(ns).await?;
    common::enforce_restricted(&cluster.client().await?, ns).await?;
    // The local cluster has no kube-proxy: the pods reach the API server by its address.
    let api_server = format!(
        "extraEnv[0].name=KUBERNETES_SERVICE_HOST,extraEnv[0].value={},\
         extraEnv[1].name=KUBERNETES_SERVICE_PORT,extraEnv[1].value={}",
        cluster.api_host, cluster.api_port
    );
    let previous = format!("{api_server},image.repository={image},image.tag=previous");
    // The previous release runs this version's image (the only one built), whose status has
    // fields 0.1.0's CRDs would prune (readyReplicas): this version's CRDs go first, and
    // Helm installs none of its own (`--skip-crds`).
    let crds = "charts/podset-operator/crds/";
    let apply = ["apply", "--server-side", "--force-conflicts", "-f", crds];
    kubectl(&cluster, &apply).await?;
    testenv::helm::release(
        testenv::helm::Release::Install,
        cluster.kubeconfig(),
        "ps",
        &previous_chart(),
        ns,
        &["--skip-crds", "--set-string", &previous],
    )
    .await?;
    let install = Install {
        cluster: cluster.clone(),
        client: cluster.client().await?,
        ns: ns.into(),
        selector: "app.kubernetes.io/instance=ps".into(),
        deployment: "ps-podset-operator".into(),
        lease: "ps-podset-operator-leader".into(),
        metrics_reader: "ps-podset-operator-metrics-reader".into(),
    };
    install.prove().await?;
    let current = format!("{image}:current");
    let upgrade = async {
        testenv::registry::push(registry, &archive, "podset-operator:current").await?;
        let chart = oci_release(&cluster, &current).await?;
        testenv::helm::release(
            testenv::helm::Release::Upgrade,
            cluster.kubeconfig(),
            "ps",
            Path::new(&chart.url),
            ns,
            &[
                "--version",
                &chart.version,
                "--plain-http",
                "--reset-values",
                "--set-string",
                &api_server,
            ],
        )
        .await
        .map(drop)
    };
    upgrade::loses_nothing(&install, upgrade).await?;
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
    helm_test(&cluster, "ps", ns).await
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
    let registry = cluster.registry().context("no registry")?;
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
    let to = format!("{registry}/charts");
    let plain = [("PLAIN_HTTP", "1")];
    run(
        "bash",
        &["hack/release.sh", "push-chart", &tgz, &to],
        &plain,
    )
    .await?;
    let url = format!("oci://{to}/podset-operator");
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
