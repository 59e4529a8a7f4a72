//! The local control plane is real: pods schedule and run on hollow nodes (many at once), the garbage
//! collector deletes dependents, and RBAC refuses an identity without permission.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams};
use kube::{Resource, ResourceExt};
use testenv::{Cluster, Options, client_from_kubeconfig, poll};

async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("two-nodes", || Options::default().with_nodes(2)).await
}

#[tokio::test]
async fn pods_schedule_and_run_on_hollow_nodes() -> Result<()> {
    let cluster = cluster().await?;
    cluster.create_namespace("run-pods").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "run-pods");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "sleeper"},
        "spec": {"containers": [{"name": "c", "image": "busybox", "command": ["sleep", "3600"]}]}
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    poll(
        Duration::from_secs(60),
        "pod Running on a hollow node",
        || async {
            let p = pods.get("sleeper").await?;
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            let phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            Ok(node.starts_with("hollow-node-") && phase == "Running")
        },
    )
    .await
}

/// Kubemark 1.20's hollow kubelet raced on its fake filesystem when it started several
/// containers at once, and died (`fatal error: concurrent map writes`); we patched it then.
/// The kubemark we build now is unpatched: many pods bound to one node at the same moment all
/// go Running only if it survives them.
#[tokio::test]
async fn a_hollow_node_survives_many_pods_starting_at_once() -> Result<()> {
    const PODS: usize = 30;
    let cluster = cluster().await?;
    cluster.create_namespace("burst").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "burst");
    let creates = (0..PODS).map(|i| {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("burst-{i}")},
            "spec": {"nodeName": "hollow-node-0", "containers": [{"name": "c", "image": "busybox"}]},
        }))
        .expect("a valid pod");
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod).await }
    });
    futures::future::try_join_all(creates).await?;
    poll(
        Duration::from_secs(90),
        &format!("all {PODS} pods Running on hollow-node-0"),
        || async {
            let running = pods
                .list(&Default::default())
                .await?
                .items
                .iter()
                .filter(|p| p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running"))
                .count();
            Ok(running == PODS)
        },
    )
    .await
}

#[tokio::test]
async fn garbage_collector_deletes_dependents() -> Result<()> {
    let cluster = cluster().await?;
    cluster.create_namespace("gc").await?;
    let cms: Api<ConfigMap> = Api::namespaced(cluster.client().await?, "gc");
    let owner = cms
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await?;
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            name: Some("dependent".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: owner.name_any(),
                uid: owner.uid().unwrap(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &dependent).await?;
    cms.delete("owner", &DeleteParams::default()).await?;
    poll(
        Duration::from_secs(90),
        "the dependent to be garbage-collected",
        || async { Ok(cms.get_opt("dependent").await?.is_none()) },
    )
    .await
}

#[tokio::test]
async fn rbac_refuses_an_identity_without_permission() -> Result<()> {
    let cluster = cluster().await?;
    cluster.create_namespace("rbac").await?;
    let sas: Api<ServiceAccount> = Api::namespaced(cluster.client().await?, "rbac");
    let sa = ServiceAccount {
        metadata: ObjectMeta {
            name: Some("nobody".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    sas.create(&PostParams::default(), &sa).await?;
    let kubeconfig = cluster.service_account_kubeconfig("rbac", "nobody").await?;
    let as_nobody = client_from_kubeconfig(&kubeconfig).await?;
    let secrets: Api<Secret> = Api::namespaced(as_nobody, "rbac");
    match secrets.list(&Default::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains("system:serviceaccount:rbac:nobody"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
    // The admin identity, by contrast, may.
    let admin: Api<Secret> = Api::namespaced(cluster.client().await?, "rbac");
    admin.list(&Default::default()).await?;
    let _ = Secret::kind(&());
    Ok(())
}
