//! Sequence 5: lists.

use anyhow::Result;
use serde_json::json;

use podset_operator::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{at, managed, pod, podset};
use crate::side::model_side;

/// 5. Lists: their resourceVersion, label and field selectors, and the operator's paged
/// metadata list.
#[tokio::test]
async fn lists() -> Result<()> {
    differential("lists", model_side, |mut s| async move {
        s.create("a managed pod", Kind::Pod, pod("a", managed()))
            .await?;
        s.create(
            "a pod of someone else",
            Kind::Pod,
            pod("b", json!({"app": "b"})),
        )
        .await?;
        s.create("another managed pod", Kind::Pod, pod("x", managed()))
            .await?;
        s.list("every pod", Kind::Pod, "").await?;
        let managed = format!("labelSelector={MANAGED_BY_LABEL}%3D{MANAGED_BY_VALUE}");
        s.list("the managed pods", Kind::Pod, &managed).await?;
        s.list("pod x", Kind::Pod, "fieldSelector=metadata.name%3Dx")
            .await?;
        let both = format!("{managed}&fieldSelector=metadata.name%3Db");
        s.list("managed pod b: none", Kind::Pod, &both).await?;
        s.list("unmanaged pods", Kind::Pod, "labelSelector=app%3Db")
            .await?;
        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.create("an At", Kind::At, at("job")).await?;
        s.list("PodSets", Kind::PodSet, "").await?;
        s.list("Ats", Kind::At, "fieldSelector=metadata.name%3Djob")
            .await?;
        s.list("Leases: none", Kind::Lease, "").await?;
        let web = s.get("the PodSet", Kind::PodSet, "web").await?;
        let owned = json!({"apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
            "name": "web", "uid": web["metadata"]["uid"], "controller": true});
        let mut c = pod("c", crate::objects::managed());
        c["metadata"]["ownerReferences"] = json!([owned]);
        s.create("a managed pod the PodSet controls", Kind::Pod, c)
            .await?;
        let selector = format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}");
        s.list_metadata(
            "the managed pods' metadata, as the operator reads it",
            &selector,
        )
        .await?;
        Ok(s)
    })
    .await
}
