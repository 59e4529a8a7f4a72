//! Issue 31, item 5: what the cluster does around the operator. Admission sits between it and
//! the API server; what admission refuses was never stored, so it is not a run: the refusal
//! is reported (a condition and a Warning event, what `kubectl describe` shows), and once it
//! passes the work is done, once. Four refusals, each on a PodSet and on an At: a webhook
//! that is down (500), a ValidatingAdmissionPolicy that denies (a change freeze), a
//! ResourceQuota used up, a LimitRange the pods do not meet (403 each). On the node-less
//! cluster; the test plays the kubelet.

use anyhow::{Result, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceQuota};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::{CONDITION_SCHEDULED, REASON_FAILED_CREATE, REASON_SUCCEEDED};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use testenv::harness::{
    self, PROMPTLY, TestNs, at, at_pod_released, cluster_without_nodes, podset, poll, poll_some,
    set_pod_phase,
};

/// What refuses the operator's pod creates in one namespace, until lifted.
#[derive(Clone, Copy, Debug)]
enum Refusal {
    /// A validating webhook with `failurePolicy: Fail` that nothing serves: 500 "failed
    /// calling webhook" (a webhook whose Deployment is down, or being upgraded).
    WebhookDown,
    /// A ValidatingAdmissionPolicy that denies every pod create: a change freeze.
    PolicyDenies,
    /// A ResourceQuota of zero pods.
    QuotaUsedUp,
    /// A LimitRange asking each pod for at least 2 CPUs, which ours do not request. (Of a
    /// container, the same minimum would be taken as its default request, and admitted.)
    LimitRangeUnmet,
}

impl Refusal {
    /// Words of the API server's refusal.
    fn words(self) -> &'static str {
        match self {
            Refusal::WebhookDown => "failed calling webhook",
            Refusal::PolicyDenies => "pods are frozen in this namespace",
            Refusal::QuotaUsedUp => "exceeded quota",
            Refusal::LimitRangeUnmet => "minimum cpu usage per Pod is 2",
        }
    }

    /// The cluster-wide or namespaced objects that refuse, as JSON.
    fn objects(self, ns: &str) -> Vec<Value> {
        let in_ns = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
        let pods = json!([{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
            "resources": ["pods"], "scope": "Namespaced"}]);
        let name = format!("refuse-{ns}");
        match self {
            Refusal::WebhookDown => vec![json!({"metadata": {"name": name}, "webhooks": [{
                "name": "down.podset-operator.test", "admissionReviewVersions": ["v1"],
                "sideEffects": "None", "failurePolicy": "Fail", "timeoutSeconds": 2,
                // Nothing listens on port 1.
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "namespaceSelector": in_ns, "rules": pods}]})],
            Refusal::PolicyDenies => vec![
                json!({"metadata": {"name": name}, "spec": {"failurePolicy": "Fail",
                    "matchConstraints": {"resourceRules": pods},
                    "validations": [{"expression": "false", "reason": "Forbidden",
                        "message": "pods are frozen in this namespace (change freeze)"}]}}),
                json!({"metadata": {"name": name}, "spec": {"policyName": name,
                    "validationActions": ["Deny"],
                    "matchResources": {"namespaceSelector": in_ns}}}),
            ],
            Refusal::QuotaUsedUp => vec![json!({"metadata": {"name": name},
                "spec": {"hard": {"pods": "0"}}})],
            Refusal::LimitRangeUnmet => vec![json!({"metadata": {"name": name},
                "spec": {"limits": [{"type": "Pod", "min": {"cpu": "2"}}]}})],
        }
    }

    /// Creates the objects, then waits until a pod create in `ns` is refused with its words
    /// (the API server takes a moment to take them up).
    async fn install(self, ns: &TestNs) -> Result<Lift> {
        let objects = self.objects(&ns.name);
        let client = ns.client.clone();
        let lift = Lift {
            refusal: self,
            client,
            namespace: ns.name.clone(),
        };
        let pp = PostParams::default();
        match self {
            Refusal::WebhookDown => {
                lift.webhooks().create(&pp, &of(&objects[0])?).await?;
            }
            Refusal::PolicyDenies => {
                lift.policies().create(&pp, &of(&objects[0])?).await?;
                lift.bindings().create(&pp, &of(&objects[1])?).await?;
            }
            Refusal::QuotaUsedUp => drop(
                ns.api::<ResourceQuota>()
                    .create(&pp, &of(&objects[0])?)
                    .await?,
            ),
            Refusal::LimitRangeUnmet => drop(
                ns.api::<LimitRange>()
                    .create(&pp, &of(&objects[0])?)
                    .await?,
            ),
        }
        let refused = |probed: Result<&Pod, &str>| probed.is_err_and(|m| m.contains(self.words()));
        ns.probe_pod_creates(&format!("pod creates refused: {self:?}"), &[], refused)
            .await?;
        Ok(lift)
    }
}

fn of<K: DeserializeOwned>(value: &Value) -> Result<K> {
    Ok(serde_json::from_value(value.clone())?)
}

/// Removes what refuses.
struct Lift {
    refusal: Refusal,
    client: Client,
    namespace: String,
}

impl Lift {
    fn webhooks(&self) -> Api<ValidatingWebhookConfiguration> {
        Api::all(self.client.clone())
    }

    fn policies(&self) -> Api<ValidatingAdmissionPolicy> {
        Api::all(self.client.clone())
    }

    fn bindings(&self) -> Api<ValidatingAdmissionPolicyBinding> {
        Api::all(self.client.clone())
    }

    async fn lift(self) -> Result<()> {
        let (dp, name) = (
            DeleteParams::default(),
            format!("refuse-{}", self.namespace),
        );
        let ns = &self.namespace;
        match self.refusal {
            Refusal::WebhookDown => drop(self.webhooks().delete(&name, &dp).await?),
            Refusal::PolicyDenies => {
                self.bindings().delete(&name, &dp).await?;
                self.policies().delete(&name, &dp).await?;
            }
            Refusal::QuotaUsedUp => {
                let api = Api::<ResourceQuota>::namespaced(self.client.clone(), ns);
                api.delete(&name, &dp).await?;
            }
            Refusal::LimitRangeUnmet => {
                let api = Api::<LimitRange>::namespaced(self.client.clone(), ns);
                api.delete(&name, &dp).await?;
            }
        }
        Ok(())
    }
}

/// A due At meets `refusal`: it is reported in `Scheduled` and a Warning event, and once the
/// refusal is lifted the command runs, once. Issue 31, case 3 is the webhook that is down:
/// before, the 500 was taken for a create that may have landed, nothing said why the At
/// waited, and (on 12f692f) the At ended DONE, not run, PodVanished.
async fn at_runs_once_lifted(refusal: Refusal, prefix: &str) -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, prefix).await?;
    let lift = refusal.install(&ns).await?;
    let mut operator = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    api.create(
        &PostParams::default(),
        &at("yay", "2019-04-12T10:12:00Z", "echo YAY"),
    )
    .await?;
    let words = refusal.words();
    poll(PROMPTLY, "the refusal reported on the At", || async {
        let at = api.get("yay").await?;
        let status = at.status.unwrap_or_default();
        let reported = status.conditions.iter().any(|c| {
            c.type_ == CONDITION_SCHEDULED
                && c.status == "False"
                && c.reason == REASON_FAILED_CREATE
                && c.message.contains(words)
        });
        Ok(reported && ns.warned("yay", REASON_FAILED_CREATE, words).await?)
    })
    .await?;

    lift.lift().await?;
    let pod = at_pod_released(&ns, "yay").await?;
    set_pod_phase(&ns, &pod.name_any(), "Running", None).await?;
    set_pod_phase(&ns, &pod.name_any(), "Succeeded", Some(0)).await?;
    let done = poll_some(PROMPTLY, "the At DONE", || async {
        let status = api.get("yay").await?.status.unwrap_or_default();
        Ok((status.phase == Some(AtPhase::Done)).then_some(status))
    })
    .await?;
    ensure!(
        done.succeeded == Some(true)
            && done.conditions.iter().any(|c| c.reason == REASON_SUCCEEDED),
        "the command's run not recorded as such: {done:?}"
    );
    let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    ensure!(pods.len() == 1, "{} pods for one At", pods.len());
    operator.assert_healthy();
    Ok(())
}

/// A PodSet of 3 meets `refusal`: `ReplicaFailure` and a Warning event say why it has no
/// pods, and once the refusal is lifted it has exactly its replicas.
async fn podset_converges_once_lifted(refusal: Refusal, prefix: &str) -> Result<()> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, prefix).await?;
    let lift = refusal.install(&ns).await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("web", 3))
        .await?;
    let words = refusal.words();
    poll(PROMPTLY, "the refusal reported on the PodSet", || async {
        let ps = api.get("web").await?;
        let reported = harness::condition(&ps, CONDITION_REPLICA_FAILURE)
            .is_some_and(|(status, _, message)| status == "True" && message.contains(words));
        Ok(reported && ns.warned("web", "FailedCreate", words).await?)
    })
    .await?;

    lift.lift().await?;
    let uid = api.get("web").await?.uid().unwrap_or_default();
    poll(PROMPTLY, "the PodSet's 3 pods", || async {
        let ps = api.get("web").await?;
        let status = ps.status.unwrap_or_default();
        let pods = ns.pods_of(&uid).await?;
        Ok(pods.len() == 3 && status.available_replicas == 3)
    })
    .await?;
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    ensure!(all.len() == 3, "{} pods for a PodSet of 3", all.len());
    operator.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn an_at_refused_by_a_webhook_that_is_down_runs_once_it_is_back() -> Result<()> {
    at_runs_once_lifted(Refusal::WebhookDown, "webhook-at").await
}

#[tokio::test]
async fn a_podset_refused_by_a_webhook_that_is_down_converges_once_it_is_back() -> Result<()> {
    podset_converges_once_lifted(Refusal::WebhookDown, "webhook-ps").await
}

#[tokio::test]
async fn an_at_denied_by_an_admission_policy_runs_once_it_is_lifted() -> Result<()> {
    at_runs_once_lifted(Refusal::PolicyDenies, "policy-at").await
}

#[tokio::test]
async fn a_podset_denied_by_an_admission_policy_converges_once_it_is_lifted() -> Result<()> {
    podset_converges_once_lifted(Refusal::PolicyDenies, "policy-ps").await
}

#[tokio::test]
async fn an_at_over_its_quota_runs_once_the_quota_is_lifted() -> Result<()> {
    at_runs_once_lifted(Refusal::QuotaUsedUp, "quota-at").await
}

#[tokio::test]
async fn a_podset_refused_by_a_limit_range_converges_once_it_is_lifted() -> Result<()> {
    podset_converges_once_lifted(Refusal::LimitRangeUnmet, "limits-ps").await
}

#[tokio::test]
async fn an_at_refused_by_a_limit_range_runs_once_it_is_lifted() -> Result<()> {
    at_runs_once_lifted(Refusal::LimitRangeUnmet, "limits-at").await
}
