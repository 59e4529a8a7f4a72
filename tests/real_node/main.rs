//! The walkthroughs on a real node: the At's command really runs in busybox (its output is
//! the pod's log, its exit code the At's outcome), and PodSet pods are real containers
//! that run with the restricted security context, are restarted by the kubelet, and run
//! a user's own template.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Result, ensure};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams, PostParams};
use podset_operator::api::{At, AtPhase, PodSet};
use podset_operator::plan::at::CONDITION_COMPLETED;
use testenv::harness::{self, PROMPTLY, TestNs, at, cluster_with_real_node, converged, poll_some};
use testenv::{Cluster, Options};

mod readme;
mod v1beta1;

async fn namespace(prefix: &str) -> Result<TestNs> {
    TestNs::new_in(cluster_with_real_node().await?, prefix).await
}

/// An At run to DONE by the At controller in a namespace of its own: the At, its pod
/// (named in its status), and that pod's log through the API server.
struct Ran {
    ns: TestNs,
    at: At,
    pod: Pod,
    log: String,
    /// The operator's `/metrics` once the At was DONE.
    metrics: BTreeMap<String, f64>,
}

async fn run_at(prefix: &str, name: &str, schedule: &str, command: &str) -> Result<Ran> {
    run_at_in(
        cluster_with_real_node().await?,
        prefix,
        name,
        schedule,
        command,
    )
    .await
}

async fn run_at_in(
    cluster: Arc<Cluster>,
    prefix: &str,
    name: &str,
    schedule: &str,
    command: &str,
) -> Result<Ran> {
    let ns = TestNs::new_in(cluster, prefix).await?;
    let token = ns.scraper().await?;
    let op = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    api.create(&PostParams::default(), &at(name, schedule, command))
        .await?;
    let at = poll_some(PROMPTLY, &format!("at {name} DONE"), || async {
        let a = api.get(name).await?;
        let phase = a.status.as_ref().and_then(|s| s.phase);
        Ok((phase == Some(AtPhase::Done)).then_some(a))
    })
    .await?;
    let pod_name = at
        .status
        .as_ref()
        .and_then(|s| s.pod_name.clone())
        .unwrap_or_default();
    let pods = ns.api::<Pod>();
    // The At ends as its command's container does; the kubelet reports the pod's own end once
    // it has stopped the pod (a moment later on 1.37).
    let pod = poll_some(PROMPTLY, &format!("pod {pod_name} ended"), || async {
        let pod = pods.get(&pod_name).await?;
        let ended = matches!(harness::phase(&pod).as_str(), "Succeeded" | "Failed");
        Ok(ended.then_some(pod))
    })
    .await?;
    let log = pods.logs(&pod_name, &LogParams::default()).await?;
    // Counted as the DONE write is answered: a moment after the API server shows it.
    let metrics = poll_some(PROMPTLY, "the At's outcome counted", || async {
        let metrics = op.scrape(&token).await?;
        let counted = metrics
            .keys()
            .any(|k| k.starts_with("podset_operator_at_outcomes_total{"));
        Ok(counted.then_some(metrics))
    })
    .await?;
    Ok(Ran {
        ns,
        at,
        pod,
        log,
        metrics,
    })
}

impl Ran {
    /// The At was made once, `verdict` (its lateness observed, and its outcome counted).
    fn assert_measured(&self, verdict: &str) {
        let value = |series: &str| self.metrics.get(series).copied().unwrap_or_default();
        assert_eq!(value("podset_operator_at_lateness_seconds_count"), 1.0);
        let outcome = format!(r#"podset_operator_at_outcomes_total{{verdict="{verdict}"}}"#);
        assert_eq!(value(&outcome), 1.0, "{:#?}", self.metrics);
    }
}

fn completed_message(at: &At) -> String {
    at.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == CONDITION_COMPLETED)
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

/// The seed's walkthrough: `echo YAY` at a past time runs at once, the At ends DONE, its
/// pod Succeeded, and `kubectl logs` prints YAY.
#[tokio::test]
async fn at_echo_yay_ends_done_and_its_log_says_yay() -> Result<()> {
    let ran = run_at("at-yay", "example-at", "2019-04-12T10:12:00Z", "echo YAY").await?;
    assert_yay(&ran);
    ran.assert_measured("succeeded");
    Ok(())
}

fn assert_yay(ran: &Ran) {
    assert_eq!(ran.at.status.as_ref().and_then(|s| s.succeeded), Some(true));
    assert_eq!(ran.pod.name_any(), "example-at-pod");
    assert_eq!(harness::phase(&ran.pod), "Succeeded");
    assert_eq!(ran.log, "YAY\n");
}

/// `make cluster-down` then `make cluster-up`: the cluster in its directory keeps its state
/// and its node, under the same name, with no ghost of it left Ready for the scheduler to
/// bind pods to; the At walkthrough run right after the restart ends DONE with YAY.
#[tokio::test]
async fn a_restarted_cluster_keeps_its_node_and_runs_the_at_walkthrough_at_once() -> Result<()> {
    let dir = tempfile::Builder::new()
        .prefix("podset-testenv-restart-")
        .tempdir()?;
    let options = || Options {
        dir: Some(dir.path().to_path_buf()),
        crds: Some(podset_operator::api::crds_yaml()),
        ..Options::default().with_real_nodes(1)
    };
    let first = Cluster::start(options()).await?;
    let node = first.real_nodes();
    first.create_namespace("from-before").await?;
    drop(first);

    let again = Arc::new(Cluster::start(options()).await?);
    assert_eq!(again.real_nodes(), node, "the node's name changed");
    let client = again.client().await?;
    let nodes: Vec<String> = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await?
        .iter()
        .map(ResourceExt::name_any)
        .collect();
    assert_eq!(
        nodes, node,
        "a node this cluster no longer runs is still registered"
    );
    ensure!(
        Api::<Namespace>::all(client)
            .get_opt("from-before")
            .await?
            .is_some(),
        "the restart lost the cluster's state"
    );
    let ran = run_at_in(
        again,
        "at-restart",
        "example-at",
        "2019-04-12T10:12:00Z",
        "echo YAY",
    )
    .await?;
    assert_yay(&ran);
    Ok(())
}

#[tokio::test]
async fn at_exit_3_ends_done_unsucceeded_with_the_exit_code() -> Result<()> {
    let ran = run_at(
        "at-exit",
        "fails",
        "2019-04-12T10:12:00Z",
        "echo before; exit 3",
    )
    .await?;
    assert_eq!(
        ran.at.status.as_ref().and_then(|s| s.succeeded),
        Some(false)
    );
    let message = completed_message(&ran.at);
    assert!(message.contains("exit code 3"), "{message}");
    assert_eq!(harness::phase(&ran.pod), "Failed");
    assert_eq!(ran.log, "before\n");
    ran.assert_measured("failed");
    Ok(())
}

#[tokio::test]
async fn at_command_is_shell_syntax() -> Result<()> {
    let command = "echo $((1+2)); date -u +%Y; [ -n \"$HOSTNAME\" ] && echo host";
    let ran = run_at("at-shell", "shell", "2019-04-12T10:12:00Z", command).await?;
    let year = Timestamp::now().strftime("%Y").to_string();
    assert_eq!(ran.log, format!("3\n{year}\nhost\n"));
    Ok(())
}

/// A command due in the future starts on time (the pod is not created early, and its
/// container starts within a few seconds), and runs once.
#[tokio::test]
async fn at_due_later_runs_on_time_and_once() -> Result<()> {
    // Whole seconds (the schedule's resolution), far enough ahead to be seen PENDING.
    let due = Timestamp::from_second(Timestamp::now().as_second() + 6)?;
    let schedule = due.strftime("%Y-%m-%dT%H:%M:%SZ").to_string();
    let Ran { ns, pod, log, .. } = run_at("at-later", "later", &schedule, "date -u +%s").await?;
    let created = pod.creation_timestamp().expect("created").0;
    let started = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|cs| {
            cs.first()?
                .state
                .as_ref()?
                .terminated
                .as_ref()?
                .started_at
                .clone()
        })
        .expect("a terminated container with its start time")
        .0;
    let ran_at: i64 = log.trim().parse()?;
    let lateness = SignedDuration::from_secs(ran_at - due.as_second());
    println!(
        "at lateness on a real node: pod created {:?} after the schedule, container started {:?}, command ran {lateness:?}",
        created.duration_since(due),
        started.duration_since(due),
    );
    ensure!(
        created >= due,
        "pod created before its schedule ({created} < {due})"
    );
    ensure!(
        lateness >= SignedDuration::ZERO && lateness <= SignedDuration::from_secs(5),
        "command ran {lateness:?} after its schedule"
    );
    let pods = ns.api::<Pod>().list(&Default::default()).await?;
    assert_eq!(pods.items.len(), 1, "the command ran in more than one pod");
    assert_eq!(log.lines().count(), 1);
    Ok(())
}

/// The seed's PodSet walkthrough with real containers: 3 Running, scaled to 5, then 2.
#[tokio::test]
async fn podset_walkthrough_with_running_busybox_pods() -> Result<()> {
    let ns = namespace("ps-walk").await?;
    let _op = ns.start_operator(&["--controllers=podset"]).await?;
    let api = ns.api::<PodSet>();
    api.create(
        &PostParams::default(),
        &harness::podset("example-podset", 3),
    )
    .await?;
    let pods = converged(&ns, "example-podset", 3).await?;
    let node = cluster_with_real_node().await?.real_nodes();
    for p in &pods {
        assert_eq!(
            Some(&node[0]),
            p.spec.as_ref().and_then(|s| s.node_name.as_ref())
        );
    }
    for n in [5, 2] {
        scale(&api, "example-podset", n).await?;
        converged(&ns, "example-podset", n as usize).await?;
    }
    Ok(())
}

async fn scale(api: &Api<PodSet>, name: &str, n: i32) -> Result<()> {
    let patch = serde_json::json!({"spec": {"replicas": n}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(patch),
    )
    .await?;
    Ok(())
}

/// Runs the cluster's kubectl in the test's namespace, as a user would; its stdout.
async fn kubectl(ns: &TestNs, args: &[&str]) -> Result<String> {
    let out = tokio::process::Command::new(testenv::versions::kubectl())
        .arg(format!(
            "--kubeconfig={}",
            ns.cluster.kubeconfig().display()
        ))
        .args(["-n", &ns.name])
        .args(args)
        .kill_on_drop(true)
        .output()
        .await?;
    ensure!(
        out.status.success(),
        "kubectl {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8(out.stdout)?)
}

/// Runs `command` in the pod's container with `kubectl exec` (through the API server and
/// the kubelet, as a user would); its stdout.
async fn exec(ns: &TestNs, pod: &str, command: &[&str]) -> Result<String> {
    let mut args = vec!["exec", pod, "--"];
    args.extend_from_slice(command);
    kubectl(ns, &args).await
}

/// The field of /proc/1/status (`Uid:`, `Seccomp:` ...) as the container's PID 1 sees it.
fn status_field<'a>(status: &'a str, field: &str) -> &'a str {
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .unwrap_or_default()
        .trim()
}

/// The pods' restricted security context, enforced by the runtime: PID 1 runs as nobody,
/// under seccomp, without capabilities, unable to gain privileges.
#[tokio::test]
async fn podset_pods_run_restricted() -> Result<()> {
    let ns = namespace("ps-sec").await?;
    let _op = ns.start_operator(&["--controllers=podset"]).await?;
    ns.api::<PodSet>()
        .create(&PostParams::default(), &harness::podset("sec", 1))
        .await?;
    let pod = converged(&ns, "sec", 1).await?.remove(0).name_any();
    let status = exec(&ns, &pod, &["cat", "/proc/1/status"]).await?;
    assert_eq!(status_field(&status, "Uid:"), "65534\t65534\t65534\t65534");
    assert_eq!(status_field(&status, "Seccomp:"), "2");
    assert_eq!(status_field(&status, "CapEff:"), "0000000000000000");
    assert_eq!(status_field(&status, "CapBnd:"), "0000000000000000");
    assert_eq!(status_field(&status, "NoNewPrivs:"), "1");
    Ok(())
}

/// A container killed inside its pod is restarted by the kubelet; the pod keeps counting.
#[tokio::test]
async fn a_killed_container_is_restarted_and_still_counts() -> Result<()> {
    let ns = namespace("ps-kill").await?;
    let _op = ns.start_operator(&["--controllers=podset"]).await?;
    ns.api::<PodSet>()
        .create(&PostParams::default(), &harness::podset("kill", 2))
        .await?;
    let before = converged(&ns, "kill", 2).await?;
    let victim = before[0].name_any();
    let pods = ns.api::<Pod>();
    let container = pods
        .get(&victim)
        .await?
        .status
        .and_then(|s| s.container_statuses)
        .and_then(|cs| cs.first()?.container_id.clone())
        .expect("a running container has an id");
    // From the host, as an OOM kill or a crash ends it: PID 1 of a container cannot be
    // killed from inside.
    ensure!(
        testenv::node::cleanup::kill_container(&container) > 0,
        "no process in {container}"
    );
    poll_some(
        Duration::from_secs(60),
        "the kubelet restarted the killed container",
        || async {
            let p = pods.get(&victim).await?;
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|cs| cs.first().map(|c| c.restart_count))
                .unwrap_or(0);
            Ok((restarts >= 1 && harness::phase(&p) == "Running").then_some(()))
        },
    )
    .await?;
    let after = converged(&ns, "kill", 2).await?;
    let mut names: Vec<String> = after.iter().map(|p| p.name_any()).collect();
    names.sort();
    let mut was: Vec<String> = before.iter().map(|p| p.name_any()).collect();
    was.sort();
    assert_eq!(
        names, was,
        "the restarted pod was replaced instead of counted"
    );
    Ok(())
}

/// A user's template with its own command runs as written.
#[tokio::test]
async fn a_user_template_runs_its_own_command() -> Result<()> {
    let ns = namespace("ps-tmpl").await?;
    let _op = ns.start_operator(&["--controllers=podset"]).await?;
    let ps: PodSet = serde_json::from_value(serde_json::json!({
        "apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
        "metadata": {"name": "tmpl"},
        "spec": {"replicas": 1, "template": {"spec": {"containers": [{
            "name": "web", "image": "busybox",
            "command": ["sh", "-c", "echo serving from $(hostname); exec sleep 3600"]
        }]}}}
    }))?;
    ns.api::<PodSet>()
        .create(&PostParams::default(), &ps)
        .await?;
    let pod = converged(&ns, "tmpl", 1).await?.remove(0).name_any();
    let pods = ns.api::<Pod>();
    let log = poll_some(Duration::from_secs(30), "the template's output", || async {
        let log = pods.logs(&pod, &LogParams::default()).await?;
        Ok((!log.is_empty()).then_some(log))
    })
    .await?;
    assert_eq!(log, format!("serving from {pod}\n"));
    Ok(())
}

/// Issue 31, item 5, for real: a PodSet whose pods no node fits, and one whose image the
/// registry does not have. Each is "available" (Pending counts), and `kubectl describe`
/// shows why nothing runs, in the scheduler's and the kubelet's words.
#[tokio::test]
async fn pods_that_cannot_start_are_described_in_the_podset() -> Result<()> {
    let ns = namespace("ps-trouble").await?;
    let _op = ns.start_operator(&["--controllers=podset"]).await?;
    let trouble = [
        (
            "nowhere",
            serde_json::json!({"nodeSelector": {"podset-test/none": "x"},
            "containers": [{"name": "web", "image": "busybox", "command": ["sleep", "3600"]}]}),
            &["Unschedulable"][..],
            "nodes are available",
        ),
        (
            "noimage",
            serde_json::json!({"containers": [{"name": "web",
            "image": "podset-test/no-such-image:1"}]}),
            &["ErrImagePull", "ImagePullBackOff"][..],
            "no-such-image",
        ),
    ];
    for (name, spec, _, _) in &trouble {
        let ps: PodSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "app.example.com/v1beta1", "kind": "PodSet",
            "metadata": {"name": name},
            "spec": {"replicas": 1, "template": {"spec": spec}},
        }))?;
        ns.api::<PodSet>()
            .create(&PostParams::default(), &ps)
            .await?;
    }
    for (name, _, reasons, words) in trouble {
        let what = format!("{name}: PodsHealthy False, {reasons:?}, in kubectl describe");
        let described = poll_some(PROMPTLY, &what, || async {
            let ps = ns.api::<PodSet>().get(name).await?;
            let status = ps.status.unwrap_or_default();
            let told = status.conditions.iter().any(|c| {
                c.type_ == "PodsHealthy"
                    && c.status == "False"
                    && reasons.contains(&c.reason.as_str())
                    && c.message.contains(words)
            });
            if !told || status.available_replicas != 1 {
                return Ok(None);
            }
            let described = ns.kubectl(&["describe", "podset", name])?;
            let warned = reasons.iter().any(|r| {
                described
                    .lines()
                    .any(|l| l.contains("Warning") && l.contains(r))
            });
            Ok(warned.then_some(described))
        })
        .await?;
        ensure!(described.contains(words), "{described}");
    }
    Ok(())
}

/// Issue 45, fault 8: an At whose command can never start (its image is never pulled) says
/// why while it waits and, with a start deadline, gives up at it: its pod deleted, the At
/// DONE, failed, DeadlineExceeded. Another At runs in the image it names.
#[tokio::test]
async fn an_at_whose_command_cannot_start_gives_up_at_its_start_deadline() -> Result<()> {
    let ns = namespace("at-deadline").await?;
    let _op = ns.start_operator(&["--controllers=at"]).await?;
    let api = ns.api::<At>();
    let mut stuck = at("stuck", "2019-04-12T10:12:00Z", "echo never");
    stuck.spec.command_container_mut().unwrap().image = Some("podset-test/no-such-image:1".into());
    stuck.spec.start_deadline_seconds = Some(15);
    let mut named = at("named", "2019-04-12T10:12:00Z", "echo YAY");
    named.spec.command_container_mut().unwrap().image = Some(format!(
        "docker.io/library/{}",
        podset_operator::api::BUSYBOX_IMAGE
    ));
    for a in [&stuck, &named] {
        api.create(&PostParams::default(), a).await?;
    }
    let done = async |name: &str| {
        poll_some(
            Duration::from_secs(120),
            &format!("at {name} DONE"),
            || async {
                let a = api.get(name).await?;
                let phase = a.status.as_ref().and_then(|s| s.phase);
                Ok((phase == Some(AtPhase::Done)).then_some(a))
            },
        )
        .await
    };
    let gave_up = done("stuck").await?;
    let status = gave_up.status.clone().unwrap_or_default();
    assert_eq!(status.succeeded, Some(false));
    let completed = status
        .conditions
        .iter()
        .find(|c| c.type_ == CONDITION_COMPLETED);
    assert_eq!(
        completed.map(|c| c.reason.as_str()),
        Some(podset_operator::plan::at::REASON_DEADLINE_EXCEEDED),
        "{status:?}"
    );
    let message = completed_message(&gave_up);
    assert!(message.contains("within 15 s"), "{message}");
    let pods = ns.api::<Pod>();
    harness::poll(PROMPTLY, "the stuck At's pod deleted", || async {
        Ok(pods
            .get_opt("stuck-pod")
            .await?
            .is_none_or(|p| p.metadata.deletion_timestamp.is_some()))
    })
    .await?;
    let ran = done("named").await?;
    assert_eq!(ran.status.and_then(|s| s.succeeded), Some(true));
    Ok(())
}
