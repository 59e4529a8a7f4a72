//! Real nodes run real containers: busybox from the cluster's own registry, logs and exec
//! through the API server, hollow nodes kept for the pods that ask for them, and a teardown
//! that leaves no process, mount or interface behind.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, LogParams, PostParams};
use testenv::{Cluster, Options, poll, poll_some};

async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("real-and-hollow", || {
        Options::default().with_nodes(1).with_real_nodes(1)
    })
    .await
}

fn pod(name: &str, spec: serde_json::Value) -> Result<Pod> {
    Ok(serde_json::from_value(
        serde_json::json!({"metadata": {"name": name}, "spec": spec}),
    )?)
}

/// Waits for the pod to reach `phase`; returns the node it ran on.
async fn wait_phase(pods: &Api<Pod>, name: &str, phase: &str) -> Result<String> {
    poll_some(
        Duration::from_secs(90),
        &format!("pod {name} {phase}"),
        || async {
            let p = pods.get(name).await?;
            let node = p.spec.and_then(|s| s.node_name).unwrap_or_default();
            let now = p.status.and_then(|s| s.phase).unwrap_or_default();
            ensure!(now != "Failed" || phase == "Failed", "pod {name} failed");
            Ok((now == phase).then_some(node))
        },
    )
    .await
}

#[tokio::test]
async fn busybox_runs_and_its_log_reaches_the_api() -> Result<()> {
    let cluster = cluster().await?;
    cluster.create_namespace("yay").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "yay");
    let spec = serde_json::json!({"restartPolicy": "Never", "containers": [{
        "name": "c", "image": "busybox", "command": ["sh", "-c", "echo YAY"]}]});
    pods.create(&PostParams::default(), &pod("yay", spec)?)
        .await?;
    let node = wait_phase(&pods, "yay", "Succeeded").await?;
    assert_eq!(cluster.real_nodes(), vec![node]);
    assert_eq!(pods.logs("yay", &LogParams::default()).await?, "YAY\n");
    Ok(())
}

#[tokio::test]
async fn only_pods_that_tolerate_it_land_on_a_hollow_node() -> Result<()> {
    let cluster = cluster().await?;
    cluster.create_namespace("placement").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "placement");
    let sleeper = |extra: serde_json::Value| {
        let mut spec = serde_json::json!({"containers": [{
            "name": "c", "image": "busybox", "command": ["sleep", "3600"]}]});
        spec.as_object_mut()
            .expect("object")
            .extend(extra.as_object().cloned().unwrap_or_default());
        spec
    };
    let hollow = serde_json::json!({
        "tolerations": [{"key": testenv::HOLLOW_TAINT, "operator": "Exists"}],
        "nodeSelector": {"kubernetes.io/hostname": "hollow-node-0"},
    });
    pods.create(&PostParams::default(), &pod("hollow", sleeper(hollow))?)
        .await?;
    for i in 0..4 {
        pods.create(
            &PostParams::default(),
            &pod(&format!("real-{i}"), sleeper(serde_json::json!({})))?,
        )
        .await?;
    }
    assert_eq!(
        wait_phase(&pods, "hollow", "Running").await?,
        "hollow-node-0"
    );
    for i in 0..4 {
        let node = wait_phase(&pods, &format!("real-{i}"), "Running").await?;
        assert_eq!(cluster.real_nodes(), vec![node]);
    }
    Ok(())
}

/// A node torn down with a pod still running (whose PID 1 ignores SIGTERM) leaves nothing; and
/// while they run, neither a real kubelet nor a hollow one puts anything in the host's netfilter
/// tables (kubelets add KUBE-FIREWALL to INPUT and OUTPUT, and more, and never remove them) or
/// in its `/tmp` (kubemark's scratch directories).
#[tokio::test]
async fn a_dropped_cluster_leaves_no_process_mount_interface_or_netfilter_rule() -> Result<()> {
    let cluster = Cluster::start(Options::default().with_nodes(1).with_real_nodes(1)).await?;
    cluster.create_namespace("left").await?;
    let pods: Api<Pod> = Api::namespaced(cluster.client().await?, "left");
    let spec = serde_json::json!({"containers": [{
        "name": "c", "image": "busybox", "command": ["sleep", "3600"]}]});
    pods.create(&PostParams::default(), &pod("stays", spec)?)
        .await?;
    wait_phase(&pods, "stays", "Running").await?;
    assert_eq!(netfilter_rules_of_kubelets()?, Vec::<String>::new());
    assert_eq!(kubemark_scratch_in_tmp()?, Vec::<String>::new());
    let dir = cluster.dir().to_string_lossy().into_owned();
    let socket = format!("{dir}/node-0/containerd.sock");
    ensure!(
        !testenv::node::cleanup::processes_with_arg(&socket).is_empty(),
        "no shim found for {socket}"
    );
    let bridge = bridges_of(&dir)?;
    drop(cluster);
    poll(
        Duration::from_secs(10),
        "no shim, mount or bridge left",
        || async {
            let mounts = std::fs::read_to_string("/proc/self/mountinfo")?;
            let links = std::process::Command::new("ip")
                .args(["-o", "link"])
                .output()?;
            Ok(
                testenv::node::cleanup::processes_with_arg(&socket).is_empty()
                    && !mounts.contains(&dir)
                    && !String::from_utf8_lossy(&links.stdout).contains(&bridge),
            )
        },
    )
    .await
}

/// The lines of the host's iptables, ip6tables and nftables rulesets that name a KUBE- chain.
fn netfilter_rules_of_kubelets() -> Result<Vec<String>> {
    let mut found = Vec::new();
    for (program, args) in [
        ("iptables-save", &[][..]),
        ("ip6tables-save", &[][..]),
        ("nft", &["list", "ruleset"][..]),
    ] {
        let Ok(out) = std::process::Command::new(program).args(args).output() else {
            continue; // not installed: nothing can have been added through it
        };
        found.extend(
            String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter(|l| l.contains("KUBE-"))
                .map(|l| format!("{program}: {l}")),
        );
    }
    Ok(found)
}

fn kubemark_scratch_in_tmp() -> Result<Vec<String>> {
    Ok(std::fs::read_dir("/tmp")?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("hollow-kubelet."))
        .collect())
}

/// The bridge of the cluster's first node, from its CNI configuration.
fn bridges_of(dir: &str) -> Result<String> {
    let conf =
        std::fs::read_to_string(format!("{dir}/node-0/cni/net.d/10-podset-testenv.conflist"))?;
    let conf: serde_json::Value = serde_json::from_str(&conf)?;
    Ok(conf["plugins"][0]["bridge"]
        .as_str()
        .unwrap_or_default()
        .to_string())
}
