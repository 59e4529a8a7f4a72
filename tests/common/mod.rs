//! End-to-end harness: a shared real control plane per test binary, a namespace per test,
//! and the operator binary run as a separate process under its own ServiceAccount, bound to
//! exactly the generated RBAC rules.
#![allow(dead_code, unused_imports)] // each test binary uses its own part of the harness

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::{Context as _, Result, anyhow};
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, Role, RoleBinding, RoleRef, Subject,
};
use kube::api::{Api, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use podset_operator::api::{At, AtSpec, PodSet, PodSetSpec};
use podset_operator::plan::podset::CONDITION_AVAILABLE;
use podset_operator::rbac;
use testenv::{Cluster, Options, Process};

pub use testenv::{controller_uid, poll, poll_some};

mod inspect;
pub use inspect::Kind;

pub const OPERATOR_SA: &str = "podset-operator";

/// The control plane shared by this test binary: scheduler and two hollow nodes, CRDs
/// installed before the garbage collector starts.
pub async fn cluster() -> Result<Arc<Cluster>> {
    testenv::shared("two-nodes", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default().with_nodes(2)
    })
    .await
}

/// The control plane shared by this test binary, with neither scheduler nor nodes: pods stay
/// unscheduled, and a test plays the kubelet by writing their status (At runs must finish,
/// which hollow nodes never do).
pub async fn cluster_without_nodes() -> Result<Arc<Cluster>> {
    testenv::shared("no-nodes", || Options {
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default()
    })
    .await
}

/// The control plane shared by this test binary with one real node (kubelet, containerd,
/// runc): pods run real busybox containers, so commands really run and end.
pub async fn cluster_with_real_node() -> Result<Arc<Cluster>> {
    testenv::shared("real-node", || Options {
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

/// The operator binary under test: this build's, or `$PODSET_OPERATOR_BIN` (an older build, to
/// show that a test fails on it).
pub fn operator_binary() -> String {
    std::env::var("PODSET_OPERATOR_BIN")
        .unwrap_or_else(|_| env!("CARGO_BIN_EXE_podset-operator").to_string())
}

/// A namespace of one test, with the operator's ServiceAccount bound to the manager rules.
pub struct TestNs {
    pub cluster: Arc<Cluster>,
    pub name: String,
    pub client: Client,
}

static COUNTER: AtomicUsize = AtomicUsize::new(0);

impl TestNs {
    pub async fn new(prefix: &str) -> Result<Self> {
        Self::new_in(cluster().await?, prefix).await
    }

    /// A namespace in `cluster` (this test binary's choice of shared cluster).
    pub async fn new_in(cluster: Arc<Cluster>, prefix: &str) -> Result<Self> {
        let name = format!(
            "{prefix}-{}-{}",
            std::process::id() % 10_000,
            COUNTER.fetch_add(1, Ordering::SeqCst)
        );
        cluster.create_namespace(&name).await?;
        let client = cluster.client().await?;
        let ns = Self {
            cluster,
            name,
            client,
        };
        ns.grant_operator_rbac().await?;
        Ok(ns)
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.name)
    }

    /// The generated ClusterRole, bound in this namespace only to the operator's account.
    async fn grant_operator_rbac(&self) -> Result<()> {
        let role = self
            .apply_cluster_role(rbac::manager_cluster_role())
            .await?;
        self.create_service_account(OPERATOR_SA).await?;
        self.bind_operator("ClusterRole", &role).await?;
        Ok(())
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

    /// Binds the (Cluster)Role `role` to the operator's account in this namespace only.
    async fn bind_operator(&self, kind: &str, role: &str) -> Result<()> {
        self.bind(OPERATOR_SA, kind, role).await
    }

    /// Binds the (Cluster)Role `role` to ServiceAccount `account` in this namespace only.
    async fn bind(&self, account: &str, kind: &str, role: &str) -> Result<()> {
        let binding = RoleBinding {
            metadata: ObjectMeta {
                name: Some(role.into()),
                ..Default::default()
            },
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: kind.into(),
                name: role.into(),
            },
            subjects: Some(vec![self.subject(account)]),
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
        self.bind(account, "Role", &name).await
    }

    /// Starts the operator binary watching this namespace, as its ServiceAccount.
    pub async fn start_operator(&self, extra_args: &[&str]) -> Result<Operator> {
        self.start_operator_as(OPERATOR_SA, extra_args).await
    }

    /// Starts the operator binary watching this namespace, as ServiceAccount `account`.
    pub async fn start_operator_as(&self, account: &str, extra_args: &[&str]) -> Result<Operator> {
        let server = self.cluster.server_url();
        self.start_operator_at(account, &server, extra_args).await
    }

    /// Starts the operator as its ServiceAccount, talking to the API server through `proxy`.
    pub async fn start_operator_through(
        &self,
        proxy: &testenv::proxy::FaultProxy,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let server = format!("https://{}", proxy.addr());
        self.start_operator_at(OPERATOR_SA, &server, extra_args)
            .await
    }

    /// Starts the operator as its ServiceAccount, talking to the API server through the
    /// Sieve `proxy`, which it trusts as its server.
    pub async fn start_operator_behind(
        &self,
        proxy: &testenv::sieve::SieveProxy,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let kubeconfig = self
            .cluster
            .service_account_kubeconfig_trusting(
                &self.name,
                OPERATOR_SA,
                &proxy.url(),
                proxy.ca_cert(),
            )
            .await?;
        self.start_operator_with(&kubeconfig, extra_args)
    }

    async fn start_operator_at(
        &self,
        account: &str,
        server: &str,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let kubeconfig = self
            .cluster
            .service_account_kubeconfig_at(&self.name, account, server)
            .await?;
        self.start_operator_with(&kubeconfig, extra_args)
    }

    /// Starts the operator binary watching this namespace, with `kubeconfig`.
    fn start_operator_with(
        &self,
        kubeconfig: &std::path::Path,
        extra_args: &[&str],
    ) -> Result<Operator> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let metrics_port = testenv::free_port()?;
        let health_port = testenv::free_port()?;
        // "podset-testenv-" marks test processes for the leftover check.
        let instance = format!("podset-testenv-op-{}-{n}", self.name);
        let mut args: Vec<String> = vec![
            "run".into(),
            format!("--namespace={}", self.name),
            "--log-format=json".into(),
            "--log-level=info,podset_operator=debug".into(),
            format!("--instance={instance}"),
            format!("--metrics-bind-address=127.0.0.1:{metrics_port}"),
            format!("--health-probe-bind-address=127.0.0.1:{health_port}"),
        ];
        args.extend(extra_args.iter().map(|s| s.to_string()));
        let mut process = Process::new(
            &format!("operator-{}-{n}", self.name),
            operator_binary(),
            args,
            self.cluster.dir(),
        )
        .env("KUBECONFIG", &kubeconfig.to_string_lossy());
        process.start()?;
        Ok(Operator {
            process,
            instance,
            metrics_port,
            health_port,
        })
    }

    /// Pods in this namespace whose controller is the object with `owner_uid`.
    pub async fn pods_of(&self, owner_uid: &str) -> Result<Vec<Pod>> {
        let pods = self.api::<Pod>().list(&ListParams::default()).await?;
        Ok(pods
            .items
            .into_iter()
            .filter(|p| controller_uid(p).as_deref() == Some(owner_uid))
            .collect())
    }
}

/// Plays the kubelet: the pod's phase, and for a finished pod its container's exit code.
pub async fn set_pod_phase(
    ns: &TestNs,
    pod: &str,
    phase: &str,
    exit_code: Option<i32>,
) -> Result<()> {
    let now = jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string();
    let state = match exit_code {
        None => serde_json::json!({"running": {"startedAt": now}}),
        Some(code) => serde_json::json!({"terminated": {
            "exitCode": code,
            "reason": if code == 0 { "Completed" } else { "Error" },
            "startedAt": now, "finishedAt": now}}),
    };
    let patch = serde_json::json!({"status": {
        "phase": phase,
        "containerStatuses": [{
            "name": "busybox", "image": "busybox", "imageID": "", "restartCount": 0,
            "ready": exit_code.is_none(), "state": state,
        }],
    }});
    ns.api::<Pod>()
        .patch_status(pod, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

pub fn phase(p: &Pod) -> String {
    p.status
        .as_ref()
        .and_then(|s| s.phase.clone())
        .unwrap_or_default()
}

/// The operator process. Killed when dropped; its log is printed if the test is failing.
pub struct Operator {
    pub process: Process,
    /// Its name in events and in the leader Lease.
    pub instance: String,
    pub metrics_port: u16,
    pub health_port: u16,
}

impl Operator {
    pub fn kill(&mut self) {
        self.process
            .stop_with(libc::SIGKILL, Duration::from_secs(5));
    }

    /// SIGTERM; the exit status if the operator exited on its own within 15 s.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        self.process
            .stop_with(libc::SIGTERM, Duration::from_secs(15))
    }

    pub fn restart(&mut self) -> Result<()> {
        self.process.start().context("restarting the operator")
    }

    /// `GET /metrics` over HTTPS (the operator's certificate is self-signed), with `token`
    /// as the bearer token if any: the status code and body.
    pub async fn get_metrics(&self, token: Option<&str>) -> Result<(u16, String)> {
        testenv::get_metrics(self.metrics_port, token).await
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.process.log).unwrap_or_default()
    }

    /// Whether its log says it leads: its last term began and has not ended.
    pub fn leads(&self) -> bool {
        let log = self.log();
        log.rfind("became the leader") > log.rfind("; stepping down")
    }

    /// The JSON lines of its log (`--log-format=json`), each parsed.
    pub fn log_lines(&self) -> Vec<serde_json::Value> {
        self.log()
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .collect()
    }

    /// Fails if the operator exited, panicked, or was warned by the API server (a deprecated
    /// API, a dropped field: see `client::WARNING_LOGGED_AS`).
    pub fn assert_healthy(&mut self) {
        self.assert_healthy_but_warned(&[]);
    }

    /// [`Self::assert_healthy`], but for API server warnings that contain one of `expected`
    /// (what a test's own input draws).
    pub fn assert_healthy_but_warned(&mut self, expected: &[&str]) {
        let unexpected: Vec<serde_json::Value> = self
            .log_lines()
            .into_iter()
            .filter(|l| l["message"] == podset_operator::client::WARNING_LOGGED_AS)
            .filter(|l| {
                let warning = l["warning"].as_str().unwrap_or_default();
                !expected.iter().any(|e| warning.contains(e))
            })
            .collect();
        assert!(
            unexpected.is_empty(),
            "the API server warned the operator: {unexpected:#?}"
        );
        assert!(
            self.process.exited().is_none(),
            "operator exited:\n{}",
            self.process.log_tail(50)
        );
        assert!(
            !self.log().contains("panicked"),
            "operator panicked:\n{}",
            self.process.log_tail(50)
        );
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if testenv::failing() {
            eprintln!(
                "----- {} log -----\n{}",
                self.process.name,
                self.process.log_tail(80)
            );
        }
    }
}

/// Short deadline for things the operator should do promptly.
pub const PROMPTLY: Duration = Duration::from_secs(60);

// PodSet helpers shared by the PodSet, lifecycle and fault tests.

pub fn at(name: &str, schedule: &str, command: &str) -> At {
    At::new(
        name,
        AtSpec {
            schedule: schedule.into(),
            command: command.into(),
        },
    )
}

pub fn podset(name: &str, replicas: i32) -> PodSet {
    PodSet::new(
        name,
        PodSetSpec {
            replicas,
            template: None,
        },
    )
}

pub fn condition(ps: &PodSet, type_: &str) -> Option<(String, String, String)> {
    ps.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Labels namespace `ns` so that the API server enforces the `restricted` Pod Security
/// Standard there.
pub async fn enforce_restricted(client: &Client, ns: &str) -> Result<()> {
    Api::<k8s_openapi::api::core::v1::Namespace>::all(client.clone())
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest",
            }}})),
        )
        .await?;
    Ok(())
}

/// Waits for a FailedCreate Warning event in the namespace, then checks that the failed
/// creates are retried with a backoff, not in a hot loop: at most 5 more in 10 s, counted
/// through the Warning events (a repeat becomes an event series with a count).
pub async fn failed_creates_back_off(ns: &TestNs) -> Result<()> {
    let events = ns.api::<Event>();
    poll(PROMPTLY, "a FailedCreate Warning event", || async {
        let list = events.list(&ListParams::default()).await?;
        Ok(list.items.iter().any(|e| {
            e.reason.as_deref() == Some("FailedCreate") && e.type_.as_deref() == Some("Warning")
        }))
    })
    .await?;
    let attempts = |list: &[Event]| -> i32 {
        list.iter()
            .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
            .map(|e| e.series.as_ref().map_or(1, |s| s.count))
            .sum()
    };
    let before = attempts(&events.list(&ListParams::default()).await?.items);
    let window = tokio::time::Instant::now();
    tokio::time::sleep_until(window + Duration::from_secs(10)).await; // observation window, not a wait
    let after = attempts(&events.list(&ListParams::default()).await?.items);
    anyhow::ensure!(
        after - before <= 5,
        "{} failed attempts in 10 s: not backing off",
        after - before
    );
    Ok(())
}

/// Waits until the PodSet has exactly `n` Running pods of its own and its status names them.
pub async fn converged(ns: &TestNs, name: &str, n: usize) -> Result<Vec<Pod>> {
    converged_within(PROMPTLY, ns, name, n).await
}

/// [`converged`], waiting up to `deadline`.
pub async fn converged_within(
    deadline: Duration,
    ns: &TestNs,
    name: &str,
    n: usize,
) -> Result<Vec<Pod>> {
    let api = ns.api::<PodSet>();
    poll_some(
        deadline,
        &format!("podset {name} to have {n} Running pods named in its status"),
        || async {
            let ps = api.get(name).await?;
            let pods: Vec<Pod> = ns
                .pods_of(&ps.uid().unwrap())
                .await?
                .into_iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .collect();
            let mut names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
            names.sort();
            let status = ps.status.clone().unwrap_or_default();
            let ok = pods.len() == n
                && pods.iter().all(|p| phase(p) == "Running")
                && status.pod_names == names
                && status.available_replicas == n as i32
                && status.observed_generation == ps.metadata.generation
                && condition(&ps, CONDITION_AVAILABLE).is_some_and(|c| c.0 == "True");
            Ok(ok.then_some(pods))
        },
    )
    .await
}

/// The random source of a fault test: seeded from `PODSET_FAULT_SEED` when set, else at
/// random; the seed is printed, and the test's output is shown when it fails, so a failing
/// run can be repeated.
pub fn seeded_rng(test: &str) -> fastrand::Rng {
    let seed = std::env::var("PODSET_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| fastrand::u64(..));
    eprintln!("{test}: random choices from seed {seed} (repeat with PODSET_FAULT_SEED={seed})");
    fastrand::Rng::with_seed(seed)
}

/// The leader-election Lease the operator uses by default.
pub const LEASE: &str = "podset-operator-leader";

/// The PodSet controller under leader election on a `lease_seconds` Lease in `ns`.
pub fn leader_args(ns: &TestNs, lease_seconds: u64) -> Vec<String> {
    vec![
        "--controllers=podset".into(),
        "--leader-elect".into(),
        format!("--leader-election-namespace={}", ns.name),
        format!("--lease-duration-seconds={lease_seconds}"),
    ]
}

/// Waits until one of `candidates` holds the [`LEASE`] in `ns` and leads: the one that created
/// the Lease leads only a lease duration later. Its name.
pub async fn wait_for_holder(ns: &TestNs, candidates: &[&Operator]) -> Result<String> {
    poll_some(PROMPTLY, "a leader", || async {
        let holder = lease_holder(ns).await?;
        Ok(candidates
            .iter()
            .any(|o| o.instance == holder && o.leads())
            .then_some(holder))
    })
    .await
}

/// Who holds the [`LEASE`] in `ns` ("" for nobody).
pub async fn lease_holder(ns: &TestNs) -> Result<String> {
    let lease = ns
        .api::<k8s_openapi::api::coordination::v1::Lease>()
        .get_opt(LEASE)
        .await?;
    Ok(lease
        .and_then(|l| l.spec?.holder_identity)
        .unwrap_or_default())
}
