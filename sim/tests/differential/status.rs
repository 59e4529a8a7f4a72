//! Sequence 3: the status subresource.

use anyhow::Result;
use http::Method;
use serde_json::json;

use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{at, managed, pod, podset};
use crate::side::model_side;

/// 3. The status subresource of PodSets, Ats and pods, and `metadata.generation`.
#[tokio::test]
async fn status() -> Result<()> {
    differential("status", model_side, |mut s| async move {
        let mut with_status = podset("web", 2);
        with_status["status"] = json!({"availableReplicas": 2});
        s.create("a PodSet, with a status", Kind::PodSet, with_status)
            .await?;
        let status = json!({"status": {"availableReplicas": 1, "podNames": ["a"]},
            "spec": {"replicas": 5}});
        s.patch_status(
            "PATCH of its status, and its spec",
            Kind::PodSet,
            "web",
            status,
        )
        .await?;
        let spec = json!({"spec": {"replicas": 3}, "status": {"availableReplicas": 9}});
        s.patch(
            "PATCH of its spec, and its status",
            Kind::PodSet,
            "web",
            spec,
        )
        .await?;
        let labels = json!({"metadata": {"labels": {"tier": "front"}}});
        s.patch("PATCH of its labels", Kind::PodSet, "web", labels)
            .await?;
        let current = s.get("GET", Kind::PodSet, "web").await?;
        let mut stale = current.clone();
        stale["metadata"]["resourceVersion"] = "1".into();
        stale["status"]["availableReplicas"] = 0.into();
        let path = format!("{}/status", s.path(Kind::PodSet, Some("web")));
        s.call(
            "PUT of its status over a stale resourceVersion",
            Method::PUT,
            &path,
            Some(stale),
        )
        .await?;
        let mut replaced = current.clone();
        replaced["status"] = json!({"availableReplicas": 3, "podNames": ["a", "b", "c"]});
        replaced["spec"]["replicas"] = 4.into();
        s.call("PUT of its status", Method::PUT, &path, Some(replaced))
            .await?;
        s.patch_status(
            "PATCH of the status of a missing PodSet",
            Kind::PodSet,
            "gone",
            json!({"status": {}}),
        )
        .await?;

        s.create("an At", Kind::At, at("job")).await?;
        let phase = json!({"status": {"phase": "PENDING"}});
        s.patch_status("PATCH of an At's status", Kind::At, "job", phase)
            .await?;
        let main = json!({"status": {"phase": "DONE"}});
        s.patch(
            "PATCH of an At's status through the main resource",
            Kind::At,
            "job",
            main,
        )
        .await?;

        s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        let running = json!({"status": {"phase": "Running"}});
        s.patch_status("PATCH of a pod's status", Kind::Pod, "p", running)
            .await?;
        let main = json!({"status": {"phase": "Failed"}, "metadata": {"labels": {"x": "y"}}});
        s.patch(
            "PATCH of a pod's status through the main resource",
            Kind::Pod,
            "p",
            main,
        )
        .await?;
        let deadline = json!({"spec": {"activeDeadlineSeconds": 600}});
        s.patch("PATCH of a pod's spec", Kind::Pod, "p", deadline)
            .await?;
        Ok(s)
    })
    .await
}
