//! The PodSet operator end to end, on a real control plane, following the Operator SDK
//! walkthrough: create, scale up by JSON patch, scale down with `kubectl scale`, delete.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{Pod, ResourceQuota};
use k8s_openapi::api::events::v1::Event;
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::ApiResource;
use podset_operator::api::{MANAGED_BY_LABEL, PodSet};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use testenv::harness::{self, PROMPTLY, TestNs, condition, converged, podset, poll};

/// The seeds' sample, at the version it names (v1alpha1).
const SAMPLE: &str = "config/samples/app_v1alpha1_podset.yaml";

#[tokio::test]
async fn walkthrough_create_scale_and_delete() -> Result<()> {
    let ns = TestNs::new("walkthrough").await?;
    let mut operator = ns.start_operator(&["--controllers=podset"]).await?;
    let pods = ns.api::<Pod>();

    // A pod with the very labels the PodSet's pods get, but not controlled by it.
    let foreign: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "foreign", "labels": {
            "app": "podset-sample", "version": "v0.1", "app.kubernetes.io/managed-by": "podset-operator"}},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))?;
    pods.create(&PostParams::default(), &foreign).await?;

    // Create from the sample, as `kubectl create -f config/samples/app_v1alpha1_podset.yaml`.
    let created = ns.create_manifest(SAMPLE).await?;
    assert_eq!(
        created.types.unwrap().api_version,
        "app.example.com/v1alpha1"
    );
    let api = ns.api::<PodSet>();
    let ps = api.get("podset-sample").await?;
    assert_eq!(ps.spec.replicas, 3);
    let created = converged(&ns, "podset-sample", 3).await?;
    for p in &created {
        assert!(
            p.name_any().starts_with("podset-sample-pod"),
            "{}",
            p.name_any()
        );
        let labels = p.labels();
        assert_eq!(labels.get("app").map(String::as_str), Some("podset-sample"));
        assert_eq!(labels.get("version").map(String::as_str), Some("v0.1"));
        let owner = &p.owner_references()[0];
        assert_eq!(p.owner_references().len(), 1);
        // The version the operator reads, the stored one.
        assert_eq!(owner.api_version, "app.example.com/v1beta1");
        assert_eq!(owner.kind, "PodSet");
        assert_eq!(owner.name, "podset-sample");
        assert_eq!(owner.uid, ps.uid().unwrap());
        assert_eq!(owner.controller, Some(true));
        assert_eq!(owner.block_owner_deletion, Some(true));
    }

    // Scale up with the walkthrough's JSON patch.
    let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
        {"op": "replace", "path": "/spec/replicas", "value": 5}
    ]))?;
    api.patch(
        "podset-sample",
        &PatchParams::default(),
        &Patch::Json::<()>(patch),
    )
    .await?;
    let five = converged(&ns, "podset-sample", 5).await?;
    // As `kubectl get replicasets` does, `kubectl get podsets` shows how many pods are
    // Ready: all five, once their containers run.
    poll(PROMPTLY, "kubectl to show 5 desired, 5 ready", || async {
        let table = ns.kubectl(&["get", "podset", "podset-sample"])?;
        let columns: Vec<Vec<&str>> = table
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        Ok(columns.first().map(|h| h[..4].to_vec())
            == Some(vec!["NAME", "DESIRED", "READY", "AVAILABLE"])
            && columns.get(1).map(|r| r[1..4].to_vec()) == Some(vec!["5", "5", "5"]))
    })
    .await?;

    // Scale down to 1 through the scale subresource. Victims follow the ranking: the pod
    // with the highest pod-deletion-cost survives even though it is not the oldest.
    let mut newest = five.clone();
    newest.sort_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    let keeper = newest.last().unwrap().name_any();
    pods.patch(
        &keeper,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
            "controller.kubernetes.io/pod-deletion-cost": "100"}}})),
    )
    .await?;
    // Let the operator's cache see the annotation before the scale-down decides.
    poll(PROMPTLY, "annotation visible", || async {
        Ok(pods
            .get(&keeper)
            .await?
            .annotations()
            .contains_key("controller.kubernetes.io/pod-deletion-cost"))
    })
    .await?;
    ns.kubectl(&["scale", "podset/podset-sample", "--replicas=1"])?;
    let one = converged(&ns, "podset-sample", 1).await?;
    assert_eq!(
        one[0].name_any(),
        keeper,
        "the highest deletion cost survives the scale-down"
    );

    // A pod deleted by hand is replaced.
    pods.delete(&keeper, &DeleteParams::default()).await?;
    let replaced = converged(&ns, "podset-sample", 1).await?;
    assert_ne!(replaced[0].name_any(), keeper);

    // Issue 45, fault 6: a pod whose operator label is taken off leaves the operator's
    // watch; as a ReplicaSet does, the operator releases it (it runs on, owned by nobody)
    // and makes another.
    let edited = replaced[0].name_any();
    let unlabel = serde_json::json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}});
    pods.patch(&edited, &PatchParams::default(), &Patch::Merge(&unlabel))
        .await?;
    poll(PROMPTLY, "the edited pod to be released", || async {
        Ok(pods.get(&edited).await?.owner_references().is_empty())
    })
    .await?;
    let after_edit = converged(&ns, "podset-sample", 1).await?;
    assert_ne!(after_edit[0].name_any(), edited);

    // The foreign look-alike was never counted, changed or deleted.
    let foreign = pods.get("foreign").await?;
    assert!(foreign.metadata.deletion_timestamp.is_none());
    assert!(foreign.owner_references().is_empty());
    let status = api.get("podset-sample").await?.status.unwrap();
    assert!(!status.pod_names.contains(&"foreign".to_string()));

    // Events tell the story.
    let events = ns.api::<Event>().list(&ListParams::default()).await?;
    let reasons: Vec<_> = events
        .items
        .iter()
        .filter_map(|e| e.reason.clone())
        .collect();
    assert!(
        reasons.iter().any(|r| r == "SuccessfulCreate"),
        "{reasons:?}"
    );
    assert!(
        reasons.iter().any(|r| r == "SuccessfulDelete"),
        "{reasons:?}"
    );
    assert!(reasons.iter().any(|r| r == "PodReleased"), "{reasons:?}");

    // Delete the PodSet: the garbage collector removes its pods, not the foreign one.
    api.delete("podset-sample", &DeleteParams::default())
        .await?;
    poll(
        Duration::from_secs(90),
        "the PodSet's pods to be garbage-collected",
        || async {
            let left = pods.list(&ListParams::default()).await?;
            Ok(left
                .items
                .iter()
                .all(|p| p.name_any() == "foreign" || p.name_any() == edited))
        },
    )
    .await?;
    assert!(pods.get_opt("foreign").await?.is_some());
    assert!(
        pods.get_opt(&edited).await?.is_some(),
        "a released pod is its editor's"
    );
    operator.assert_healthy();
    Ok(())
}

/// `WATCH_NAMESPACE=a,b`, as controller-runtime's multi-namespace cache: with the manager
/// rules in a and b only, the operator manages PodSets in both (one made before it listed,
/// one after, one scaled), one watch a namespace, and leaves a third namespace's alone.
#[tokio::test]
async fn a_list_of_namespaces_is_watched_and_no_other() -> Result<()> {
    let (a, b) = (TestNs::new("list-a").await?, TestNs::new("list-b").await?);
    let other = TestNs::new("list-other").await?;
    let post = PostParams::default();
    for ns in [&other, &a] {
        ns.api::<PodSet>().create(&post, &podset("web", 2)).await?;
    }
    let watched = [&a, &b];
    let mut operator = a
        .start_operator_watching(&watched, &["--controllers=podset"])
        .await?;
    operator.wait_ready(PROMPTLY).await?;
    b.api::<PodSet>().create(&post, &podset("web", 3)).await?;
    converged(&a, "web", 2).await?;
    converged(&b, "web", 3).await?;
    let one = Patch::Merge(serde_json::json!({"spec": {"replicas": 1}}));
    b.api::<PodSet>()
        .patch("web", &PatchParams::default(), &one)
        .await?;
    converged(&b, "web", 1).await?;

    let untouched = other.api::<PodSet>().get("web").await?;
    assert_eq!(
        untouched.status, None,
        "a namespace not in the list was written to"
    );
    assert!(other.pods_of(&untouched.uid().unwrap()).await?.is_empty());
    operator.assert_healthy();
    Ok(())
}

#[tokio::test]
async fn api_server_refuses_invalid_replicas_and_defaults_to_one() -> Result<()> {
    let ns = TestNs::new("validation").await?;
    let ar = ApiResource::erase::<PodSet>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(ns.client.clone(), &ns.name, &ar);
    let submit = |name: &str, spec: serde_json::Value| {
        let obj: DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
            "metadata": {"name": name}, "spec": spec
        }))
        .unwrap();
        let api = api.clone();
        async move { api.create(&PostParams::default(), &obj).await }
    };
    for (name, replicas, expect) in [
        (
            "zero",
            serde_json::json!(0),
            "should be greater than or equal to 1",
        ),
        (
            "eleven",
            serde_json::json!(11),
            "should be less than or equal to 10",
        ),
        ("abc", serde_json::json!("abc"), "must be of type integer"),
    ] {
        match submit(name, serde_json::json!({"replicas": replicas})).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "{name}: {s:?}");
                assert!(s.message.contains("spec.replicas"), "{name}: {}", s.message);
                assert!(s.message.contains(expect), "{name}: {}", s.message);
            }
            other => panic!("{name}: expected 422 Invalid, got {other:?}"),
        }
    }
    // Issue 45, fault 1: templates whose pods end by themselves are refused, as a
    // ReplicaSet's are, with the field's path.
    let containers = serde_json::json!([{"name": "c", "image": "busybox"}]);
    for (name, field, value, expect) in [
        (
            "deadline",
            "activeDeadlineSeconds",
            serde_json::json!(30),
            "activeDeadlineSeconds is not supported",
        ),
        (
            "never",
            "restartPolicy",
            serde_json::json!("Never"),
            "restartPolicy must be Always",
        ),
    ] {
        let spec = serde_json::json!({"replicas": 1, "template": {"spec": {
            "containers": containers, field: value}}});
        match submit(name, spec).await {
            Err(kube::Error::Api(s)) => {
                assert_eq!(s.code, 422, "{name}: {s:?}");
                assert!(
                    s.message.contains("spec.template.spec"),
                    "{name}: {}",
                    s.message
                );
                assert!(s.message.contains(expect), "{name}: {}", s.message);
            }
            other => panic!("{name}: expected 422 Invalid, got {other:?}"),
        }
    }
    let always = serde_json::json!({"template": {"spec": {"containers": containers,
        "restartPolicy": "Always"}}});
    submit("always", always).await?;
    let defaulted = submit("defaulted", serde_json::json!({})).await?;
    assert_eq!(defaulted.data["spec"]["replicas"], 1);
    // Doc comments are schema descriptions, so kubectl explain documents the fields.
    let explain = ns.kubectl(&["explain", "podset.spec.replicas"])?;
    assert!(explain.contains("1 to 10"), "{explain}");
    Ok(())
}

#[tokio::test]
async fn quota_refusal_is_reported_and_retried_with_backoff() -> Result<()> {
    let ns = TestNs::new("quota").await?;
    let quota: ResourceQuota = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "two-pods"}, "spec": {"hard": {"pods": "2"}}
    }))?;
    let quotas = ns.api::<ResourceQuota>();
    quotas.create(&PostParams::default(), &quota).await?;
    poll(PROMPTLY, "quota status computed", || async {
        Ok(quotas
            .get("two-pods")
            .await?
            .status
            .and_then(|s| s.hard)
            .is_some())
    })
    .await?;
    let _operator = ns.start_operator(&["--controllers=podset"]).await?;
    let api = ns.api::<PodSet>();
    let ps = api
        .create(&PostParams::default(), &podset("capped", 4))
        .await?;
    poll(
        PROMPTLY,
        "ReplicaFailure with the quota message",
        || async {
            let ps = api.get("capped").await?;
            Ok(
                condition(&ps, CONDITION_REPLICA_FAILURE).is_some_and(|(status, reason, msg)| {
                    status == "True" && reason == "FailedCreate" && msg.contains("exceeded quota")
                }),
            )
        },
    )
    .await?;
    assert_eq!(
        ns.pods_of(&ps.uid().unwrap()).await?.len(),
        2,
        "exactly the quota's worth"
    );
    harness::failed_creates_back_off(&ns).await?;

    // Lift the quota: the PodSet converges and the failure clears.
    quotas.delete("two-pods", &DeleteParams::default()).await?;
    converged(&ns, "capped", 4).await?;
    poll(
        Duration::from_secs(90),
        "ReplicaFailure cleared",
        || async {
            Ok(
                condition(&api.get("capped").await?, CONDITION_REPLICA_FAILURE)
                    .is_some_and(|c| c.0 == "False"),
            )
        },
    )
    .await?;
    Ok(())
}

#[tokio::test]
async fn converged_podsets_cost_no_writes() -> Result<()> {
    let ns = TestNs::new("idle").await?;
    // Resyncs every second or two: a look at a converged PodSet must write nothing either.
    let mut operator = ns
        .start_operator(&["--controllers=podset", "--resync-period-seconds=2"])
        .await?;
    let api = ns.api::<PodSet>();
    for i in 0..3 {
        api.create(&PostParams::default(), &podset(&format!("idle-{i}"), 2))
            .await?;
        converged(&ns, &format!("idle-{i}"), 2).await?;
    }
    // The operator's events only: the scheduler's and the hollow kubelets' may come late.
    let snapshot = |api: Api<PodSet>, pods: Api<Pod>, events: Api<Event>| async move {
        let events = events.list(&ListParams::default()).await?.items;
        let ours = |e: &&Event| e.reporting_controller.as_deref() == Some("podset-operator");
        let events = events.iter().filter(ours).count();
        anyhow::Ok((versions(&api).await?, versions(&pods).await?, events))
    };
    let before = snapshot(api.clone(), ns.api(), ns.api()).await?;
    assert!(
        before.2 >= 3,
        "no SuccessfulCreate event of the operator's seen"
    );
    let window = tokio::time::Instant::now();
    tokio::time::sleep_until(window + Duration::from_secs(15)).await; // observation window, not a wait
    let after = snapshot(api.clone(), ns.api(), ns.api()).await?;
    assert_eq!(
        before.0, after.0,
        "PodSets changed while idle (status churn)"
    );
    assert_eq!(before.1, after.1, "pods changed while idle");
    assert_eq!(before.2, after.2, "events were written while idle");
    operator.assert_healthy();
    Ok(())
}

/// The watch triggers only on spec changes; a deposed leader's late status write (played here
/// by the test) would stand until a pod changed, were it not for the resync.
#[tokio::test]
async fn a_status_overwritten_by_someone_else_is_put_right_by_the_resync() -> Result<()> {
    let ns = TestNs::new("resync").await?;
    let mut operator = ns
        .start_operator(&["--controllers=podset", "--resync-period-seconds=2"])
        .await?;
    let api = ns.api::<PodSet>();
    api.create(&PostParams::default(), &podset("resync", 2))
        .await?;
    let pods = converged(&ns, "resync", 2).await?;
    let stale = serde_json::json!({"status": {"availableReplicas": 7, "podNames": ["gone"]}});
    api.patch_status("resync", &PatchParams::default(), &Patch::Merge(&stale))
        .await?;
    let again = converged(&ns, "resync", 2).await?;
    let uids = |pods: &[Pod]| pods.iter().map(|p| p.uid()).collect::<Vec<_>>();
    assert_eq!(uids(&again), uids(&pods), "pods were replaced");
    operator.assert_healthy();
    Ok(())
}

/// Each object's resourceVersion, by name: any write changes it.
async fn versions<K>(api: &Api<K>) -> Result<BTreeMap<String, String>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|o| (o.name_any(), o.resource_version().unwrap_or_default()))
        .collect())
}
