//! A real node's configuration files and flags: pure functions of its paths and addresses.

use std::net::Ipv4Addr;
use std::path::Path;

use super::network::Bridge;
use crate::versions;

/// containerd's configuration: everything under `dir`, so any number of nodes coexist, and
/// images pulled through `dir/certs.d` (see [`registry_hosts`]).
pub fn containerd_toml(dir: &Path) -> String {
    let d = dir.display();
    format!(
        r#"version = 3
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.nri.v1.nri"]

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.cri.v1.images"]
  [plugins."io.containerd.cri.v1.images".pinned_images]
    sandbox = "{pause}"
  [plugins."io.containerd.cri.v1.images".registry]
    config_path = "{d}/certs.d"

[plugins."io.containerd.transfer.v1.local"]
  config_path = "{d}/certs.d"

[plugins."io.containerd.cri.v1.runtime"]
  # These machines lack CAP_SYS_RESOURCE: a sandbox asking for oom_score_adj -998 fails.
  restrict_oom_score_adj = true
  # Network namespaces under the node's own state dir, so teardown finds exactly its own.
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.cri.v1.runtime".cni]
    bin_dirs = ["/usr/lib/cni"]
    conf_dir = "{d}/cni/net.d"

[plugins."io.containerd.grpc.v1.cri"]
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
"#,
        pause = versions::pause_image(),
    )
}

/// The registry hosts containerd resolves through the cluster's own registry, each with its
/// `hosts.toml` (`certs.d/<host>/hosts.toml`): `docker.io` and `registry.k8s.io` (pods name
/// images as on any cluster: `image: busybox`), and `localhost:<port>` over plain HTTP.
pub fn registry_hosts(registry: &str) -> Vec<(String, String)> {
    let port = registry.rsplit(':').next().unwrap_or_default();
    let mirror = format!(
        "[host.\"http://{registry}\"]\n  capabilities = [\"pull\", \"resolve\"]\n  skip_verify = true\n"
    );
    ["docker.io", "registry.k8s.io", &format!("localhost:{port}")]
        .map(|host| {
            (
                host.to_string(),
                format!("server = \"http://{registry}\"\n{mirror}"),
            )
        })
        .into()
}

/// The CNI network: the node's bridge, host-local addresses from its subnet, a default route
/// through the gateway (where the API server listens for pods).
pub fn cni_conflist(bridge: &Bridge, ipam_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "0.4.0",
        "name": "podset-testenv",
        "plugins": [{
            "type": "bridge",
            "bridge": bridge.name,
            "isGateway": true,
            "ipMasq": false,
            "hairpinMode": true,
            "ipam": {
                "type": "host-local",
                "ranges": [[{"subnet": bridge.cidr(), "gateway": bridge.gateway().to_string()}]],
                "routes": [{"dst": "0.0.0.0/0"}],
                "dataDir": ipam_dir,
            }
        }]
    })
    .to_string()
}

/// The kubelet's configuration file. Its address is a loopback IP of its own (the API server
/// reaches it there for logs and exec; nothing listens beyond loopback), its clients are
/// authenticated by the cluster CA and authorized by the API server (Webhook). Pod logs go to
/// the node's own directory: two nodes sharing `/var/log/pods` would delete each other's.
pub fn kubelet_config(dir: &Path, address: Ipv4Addr, ca: &Path) -> String {
    serde_json::json!({
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": address.to_string(),
        "healthzBindAddress": address.to_string(),
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": false},
            "webhook": {"enabled": true},
            "x509": {"clientCAFile": ca},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": format!("unix://{}/containerd.sock", dir.display()),
        "podLogsDir": dir.join("pod-logs"),
        "volumePluginDir": dir.join("volume-plugins"),
        // Our hosts run cgroup v1, which kubelet 1.35+ refuses unless told (KEP-5573).
        "failCgroupV1": false,
        "cgroupDriver": "cgroupfs",
        "cgroupsPerQOS": false,
        "enforceNodeAllocatable": [],
        "failSwapOn": false,
        // A test machine's disk and memory are the tests' business, not eviction's.
        "evictionHard": {},
        "imageGCHighThresholdPercent": 100,
        "serializeImagePulls": false,
    })
    .to_string()
}

/// The kubelet's flags: what its configuration file cannot say.
pub fn kubelet_args(dir: &Path, address: Ipv4Addr, kubeconfig: &Path) -> Vec<String> {
    let d = dir.display();
    vec![
        format!("--config={d}/kubelet.json"),
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={address}"),
        format!("--root-dir={d}/kubelet"),
        format!("--cert-dir={d}/kubelet-pki"),
        "--node-labels=podset-testenv/node=real".into(),
        "--v=1".into(),
    ]
}

/// A kubeconfig with a client certificate (the kubelet's `system:node:<name>`).
pub fn cert_kubeconfig(server: &str, ca: &Path, cert: &Path, key: &Path) -> String {
    format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: local\n  cluster:\n    server: {server}\n    certificate-authority: {ca}\nusers:\n- name: node\n  user:\n    client-certificate: {cert}\n    client-key: {key}\ncontexts:\n- name: local\n  context:\n    cluster: local\n    user: node\ncurrent-context: local\n",
        ca = ca.display(),
        cert = cert.display(),
        key = key.display(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn containerd_keeps_every_path_and_socket_under_the_node_dir() {
        let toml = containerd_toml(Path::new("/n/x"));
        for line in toml.lines().filter(|l| l.contains('/') && l.contains('=')) {
            assert!(
                line.contains("\"/n/x/")
                    || line.contains("/usr/lib/cni")
                    || line.contains(versions::pause_image()),
                "path outside the node dir: {line}"
            );
        }
        assert!(toml.contains("restrict_oom_score_adj = true"));
    }

    #[test]
    fn images_resolve_through_the_clusters_registry() {
        let hosts = registry_hosts("127.0.0.1:5001");
        let names: Vec<_> = hosts.iter().map(|(h, _)| h.as_str()).collect();
        assert_eq!(names, ["docker.io", "registry.k8s.io", "localhost:5001"]);
        for (_, toml) in hosts {
            assert!(
                toml.starts_with("server = \"http://127.0.0.1:5001\""),
                "{toml}"
            );
        }
    }

    #[test]
    fn the_kubelet_keeps_its_files_under_the_node_dir_and_runs_on_cgroup_v1() {
        let conf: serde_json::Value = serde_json::from_str(&kubelet_config(
            Path::new("/n/x"),
            Ipv4Addr::new(127, 3, 4, 5),
            Path::new("/ca.crt"),
        ))
        .unwrap();
        assert_eq!(conf["podLogsDir"], "/n/x/pod-logs");
        assert_eq!(
            conf["containerRuntimeEndpoint"],
            "unix:///n/x/containerd.sock"
        );
        assert_eq!(conf["address"], "127.3.4.5");
        assert_eq!(conf["failCgroupV1"], false);
    }

    #[test]
    fn cni_uses_the_nodes_bridge_and_subnet() {
        let b = Bridge {
            name: "pst0000beef".into(),
            subnet: Ipv4Addr::new(10, 70, 3, 0),
        };
        let conf: serde_json::Value =
            serde_json::from_str(&cni_conflist(&b, Path::new("/n/ipam"))).unwrap();
        let plugin = &conf["plugins"][0];
        assert_eq!(plugin["bridge"], "pst0000beef");
        assert_eq!(plugin["ipMasq"], false);
        assert_eq!(plugin["ipam"]["ranges"][0][0]["subnet"], "10.70.3.0/24");
        assert_eq!(plugin["ipam"]["ranges"][0][0]["gateway"], "10.70.3.1");
    }
}
