//! Issue 31, case 1: an object the API server admitted and the operator cannot read (stored
//! under an older, looser schema) is reported, and stops no other object, nor readiness.

use anyhow::{Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podset_operator::api::{PodSet, podset_crd};
use podset_operator::plan::podset::CONDITION_REPLICA_FAILURE;
use podset_operator::plan::unreadable::REASON_UNREADABLE;
use serde_json::{Value, json};

use testenv::harness::{
    Kind, PROMPTLY, TestNs, condition, own_cluster_ns, podset, poll, poll_some,
};

/// The readiness probe of a PodSet's one container on `port`.
fn probing(name: &str, port: Value) -> Value {
    json!({
        "apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
        "metadata": {"name": name},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{
            "name": "busybox", "image": "busybox", "command": ["sleep", "3600"],
            "readinessProbe": {"httpGet": {"port": port}},
        }]}}},
    })
}

/// `schema` without the bounds of 32-bit integers: the CRD as a release before them had it.
fn loosen(schema: &mut Value) {
    if let Some(fields) = schema.as_object_mut() {
        for bound in ["maximum", "minimum"] {
            let i32_edge = |v: &Value| {
                v.as_f64()
                    .is_some_and(|v| v == f64::from(i32::MAX) || v == f64::from(i32::MIN))
            };
            if fields.get(bound).is_some_and(i32_edge) {
                fields.remove(bound);
            }
        }
        fields.values_mut().for_each(loosen);
    } else if let Some(items) = schema.as_array_mut() {
        items.iter_mut().for_each(loosen);
    }
}

async fn install(ns: &TestNs, crd: Value) -> Result<()> {
    let api = Api::<CustomResourceDefinition>::all(ns.client.clone());
    let name = crd["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    api.patch(
        &name,
        &PatchParams::apply("test").force(),
        &Patch::Apply(crd),
    )
    .await?;
    Ok(())
}

/// Creates `body`; the API server's code and message if it refuses it.
async fn create(ns: &TestNs, body: &Value) -> Result<Option<(u16, String)>> {
    ns.post_raw(
        Kind::PodSet,
        Kind::PodSet.api_version(),
        serde_json::to_vec(body)?,
    )
    .await
}

/// The PodSet `name` as stored, whatever the Rust type can hold.
async fn stored(ns: &TestNs, name: &str) -> Result<Value> {
    ns.get_raw(Kind::PodSet, name).await
}

/// Waits until the PodSet `name` has `n` pods of its own, named in its status (no nodes:
/// they stay Pending, which counts as available).
async fn served(ns: &TestNs, name: &str, n: usize) -> Result<PodSet> {
    poll_some(
        PROMPTLY,
        &format!("podset {name} served with {n} pods"),
        || async {
            let ps = ns.api::<PodSet>().get(name).await?;
            let pods = ns.pods_of(&ps.uid().unwrap_or_default()).await?;
            let status = ps.status.clone().unwrap_or_default();
            let ok = pods.len() == n
                && status.pod_names.len() == n
                && status.observed_generation == ps.metadata.generation;
            Ok(ok.then_some(ps))
        },
    )
    .await
}

#[tokio::test]
async fn an_object_the_operator_cannot_read_is_reported_and_stops_no_other() -> Result<()> {
    let ns = own_cluster_ns("unreadable", &[]).await?;
    let mut loose = serde_json::to_value(podset_crd())?;
    loosen(&mut loose);
    install(&ns, loose).await?;
    let unreadable = probing("bad", json!(2_147_483_648_i64));
    // The CRD's new schema is served a moment after the update.
    poll(
        PROMPTLY,
        "the loose schema to admit a port past i32",
        || async { Ok(create(&ns, &unreadable).await?.is_none()) },
    )
    .await?;
    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("before", 2))
        .await?;

    install(&ns, serde_json::to_value(podset_crd())?).await?;
    // Until it is served, a create may still be stored: each try has its own name.
    let tries = std::sync::atomic::AtomicUsize::new(0);
    let refusal = poll_some(PROMPTLY, "this release's schema to refuse it", || async {
        let n = tries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let again = probing(&format!("bad-again-{n}"), json!(2_147_483_648_i64));
        create(&ns, &again).await
    })
    .await?;
    ensure!(
        refusal.0 == 422 && refusal.1.contains("less than or equal to"),
        "refused, but not for the bound: {refusal:?}"
    );

    let mut operator = ns.start_operator(&[]).await?;
    served(&ns, "before", 2).await?;
    let reported = poll_some(PROMPTLY, "the unreadable PodSet reported", || async {
        let bad = stored(&ns, "bad").await?;
        let conditions = bad["status"]["conditions"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let report = conditions.iter().find(|c| {
            c["type"] == CONDITION_REPLICA_FAILURE
                && c["status"] == "True"
                && c["reason"] == REASON_UNREADABLE
        });
        let warned = ns.warned("bad", REASON_UNREADABLE, "").await?;
        Ok(report.filter(|_| warned).map(|c| {
            (
                c["message"].clone(),
                bad["metadata"]["resourceVersion"].clone(),
            )
        }))
    })
    .await?;
    let (message, version) = reported;
    ensure!(
        message.as_str().is_some_and(|m| m
            .contains("spec.template.spec.containers[0].readinessProbe.httpGet.port")
            && m.contains("2147483648")),
        "the report does not say where and why: {message}"
    );
    let readyz = format!("http://127.0.0.1:{}/readyz", operator.health_port);
    let code = reqwest::get(readyz).await?.status();
    ensure!(
        code == 200,
        "/readyz {code} with an unreadable PodSet stored"
    );

    // A PodSet made afterwards is served, and the unreadable one was written once: the
    // report, never again.
    ns.api::<PodSet>()
        .create(&PostParams::default(), &podset("after", 1))
        .await?;
    served(&ns, "after", 1).await?;
    let bad = stored(&ns, "bad").await?;
    ensure!(
        bad["metadata"]["resourceVersion"] == version,
        "the unreadable PodSet was written again"
    );
    ensure!(
        ns.pods_of(bad["metadata"]["uid"].as_str().unwrap_or_default())
            .await?
            .is_empty(),
        "pods were made for it"
    );

    // Fixed by its owner, it is read and served.
    let fixed = json!({"spec": probing("bad", json!(8080))["spec"]});
    ns.api::<PodSet>()
        .patch("bad", &PatchParams::default(), &Patch::Merge(&fixed))
        .await?;
    let ps = served(&ns, "bad", 1).await?;
    let failure = condition(&ps, CONDITION_REPLICA_FAILURE);
    ensure!(
        failure.as_ref().is_some_and(|c| c.0 == "False"),
        "still reported once fixed: {failure:?}"
    );
    operator.assert_healthy_but_warned(&["cannot read this object"]);
    Ok(())
}
