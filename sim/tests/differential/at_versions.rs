//! Sequence 11: what the simulation's v1beta1 Ats lean on. An At made at v1beta1 with what
//! v1alpha1 cannot say (a time zone, a template of two containers held by another
//! controller's gate, deadlines, a TTL), read and edited at v1alpha1 through the conversion
//! webhook (what is stored is what `conversion::convert` answers: the edit applied to the
//! saved spec), and one made at v1alpha1; then the At's gate taken off its pod as the operator
//! does it, a JSON patch that tests the pod's UID and the gate's name at its index, beside
//! another controller's gate, which it takes off in turn.

use anyhow::Result;
use http::Method;
use serde_json::{Value, json};

use podset_sim::model::resource::Kind;
use podset_sim::model::versions::AT_ALPHA;
use podset_sim::queue;

use crate::differential;
use crate::objects::{managed, pod};
use crate::side::{Side, model_side};

fn beta_at(name: &str) -> Value {
    json!({
        "apiVersion": Kind::At.api_version(), "kind": "At",
        "metadata": {"name": name},
        "spec": {
            // A local time Berlin's clocks skip.
            "schedule": "2030-03-31T02:30:00", "timeZone": "Europe/Berlin",
            "template": {"spec": {
                "schedulingGates": [{"name": queue::GATE}],
                "containers": [
                    {"name": "helper", "image": "busybox:1.37.0",
                        "command": ["sh", "-c", "sleep infinity"]},
                    {"name": "main", "command": ["sh", "-c", "sleep 5; echo YAY"]},
                ],
            }},
            "containerName": "main",
            "startDeadlineSeconds": 30, "activeDeadlineSeconds": 10,
            "ttlSecondsAfterFinished": 5,
        },
    })
}

/// Sends `method` for At `name` at v1alpha1.
async fn alpha(
    s: &mut Side,
    step: &str,
    method: Method,
    name: Option<&str>,
    body: Option<Value>,
) -> Result<Value> {
    let path = Kind::At.path_at(AT_ALPHA, &s.ns, name);
    s.call(step, method, &path, body).await
}

#[tokio::test]
async fn ats_at_both_versions() -> Result<()> {
    differential("at-versions", model_side, |mut s| async move {
        s.create("an At at v1beta1", Kind::At, beta_at("cron"))
            .await?;
        let get = Method::GET;
        alpha(&mut s, "read at v1alpha1", get, Some("cron"), None).await?;
        let command = json!({"spec": {"command": "echo EDITED"}});
        let patch = Method::PATCH;
        alpha(
            &mut s,
            "its command edited at v1alpha1",
            patch.clone(),
            Some("cron"),
            Some(command),
        )
        .await?;
        s.get("read at v1beta1: the rest kept", Kind::At, "cron")
            .await?;
        let schedule = json!({"spec": {"schedule": "2030-01-01T00:00:00Z"}});
        alpha(
            &mut s,
            "its schedule edited at v1alpha1",
            patch,
            Some("cron"),
            Some(schedule),
        )
        .await?;
        s.get("read at v1beta1: UTC, no zone", Kind::At, "cron")
            .await?;
        let book = json!({"apiVersion": AT_ALPHA, "kind": "At", "metadata": {"name": "job"},
            "spec": {"schedule": "2030-01-01T00:00:00Z", "command": "echo YAY"}});
        alpha(
            &mut s,
            "the book's At at v1alpha1",
            Method::POST,
            None,
            Some(book),
        )
        .await?;
        s.get("read at v1beta1", Kind::At, "job").await?;
        Ok(s)
    })
    .await
}

#[tokio::test]
async fn gates_taken_off_one_at_a_time() -> Result<()> {
    differential("gates", model_side, |mut s| async move {
        let mut gated = pod("gated", managed());
        gated["spec"]["schedulingGates"] = json!([{"name": queue::GATE},
            {"name": podset_operator::api::AT_GATE}]);
        let made = s.create("a pod with two gates", Kind::Pod, gated).await?;
        let uid = made["metadata"]["uid"].clone();
        let ungate = |index: usize, gate: &str| {
            json!([
                {"op": "test", "path": "/metadata/uid", "value": uid},
                {"op": "test", "path": format!("/spec/schedulingGates/{index}/name"), "value": gate},
                {"op": "remove", "path": format!("/spec/schedulingGates/{index}")},
            ])
        };
        let at_gate = podset_operator::api::AT_GATE;
        s.patch("the At's gate, tested at 1", Kind::Pod, "gated", ungate(1, at_gate))
            .await?;
        s.patch("again: no gate at 1", Kind::Pod, "gated", ungate(1, at_gate))
            .await?;
        s.patch("the wrong gate at 0", Kind::Pod, "gated", ungate(0, at_gate))
            .await?;
        s.patch("the queue's gate, the last", Kind::Pod, "gated", ungate(0, queue::GATE))
            .await?;
        Ok(s)
    })
    .await
}
