//! A real node's configuration files and flags: pure functions of its paths and addresses.

use std::net::Ipv4Addr;
use std::path::Path;

use super::network::Bridge;

/// The sandbox image every pod starts with; the node's registry serves it (see `registry`).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.2";

/// containerd's configuration: everything under `dir`, so any number of nodes coexist, and
/// `docker.io` / `registry.k8s.io` pulled from the cluster's own registry.
pub fn containerd_toml(dir: &Path, registry: &str) -> String {
    let d = dir.display();
    let mirror = |host: &str| {
        format!(
            "[plugins.\"io.containerd.grpc.v1.cri\".registry.mirrors.\"{host}\"]\n  endpoint = [\"http://{registry}\"]\n"
        )
    };
    format!(
        r#"version = 2
root = "{d}/containerd/root"
state = "{d}/containerd/state"
disabled_plugins = ["io.containerd.snapshotter.v1.aufs", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]

[grpc]
  address = "{d}/containerd.sock"
[ttrpc]
  address = "{d}/containerd.sock.ttrpc"
[debug]
  address = ""
[metrics]
  address = ""

[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/containerd/opt"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{PAUSE_IMAGE}"
  # These machines lack CAP_SYS_RESOURCE: a sandbox asking for oom_score_adj -998 fails.
  restrict_oom_score_adj = true
  # Network namespaces under the node's own state dir, so teardown finds exactly its own.
  netns_mounts_under_state_dir = true
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"

[plugins."io.containerd.grpc.v1.cri".cni]
  bin_dir = "/usr/lib/cni"
  conf_dir = "{d}/cni/net.d"

{docker}{k8s}"#,
        docker = mirror("docker.io"),
        k8s = mirror("registry.k8s.io"),
    )
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

/// The kubelet's flags. Its name and address is a loopback IP of its own (the API server
/// reaches it there for logs and exec; nothing listens beyond loopback), its clients are
/// authenticated by the cluster CA and authorized by the API server (Webhook).
pub fn kubelet_args(dir: &Path, address: Ipv4Addr, kubeconfig: &Path, ca: &Path) -> Vec<String> {
    let d = dir.display();
    let mut args: Vec<String> = vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        format!("--hostname-override={address}"),
        format!("--address={address}"),
        format!("--healthz-bind-address={address}"),
        format!("--root-dir={d}/kubelet"),
        format!("--cert-dir={d}/kubelet-pki"),
        format!("--volume-plugin-dir={d}/volume-plugins"),
        format!("--container-runtime-endpoint=unix://{d}/containerd.sock"),
        format!("--client-ca-file={}", ca.display()),
        format!("--pod-infra-container-image={PAUSE_IMAGE}"),
        "--node-labels=podset-testenv/node=real".into(),
    ];
    args.extend(
        [
            "--container-runtime=remote",
            "--anonymous-auth=false",
            "--authorization-mode=Webhook",
            "--fail-swap-on=false",
            "--cgroup-driver=cgroupfs",
            "--cgroups-per-qos=false",
            "--enforce-node-allocatable=",
            "--read-only-port=0",
            "--make-iptables-util-chains=false",
            "--eviction-hard=",
            "--image-gc-high-threshold=100",
            "--serialize-image-pulls=false",
            "--v=1",
        ]
        .map(String::from),
    );
    args
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
        let toml = containerd_toml(Path::new("/n/x"), "127.0.0.1:5001");
        for line in toml.lines().filter(|l| l.contains('/') && l.contains('=')) {
            assert!(
                line.contains("\"/n/x/")
                    || line.contains("/usr/lib/cni")
                    || line.contains("http://127.0.0.1:5001")
                    || line.contains(PAUSE_IMAGE),
                "path outside the node dir: {line}"
            );
        }
        assert!(toml.contains("restrict_oom_score_adj = true"));
        assert_eq!(
            toml.matches("endpoint = [\"http://127.0.0.1:5001\"]")
                .count(),
            2
        );
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
