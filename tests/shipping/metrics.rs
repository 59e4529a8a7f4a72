//! An install's `/metrics`, as its Deployment would serve it. Hollow nodes start no container,
//! so the installed container is run on this host instead: the operator binary with the
//! Deployment's args and literal env, as the installed ServiceAccount. That exercises what the
//! install decides (flags, the metrics-auth binding, the metrics-reader ClusterRole); the image
//! itself, and the conversion webhook (which the API server reaches only in a pod behind the
//! Service), wait for real nodes (`tests/in_cluster`).

use testenv::Process;

use super::*;

/// The installed Deployment's container, run on this host as ServiceAccount `ns/sa`, with its
/// listeners moved to loopback ports the kernel picks. Stopped when dropped.
pub struct Installed {
    pub process: Process,
    pub metrics_port: u16,
}

impl Installed {
    pub async fn start(cluster: &Cluster, ns: &str, deployment: &str, sa: &str) -> Result<Self> {
        let kc = cluster.kubeconfig();
        let out = kubectl(
            kc,
            &["get", "deployment", deployment, "-n", ns, "-o", "json"],
        )
        .await?;
        let deploy: Value = serde_json::from_str(&out)?;
        let container = &deploy["spec"]["template"]["spec"]["containers"][0];
        let mut args: Vec<String> = container["args"]
            .as_array()
            .context("the container has args")?
            .iter()
            .filter_map(Value::as_str)
            .filter(|a| !a.starts_with("--metrics-bind-address="))
            .filter(|a| !a.starts_with("--health-probe-bind-address="))
            .filter(|a| !a.starts_with("--webhook-"))
            .map(String::from)
            .collect();
        args.extend([
            "--metrics-bind-address=127.0.0.1:0".into(),
            "--health-probe-bind-address=127.0.0.1:0".into(),
            // In a pod: POD_NAME from the downward API. "podset-testenv-" marks test
            // processes for the leftover check.
            format!("--instance=podset-testenv-installed-{ns}"),
        ]);
        let kubeconfig = cluster.service_account_kubeconfig(ns, sa).await?;
        let mut process = Process::new(
            &format!("installed-{ns}"),
            env!("CARGO_BIN_EXE_podset-operator"),
            args,
            cluster.dir(),
        )
        .env("KUBECONFIG", &kubeconfig.to_string_lossy())
        // In a pod: the mounted ServiceAccount's namespace.
        .env("LEADER_ELECTION_NAMESPACE", ns);
        for var in container["env"].as_array().into_iter().flatten() {
            if let (Some(name), Some(value)) = (var["name"].as_str(), var["value"].as_str()) {
                process = process.env(name, value);
            }
        }
        process.start()?;
        let listening = testenv::operator::Listening::after(&mut process, 0)?;
        Ok(Self {
            process,
            metrics_port: listening.metrics.port(),
        })
    }

    async fn get_metrics(&self, token: Option<&str>) -> Result<(u16, String)> {
        testenv::get_metrics(self.metrics_port, token).await
    }

    /// 401 without a token, 403 for an account not bound to `reader_role`, 200 with the
    /// operator's metrics once it is, as a cluster admin would let Prometheus in.
    pub async fn assert_metrics_guarded(
        &self,
        cluster: &Cluster,
        ns: &str,
        reader_role: &str,
    ) -> Result<()> {
        let kc = cluster.kubeconfig();
        let (code, body) = poll_some(Duration::from_secs(60), "/metrics to listen", || async {
            Ok(self.get_metrics(None).await.ok())
        })
        .await
        .with_context(|| self.process.log_tail(30))?;
        ensure!(code == 401, "no token: {code} {body}");

        kubectl(kc, &["create", "serviceaccount", "prometheus", "-n", ns]).await?;
        let token = cluster.service_account_token(ns, "prometheus").await?;
        let (code, body) = self.get_metrics(Some(&token)).await?;
        ensure!(code == 403, "an unbound account: {code} {body}");

        let binding = format!("{ns}-prometheus");
        let account = format!("--serviceaccount={ns}:prometheus");
        let role = format!("--clusterrole={reader_role}");
        kubectl(
            kc,
            &["create", "clusterrolebinding", &binding, &role, &account],
        )
        .await?;
        // The operator keeps a denial for 10 s.
        let body = poll_some(
            Duration::from_secs(60),
            "/metrics 200 once bound",
            || async {
                let (code, body) = self.get_metrics(Some(&token)).await?;
                Ok((code == 200).then_some(body))
            },
        )
        .await
        .with_context(|| self.process.log_tail(30))?;
        ensure!(body.contains("podset_operator_build_info"), "{body}");
        kubectl(kc, &["delete", "clusterrolebinding", &binding]).await?;
        Ok(())
    }
}
