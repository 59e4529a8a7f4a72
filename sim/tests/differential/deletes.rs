//! Sequence 4: deletes.

use anyhow::Result;
use kube::api::WatchParams;
use serde_json::json;

use podset_sim::model::resource::Kind;

use crate::objects::{at, lease, managed, pod, podset};
use crate::side::{model_side, version};
use crate::{WRONG_UID, differential};

/// 4. Deletes: preconditions, a missing object, graceful deletion of pods, and the answers.
#[tokio::test]
async fn deletes() -> Result<()> {
    differential("deletes", model_side, |mut s| async move {
        let p = s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        let version = version(&p).to_string();
        let mut watch = s
            .watch(Kind::Pod, &WatchParams::default(), &version)
            .await?;
        s.alias(WRONG_UID, "<the wrong UID>");
        let wrong = json!({"preconditions": {"uid": WRONG_UID}});
        s.delete(
            "DELETE with a UID that does not match",
            Kind::Pod,
            "p",
            wrong,
        )
        .await?;
        let wrong = json!({"preconditions": {"resourceVersion": "1"}});
        s.delete(
            "DELETE with a resourceVersion that does not match",
            Kind::Pod,
            "p",
            wrong,
        )
        .await?;
        s.delete("DELETE of a missing pod", Kind::Pod, "nobody", json!({}))
            .await?;
        let p = s.get("GET", Kind::Pod, "p").await?;
        let right = json!({"preconditions": {"uid": p["metadata"]["uid"]}});
        s.delete("DELETE of an unscheduled pod", Kind::Pod, "p", right)
            .await?;
        // Two writes: marked with no grace, then gone.
        s.events("its deletion, as a watch sees it", &mut watch, 2)
            .await?;
        s.get("GET of the deleted pod", Kind::Pod, "p").await?;

        let mut bound = pod("bound", managed());
        bound["spec"]["nodeName"] = "nowhere".into();
        bound["spec"]["terminationGracePeriodSeconds"] = 7.into();
        s.create("a pod bound to a node", Kind::Pod, bound).await?;
        s.delete("DELETE of a scheduled pod", Kind::Pod, "bound", json!({}))
            .await?;
        s.get("GET of the terminating pod", Kind::Pod, "bound")
            .await?;
        s.delete(
            "DELETE of the terminating pod",
            Kind::Pod,
            "bound",
            json!({}),
        )
        .await?;
        let shorter = json!({"gracePeriodSeconds": 3});
        s.delete(
            "DELETE with a shorter grace period",
            Kind::Pod,
            "bound",
            shorter,
        )
        .await?;
        let now = json!({"gracePeriodSeconds": 0});
        s.delete("DELETE with no grace period", Kind::Pod, "bound", now)
            .await?;
        s.get("GET of the deleted pod", Kind::Pod, "bound").await?;

        let mut done = pod("done", managed());
        done["spec"]["nodeName"] = "nowhere".into();
        s.create("another pod bound to a node", Kind::Pod, done)
            .await?;
        s.patch_status(
            "it succeeded",
            Kind::Pod,
            "done",
            json!({"status": {"phase": "Succeeded"}}),
        )
        .await?;
        s.delete(
            "DELETE of a pod that finished",
            Kind::Pod,
            "done",
            json!({}),
        )
        .await?;
        s.get("GET of the deleted pod", Kind::Pod, "done").await?;

        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.delete("DELETE of a PodSet", Kind::PodSet, "web", json!({}))
            .await?;
        s.create("an At", Kind::At, at("job")).await?;
        let wrong = json!({"preconditions": {"uid": WRONG_UID}});
        s.delete(
            "DELETE of an At with a UID that does not match",
            Kind::At,
            "job",
            wrong,
        )
        .await?;
        s.delete("DELETE of an At", Kind::At, "job", json!({}))
            .await?;
        s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        s.delete("DELETE of a Lease", Kind::Lease, "l", json!({}))
            .await?;
        Ok(s)
    })
    .await
}
