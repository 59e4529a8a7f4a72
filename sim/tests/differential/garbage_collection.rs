//! Sequence 7: the garbage collector.

use anyhow::Result;
use serde_json::{Value, json};

use podset_sim::model::resource::Kind;

use crate::objects::{managed, pod, podset};
use crate::side::{name_of, world_side};
use crate::{WRONG_UID, differential};

/// 7. The garbage collector: a deleted PodSet's pods go, and so does a pod whose controller
/// does not exist. On the model's side this is the simulated world, whose kubelet also binds
/// and starts the pods (the real cluster has no node): only which pods are left is compared.
#[tokio::test]
async fn garbage_collection() -> Result<()> {
    differential("gc", world_side, |mut s| async move {
        let owner = s
            .create("a PodSet", Kind::PodSet, podset("owner", 2))
            .await?;
        let reference = |kind: &str, name: &str, uid: &Value| {
            json!([{"apiVersion": "app.example.com/v1beta1", "kind": kind, "name": name,
                "uid": uid, "controller": true, "blockOwnerDeletion": true}])
        };
        for name in ["owned-1", "owned-2"] {
            let mut owned = pod(name, managed());
            owned["metadata"]["ownerReferences"] =
                reference("PodSet", "owner", &owner["metadata"]["uid"]);
            s.create("a pod it controls", Kind::Pod, owned).await?;
        }
        let mut orphan = pod("orphan", managed());
        orphan["metadata"]["ownerReferences"] = reference("PodSet", "ghost", &json!(WRONG_UID));
        s.alias(WRONG_UID, "<a UID no object has>");
        s.create("a pod whose controller does not exist", Kind::Pod, orphan)
            .await?;
        s.create("a pod of nobody's", Kind::Pod, pod("free", json!({})))
            .await?;
        s.delete("DELETE of the PodSet", Kind::PodSet, "owner", json!({}))
            .await?;
        let names = |pods: &[Value]| pods.iter().map(name_of).collect::<Vec<_>>();
        s.until("the garbage collector", Kind::Pod, |pods| {
            names(pods) == ["free"]
        })
        .await?;
        Ok(s)
    })
    .await
}
