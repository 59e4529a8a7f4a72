//! failover: two of a worker on one Lease, W4's 10,000 pods converged; the leader SIGKILLed,
//! then the next leader SIGTERMed, and each time how long a new object takes to converge under
//! the one after. The operator with a cold standby and with a warm one, against two
//! kube-controller-managers running the replicaset controller (QPS 1000, as in W4).
//! failover-w5: the kill alone at W5's 100,000 pods, with the new leader's peak memory from
//! the kill until converged (issue 48: a takeover lists every pod).

use std::path::Path;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;
use testenv::harness::LEASE;
use testenv::operator::Operator;
use testenv::{Process, poll, poll_some};

use crate::NS;
use crate::cli::{BenchArgs, Sizes};
use crate::env::{
    Env, Target, Worker, operator_launcher, operator_metrics, start_controller_manager,
};
use crate::report::Sample;
use crate::scenario::lease::{LeaseWatch, holder_of, whose};
use crate::system::{metric_sum, mib, pod_watches, proc_stats};
use crate::workload::{self, Convergence, Kind, names};

/// The measurements, one row each per pair.
pub const KILL: &str = "Failover W4 1000x10: SIGKILL leader -> new object converged";
pub const RELEASE: &str = "Failover W4 1000x10: SIGTERM leader -> Lease release seen";
pub const HANDOVER: &str = "Failover W4 1000x10: release seen -> new object converged";
pub const KILL_W5: &str = "Failover W5 10000x10: SIGKILL leader -> new object converged";

/// The size a failover run converges before its faults, and which faults it makes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Scale {
    /// W4, the kill then the handover.
    W4,
    /// W5, the kill alone: what it measures is the takeover's memory at 100,000 pods.
    W5,
}

impl Scale {
    pub fn name(self) -> &'static str {
        match self {
            Scale::W4 => "W4 1000x10",
            Scale::W5 => "W5 10000x10",
        }
    }

    fn size(self, s: &Sizes) -> (usize, i32) {
        match self {
            Scale::W4 => (s.w4_objects, s.w4_replicas),
            Scale::W5 => (s.w5_objects, s.w5_replicas),
        }
    }

    fn kill_row(self) -> &'static str {
        match self {
            Scale::W4 => KILL,
            Scale::W5 => KILL_W5,
        }
    }
}

const LEASE_SECONDS: u64 = 15;
/// The new objects' replicas: not W4's, so that the convergence watch counts them alone.
const NEW_REPLICAS: i32 = 5;
/// A new leader waits out a lease duration at most, then lists 10,000 pods.
const TAKEOVER: Duration = Duration::from_secs(300);
/// A candidate's start until it is up, or until its pod watch is open.
const STARTUP: Duration = Duration::from_secs(120);

/// The two workers on one Lease.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Pair {
    /// `warm`: the standby watches the pods while it waits (`--warm-standby`).
    Operator {
        warm: bool,
    },
    ControllerManager,
}

impl Pair {
    pub const ALL: [Pair; 3] = [
        Pair::Operator { warm: false },
        Pair::Operator { warm: true },
        Pair::ControllerManager,
    ];

    /// The W4 target it doubles, whose figures it uses.
    fn base(self) -> Target {
        match self {
            Pair::Operator { .. } => Target::Operator,
            Pair::ControllerManager => Target::ReplicaSet(Some(1000)),
        }
    }

    /// Whether `--targets` asks for it: by its own key or its base's.
    pub fn wanted(self, targets: &[String]) -> bool {
        let key = match self {
            Pair::Operator { warm: false } => "operator-cold",
            Pair::Operator { warm: true } => "operator-warm",
            Pair::ControllerManager => self.base().key(),
        };
        targets.is_empty() || targets.iter().any(|k| k == key || k == self.base().key())
    }

    /// Its rows' target; kube-controller-manager's is the ratios' base (see `report::ratio`).
    pub fn label(self) -> String {
        match self {
            Pair::Operator { warm: false } => "podset-operator x2, cold standby".into(),
            Pair::Operator { warm: true } => "podset-operator x2, warm standby".into(),
            Pair::ControllerManager => format!("{} x2", self.base().label()),
        }
    }

    fn kind(self) -> Kind {
        match self {
            Pair::Operator { .. } => Kind::PodSet,
            Pair::ControllerManager => Kind::ReplicaSet,
        }
    }

    /// The Lease's namespace and name: each worker's default one.
    fn lease(self) -> (&'static str, &'static str) {
        match self {
            Pair::Operator { .. } => (NS, LEASE),
            Pair::ControllerManager => ("kube-system", "kube-controller-manager"),
        }
    }

    /// Whether a SIGTERMed leader releases the Lease. kube-controller-manager 1.37 does only
    /// with the alpha gate ControllerManagerReleaseLeaderElectionLockOnExit, off by default:
    /// its standby waits for the lease to expire.
    fn releases(self) -> bool {
        matches!(self, Pair::Operator { .. })
    }
}

/// One run: a fresh control plane, two candidates, W4 converged, then the kill and the
/// handover. Every process it starts is stopped when it returns, error or not.
pub async fn failover_run(
    pair: Pair,
    scale: Scale,
    args: &BenchArgs,
    s: &Sizes,
) -> Result<Vec<(&'static str, String, Sample)>> {
    let (objects, replicas) = scale.size(s);
    if replicas == NEW_REPLICAS {
        bail!("the converged objects must not have the new objects' {NEW_REPLICAS} replicas");
    }
    let env = Env::without_worker(&args.operator).await?;
    // Declared after the control plane, so dropped (its processes killed) before it.
    let mut candidates = Candidates::new(pair, &env, &args.operator).await?;
    candidates.spawn().await?;
    if pair == Pair::ControllerManager {
        // kube-controller-manager's name in the Lease is its host and a random UUID, learnt
        // from the Lease alone: the first leads before the second starts.
        candidates.leader().await?;
    }
    candidates.spawn().await?;
    let mut conv = Convergence::start(&env.client, NS, pair.kind());
    let names = names("w", objects);
    workload::create_all(&env.client, NS, pair.kind(), &names, replicas).await?;
    conv.wait(objects, replicas, Duration::from_secs(1800))
        .await?;
    let pods = objects * replicas as usize;
    let kill = kill(&mut candidates, &mut conv).await?;
    let mut rows = vec![(scale.kill_row(), pair.label(), Sample { pods, ..kill })];
    if scale == Scale::W5 {
        return Ok(rows);
    }
    for (scenario, target, sample) in handover(&mut candidates, &mut conv).await? {
        rows.push((scenario, target, Sample { pods, ..sample }));
    }
    Ok(rows)
}

/// SIGKILLs the leader and creates a new object at that instant: the time until it converged,
/// with the leader's and the standby's memory, and the operator standby's requests; and the
/// standby's peak memory from the kill until converged, against the leader's before the kill
/// (its steady memory: everything converged and nothing to do). Then starts a replacement, so
/// that two run again.
async fn kill(c: &mut Candidates<'_>, conv: &mut Convergence) -> Result<Sample> {
    c.warmed().await?;
    let leader = c.leader().await?;
    let next = c.standby(leader)?;
    let steady = c.members[leader].rss_mib()?;
    let mut sample = Sample {
        peak_rss_mib: c.members[leader].peak_rss_mib()?,
        ..Sample::default()
    };
    sample.figures.push(("leader steady RSS MiB", steady));
    let standby = &c.members[next];
    sample
        .figures
        .push(("standby peak RSS MiB", standby.peak_rss_mib()?));
    if let Worker::Operator(op) = &standby.worker {
        let text = operator_metrics(op.metrics_port).await?;
        let sent = metric_sum(&text, "rest_client_requests_total", |_| true);
        sample.figures.push(("standby API requests", sent));
        let standing_by = standby.started.elapsed().as_secs_f64();
        sample.figures.push(("in standby s", standing_by));
    }
    standby.reset_peak_rss()?;
    let holder = c.members[leader].identity.clone().unwrap_or_default();
    let mut lease = LeaseWatch::start(&c.env.client, c.pair.lease(), holder).await?;
    let t0 = Instant::now();
    c.members[leader].kill();
    c.create("failover-kill").await?;
    let (converged, taken) = tokio::join!(
        conv.wait(1, NEW_REPLICAS, TAKEOVER),
        tokio::time::timeout(TAKEOVER, lease.changed())
    );
    converged?;
    sample.seconds = t0.elapsed().as_secs_f64();
    let (taken, _) = taken.context("the Lease never changed hands after the kill")??;
    // The wait for the lease to expire, then the new leader's own start.
    let waited = (taken - t0).as_secs_f64();
    sample.figures.push(("kill -> Lease taken s", waited));
    sample
        .figures
        .push(("Lease taken -> converged s", sample.seconds - waited));
    let takeover = c.members[next].peak_rss_mib()?;
    sample.figures.push(("takeover peak RSS MiB", takeover));
    sample
        .figures
        .push(("takeover peak / leader steady", takeover / steady));
    // Named before the replacement starts: until then, the one live candidate not named.
    c.leader().await?;
    c.spawn().await?;
    Ok(sample)
}

/// SIGTERMs the leader; once the Lease shows it released (its holder gone or changed), creates
/// a new object: the times from the SIGTERM to the release seen, and from there until the
/// object converged. A worker that does not release: from the SIGTERM, creating the object
/// then, until it converged.
async fn handover(
    c: &mut Candidates<'_>,
    conv: &mut Convergence,
) -> Result<Vec<(&'static str, String, Sample)>> {
    c.warmed().await?;
    let leader = c.leader().await?;
    let holder = c.members[leader].identity.clone().unwrap_or_default();
    let mut lease = LeaseWatch::start(&c.env.client, c.pair.lease(), holder).await?;
    let label = c.pair.label();
    let t0 = Instant::now();
    c.members[leader].terminate()?;
    if c.pair.releases() {
        let (seen, released) = tokio::time::timeout(TAKEOVER, lease.changed())
            .await
            .context("the Lease never changed after SIGTERM")??;
        c.create("failover-handover").await?;
        conv.wait(2, NEW_REPLICAS, TAKEOVER).await?;
        let release = Sample {
            seconds: (seen - t0).as_secs_f64(),
            note: match released {
                true => String::new(),
                false => "not released: the time to a new holder".into(),
            },
            ..Sample::default()
        };
        let converged = Sample {
            seconds: seen.elapsed().as_secs_f64(),
            ..Sample::default()
        };
        return Ok(vec![
            (RELEASE, label.clone(), release),
            (HANDOVER, label, converged),
        ]);
    }
    c.create("failover-handover").await?;
    let converged = async {
        conv.wait(2, NEW_REPLICAS, TAKEOVER).await?;
        Ok::<_, anyhow::Error>(t0.elapsed())
    };
    let (converged, changed) =
        tokio::join!(converged, tokio::time::timeout(TAKEOVER, lease.changed()));
    let (seconds, (seen, released)) = (converged?, changed.context("no new holder")??);
    let how = match released {
        true => "released",
        false => "never empty: a new holder",
    };
    let after = (seen - t0).as_secs_f64();
    let sample = Sample {
        seconds: seconds.as_secs_f64(),
        note: format!("Lease {how} {after:.1} s after SIGTERM"),
        ..Sample::default()
    };
    let label = format!("{label}, no release: SIGTERM -> converged");
    Ok(vec![(HANDOVER, label, sample)])
}

struct Candidate {
    worker: Worker,
    /// Its name in the Lease; a kube-controller-manager's is learnt when it leads.
    identity: Option<String>,
    /// Not signalled yet.
    alive: bool,
    started: Instant,
}

impl Candidate {
    fn process(&self) -> &Process {
        self.worker.process()
    }

    fn pid(&self) -> Result<u32> {
        self.process().pid().context("a candidate not running")
    }

    fn peak_rss_mib(&self) -> Result<f64> {
        Ok(mib(proc_stats(self.pid()?)?.peak_rss_kib))
    }

    fn rss_mib(&self) -> Result<f64> {
        Ok(mib(proc_stats(self.pid()?)?.rss_kib))
    }

    /// Starts its peak memory (VmHWM) over from what it holds now: the kernel's own peak, not
    /// a sample that could miss a short one.
    fn reset_peak_rss(&self) -> Result<()> {
        let path = format!("/proc/{}/clear_refs", self.pid()?);
        std::fs::write(&path, "5").with_context(|| format!("resetting the peak RSS in {path}"))
    }

    /// SIGKILL at once; the process is reaped when the candidate is dropped.
    fn kill(&mut self) {
        if let Some(kill) = self.process().killer() {
            kill();
        }
        self.alive = false;
    }

    /// SIGTERM, without waiting for the exit (the Lease is watched meanwhile).
    fn terminate(&mut self) -> Result<()> {
        let pid = self.pid()?;
        // SAFETY: a plain syscall on the process group the candidate leads (see
        // testenv::spawn_tied), which this candidate still owns, so not reused.
        unsafe { libc::kill(-(pid as i32), libc::SIGTERM) };
        self.alive = false;
        Ok(())
    }
}

/// The candidates on the pair's Lease, live and dead; all are killed when dropped.
struct Candidates<'a> {
    pair: Pair,
    env: &'a Env,
    operator_bin: &'a Path,
    members: Vec<Candidate>,
    /// The pod watches open before any candidate ran (see [`Candidates::warmed`]).
    other_watches: f64,
}

impl<'a> Candidates<'a> {
    async fn new(pair: Pair, env: &'a Env, operator_bin: &'a Path) -> Result<Self> {
        Ok(Self {
            pair,
            env,
            operator_bin,
            members: Vec::new(),
            other_watches: pod_watches(&env.client).await?,
        })
    }

    /// Starts one more candidate and waits until it is up: an operator ready (a standby is
    /// ready while it waits), a kube-controller-manager serving `/healthz`.
    async fn spawn(&mut self) -> Result<()> {
        let name = format!("bench-{}", char::from(b'a' + self.members.len() as u8));
        let started = Instant::now();
        let (worker, identity) = match self.pair {
            Pair::Operator { warm } => {
                let op = self.start_operator(&name, warm).await?;
                let identity = op.instance.clone();
                (Worker::Operator(op), Some(identity))
            }
            Pair::ControllerManager => {
                let process = self.start_controller_manager(&name).await?;
                (Worker::ControllerManager(process), None)
            }
        };
        self.members.push(Candidate {
            worker,
            identity,
            alive: true,
            started,
        });
        Ok(())
    }

    async fn start_operator(&self, name: &str, warm: bool) -> Result<Operator> {
        let kubeconfig = self.env.cluster.kubeconfig();
        let bin = self.operator_bin;
        let op = operator_launcher(&self.env.cluster, kubeconfig, bin, "podset", name)
            .args([
                "--leader-elect".into(),
                format!("--leader-election-namespace={NS}"),
                format!("--lease-duration-seconds={LEASE_SECONDS}"),
                format!("--warm-standby={warm}"),
            ])
            .start()?;
        op.wait_ready(STARTUP).await?;
        Ok(op)
    }

    /// The W4 target's kube-controller-manager flags, under leader election (renew deadline
    /// and retry period at their defaults, 10 s and 2 s), serving on a port of its own.
    async fn start_controller_manager(&self, name: &str) -> Result<Process> {
        let cluster = &self.env.cluster;
        let election = [
            "--leader-elect=true".into(),
            format!("--leader-elect-lease-duration={LEASE_SECONDS}s"),
        ];
        let (kubeconfig, target) = (cluster.kubeconfig(), self.pair.base());
        start_controller_manager(cluster, kubeconfig, target, name, &election).await
    }

    /// Waits until a live candidate holds the Lease: its index. A holder no candidate is known
    /// by is the one live candidate not named yet (a kube-controller-manager), named so.
    async fn leader(&mut self) -> Result<usize> {
        let (namespace, name) = self.pair.lease();
        let leases: Api<Lease> = Api::namespaced(self.env.client.clone(), namespace);
        let known: Vec<(Option<String>, bool)> = self
            .members
            .iter()
            .map(|c| (c.identity.clone(), c.alive))
            .collect();
        let (i, holder) = poll_some(TAKEOVER, "a live candidate holding the Lease", || async {
            let holder = holder_of(leases.get_opt(name).await?.as_ref());
            Ok(whose(&known, &holder).map(|i| (i, holder)))
        })
        .await?;
        self.members[i].identity = Some(holder);
        Ok(i)
    }

    /// The live candidate that is not `leader`.
    fn standby(&self, leader: usize) -> Result<usize> {
        (0..self.members.len())
            .find(|&i| i != leader && self.members[i].alive)
            .context("no standby")
    }

    /// With a warm standby, waits until every live operator watches the pods: the API
    /// server's count of open pod watches, beyond those open before any candidate ran. A
    /// watch opens once its initial list is done, so the standby then holds them all.
    async fn warmed(&self) -> Result<()> {
        if self.pair != (Pair::Operator { warm: true }) {
            return Ok(());
        }
        let live = self.members.iter().filter(|c| c.alive).count();
        let want = self.other_watches + live as f64;
        let what = format!("{want} pod watches (the warm standby's among them)");
        poll(STARTUP, &what, || async {
            Ok(pod_watches(&self.env.client).await? >= want)
        })
        .await
    }

    /// Creates a new object of [`NEW_REPLICAS`].
    async fn create(&self, name: &str) -> Result<()> {
        let (client, kind) = (&self.env.client, self.pair.kind());
        workload::create_all(client, NS, kind, &[name.to_string()], NEW_REPLICAS).await
    }
}
