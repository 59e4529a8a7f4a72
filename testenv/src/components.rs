//! A cluster's control-plane processes (etcd, kube-apiserver, kube-controller-manager,
//! kube-scheduler) and kubemark hollow nodes: their flags, start-up and restarts.

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Result, anyhow, bail};

use crate::process::Process;
use crate::{Cluster, HOLLOW_TAINT, Options, Root, free_port, node, versions};

impl Cluster {
    pub(crate) fn start_etcd(&mut self) -> Result<()> {
        let peer = free_port()?;
        // A throwaway cluster keeps etcd on tmpfs: fsync latency, not CPU, bounds the apiserver
        // here. A fixed directory (make cluster-up) keeps its data across restarts.
        let data = match (&self.root, Path::new("/dev/shm").is_dir()) {
            (Root::Temp(_), true) => tempfile::Builder::new()
                .prefix("podset-testenv-etcd-")
                .tempdir_in("/dev/shm")?
                .keep(),
            _ => self.dir().join("etcd"),
        };
        std::fs::write(
            self.dir().join("etcd-data-dir"),
            data.to_string_lossy().as_bytes(),
        )?;
        let client_url = format!("http://127.0.0.1:{}", self.etcd_port);
        let peer_url = format!("http://127.0.0.1:{peer}");
        let args = vec![
            format!("--data-dir={}", data.display()),
            format!("--listen-client-urls={client_url}"),
            format!("--advertise-client-urls={client_url}"),
            format!("--listen-peer-urls={peer_url}"),
            format!("--initial-advertise-peer-urls={peer_url}"),
            format!("--initial-cluster=default={peer_url}"),
            "--log-level=warn".into(),
            "--quota-backend-bytes=4294967296".into(),
        ];
        let mut p = Process::new("etcd", versions::etcd(), args, self.dir());
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    pub(crate) async fn start_apiserver(&mut self, extra: &[String]) -> Result<()> {
        let d = self.dir().to_path_buf();
        let mut args = vec![
            format!("--etcd-servers=http://127.0.0.1:{}", self.etcd_port),
            format!("--bind-address={}", self.api_host),
            format!("--advertise-address={}", self.api_host),
            format!("--secure-port={}", self.api_port),
            format!("--tls-cert-file={}", self.pki.serving_cert.display()),
            format!("--tls-private-key-file={}", self.pki.serving_key.display()),
            format!("--client-ca-file={}", self.pki.ca_cert.display()),
            format!("--token-auth-file={}", d.join("tokens.csv").display()),
            // Node: kubelets get exactly what their pods need, as on a real cluster.
            "--authorization-mode=Node,RBAC".into(),
            format!(
                "--service-account-key-file={}",
                self.pki.service_account_pub.display()
            ),
            format!(
                "--service-account-signing-key-file={}",
                self.pki.service_account_key.display()
            ),
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
            "--service-cluster-ip-range=10.0.0.0/24".into(),
            "--allow-privileged=true".into(),
            // The `kubernetes` Service's endpoints would name the advertised address, which
            // may not be loopback; and with no kube-proxy the Service routes nowhere anyway
            // (pods are given the API server's address, see hack/deploy-local.sh).
            "--endpoint-reconciler-type=none".into(),
            // Webhooks behind a Service (the operator's conversion webhook) are dialled at
            // their endpoints' pod addresses: with no kube-proxy, a ClusterIP leads nowhere.
            "--enable-aggregator-routing=true".into(),
            // Not in the defaults: setting blockOwnerDeletion on an ownerReference then needs
            // update on the owner's finalizers, as on most production clusters.
            "--enable-admission-plugins=OwnerReferencesPermissionEnforcement,NodeRestriction"
                .into(),
            format!("--cert-dir={}", d.join("apiserver-certs").display()),
            "--v=1".into(),
        ];
        args.extend(extra.iter().cloned());
        let mut p = Process::new("kube-apiserver", self.bin.join("kube-apiserver"), args, &d);
        p.start()?;
        self.components.push(p);
        self.wait_for_apiserver().await
    }

    /// Polls `/readyz` until it answers 200, or fails with the apiserver's log.
    pub async fn wait_for_apiserver(&mut self) -> Result<()> {
        let began = SystemTime::now();
        let http = self.https(Duration::from_secs(2))?;
        let url = format!("{}/readyz", self.server_url());
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let ok = http
                .get(&url)
                .bearer_auth(&self.admin_token)
                .send()
                .await
                .map(|r| r.status().is_success())
                .unwrap_or(false);
            if ok {
                self.not_ready.push((began, SystemTime::now()));
                return Ok(());
            }
            for name in ["etcd", "kube-apiserver"] {
                if let Some(p) = self.component_mut(name)
                    && let Some(status) = p.exited()
                {
                    bail!(
                        "{name} exited ({status}) during start-up:\n{}",
                        p.log_tail(40)
                    );
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "kube-apiserver not ready after 90s:\n{}",
                    self.component("kube-apiserver")
                        .map(|p| p.log_tail(40))
                        .unwrap_or_default()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    pub(crate) fn start_controller_manager(&mut self, opts: &Options) -> Result<()> {
        let mut args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            format!(
                "--service-account-private-key-file={}",
                self.pki.service_account_key.display()
            ),
            format!("--root-ca-file={}", self.pki.ca_cert.display()),
            "--use-service-account-credentials=false".into(),
            "--v=1".into(),
        ];
        if let Some(c) = &opts.controllers {
            args.push(format!("--controllers={c}"));
        }
        args.extend(opts.controller_manager_args.iter().cloned());
        let mut p = Process::new(
            "kube-controller-manager",
            self.bin.join("kube-controller-manager"),
            args,
            self.dir(),
        );
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    pub(crate) fn start_scheduler(&mut self) -> Result<()> {
        let args = vec![
            format!("--kubeconfig={}", self.kubeconfig.display()),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            "--v=1".into(),
        ];
        let mut p = Process::new(
            "kube-scheduler",
            self.bin.join("kube-scheduler"),
            args,
            self.dir(),
        );
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    /// A kubemark hollow kubelet: it registers a node and reports its pods Running, with fake
    /// images and containers. It makes its scratch directories in `/tmp`, whatever `$TMPDIR`
    /// says, and never removes them: it runs in a mount namespace of its own where `/tmp` is
    /// a directory of the cluster's, gone with the cluster (its kubeconfig and certificates
    /// are in there too: the cluster's own directory is hidden). It finds no iptables either
    /// (see [`node::path_without_iptables`]).
    pub(crate) fn start_hollow_node(&mut self, i: usize, tainted: bool) -> Result<()> {
        let name = format!("hollow-node-{i}");
        let scratch = self.dir().join(&name);
        std::fs::create_dir_all(&scratch)?;
        self.write_movable_kubeconfig(&scratch, Path::new("/tmp"))?;
        let mut args: Vec<String> = [
            "--mount",
            "--propagation=private",
            "sh",
            "-c",
            // Its own binary is bound into the scratch directory first: it may itself live
            // under /tmp (a cache there), which the second mount hides.
            r#"dir=$0 bin=$1; shift; : > "$dir/kubemark" && mount --bind "$bin" "$dir/kubemark" && mount --rbind "$dir" /tmp && exec /tmp/kubemark "$@""#,
        ]
        .map(String::from)
        .into();
        args.extend([
            scratch.to_string_lossy().into_owned(),
            self.bin.join("kubemark").to_string_lossy().into_owned(),
            "--morph=kubelet".into(),
            format!("--name={name}"),
            "--kubeconfig=/tmp/kubeconfig".into(),
            "--cert-dir=/tmp".into(),
            format!("--kubelet-port={}", free_port()?),
            format!("--kubelet-read-only-port={}", free_port()?),
            // Its default dials the host's containerd for images.
            "--use-host-image-service=false".into(),
            "--v=1".into(),
        ]);
        if tainted {
            args.push(format!(
                "--register-with-taints={HOLLOW_TAINT}=true:NoSchedule"
            ));
        }
        let mut p = Process::new(&name, "unshare", args, self.dir())
            .env("PATH", &node::path_without_iptables());
        p.start()?;
        self.components.push(p);
        Ok(())
    }

    pub fn component(&self, name: &str) -> Option<&Process> {
        self.components.iter().find(|p| p.name == name)
    }

    pub fn component_mut(&mut self, name: &str) -> Option<&mut Process> {
        self.components.iter_mut().find(|p| p.name == name)
    }

    /// Stops a component (SIGTERM, then SIGKILL) so a fault test can restart it.
    pub fn stop(&mut self, name: &str) -> Result<()> {
        self.component_mut(name)
            .ok_or_else(|| anyhow!("no component {name}"))?
            .stop();
        Ok(())
    }

    /// Starts a stopped component again with the same flags; waits for the apiserver.
    pub async fn restart(&mut self, name: &str) -> Result<()> {
        let p = self
            .component_mut(name)
            .ok_or_else(|| anyhow!("no component {name}"))?;
        p.stop();
        p.start()?;
        if name == "kube-apiserver" || name == "etcd" {
            self.wait_for_apiserver().await?;
        }
        Ok(())
    }
}
