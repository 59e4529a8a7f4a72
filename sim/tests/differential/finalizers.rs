//! Sequence 8: deletion that waits for finalizers, and the garbage collector's propagation
//! policies.

use anyhow::Result;
use serde_json::{Value, json};

use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{at, managed, pod, podset};
use crate::side::{Side, model_side, name_of, world_side};

/// 8a. Another controller's finalizer holds a deleted PodSet and At: each is marked (a
/// `deletionTimestamp`, a new generation) and still served, written and deleted again, and
/// goes when the finalizer is taken off.
#[tokio::test]
async fn finalizers() -> Result<()> {
    differential("finalizers", model_side, |mut s| async move {
        let objects = [
            (
                Kind::PodSet,
                podset("held", 1),
                json!({"availableReplicas": 0, "podNames": []}),
            ),
            (Kind::At, at("held"), json!({"phase": "PENDING"})),
        ];
        for (kind, object, status) in objects {
            let mut held = object;
            held["metadata"]["finalizers"] = json!(["example.com/hold"]);
            s.create("an object with another controller's finalizer", kind, held)
                .await?;
            s.delete("DELETE of it", kind, "held", json!({})).await?;
            s.get("GET of it, marked", kind, "held").await?;
            s.delete("DELETE of it again", kind, "held", json!({}))
                .await?;
            let status = json!({ "status": status });
            s.patch_status(
                "a status write while it is being deleted",
                kind,
                "held",
                status,
            )
            .await?;
            let unheld = json!({"metadata": {"finalizers": null}});
            s.patch("the finalizer taken off", kind, "held", unheld)
                .await?;
            s.get("GET of it, gone", kind, "held").await?;
        }
        Ok(s)
    })
    .await
}

/// 8b. A PodSet deleted in the foreground goes after its pods; one deleted orphaning goes
/// and leaves its pods, no longer naming it. On the model's side this is the simulated
/// world's garbage collector: the DELETE's answers and which pods are left are compared.
#[tokio::test]
async fn propagation() -> Result<()> {
    differential("propagation", world_side, |mut s| async move {
        for (name, policy) in [("fg", "Foreground"), ("orphaning", "Orphan")] {
            owner_with_pods(&mut s, name).await?;
            let options = json!({"propagationPolicy": policy});
            s.delete(
                &format!("DELETE with {policy}"),
                Kind::PodSet,
                name,
                options,
            )
            .await?;
            s.until(&format!("PodSet {name} gone"), Kind::PodSet, |all| {
                all.iter().all(|ps| name_of(ps) != name)
            })
            .await?;
        }
        let left = |pods: &[Value]| {
            let mut left: Vec<(String, Value)> = pods
                .iter()
                .filter(|p| p["metadata"]["deletionTimestamp"].is_null())
                .map(|p| (name_of(p), p["metadata"]["ownerReferences"].clone()))
                .collect();
            left.sort_by(|a, b| a.0.cmp(&b.0));
            left
        };
        let orphans = vec![
            ("orphaning-1".to_string(), Value::Null),
            ("orphaning-2".to_string(), Value::Null),
        ];
        s.until(
            "only the orphaned pods left, naming no owner",
            Kind::Pod,
            |pods| left(pods) == orphans,
        )
        .await?;
        Ok(s)
    })
    .await
}

/// PodSet `name` and two pods it controls, `name-1` and `name-2`, which block its deletion.
async fn owner_with_pods(s: &mut Side, name: &str) -> Result<()> {
    let owner = s.create("a PodSet", Kind::PodSet, podset(name, 2)).await?;
    for i in 1..=2 {
        let mut owned = pod(&format!("{name}-{i}"), managed());
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "app.example.com/v1beta1",
            "kind": "PodSet", "name": name, "uid": owner["metadata"]["uid"],
            "controller": true, "blockOwnerDeletion": true}]);
        s.create("a pod it controls", Kind::Pod, owned).await?;
    }
    Ok(())
}
