//! Sequence 6: watches.

use anyhow::{Result, ensure};
use futures::StreamExt;
use http::Method;
use kube::api::{WatchEvent, WatchParams};
use serde_json::json;

use podset_operator::api::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{lease, managed, pod};
use crate::side::{model_side, version};

/// 6. Watches: the events of each write, in order; a label selector's transitions; a
/// version too old; bookmarks.
#[tokio::test]
async fn watches() -> Result<()> {
    differential("watches", model_side, |mut s| async move {
        let first = s.create("a pod", Kind::Pod, pod("w", json!({}))).await?;
        let from = version(&first).to_string();
        let mut all = s.watch(Kind::Pod, &WatchParams::default(), &from).await?;
        let selected =
            WatchParams::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
        let mut selecting = s.watch(Kind::Pod, &selected, &from).await?;
        s.create("another pod", Kind::Pod, pod("v", json!({})))
            .await?;
        let label = json!({"metadata": {"labels": managed()}});
        s.patch("labelled", Kind::Pod, "w", label).await?;
        let unlabel = json!({"metadata": {"labels": {MANAGED_BY_LABEL: null}}});
        s.patch("unlabelled", Kind::Pod, "w", unlabel).await?;
        let label = json!({"metadata": {"labels": managed()}});
        s.patch("labelled again", Kind::Pod, "w", label).await?;
        let running = json!({"status": {"phase": "Running"}});
        s.patch_status("its status", Kind::Pod, "w", running)
            .await?;
        s.delete("deleted", Kind::Pod, "w", json!({})).await?;
        s.create("a third pod", Kind::Pod, pod("a", json!({})))
            .await?;
        s.events("every event", &mut all, 8).await?;
        s.events("the selected pods' events", &mut selecting, 6)
            .await?;

        let mut current = s.watch(Kind::Pod, &WatchParams::default(), "0").await?;
        s.events("a watch from 0: the pods there are", &mut current, 2)
            .await?;

        // A version older than the window of changes kept: an ERROR event carrying a 410,
        // after an HTTP 200. On the real server the window is its watch cache's, for each
        // resource, which keeps the changes since it started (and recent ones): PodSets' started
        // once their CRD was, after version 1, but pods' with the API server, at version 1, so
        // a watch of pods from 1 is not too old on a fresh cluster. (Nor has etcd compacted
        // anything yet: the API server asks it to every 5 minutes.) The model's store starts
        // its versions after 1000 (`FIRST_VERSION`).
        let mut gone = s.watch(Kind::PodSet, &WatchParams::default(), "1").await?;
        s.events("a watch from a version too old", &mut gone, 1)
            .await?;
        let after = gone.next().await;
        ensure!(
            after.is_none(),
            "the watch went on after its error: {after:?}"
        );
        let path = format!(
            "{}?watch=true&resourceVersion=1&timeoutSeconds=5",
            s.path(Kind::PodSet, None)
        );
        s.call("the same, as it answers", Method::GET, &path, None)
            .await?;

        // The real server sends a watch a BOOKMARK 2 s before its timeout (and every minute),
        // but only at a version past the watch's last event, once its watch cache has seen
        // one: a write of anything (a Lease), then a consistent read (a LIST), for which the
        // cache asks etcd how far it is. The model sends one whenever the simulation says, at
        // its current version even if the watch saw that one already: harmless to a client,
        // which only resumes from it.
        let bookmarks = WatchParams::default().timeout(4);
        let mut quiet = s.watch(Kind::Pod, &bookmarks, &from).await?;
        s.events("the events before the bookmark", &mut quiet, 8)
            .await?;
        let written = s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        s.list("the pods", Kind::Pod, "").await?;
        s.bookmark();
        let bookmark = quiet.next().await.transpose()?;
        if let Some(WatchEvent::Bookmark(b)) = &bookmark {
            let at: u64 = b.metadata.resource_version.parse()?;
            ensure!(
                at >= version(&written),
                "a bookmark at {at}, before the Lease"
            );
        }
        s.record_optional(
            "a bookmark, if one came in time",
            bookmark.map(|b| {
                let mut b = serde_json::to_value(b).expect("JSON");
                b["object"]["metadata"]["resourceVersion"] = "<at least the Lease's>".into();
                b
            }),
        );
        Ok(s)
    })
    .await
}
