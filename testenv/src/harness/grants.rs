//! RBAC in a test's namespace: the operator's ServiceAccount bound to exactly the generated
//! rules, and the grants a test adds (metrics auth, leader election, accounts of its own).

use anyhow::Result;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};
use podset_operator::rbac;

use super::TestNs;

/// The ServiceAccount the operator runs as.
pub const OPERATOR_SA: &str = "podset-operator";

impl TestNs {
    /// The generated ClusterRole, bound in this namespace only to the operator's account;
    /// and the migration's, bound cluster-wide (it reads the two CRDs, which have no
    /// namespace).
    pub(super) async fn grant_operator_rbac(&self) -> Result<()> {
        let role = self
            .apply_cluster_role(rbac::manager_cluster_role())
            .await?;
        self.create_service_account(OPERATOR_SA).await?;
        let subject = self.subject(OPERATOR_SA);
        self.bind(&role, subject, "ClusterRole", &role).await?;
        self.grant_cluster_role(OPERATOR_SA, rbac::migration_cluster_role())
            .await
    }

    /// Binds the manager rules in this namespace to the operator's account in `watcher`'s
    /// (which watches this one too: `WATCH_NAMESPACE=a,b`).
    pub async fn grant_operator_rbac_to(&self, watcher: &TestNs) -> Result<()> {
        let role = rbac::manager_cluster_role()
            .metadata
            .name
            .unwrap_or_default();
        let binding = format!("{role}-{}", watcher.name);
        let subject = watcher.subject(OPERATOR_SA);
        self.bind(&binding, subject, "ClusterRole", &role).await
    }

    /// Applies `role` (shared by every test of the cluster, hence server-side apply); its name.
    async fn apply_cluster_role(&self, role: ClusterRole) -> Result<String> {
        let name = role.metadata.name.clone().unwrap_or_default();
        let ssa = PatchParams::apply("podset-operator-tests").force();
        Api::<ClusterRole>::all(self.client.clone())
            .patch(&name, &ssa, &Patch::Apply(role))
            .await?;
        Ok(name)
    }

    /// Creates ServiceAccount `name` in this namespace, with no rights yet.
    pub async fn create_service_account(&self, name: &str) -> Result<()> {
        let sa = ServiceAccount {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        self.api::<ServiceAccount>()
            .create(&PostParams::default(), &sa)
            .await?;
        Ok(())
    }

    /// Binds the (Cluster)Role `role` to `subject` in this namespace only, as `name`.
    async fn bind(&self, name: &str, subject: Subject, kind: &str, role: &str) -> Result<()> {
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: kind.into(),
                name: role.into(),
            },
            subjects: Some(vec![subject]),
        };
        self.api::<RoleBinding>()
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    /// Lets the operator's account authenticate and authorize the callers of its `/metrics`.
    pub async fn grant_metrics_auth(&self) -> Result<()> {
        self.grant_cluster_role(OPERATOR_SA, rbac::metrics_auth_cluster_role())
            .await
    }

    /// Lets the operator review scrapers and makes one, as a Prometheus would be set up: a
    /// ServiceAccount bound to the generated `metrics-reader` ClusterRole. Its token.
    pub async fn scraper(&self) -> Result<String> {
        self.grant_metrics_auth().await?;
        self.create_service_account("scraper").await?;
        self.grant_cluster_role("scraper", rbac::metrics_reader_cluster_role())
            .await?;
        self.cluster
            .service_account_token(&self.name, "scraper")
            .await
    }

    /// Applies the ClusterRole `role` and binds it cluster-wide to ServiceAccount `account`
    /// of this namespace (TokenReviews, SubjectAccessReviews and `/metrics` have no
    /// namespace).
    pub async fn grant_cluster_role(&self, account: &str, role: ClusterRole) -> Result<()> {
        let name = self.apply_cluster_role(role).await?;
        self.bind_cluster_role(account, name).await
    }

    /// Binds the existing ClusterRole `name` cluster-wide to ServiceAccount `account` of
    /// this namespace.
    pub async fn bind_cluster_role(&self, account: &str, name: String) -> Result<()> {
        let binding = ClusterRoleBinding {
            metadata: ObjectMeta {
                name: Some(format!("{name}-{}-{account}", self.name)),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name,
            },
            subjects: Some(vec![self.subject(account)]),
        };
        Api::<ClusterRoleBinding>::all(self.client.clone())
            .create(&PostParams::default(), &binding)
            .await?;
        Ok(())
    }

    fn subject(&self, account: &str) -> Subject {
        Subject {
            kind: "ServiceAccount".into(),
            name: account.into(),
            namespace: Some(self.name.clone()),
            ..Default::default()
        }
    }

    /// Lets the operator's account hold the leader Lease in this namespace.
    pub async fn grant_leader_election(&self) -> Result<()> {
        self.grant_role(OPERATOR_SA, rbac::leader_election_role())
            .await
    }

    /// Creates `role` in this namespace and binds it to ServiceAccount `account`.
    pub async fn grant_role(&self, account: &str, role: Role) -> Result<()> {
        let name = role.metadata.name.clone().unwrap_or_default();
        self.api::<Role>()
            .create(&PostParams::default(), &role)
            .await?;
        self.bind(&name, self.subject(account), "Role", &name).await
    }
}
