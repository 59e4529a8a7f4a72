//! The walkthroughs the Sieve runs perturb, each driven step by step on the real API server
//! (no nodes: the test plays the kubelet), and the end state each must reach: the PodSet
//! walkthrough (3, then 5, then 1), an At due now, a PodSet one of whose pods a person
//! unlabels before deleting the PodSet in the foreground, and an At deleted before it is due.

use std::pin::pin;
use std::time::Duration;

use anyhow::{Context as _, Result};
use futures::StreamExt;
use futures::future::{Either, select};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use podset_operator::api::{At, AtPhase, MANAGED_BY_LABEL, PodSet};
use podset_operator::plan::at::CONDITION_COMPLETED;
use serde_json::json;
use testenv::MaxPods;
use testenv::harness::{self, TestNs, at, podset, poll_some, set_pod_phase};

use super::{CONVERGE, Facts};

pub(crate) async fn podset_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    with_kubelet(ns, podset_steps(ns, pods)).await
}

/// Runs `steps` while the test plays the kubelet ([`run_pods`]).
async fn with_kubelet(ns: &TestNs, steps: impl Future<Output = Result<Facts>>) -> Result<Facts> {
    match select(pin!(steps), pin!(run_pods(ns))).await {
        Either::Left((facts, _)) => facts,
        Either::Right(((), _)) => anyhow::bail!("the kubelet's pod watch ended"),
    }
}

/// Plays the kubelet: each new pod goes Running at once. Each pod then has two states
/// (Pending, Running) that a perturbed watch can show late or not at all; available
/// counts both.
async fn run_pods(ns: &TestNs) {
    let mut pods = pin!(
        watcher(ns.api::<Pod>(), watcher::Config::default())
            .default_backoff()
            .applied_objects()
    );
    while let Some(pod) = pods.next().await {
        let Ok(pod) = pod else { continue };
        if harness::phase(&pod) == "Pending" && pod.metadata.deletion_timestamp.is_none() {
            // A pod deleted meanwhile (a scale-down) cannot start: nothing to do.
            let _ = set_pod_phase(ns, &pod.name_any(), "Running", None).await;
        }
    }
}

async fn podset_steps(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<PodSet>();
    let created = api
        .create(&PostParams::default(), &podset("web", 3))
        .await?;
    let uid = created.uid().context("no uid")?;
    settled(ns, 3).await?;
    let most_at_3 = pods.snapshot().get(&uid).copied().unwrap_or(0);
    let replicas = |n: i32| Patch::Merge(json!({"spec": {"replicas": n}}));
    api.patch("web", &PatchParams::default(), &replicas(5))
        .await?;
    settled(ns, 5).await?;
    let most_at_5 = pods.snapshot().get(&uid).copied().unwrap_or(0);
    api.patch_scale("web", &PatchParams::default(), &replicas(1))
        .await?;
    let ps = settled(ns, 1).await?;

    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let live = testenv::live_pods_by_owner(&all);
    let owned = live.get(&uid).cloned().unwrap_or_default();
    let status = ps.status.clone().unwrap_or_default();
    Ok(Facts::from([
        ("live pods of the PodSet", owned.len().to_string()),
        ("pods in the namespace", all.len().to_string()),
        (
            "status.availableReplicas",
            status.available_replicas.to_string(),
        ),
        ("status.podNames", names_are(&status.pod_names, &owned)),
        ("most pods at once at 3 replicas", most_at_3.to_string()),
        ("most pods at once at 5 replicas", most_at_5.to_string()),
        ("pods ever created", ever(pods, &uid)),
    ]))
}

/// Whether `names` are the PodSet's live pods, as a fact.
fn names_are(names: &[String], live: &[String]) -> String {
    if names == live {
        "its live pods".into()
    } else {
        format!("{names:?}, not its live pods {live:?}")
    }
}

fn ever(pods: &MaxPods, uid: &str) -> String {
    pods.ever().get(uid).copied().unwrap_or(0).to_string()
}

/// Waits until the PodSet `web` has exactly `n` live pods of its own, named in its status
/// for its current generation.
async fn settled(ns: &TestNs, n: usize) -> Result<PodSet> {
    let api = ns.api::<PodSet>();
    poll_some(CONVERGE, &format!("podset web settled at {n}"), || async {
        let ps = api.get("web").await?;
        let pods = ns.api::<Pod>().list(&ListParams::default()).await?.items;
        let live = testenv::live_pods_by_owner(&pods)
            .remove(&ps.uid().unwrap_or_default())
            .unwrap_or_default();
        let status = ps.status.clone().unwrap_or_default();
        let ok = ps.spec.replicas == n as i32
            && live.len() == n
            && status.pod_names == live
            && status.available_replicas == n as i32
            && status.observed_generation == ps.metadata.generation;
        Ok(ok.then_some(ps))
    })
    .await
}

pub(crate) async fn at_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<At>();
    // Scheduled in the past: due at once.
    let created = api
        .create(
            &PostParams::default(),
            &at("yay", "2019-04-12T10:12:00Z", "echo YAY"),
        )
        .await?;
    let uid = created.uid().context("no uid")?;
    let done = || async {
        let status = api.get("yay").await?.status.unwrap_or_default();
        Ok((status.phase == Some(AtPhase::Done)).then_some(status))
    };
    // The kubelet's part: once the pod is released from its scheduling gate, the command runs
    // and exits 0, reported Running then Succeeded back to back, as a kubelet does for a
    // short command: a thinned watch then has a state (Running) to drop whatever the load.
    // A gated pod found after a crash, before it was recorded, is deleted and made again (it
    // never ran).
    let released = |pod: &Pod| {
        pod.spec
            .as_ref()
            .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
    };
    let pod_or_verdict = poll_some(
        CONVERGE,
        "the At's pod released, or its verdict",
        || async {
            let pods = ns.pods_of(&uid).await?;
            if let Some(pod) = pods.into_iter().find(released) {
                return Ok(Some(Either::Left(pod)));
            }
            Ok(done().await?.map(Either::Right))
        },
    )
    .await?;
    let done = match pod_or_verdict {
        Either::Left(pod) => {
            set_pod_phase(ns, &pod.name_any(), "Running", None).await?;
            set_pod_phase(ns, &pod.name_any(), "Succeeded", Some(0)).await?;
            poll_some(CONVERGE, "at yay DONE", done).await?
        }
        Either::Right(done) => done,
    };

    let verdict = done
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_COMPLETED)
        .map(|c| format!("{} {}", c.status, c.reason));
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    Ok(Facts::from([
        ("phase", format!("{:?}", done.phase)),
        ("succeeded", format!("{:?}", done.succeeded)),
        ("condition Completed", format!("{verdict:?}")),
        ("status.podName", format!("{:?}", done.pod_name)),
        ("pods in the namespace", all.len().to_string()),
        // Gated pods made and deleted unreleased (the operator killed between the create and
        // the record) never ran: released ones are what ran.
        ("pods ever released", ever_released(pods, &uid)),
    ]))
}

fn ever_released(pods: &MaxPods, uid: &str) -> String {
    pods.ever_released()
        .get(uid)
        .copied()
        .unwrap_or(0)
        .to_string()
}

pub(crate) fn podset_expected() -> Facts {
    Facts::from([
        ("live pods of the PodSet", "1".into()),
        ("pods in the namespace", "1".into()),
        ("status.availableReplicas", "1".into()),
        ("status.podNames", "its live pods".into()),
        ("most pods at once at 3 replicas", "3".into()),
        ("most pods at once at 5 replicas", "5".into()),
        ("pods ever created", "5".into()),
    ])
}

pub(crate) fn at_expected() -> Facts {
    Facts::from([
        ("phase", "Some(Done)".into()),
        ("succeeded", "Some(true)".into()),
        ("condition Completed", "Some(\"True Succeeded\")".into()),
        ("status.podName", "Some(\"yay-pod\")".into()),
        ("pods in the namespace", "1".into()),
        ("pods ever released", "1".into()),
    ])
}

/// A person takes the operator's label off one of a PodSet's 2 pods: it is released (no
/// controller reference) and replaced. Then the PodSet is deleted in the foreground: its pods
/// go before it, the released one stays.
pub(crate) async fn released_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    with_kubelet(ns, released_steps(ns, pods)).await
}

async fn released_steps(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<PodSet>();
    let created = api
        .create(&PostParams::default(), &podset("web", 2))
        .await?;
    let uid = created.uid().context("no uid")?;
    settled(ns, 2).await?;
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let edited = testenv::live_pods_by_owner(&all)
        .remove(&uid)
        .and_then(|names| names.into_iter().next())
        .context("no pod")?;
    let unlabel = Patch::Merge(json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}}));
    ns.api::<Pod>()
        .patch(&edited, &PatchParams::default(), &unlabel)
        .await?;
    let released = || async {
        let pod = ns.api::<Pod>().get(&edited).await?;
        let refs = pod.metadata.owner_references.unwrap_or_default();
        Ok(refs.is_empty().then_some(()))
    };
    poll_some(CONVERGE, "the edited pod released", released).await?;
    settled(ns, 2).await?;
    api.delete("web", &DeleteParams::foreground()).await?;
    poll_some(CONVERGE, "the PodSet gone, its pods first", || async {
        let gone = api.get_opt("web").await?.is_none();
        let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
        let owned = all
            .iter()
            .any(|p| testenv::controller_uid(p).as_deref() == Some(uid.as_str()));
        Ok((gone && !owned).then_some(()))
    })
    .await?;
    let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
    let left: Vec<String> = all.iter().map(|p| p.name_any()).collect();
    Ok(Facts::from([
        ("pods left", names_are(&left, &[edited])),
        ("pods ever created", ever(pods, &uid)),
    ]))
}

/// An At is deleted a second before it is due: its command never runs. (An operator whose
/// watch has not shown the deletion may make its pod, gated; the At's status write then finds
/// it gone, the pod is never released, and the garbage collector removes it.)
pub(crate) async fn deleted_at_scenario(ns: &TestNs, pods: &MaxPods) -> Result<Facts> {
    let api = ns.api::<At>();
    let due = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(8);
    let schedule = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let created = api
        .create(&PostParams::default(), &at("later", &schedule, "echo YAY"))
        .await?;
    let uid = created.uid().context("no uid")?;
    poll_some(CONVERGE, "at later PENDING", || async {
        let status = api.get("later").await?.status.unwrap_or_default();
        Ok((status.phase == Some(AtPhase::Pending)).then_some(()))
    })
    .await?;
    // The schedule itself is what is waited for, up to a second before it.
    until(due - jiff::SignedDuration::from_secs(1)).await;
    api.delete("later", &DeleteParams::default()).await?;
    poll_some(CONVERGE, "at later gone", || async {
        Ok(api.get_opt("later").await?.is_none().then_some(()))
    })
    .await?;
    until(due + jiff::SignedDuration::from_secs(3)).await;
    poll_some(CONVERGE, "no pod of the At left", || async {
        let all = ns.api::<Pod>().list(&ListParams::default()).await?.items;
        Ok(all.is_empty().then_some(()))
    })
    .await?;
    Ok(Facts::from([(
        "pods ever released",
        ever_released(pods, &uid),
    )]))
}

/// Waits until the wall clock reads `t`.
async fn until(t: jiff::Timestamp) {
    let left = t.duration_since(jiff::Timestamp::now());
    tokio::time::sleep(Duration::try_from(left).unwrap_or_default()).await;
}

pub(crate) fn released_expected() -> Facts {
    Facts::from([
        ("pods left", "its live pods".into()),
        ("pods ever created", "3".into()),
    ])
}

pub(crate) fn deleted_at_expected() -> Facts {
    Facts::from([("pods ever released", "0".into())])
}
