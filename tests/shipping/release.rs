//! A Helm release installed into its own namespace, and the cluster-wide objects it leaves.

use super::*;

/// The cluster-wide RBAC of secure metrics, as `kubectl get -o name` lists them.
pub fn metrics_rbac_objects(fullname: &str) -> Vec<String> {
    vec![
        format!("clusterrole.rbac.authorization.k8s.io/{fullname}-metrics-auth"),
        format!("clusterrole.rbac.authorization.k8s.io/{fullname}-metrics-reader"),
        format!("clusterrolebinding.rbac.authorization.k8s.io/{fullname}-metrics-auth"),
    ]
}

/// The cluster-wide RBAC on the operator's own CRDs (by name: the At's conversion, both
/// kinds' storage migration), as `kubectl get -o name` lists it.
pub fn crd_rbac_objects(fullname: &str) -> Vec<String> {
    ["conversion", "migration"]
        .iter()
        .flat_map(|role| {
            [
                format!("clusterrole.rbac.authorization.k8s.io/{fullname}-{role}"),
                format!("clusterrolebinding.rbac.authorization.k8s.io/{fullname}-{role}"),
            ]
        })
        .collect()
}

/// The editor and viewer ClusterRoles for people, as `kubectl get -o name` lists them.
pub fn user_role_objects(fullname: &str) -> Vec<String> {
    rbac::user_roles()
        .iter()
        .map(|r| {
            format!(
                "clusterrole.rbac.authorization.k8s.io/{fullname}-{}",
                r.name()
            )
        })
        .collect()
}

/// A Helm release installed with real Helm into its own namespace.
pub struct Release {
    kc: PathBuf,
    name: &'static str,
    pub ns: String,
    pub fullname: String,
    selector: String,
}

impl Release {
    /// Installs the chart with `values` (helm flags) and waits for the release's
    /// objects, the chart's CRDs, and both replicas scheduled and Running on hollow nodes.
    pub async fn install(cluster: &Cluster, name: &'static str, values: &[&str]) -> Result<Self> {
        let ns = unique(name);
        cluster.create_namespace(&ns).await?;
        let release = Self {
            kc: cluster.kubeconfig().to_path_buf(),
            name,
            fullname: format!("{name}-podset-operator"),
            selector: format!("app.kubernetes.io/instance={name}"),
            ns,
        };
        testenv::helm::release(
            testenv::helm::Release::Install,
            &release.kc,
            name,
            &chart(),
            &release.ns,
            values,
        )
        .await?;
        wait_objects(&release.kc, &release.ns, &release.objects(), true).await?;
        wait_crds_established(&release.kc).await?;
        wait_pods_scheduled(&release.kc, &release.ns, &release.selector).await?;
        Ok(release)
    }

    /// The release's objects in its namespace, as `kind/name`.
    fn objects(&self) -> Vec<String> {
        let f = &self.fullname;
        vec![
            format!("deployment/{f}"),
            format!("serviceaccount/{f}"),
            format!("role/{f}-leader-election"),
            format!("rolebinding/{f}-leader-election"),
            format!("poddisruptionbudget/{f}"),
            format!("service/{f}-metrics"),
        ]
    }

    pub fn service_account(&self) -> (&str, &str) {
        (&self.ns, &self.fullname)
    }

    /// `helm uninstall`, then every object of the release gone: its own, `elsewhere`
    /// (namespace, objects), and the Deployment's pods.
    pub async fn uninstall(&self, elsewhere: &[(&str, Vec<String>)]) -> Result<()> {
        testenv::helm::uninstall(&self.kc, self.name, &self.ns).await?;
        wait_objects(&self.kc, &self.ns, &self.objects(), false).await?;
        for (ns, objects) in elsewhere {
            wait_objects(&self.kc, ns, objects, false).await?;
        }
        wait_no_pods(&self.kc, &self.ns, &self.selector).await
    }
}
