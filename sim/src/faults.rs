//! The fault schedule, as FoundationDB's BUGGIFY draws it: each kind of fault is switched on
//! for a whole run with even odds, and, when on, fires with a fixed chance each time a request
//! (or a watch, or a moment in the replica schedule) reaches it. So every run mixes progress
//! with partial failure, and a fault the others would drown out gets runs of its own.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
pub enum Fault {
    /// The connection is refused: the request never leaves.
    Refused,
    /// A new connection takes seconds to open (SYNs retransmitted), then the request leaves.
    SlowConnect,
    /// 429 with `Retry-After: 1`, before anything is done.
    TooManyRequests,
    /// 500 InternalError, before anything is done.
    InternalError,
    /// 503, before anything is done.
    Unavailable,
    /// The server holds the request for a while (a slow etcd) before carrying it out.
    SlowServer,
    /// The request is carried out; its reply is lost (a connection reset).
    LostReply,
    /// The request never reaches the server, and no answer comes (a dead path).
    HangBefore,
    /// The request is carried out, and no answer comes.
    HangAfter,
    /// The request is carried out, and the answer is 504 Timeout.
    TimeoutAfter,
    /// The answer comes late.
    SlowReply,
    /// A watch delivers nothing for a while, then everything held.
    WatchStall,
    /// A watch ends early (the client resumes from its last version, or relists).
    WatchCut,
    /// The change log is compacted: a resumed watch is told 410 Gone and relists.
    Compaction,
    /// A replica dies (its memory with it) and restarts.
    Crash,
    /// A replica dies right after one of its writes was carried out.
    CrashAfterWrite,
    /// A replica is asked to stop (SIGTERM, as in a rolling upgrade) and restarts.
    Terminate,
    /// A replica is paused (SIGSTOP, a VM migration, a long GC) and resumed.
    Freeze,
    /// A replica's wall clock jumps.
    ClockJump,
    /// A deleted pod's node is lost: the pod stays Terminating for the rest of the run.
    StuckTerminating,
    /// A pod create meets a validating webhook that cannot be called (`failurePolicy:
    /// Fail`): 500 InternalError "failed calling webhook", nothing stored.
    AdmissionDown,
    /// A mutating webhook adds a sidecar to a pod as it is created (a service mesh's proxy):
    /// a container, or an init container that keeps running (`restartPolicy: Always`), which
    /// may run on, end or fail beside the pod's own container.
    Sidecar,
    /// The kubelet kills an At's command for its memory: OOMKilled, exit code 137.
    OomKilled,
    /// Every request of the fault phase takes a latency each way (a congested or distant path
    /// to the API server, a proxy): drawn once per run, up to a fifth of the renew deadline,
    /// at which client-go's margins still hold (`Faults::slow_path`).
    SlowPath,
    /// The kubelet rejects a PodSet's or an At's pod as it is bound, before it starts
    /// (`OutOfpods`, `NodeAffinity`): Failed, with its reason.
    Rejected,
}

impl Fault {
    pub const ALL: [Fault; 25] = [
        Fault::Refused,
        Fault::SlowConnect,
        Fault::TooManyRequests,
        Fault::InternalError,
        Fault::Unavailable,
        Fault::SlowServer,
        Fault::LostReply,
        Fault::HangBefore,
        Fault::HangAfter,
        Fault::TimeoutAfter,
        Fault::SlowReply,
        Fault::WatchStall,
        Fault::WatchCut,
        Fault::Compaction,
        Fault::Crash,
        Fault::CrashAfterWrite,
        Fault::Terminate,
        Fault::Freeze,
        Fault::ClockJump,
        Fault::StuckTerminating,
        Fault::AdmissionDown,
        Fault::Sidecar,
        Fault::OomKilled,
        Fault::SlowPath,
        Fault::Rejected,
    ];

    /// The chance it fires each time it is reached, when on.
    fn rate(self) -> f64 {
        match self {
            Fault::Sidecar => 0.30,
            Fault::SlowReply | Fault::StuckTerminating | Fault::OomKilled => 0.10,
            Fault::Rejected => 0.20,
            Fault::WatchStall | Fault::WatchCut => 0.15,
            Fault::Refused
            | Fault::TooManyRequests
            | Fault::LostReply
            | Fault::TimeoutAfter
            | Fault::AdmissionDown => 0.05,
            Fault::InternalError | Fault::Unavailable | Fault::HangAfter => 0.03,
            Fault::SlowConnect | Fault::SlowServer | Fault::HangBefore | Fault::CrashAfterWrite => {
                0.02
            }
            // Reached once per simulated second of the fault phase, in each replica.
            Fault::Crash | Fault::Terminate | Fault::Freeze | Fault::ClockJump => 0.01,
            Fault::Compaction => 0.02,
            // Drawn once, for the whole fault phase.
            Fault::SlowPath => 1.0,
        }
    }
}

/// What the network does to one request.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RequestPlan {
    pub connect: Connect,
    pub before: Before,
    pub after: After,
    /// Extra time before the answer is read.
    pub slow_reply: Duration,
    /// For a watch: what happens to its stream (drawn at random when `None`).
    pub watch: Option<WatchPlan>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Connect {
    #[default]
    Pooled,
    Refused,
    Slow(Duration),
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum Before {
    #[default]
    Pass,
    /// Answered with this status, nothing done.
    Status(u16, &'static str),
    /// Answered 500 by admission, whose webhook could not be called: nothing done.
    WebhookDown,
    /// Carried out, the pod's `app.kubernetes.io/managed-by` label taken away by a mutating
    /// webhook or policy: stored hidden from the operator's pod watch. Scripted only: a
    /// replica that crashes (or loses the answer) between such a create and its delete leaves
    /// a pod no replica can see, which the random search would find (see docs/architecture.md).
    StripLabel,
    /// Carried out, a sidecar added by a mutating webhook ([`Fault::Sidecar`]).
    Sidecar(Sidecar),
    Hang,
    /// Carried out after this long at the server.
    Hold(Duration),
}

/// A sidecar a webhook adds to a pod.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sidecar {
    /// An init container with `restartPolicy: Always` (stopped by the kubelet once the pod's
    /// containers ended), else a container of its own.
    pub native: bool,
    /// The code it exits with once the pod's own container ended; `None`: it runs on.
    pub exits: Option<i64>,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub enum After {
    #[default]
    Reply,
    Lost,
    Hang,
    Timeout,
}

/// What happens to one watch's stream.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchPlan {
    /// Nothing delivered from `.0` after the start for `.1`.
    pub stall: Option<(Duration, Duration)>,
    /// The stream ends this long after the start.
    pub cut: Option<Duration>,
}

/// A fault a scenario aims at particular requests: the next `times` requests that match get
/// `plan`.
#[derive(Clone, Debug)]
pub struct Rule {
    /// Only the requests of this replica; any replica's when `None`.
    pub replica: Option<usize>,
    pub method: http::Method,
    /// A part of the path (and query) the request must contain.
    pub path: String,
    pub plan: RequestPlan,
    pub times: u32,
}

/// The request a plan is drawn for.
pub struct Request<'a> {
    pub replica: usize,
    pub method: &'a http::Method,
    pub path: &'a str,
}

pub struct Faults {
    rng: fastrand::Rng,
    enabled: BTreeSet<Fault>,
    rules: Vec<Rule>,
    /// Faults fire only while true (the fault phase).
    pub active: bool,
    pub counts: BTreeMap<Fault, u64>,
    /// The latency each way of every request drawn at random ([`Fault::SlowPath`]).
    path_latency: Duration,
    /// PodSets (by name) whose every pod the kubelet rejects during the fault phase: a
    /// template no node admits.
    pub rejecting: BTreeSet<String>,
}

impl Faults {
    /// Switches each kind on with even odds, or exactly `only` when given.
    pub fn new(mut rng: fastrand::Rng, only: Option<&[Fault]>) -> Self {
        let enabled = match only {
            Some(only) => only.iter().copied().collect(),
            None => Fault::ALL.into_iter().filter(|_| rng.bool()).collect(),
        };
        Self {
            rng,
            enabled,
            rules: Vec::new(),
            active: true,
            counts: BTreeMap::new(),
            path_latency: Duration::ZERO,
            rejecting: BTreeSet::new(),
        }
    }

    /// With [`Fault::Rejected`] on, one run in two has a PodSet whose every pod is rejected.
    pub fn draw_rejecting(&mut self, podset: &str) {
        if self.enabled.contains(&Fault::Rejected) && self.rng.bool() {
            self.rejecting.insert(podset.to_string());
        }
    }

    /// Whether the kubelet rejects a pod of PodSet `podset` now.
    pub fn rejects(&mut self, podset: &str) -> bool {
        let always = self.active && self.rejecting.contains(podset);
        if always {
            *self.counts.entry(Fault::Rejected).or_default() += 1;
        }
        always || self.fire(Fault::Rejected)
    }

    pub fn enabled(&self) -> &BTreeSet<Fault> {
        &self.enabled
    }

    /// Whether `fault` fires now.
    pub fn fire(&mut self, fault: Fault) -> bool {
        let fires = self.active && self.enabled.contains(&fault) && self.rng.f64() < fault.rate();
        if fires {
            *self.counts.entry(fault).or_default() += 1;
        }
        fires
    }

    /// A duration between `low` and `high`.
    pub fn between(&mut self, low: Duration, high: Duration) -> Duration {
        low + (high - low).mul_f64(self.rng.f64())
    }

    /// Draws the latency of a slow path, if that fault is on: up to a fifth of
    /// `renew_deadline` (a renewal, and a read and a write after a conflict, then fit in it),
    /// or a second without leader election.
    pub fn slow_path(&mut self, renew_deadline: Option<Duration>) {
        if self.enabled.contains(&Fault::SlowPath) {
            let most = renew_deadline.map_or(secs(1), |d| d / 5);
            self.path_latency = self.between(Duration::from_millis(20), most);
            *self.counts.entry(Fault::SlowPath).or_default() += 1;
        }
    }

    pub fn add_rule(&mut self, rule: Rule) {
        self.rules.push(rule);
    }

    /// The plan of the first rule `req` matches, else one drawn at random.
    pub fn plan_request(&mut self, req: &Request<'_>) -> RequestPlan {
        let rule = self.rules.iter_mut().find(|r| {
            r.times > 0
                && r.replica.is_none_or(|id| id == req.replica)
                && r.method == *req.method
                && req.path.contains(&r.path)
        });
        if let Some(rule) = rule {
            rule.times -= 1;
            return rule.plan.clone();
        }
        let mut plan = self.random_plan();
        if self.active {
            plan.connect = match plan.connect {
                Connect::Pooled if !self.path_latency.is_zero() => Connect::Slow(self.path_latency),
                Connect::Slow(d) => Connect::Slow(d + self.path_latency),
                other => other,
            };
            plan.slow_reply += self.path_latency;
        }
        let pod_create = *req.method == http::Method::POST
            && req
                .path
                .split('?')
                .next()
                .is_some_and(|p| p.ends_with("/pods"));
        if pod_create && plan.before == Before::Pass && self.fire(Fault::AdmissionDown) {
            plan.before = Before::WebhookDown;
        }
        if pod_create && plan.before == Before::Pass && self.fire(Fault::Sidecar) {
            let exits = [None, Some(0), Some(1), Some(137)][self.rng.usize(..4)];
            let native = self.rng.bool();
            plan.before = Before::Sidecar(Sidecar { native, exits });
        }
        plan
    }

    fn random_plan(&mut self) -> RequestPlan {
        let mut plan = RequestPlan::default();
        if self.fire(Fault::Refused) {
            plan.connect = Connect::Refused;
            return plan;
        }
        if self.fire(Fault::SlowConnect) {
            plan.connect = Connect::Slow(self.between(secs(1), secs(25)));
        }
        plan.before = if self.fire(Fault::TooManyRequests) {
            Before::Status(429, "TooManyRequests")
        } else if self.fire(Fault::InternalError) {
            Before::Status(500, "InternalError")
        } else if self.fire(Fault::Unavailable) {
            Before::Status(503, "ServiceUnavailable")
        } else if self.fire(Fault::HangBefore) {
            Before::Hang
        } else if self.fire(Fault::SlowServer) {
            Before::Hold(self.between(secs(1), MAX_HOLD))
        } else {
            Before::Pass
        };
        plan.after = if self.fire(Fault::LostReply) {
            After::Lost
        } else if self.fire(Fault::HangAfter) {
            After::Hang
        } else if self.fire(Fault::TimeoutAfter) {
            After::Timeout
        } else {
            After::Reply
        };
        if self.fire(Fault::SlowReply) {
            plan.slow_reply = self.between(Duration::from_millis(100), secs(5));
        }
        plan
    }

    pub fn plan_watch(&mut self) -> WatchPlan {
        let stall = self.fire(Fault::WatchStall).then(|| {
            (
                self.between(secs(0), MAX_STALL_FROM),
                self.between(secs(1), MAX_STALL),
            )
        });
        let cut = self
            .fire(Fault::WatchCut)
            .then(|| self.between(Duration::from_millis(10), secs(120)));
        WatchPlan { stall, cut }
    }
}

/// The longest the server holds a request (kube-apiserver gives up on one after 60 s).
pub const MAX_HOLD: Duration = Duration::from_secs(60);
/// How late in a watch a stall may begin, and how long it may last.
const MAX_STALL_FROM: Duration = Duration::from_secs(30);
const MAX_STALL: Duration = Duration::from_secs(60);
/// By when, after its start, every stall of a watch has ended.
pub const STALLS_OVER: Duration = MAX_STALL_FROM.saturating_add(MAX_STALL);

pub fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}
