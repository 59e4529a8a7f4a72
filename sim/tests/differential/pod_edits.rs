//! Sequence 9: what others do to the operator's pods (the simulation's `Disown`,
//! `AnnotatePod`, `EvictPod` and `UngateAtPod`): the controller reference taken off or
//! handed to another PodSet, an annotation, a `DisruptionTarget` condition beside the
//! others, a scheduling gate taken off (and one added, which only deletion allows).

use anyhow::Result;
use serde_json::{Value, json};

use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{managed, pod, podset};
use crate::side::model_side;

#[tokio::test]
async fn pod_edits() -> Result<()> {
    differential("pod-edits", model_side, |mut s| async move {
        let a = s.create("a PodSet", Kind::PodSet, podset("a", 1)).await?;
        let b = s
            .create("another PodSet", Kind::PodSet, podset("b", 1))
            .await?;
        let controller = |ps: &Value, name: &str| {
            json!([{"apiVersion": "app.example.com/v1beta1", "kind": "PodSet", "name": name,
                "uid": ps["metadata"]["uid"], "controller": true, "blockOwnerDeletion": true}])
        };
        let mut owned = pod("owned", managed());
        owned["metadata"]["ownerReferences"] = controller(&a, "a");
        s.create("a pod PodSet a controls", Kind::Pod, owned)
            .await?;
        let handed = json!({"metadata": {"ownerReferences": controller(&b, "b")}});
        s.patch("handed to PodSet b", Kind::Pod, "owned", handed)
            .await?;
        let cost = json!({"metadata": {"annotations":
            {"controller.kubernetes.io/pod-deletion-cost": "-3"}}});
        s.patch("its deletion cost set", Kind::Pod, "owned", cost)
            .await?;
        let disruption = json!({"status": {"conditions": [{"type": "DisruptionTarget",
            "status": "True", "reason": "EvictionByEvictionAPI",
            "message": "Eviction API: evicting", "lastTransitionTime": "2030-01-01T00:00:00Z"}]}});
        s.patch_status(
            "a DisruptionTarget condition",
            Kind::Pod,
            "owned",
            disruption,
        )
        .await?;
        let disowned = json!({"metadata": {"ownerReferences": null}});
        s.patch("its controller taken off", Kind::Pod, "owned", disowned)
            .await?;
        s.get("GET of it", Kind::Pod, "owned").await?;
        let mut gated = pod("gated", managed());
        gated["spec"]["schedulingGates"] = json!([{"name": "example.com/a"}]);
        s.create("a gated pod", Kind::Pod, gated).await?;
        let more = json!({"spec": {"schedulingGates":
            [{"name": "example.com/a"}, {"name": "example.com/b"}]}});
        s.patch("a gate added", Kind::Pod, "gated", more).await?;
        let none = json!({"spec": {"schedulingGates": null}});
        s.patch("its gate taken off", Kind::Pod, "gated", none)
            .await?;
        Ok(s)
    })
    .await
}
