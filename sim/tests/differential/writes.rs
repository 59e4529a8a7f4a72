//! Sequences 1 and 2: creates, and reads and writes under optimistic concurrency.

use anyhow::{Context as _, Result, ensure};
use http::Method;
use kube::api::WatchParams;
use serde_json::{Value, json};

use podset_sim::model::resource::Kind;

use crate::differential;
use crate::objects::{lease, managed, pod, podset};
use crate::side::{model_side, name_of, version};

/// The API server's alphabet for `generateName`.
const ALPHABET: &str = "bcdfghjklmnpqrstvwxz2456789";

/// 1. Creates: `generateName`, a name taken, a namespace that does not exist.
#[tokio::test]
async fn creates() -> Result<()> {
    differential("creates", model_side, |mut s| async move {
        let generated = s
            .create(
                "generateName",
                Kind::PodSet,
                json!({"apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
                    "metadata": {"generateName": "web-"}, "spec": {"replicas": 1}}),
            )
            .await?;
        let name = name_of(&generated);
        let suffix = name.strip_prefix("web-").context("the prefix")?;
        ensure!(
            suffix.len() == 5 && suffix.chars().all(|c| ALPHABET.contains(c)),
            "generated name {name}"
        );
        s.alias(&name, "web-<5 generated>");
        let long = "p".repeat(70);
        let cut = s
            .create(
                "generateName, a prefix too long for a label",
                Kind::Pod,
                json!({"metadata": {"generateName": long},
                    "spec": {"containers": [{"name": "c", "image": "busybox"}]}}),
            )
            .await?;
        let name = name_of(&cut);
        ensure!(name.len() == 63, "generated name {name}");
        s.alias(&name, "p x 58 + <5 generated>");
        s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        s.create("the pod again", Kind::Pod, pod("p", managed()))
            .await?;
        s.create("a pod without a name", Kind::Pod, pod("", managed()))
            .await?;
        s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.create("the PodSet again", Kind::PodSet, podset("web", 1))
            .await?;
        let mut empty = podset("empty", 1);
        empty["metadata"]["labels"] = json!({});
        empty["metadata"]["annotations"] = json!({});
        empty["metadata"]["finalizers"] = json!([]);
        s.create("a PodSet with empty labels", Kind::PodSet, empty)
            .await?;
        let mut empty = pod("empty", json!({}));
        empty["metadata"]["annotations"] = json!({});
        empty["metadata"]["ownerReferences"] = json!([]);
        s.create("a pod with empty labels", Kind::Pod, empty)
            .await?;
        let mut versioned = pod("versioned", managed());
        versioned["metadata"]["resourceVersion"] = "5".into();
        s.create("a pod with a resourceVersion", Kind::Pod, versioned)
            .await?;
        let mut astray = pod("astray", managed());
        astray["metadata"]["namespace"] = "elsewhere".into();
        s.create("a pod of another namespace", Kind::Pod, astray)
            .await?;
        let elsewhere = Kind::Pod.path(&format!("{}-missing", s.ns), None);
        s.call(
            "in a namespace that does not exist",
            Method::POST,
            &elsewhere,
            Some(pod("p", managed())),
        )
        .await?;
        Ok(s)
    })
    .await
}

/// 2. Reads and writes under optimistic concurrency. (Unlike pods, Leases and custom
/// resources refuse a PUT that names no resourceVersion.)
#[tokio::test]
async fn concurrency() -> Result<()> {
    differential("concurrency", model_side, |mut s| async move {
        s.get("GET of a missing pod", Kind::Pod, "nobody").await?;
        let first = s.create("a Lease", Kind::Lease, lease("l", "a")).await?;
        let mut watch = s
            .watch(
                Kind::Lease,
                &WatchParams::default(),
                &version(&first).to_string(),
            )
            .await?;
        let mut second = first.clone();
        second["spec"]["holderIdentity"] = "b".into();
        s.put("PUT over its resourceVersion", Kind::Lease, "l", second)
            .await?;
        let mut stale = first.clone();
        stale["spec"]["holderIdentity"] = "c".into();
        s.put("PUT over a stale resourceVersion", Kind::Lease, "l", stale)
            .await?;
        s.put(
            "PUT of a Lease without a resourceVersion",
            Kind::Lease,
            "l",
            lease("l", "c"),
        )
        .await?;
        let mut empty = lease("l", "c");
        empty["metadata"]["resourceVersion"] = "".into();
        s.put("PUT with an empty resourceVersion", Kind::Lease, "l", empty)
            .await?;
        let stale = json!({"metadata": {"resourceVersion": first["metadata"]["resourceVersion"]},
            "spec": {"holderIdentity": "c"}});
        s.patch(
            "PATCH with a stale resourceVersion",
            Kind::Lease,
            "l",
            stale,
        )
        .await?;
        let change = json!({"spec": {"holderIdentity": "d"}});
        let changed = s.patch("PATCH", Kind::Lease, "l", change.clone()).await?;
        let same = s
            .patch("PATCH that changes nothing", Kind::Lease, "l", change)
            .await?;
        ensure!(
            version(&same) == version(&changed),
            "a PATCH that changed nothing wrote"
        );
        s.patch(
            "PATCH again",
            Kind::Lease,
            "l",
            json!({"spec": {"holderIdentity": "e"}}),
        )
        .await?;
        s.events("each change once, and nothing else", &mut watch, 3)
            .await?;
        let web = s.create("a PodSet", Kind::PodSet, podset("web", 1)).await?;
        s.put(
            "PUT of a PodSet without a resourceVersion",
            Kind::PodSet,
            "web",
            podset("web", 2),
        )
        .await?;
        // Their spec is immutable but for a few fields, which the model does not enforce: the
        // operator never updates a pod (the simulation's kubelet binds pods with a PATCH).
        let mut p = s.create("a pod", Kind::Pod, pod("p", managed())).await?;
        p["metadata"]["labels"] = json!({"x": "y"});
        p["metadata"]
            .as_object_mut()
            .map(|m| m.remove("resourceVersion"));
        s.put("PUT of a pod without a resourceVersion", Kind::Pod, "p", p)
            .await?;
        // A pod released from its owner (issue 45, fault 6): a JSON patch whose tests pass,
        // one whose test fails, one that removes what is not there. The owner exists: a
        // dangling one would race the real garbage collector.
        let web_uid = web["metadata"]["uid"].clone();
        let mut owned = pod("owned", json!({"x": "y"}));
        owned["metadata"]["ownerReferences"] = json!([{"apiVersion": "app.example.com/v1beta1",
            "kind": "PodSet", "name": "web", "uid": web_uid, "controller": true}]);
        let owned = s.create("a pod with an owner", Kind::Pod, owned).await?;
        let release = |uid: &Value| {
            json!([
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": "/metadata/ownerReferences/0/uid", "value": web_uid},
                {"op": "remove", "path": "/metadata/ownerReferences/0"},
            ])
        };
        let wrong = json!("00000000-0000-4000-8000-0000000000ff");
        s.patch(
            "JSON patch, a test failing",
            Kind::Pod,
            "owned",
            release(&wrong),
        )
        .await?;
        let uid = owned["metadata"]["uid"].clone();
        s.patch("JSON patch", Kind::Pod, "owned", release(&uid))
            .await?;
        s.patch(
            "JSON patch, the path gone",
            Kind::Pod,
            "owned",
            release(&uid),
        )
        .await?;
        Ok(s)
    })
    .await
}
