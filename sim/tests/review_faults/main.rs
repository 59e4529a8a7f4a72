//! The faults a review of the operator found (issue 26), and those the random search found
//! since, each as a scripted scenario on the simulation: the order of events that breaks it,
//! and the oracle's verdict. Each failed on the code it was found in (see the note on each).

use std::time::Duration;

use http::Method;
use podset_sim::faults::{After, Before, Connect, RequestPlan, Rule, WatchPlan};
use podset_sim::model::objects;
use podset_sim::model::resource::Kind;
use podset_sim::model::store::finalizers::Propagation;
use podset_sim::model::store::{Key, Store};
use podset_sim::replica::{LEASE_NAME, LEASE_NAMESPACE};
use podset_sim::scenario::{Scene, Setup, assert_ok, play};
use podset_sim::workload::{Action, NAMESPACES, pods_of};

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

fn rule(replica: Option<usize>, method: Method, path: &str, plan: RequestPlan, times: u32) -> Rule {
    Rule {
        replica,
        method,
        path: path.into(),
        plan,
        times,
    }
}

/// What befalls a request before the server acts on it, and its answer after.
fn plan(before: Before, after: After) -> RequestPlan {
    RequestPlan {
        before,
        after,
        ..RequestPlan::default()
    }
}

/// The replica that leads, once it acts (its caches synced).
async fn leader(scene: &Scene) -> Result<usize, String> {
    for _ in 0..300 {
        if let Some(l) = scene.leader().filter(|l| l.ready()) {
            scene.sleep(secs(3)).await;
            return Ok(l.id);
        }
        scene.sleep(Duration::from_millis(100)).await;
    }
    Err("no replica led within 30 s".into())
}

/// The user creates PodSet `ns-a/web`.
fn create_web(replicas: i64) -> Action {
    Action::CreatePodSet {
        ns: "ns-a",
        name: "web".into(),
        replicas,
    }
}

/// The user scales PodSet `ns-a/web` to each of `replicas` in turn, `every` apart.
async fn keep_scaling_web(scene: &Scene, every: Duration, replicas: &[i64]) {
    for &replicas in replicas {
        scene.sleep(every).await;
        scene.user(Action::Scale {
            ns: "ns-a",
            name: "web".into(),
            replicas,
        });
    }
}

/// The user deletes PodSet `ns-a/web`.
fn delete_web() -> Action {
    Action::DeletePodSet {
        ns: "ns-a",
        name: "web".into(),
        policy: Default::default(),
    }
}

/// A watch that delivers nothing from `from` seconds after its start, for `long` seconds.
fn quiet(from: u64, long: u64) -> RequestPlan {
    RequestPlan {
        watch: Some(WatchPlan {
            stall: Some((secs(from), secs(long))),
            cut: None,
        }),
        ..RequestPlan::default()
    }
}

mod at;
mod deleted_podset;
mod leadership;
mod podset;
