//! The operator's permissions: exactly the API calls the code makes, in one table, from
//! which the checked-in RBAC manifests are generated.

use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule, Role};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Resource;

use crate::api::{At, PodSet};

/// Name of the ClusterRole (or, for a one-namespace install, Role) holding [`rules`].
pub const MANAGER_ROLE: &str = "podset-operator-manager";
/// Name of the Role for the leader-election Lease, in the operator's own namespace.
pub const LEADER_ELECTION_ROLE: &str = "podset-operator-leader-election";
/// Name of the Role for the webhook's certificate Secret, in the operator's own namespace.
pub const WEBHOOK_CERT_ROLE: &str = "podset-operator-webhook-cert";
/// Name of the ClusterRole for the At CRD's conversion settings (CRDs have no namespace).
pub const CONVERSION_ROLE: &str = "podset-operator-conversion";
/// Name of the ClusterRole for the storage migration's reads of both CRDs and their
/// `storedVersions` (CRDs have no namespace).
pub const MIGRATION_ROLE: &str = "podset-operator-migration";
/// Name of the Secret the operator provisions the webhook's certificates in (as the
/// manifests name it; `--webhook-cert-secret`).
pub const WEBHOOK_CERT_SECRET: &str = "podset-operator-webhook-cert";

/// Name of the ClusterRole that lets the operator authenticate and authorize metrics scrapes
/// (always cluster-wide: TokenReviews and SubjectAccessReviews have no namespace).
pub const METRICS_AUTH_ROLE: &str = "podset-operator-metrics-auth";
/// Name of the ClusterRole to bind to a scraper (Prometheus) so that it may read `/metrics`.
pub const METRICS_READER_ROLE: &str = "podset-operator-metrics-reader";

fn rule(group: &str, resources: &[&str], verbs: &[&str]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(vec![group.to_string()]),
        resources: Some(resources.iter().map(|r| r.to_string()).collect()),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..Default::default()
    }
}

/// What the controllers call, wherever they watch.
pub fn rules() -> Vec<PolicyRule> {
    vec![
        // Watched through reflectors (list + watch); nothing reads them one by one. One still
        // stored at an older version is written back unchanged (update: `migrate`). An At is
        // deleted once DONE for its ttlSecondsAfterFinished.
        rule(
            "app.example.com",
            &["podsets"],
            &["list", "watch", "update"],
        ),
        rule(
            "cnat.programming-kubernetes.info",
            &["ats"],
            &["list", "watch", "update", "delete"],
        ),
        // Status is written with merge patches; a write that met a conflict is read back by a
        // list of the object's name, to tell its own landed write from someone else's.
        rule("app.example.com", &["podsets/status"], &["patch"]),
        rule(
            "cnat.programming-kubernetes.info",
            &["ats/status"],
            &["patch"],
        ),
        // blockOwnerDeletion on an ownerReference needs update on the owner's finalizers.
        rule("app.example.com", &["podsets/finalizers"], &["update"]),
        rule(
            "cnat.programming-kubernetes.info",
            &["ats/finalizers"],
            &["update"],
        ),
        // list + watch feed the shared pod cache; get is the At controller's live read of its
        // pod (its recorded pod missing from the cache, an existing one after a 409); patch is
        // the At controller's release of its recorded pod from its scheduling gate; delete is
        // PodSet's scale-down only.
        rule(
            "",
            &["pods"],
            &["get", "list", "watch", "create", "patch", "delete"],
        ),
        // A repeated event becomes a series: PATCHes of the first (src/events.rs).
        rule("events.k8s.io", &["events"], &["create", "patch"]),
    ]
}

/// The webhook's provisioned certificates (`webhook::keeper`): its one Secret, read and
/// watched (by name, through a field selector) and replaced by name; created if missing (a
/// create cannot be limited to a name).
pub fn webhook_cert_rules() -> Vec<PolicyRule> {
    vec![
        named(
            rule("", &["secrets"], &["get", "list", "watch", "update"]),
            WEBHOOK_CERT_SECRET,
        ),
        rule("", &["secrets"], &["create"]),
    ]
}

/// The At CRD's conversion pointed at the webhook Service with the CA as its `caBundle`
/// (`webhook::keeper`): that CRD alone, by name.
pub fn conversion_rules() -> Vec<PolicyRule> {
    vec![named(
        rule(
            "apiextensions.k8s.io",
            &["customresourcedefinitions"],
            &["get", "patch"],
        ),
        crate::webhook::keeper::AT_CRD,
    )]
}

/// The storage migration at the start of a term (`migrate`): both CRDs read, to see whether
/// anything may still be stored at an older version, and their `storedVersions` trimmed once
/// nothing is. Those two CRDs alone, by name.
pub fn migration_rules() -> Vec<PolicyRule> {
    let crds = crate::migrate::KINDS.map(|k| k.crd);
    let mut get = rule(
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        &["get"],
    );
    let mut trim = rule(
        "apiextensions.k8s.io",
        &["customresourcedefinitions/status"],
        &["patch"],
    );
    get.resource_names = Some(crds.map(String::from).to_vec());
    trim.resource_names = get.resource_names.clone();
    vec![get, trim]
}

fn named(mut rule: PolicyRule, name: &str) -> PolicyRule {
    rule.resource_names = Some(vec![name.into()]);
    rule
}

/// Leader election on a coordination.k8s.io Lease (`leader`): get, create, and update over
/// the resourceVersion read; list and watch to see it change at once.
pub fn leader_election_rules() -> Vec<PolicyRule> {
    vec![rule(
        "coordination.k8s.io",
        &["leases"],
        &["get", "list", "watch", "create", "update"],
    )]
}

/// The secure metrics endpoint asks the API server who a scraper is (TokenReview) and
/// whether it may `get /metrics` (SubjectAccessReview).
pub fn metrics_auth_rules() -> Vec<PolicyRule> {
    vec![
        rule("authentication.k8s.io", &["tokenreviews"], &["create"]),
        rule(
            "authorization.k8s.io",
            &["subjectaccessreviews"],
            &["create"],
        ),
    ]
}

/// What a scraper needs: `get` on the non-resource URL `/metrics`.
pub fn metrics_reader_rules() -> Vec<PolicyRule> {
    vec![PolicyRule {
        non_resource_urls: Some(vec!["/metrics".into()]),
        verbs: vec!["get".into()],
        ..Default::default()
    }]
}

/// What `podset-operator check` (the chart's `helm test`) calls, in the release namespace:
/// a list of each CRD (one item, metadata only) and of the operator's pods, to probe them.
pub fn check_rules() -> Vec<PolicyRule> {
    vec![
        rule("app.example.com", &["podsets"], &["list"]),
        rule("cnat.programming-kubernetes.info", &["ats"], &["list"]),
        rule("", &["pods"], &["list"]),
    ]
}

/// What a role for people grants on a custom resource: kubebuilder's `<kind>_editor_role` and
/// `<kind>_viewer_role`. The operator holds neither; they are for the cluster's users.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Access {
    Editor,
    Viewer,
}

impl Access {
    pub const ALL: [Access; 2] = [Access::Editor, Access::Viewer];

    pub fn name(self) -> &'static str {
        match self {
            Access::Editor => "editor",
            Access::Viewer => "viewer",
        }
    }

    /// The verbs on the resource itself; both may also `get` its status.
    pub fn verbs(self) -> &'static [&'static str] {
        match self {
            Access::Editor => &[
                "create", "delete", "get", "list", "patch", "update", "watch",
            ],
            Access::Viewer => &["get", "list", "watch"],
        }
    }

    /// The built-in ClusterRoles this one is aggregated into (by the label
    /// `rbac.authorization.k8s.io/aggregate-to-<role>: "true"`): whoever is bound to `edit`
    /// or `admin` in a namespace may edit, whoever is bound to `view` may read.
    pub fn aggregate_to(self) -> &'static [&'static str] {
        match self {
            Access::Editor => &["admin", "edit"],
            Access::Viewer => &["view"],
        }
    }
}

/// A role for people on one of the custom resources.
#[derive(Clone, Debug)]
pub struct UserRole {
    /// The kind in lower case (`podset`), as kubebuilder names the role's file.
    pub kind: String,
    pub access: Access,
    pub rules: Vec<PolicyRule>,
}

impl UserRole {
    fn of<K: Resource<DynamicType = ()>>(access: Access) -> Self {
        let (group, plural) = (K::group(&()), K::plural(&()));
        let status = format!("{plural}/status");
        Self {
            kind: K::kind(&()).to_lowercase(),
            access,
            rules: vec![
                rule(&group, &[&plural], access.verbs()),
                rule(&group, &[&status], &["get"]),
            ],
        }
    }

    /// `<kind>-<access>`: `podset-editor`.
    pub fn name(&self) -> String {
        format!("{}-{}", self.kind, self.access.name())
    }

    /// The ClusterRole of the kustomize layout, `podset-operator-<kind>-<access>-role`,
    /// labelled for aggregation.
    pub fn cluster_role(&self) -> ClusterRole {
        let mut role = cluster_role(
            &format!("podset-operator-{}-role", self.name()),
            self.rules.clone(),
        );
        role.metadata.labels = Some(
            self.access
                .aggregate_to()
                .iter()
                .map(|to| {
                    (
                        format!("rbac.authorization.k8s.io/aggregate-to-{to}"),
                        "true".into(),
                    )
                })
                .collect(),
        );
        role
    }
}

/// An editor and a viewer role for each custom resource.
pub fn user_roles() -> Vec<UserRole> {
    Access::ALL
        .into_iter()
        .flat_map(|access| [UserRole::of::<PodSet>(access), UserRole::of::<At>(access)])
        .collect()
}

fn cluster_role(name: &str, rules: Vec<PolicyRule>) -> ClusterRole {
    ClusterRole {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        rules: Some(rules),
        ..Default::default()
    }
}

pub fn metrics_auth_cluster_role() -> ClusterRole {
    cluster_role(METRICS_AUTH_ROLE, metrics_auth_rules())
}

pub fn metrics_reader_cluster_role() -> ClusterRole {
    cluster_role(METRICS_READER_ROLE, metrics_reader_rules())
}

pub fn manager_cluster_role() -> ClusterRole {
    cluster_role(MANAGER_ROLE, rules())
}

pub fn migration_cluster_role() -> ClusterRole {
    cluster_role(MIGRATION_ROLE, migration_rules())
}

pub fn conversion_cluster_role() -> ClusterRole {
    cluster_role(CONVERSION_ROLE, conversion_rules())
}

pub fn webhook_cert_role() -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(WEBHOOK_CERT_ROLE.into()),
            ..Default::default()
        },
        rules: Some(webhook_cert_rules()),
    }
}

pub fn leader_election_role() -> Role {
    Role {
        metadata: ObjectMeta {
            name: Some(LEADER_ELECTION_ROLE.into()),
            ..Default::default()
        },
        rules: Some(leader_election_rules()),
    }
}
