//! An installed operator, and the walkthrough that proves it runs: both replicas Ready
//! through their probes, exactly one holds the Lease, PodSets converge, deleting the leader's
//! pod hands the Lease over within its duration, the At walkthrough, JSON logs, and /metrics
//! in the cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, LogParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
use testenv::Cluster;

use crate::common::{self, TestNs, converged, poll_some};

/// The Lease duration of both installs (their default).
pub const LEASE_DURATION: Duration = Duration::from_secs(15);

/// An installed operator: its namespace, its pods' selector, its Lease.
#[derive(Clone)]
pub struct Install {
    pub cluster: Arc<Cluster>,
    pub client: kube::Client,
    pub ns: String,
    pub selector: String,
    pub deployment: String,
    pub lease: String,
    /// The installed ClusterRole that allows `get /metrics`.
    pub metrics_reader: String,
}

impl Install {
    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.ns)
    }

    /// Who holds the Lease ("" for no one).
    pub async fn holder(&self) -> Result<String> {
        Ok(self
            .api::<Lease>()
            .get_opt(&self.lease)
            .await?
            .and_then(|l| l.spec?.holder_identity)
            .unwrap_or_default())
    }

    /// The operator's pods that are not terminating.
    pub async fn live_pods(&self) -> Result<Vec<Pod>> {
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
    pub async fn ready_with_leader(&self) -> Result<String> {
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
    pub async fn prove(&self) -> Result<()> {
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

pub fn pod_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
