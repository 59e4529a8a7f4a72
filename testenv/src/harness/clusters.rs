//! Which control plane a test runs on: one shared by the test binary (with hollow nodes,
//! without nodes, or with a real node), or one of its own for a test that stops components.

use std::sync::Arc;

use anyhow::{Result, anyhow};

use super::TestNs;
use crate::{Cluster, Options};

/// The control plane shared by this test binary: scheduler and two hollow nodes, CRDs
/// installed before the garbage collector starts.
pub async fn cluster() -> Result<Arc<Cluster>> {
    crate::shared("two-nodes", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default().with_nodes(2)
    })
    .await
}

/// The control plane shared by this test binary, with neither scheduler nor nodes: pods stay
/// unscheduled, and a test plays the kubelet by writing their status (At runs must finish,
/// which hollow nodes never do).
pub async fn cluster_without_nodes() -> Result<Arc<Cluster>> {
    crate::shared("no-nodes", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default()
    })
    .await
}

/// The control plane shared by this test binary with one real node (kubelet, containerd,
/// runc): pods run real busybox containers, so commands really run and end.
pub async fn cluster_with_real_node() -> Result<Arc<Cluster>> {
    crate::shared("real-node", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default().with_real_nodes(1)
    })
    .await
}

/// A namespace on a control plane of the test's own, for a test that stops its components.
pub async fn own_cluster_ns(prefix: &str, apiserver_args: &[&str]) -> Result<TestNs> {
    let cluster = Cluster::start(Options {
        crds: Some(podset_operator::api::crds_yaml()),
        apiserver_args: apiserver_args.iter().map(|s| s.to_string()).collect(),
        ..Options::default()
    })
    .await?;
    TestNs::new_in(Arc::new(cluster), prefix).await
}

/// The cluster of `own_cluster_ns`: the namespace holds its only reference.
pub fn own_cluster(ns: &mut TestNs) -> Result<&mut Cluster> {
    Arc::get_mut(&mut ns.cluster).ok_or_else(|| anyhow!("the cluster is shared; cannot stop it"))
}
