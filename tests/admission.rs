//! Issue 31, item 5: what the cluster does around the operator. Admission sits between it and
//! the API server; what admission refuses was never stored, so it is not a run: the refusal
//! is reported (a condition and a Warning event, what `kubectl describe` shows), and once it
//! passes the work is done, once. On the node-less cluster; the test plays the kubelet.

mod common;

use anyhow::Result;
use common::{PROMPTLY, TestNs, at, cluster_without_nodes, podset, poll, poll_some, set_pod_phase};
use k8s_openapi::api::admissionregistration::v1::{
    RuleWithOperations, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::{CONDITION_SCHEDULED, REASON_FAILED_CREATE, REASON_SUCCEEDED};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;

const WEBHOOK_DOWN: &str = "failed calling webhook";

/// A validating webhook on pod creates in `ns` that nothing serves, with `failurePolicy:
/// Fail`: the API server answers every pod create there 500 "failed calling webhook" (a
/// webhook whose Deployment is down, or being upgraded). Removed when dropped.
struct DownWebhook {
    client: Client,
    name: String,
}

impl DownWebhook {
    async fn install(ns: &TestNs) -> Result<Self> {
        let name = format!("down-{}", ns.name);
        let webhook = ValidatingWebhook {
            name: "down.podset-operator.test".into(),
            admission_review_versions: vec!["v1".into()],
            side_effects: "None".into(),
            failure_policy: Some("Fail".into()),
            timeout_seconds: Some(2),
            client_config: WebhookClientConfig {
                // Nothing listens on port 1.
                url: Some("https://127.0.0.1:1/validate".into()),
                ..Default::default()
            },
            namespace_selector: Some(LabelSelector {
                match_labels: Some(
                    [("kubernetes.io/metadata.name".to_string(), ns.name.clone())].into(),
                ),
                ..Default::default()
            }),
            rules: Some(vec![RuleWithOperations {
                api_groups: Some(vec![String::new()]),
                api_versions: Some(vec!["v1".into()]),
                operations: Some(vec!["CREATE".into()]),
                resources: Some(vec!["pods".into()]),
                scope: Some("Namespaced".into()),
            }]),
            ..Default::default()
        };
        let config = ValidatingWebhookConfiguration {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            webhooks: Some(vec![webhook]),
        };
        let api = Api::<ValidatingWebhookConfiguration>::all(ns.client.clone());
        api.create(&PostParams::default(), &config).await?;
        let down = Self {
            client: ns.client.clone(),
            name,
        };
        // The API server takes up a new configuration within a moment; a probe pod made
        // before it did is removed at once.
        let tries = std::sync::atomic::AtomicUsize::new(0);
        poll(PROMPTLY, "pod creates to fail at the webhook", || async {
            let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let pods = ns.api::<Pod>();
            match pods
                .create(&PostParams::default(), &probe_pod(&format!("probe-{n}")))
                .await
            {
                Err(kube::Error::Api(s)) => Ok(s.message.contains(WEBHOOK_DOWN)),
                Err(e) => Err(e.into()),
                Ok(made) => {
                    pods.delete(&made.name_any(), &DeleteParams::default().grace_period(0))
                        .await?;
                    Ok(false)
                }
            }
        })
        .await?;
        Ok(down)
    }

    /// The webhook is back (here: gone).
    async fn back(self) -> Result<()> {
        let api = Api::<ValidatingWebhookConfiguration>::all(self.client.clone());
        api.delete(&self.name, &DeleteParams::default()).await?;
        Ok(())
    }
}

fn probe_pod(name: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]},
    }))
    .expect("a pod")
}

/// Issue 31, case 3: the webhook is down when an At falls due. Before: the 500 was taken for
/// a create that may have landed, nothing said why the At waited, and (on 12f692f) the At
/// ended DONE, not run, PodVanished. Now the refusal shows in `Scheduled` and a Warning
/// event, and once the webhook is back the command runs, once.
#[tokio::test]
async fn an_at_refused_by_a_webhook_that_is_down_runs_once_it_is_back() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "webhook-at").await?;
    let down = DownWebhook::install(&ns).await?;
    let mut operator = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    api.create(
        &PostParams::default(),
        &at("yay", "2019-04-12T10:12:00Z", "echo YAY"),
    )
    .await?;
    poll(PROMPTLY, "the refusal reported on the At", || async {
        let at = api.get("yay").await?;
        let status = at.status.unwrap_or_default();
        let reported = status.conditions.iter().any(|c| {
            c.type_ == CONDITION_SCHEDULED
                && c.status == "False"
                && c.reason == REASON_FAILED_CREATE
                && c.message.contains(WEBHOOK_DOWN)
        });
        Ok(reported && ns.warned("yay", REASON_FAILED_CREATE, WEBHOOK_DOWN).await?)
    })
    .await?;

    down.back().await?;
    let pod = poll_some(PROMPTLY, "the At's pod made and released", || async {
        let pod = ns.api::<Pod>().get_opt("yay-pod").await?;
        let released = |p: &Pod| {
            p.spec
                .as_ref()
                .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
        };
        Ok(pod.filter(released))
    })
    .await?;
    set_pod_phase(&ns, &pod.name_any(), "Running", None).await?;
    set_pod_phase(&ns, &pod.name_any(), "Succeeded", Some(0)).await?;
    let done = poll_some(PROMPTLY, "the At DONE", || async {
        let status = api.get("yay").await?.status.unwrap_or_default();
        Ok((status.phase == Some(AtPhase::Done)).then_some(status))
    })
    .await?;
    anyhow::ensure!(
        done.succeeded == Some(true)
            && done.conditions.iter().any(|c| c.reason == REASON_SUCCEEDED),
        "the command's run not recorded as such: {done:?}"
    );
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    anyhow::ensure!(pods.len() == 1, "{} pods for one At", pods.len());
    operator.assert_healthy();
    Ok(())
}

/// The same webhook down while a PodSet is created: `ReplicaFailure` and a Warning event say
/// why it has no pods, and once the webhook is back it has exactly its replicas.
#[tokio::test]
async fn a_podset_refused_by_a_webhook_that_is_down_converges_once_it_is_back() -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, "webhook-ps").await?;
    let down = DownWebhook::install(&ns).await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("web", 3))
        .await?;
    poll(PROMPTLY, "the refusal reported on the PodSet", || async {
        let ps = api.get("web").await?;
        let reported = common::condition(&ps, CONDITION_REPLICA_FAILURE)
            .is_some_and(|(status, _, message)| status == "True" && message.contains(WEBHOOK_DOWN));
        Ok(reported && ns.warned("web", "FailedCreate", WEBHOOK_DOWN).await?)
    })
    .await?;

    down.back().await?;
    let uid = api.get("web").await?.uid().unwrap_or_default();
    poll(PROMPTLY, "the PodSet's 3 pods", || async {
        let ps = api.get("web").await?;
        let status = ps.status.unwrap_or_default();
        let pods = ns.pods_of(&uid).await?;
        Ok(pods.len() == 3 && status.available_replicas == 3)
    })
    .await?;
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    anyhow::ensure!(all.len() == 3, "{} pods for a PodSet of 3", all.len());
    operator.assert_healthy();
    Ok(())
}
