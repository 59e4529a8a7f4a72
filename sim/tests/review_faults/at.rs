//! The At controller: a command run once, and a verdict that says what happened.

use super::*;

fn due_now(ns: &'static str, name: &str) -> Action {
    Action::CreateAt {
        ns,
        name: name.into(),
        due_in: -5,
        command: "echo YAY".into(),
    }
}

fn at_succeeded(scene: &Scene, ns: &str, name: &str) -> Result<(), String> {
    let at = scene.get(Kind::At, ns, name).ok_or("the At is gone")?;
    match at["status"]["succeeded"].as_bool() {
        Some(true) => Ok(()),
        _ => Err(format!("At {ns}/{name} did not succeed: {}", at["status"])),
    }
}

/// At `ns-a/job` reaches a verdict within `within`, and it is a success.
async fn succeeds_within(scene: &Scene, within: Duration) -> Result<(), String> {
    scene
        .until("a verdict", within, done("ns-a", "job"))
        .await?;
    at_succeeded(scene, "ns-a", "job")
}

/// Whether At `ns/name` is DONE.
fn done(ns: &'static str, name: &'static str) -> impl Fn(&Store) -> bool {
    move |store| {
        let key = Key {
            kind: Kind::At,
            namespace: ns.into(),
            name: name.into(),
        };
        store
            .get(&key)
            .is_some_and(|a| a["status"]["phase"] == "DONE")
    }
}

/// Fault 3, first half: the window in which a lost create may still land was counted on the
/// wall clock from the `startTime` another process wrote. A leader whose clock ran an hour
/// ahead sends the create of the pod and dies before it lands (then before it recorded
/// RUNNING; since the pod comes first, with nothing recorded): its successor must still reach
/// a verdict at once, not an hour later. (Random search: `ClockJump` seeds, "At is due and
/// RUNNING".)
#[test]
fn the_create_window_is_timed_by_the_process_that_waits_not_by_the_writers_clock() {
    let report = play(3, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        scene.replicas[l].jump_clock(&scene.sim, 3600);
        let stuck = RequestPlan {
            before: Before::Hang,
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::POST, "/pods", stuck, 1));
        scene.user(due_now("ns-a", "job"));
        // Simulated time: the leader reconciles the due At at once, and its create hangs.
        scene.sleep(secs(5)).await;
        scene.replicas[l].crash(&scene.sim);
        scene
            .until("a verdict", secs(200), done("ns-a", "job"))
            .await
    });
    assert_ok(&report);
}

/// Fault 3, second half: the window was counted from the reconcile's start, before the
/// RUNNING write, the Starting event and the waits for a write slot; the create itself left
/// later still and the server held it. A retry declared the command not run, then the pod
/// landed and ran. (Random search: `SlowServer` seeds, "PodVanished, but a run of its command
/// had ended".)
#[test]
fn no_verdict_of_not_run_while_our_own_create_may_still_land() {
    let report = play(31, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let held = |d| RequestPlan {
            before: Before::Hold(secs(d)),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::PATCH, "/ats/job/status", held(25), 1));
        scene.rule(rule(Some(l), Method::POST, "/events", held(25), 1));
        let late = RequestPlan {
            connect: Connect::Slow(secs(25)),
            before: Before::Hold(secs(40)),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::POST, "/pods", late, 1));
        scene.user(due_now("ns-a", "job"));
        scene
            .until("a verdict", secs(300), done("ns-a", "job"))
            .await?;
        // Whatever the server still held has landed by now.
        scene.sleep(secs(60)).await;
        at_succeeded(&scene, "ns-a", "job")
    });
    assert_ok(&report);
}

/// Fault 4: the RUNNING write landed, its reply was lost, and the next reconcile (RUNNING, no
/// pod) waited out the window and declared the pod vanished: the command never ran, though
/// this process knew it had sent no create. (Random search: "the process that recorded
/// RUNNING never sent the create of its pod", the commonest failure.)
#[test]
fn a_lost_reply_to_the_running_write_still_runs_the_command() {
    let report = play(4, Setup::default(), |scene| async move {
        leader(&scene).await?;
        let lost = RequestPlan {
            after: After::Lost,
            ..RequestPlan::default()
        };
        scene.rule(rule(None, Method::PATCH, "/ats/job/status", lost, 1));
        scene.user(due_now("ns-a", "job"));
        succeeds_within(&scene, secs(200)).await
    });
    assert_ok(&report);
}

/// Fault 9: a RUNNING At's pod that the cache does not have (someone took the operator's
/// label off it) was found by the live read, recorded, and then waited on for a watch event
/// that never comes: the At stayed RUNNING for good. (Random search: `UnlabelAtPod` seeds,
/// "At is due and RUNNING".)
#[test]
fn an_at_whose_pod_left_the_watch_still_ends() {
    let report = play(9, Setup::default(), |scene| async move {
        leader(&scene).await?;
        scene.user(Action::CreateAt {
            ns: "ns-a",
            name: "job".into(),
            due_in: -5,
            command: "sleep 1; echo YAY".into(),
        });
        scene
            .until("the pod", secs(30), |s| {
                s.objects(Kind::Pod, Some("ns-a"))
                    .any(|p| p["metadata"]["name"] == "job-pod")
            })
            .await?;
        scene.user(Action::UnlabelAtPod {
            ns: "ns-a",
            at: "job".into(),
        });
        succeeds_within(&scene, secs(120)).await
    });
    assert_ok(&report);
}

/// Found by the search (issue 26's eleventh): an At reconciled while its replica's clock was
/// half an hour behind set a timer for that half hour, and ran that late though the clock was
/// corrected seconds later. (Random search: `ClockJump` seeds, "At is due and PENDING".)
#[test]
fn an_at_runs_on_time_after_its_replicas_clock_is_corrected() {
    let setup = Setup {
        replicas: 1,
        settings: podset_sim::replica::ReplicaSettings {
            lease: None,
            ..Setup::default().settings
        },
        ..Setup::default()
    };
    let report = play(11, setup, |scene| async move {
        scene.sleep(secs(5)).await;
        scene.replicas[0].jump_clock(&scene.sim, -1800);
        scene.user(Action::CreateAt {
            ns: "ns-a",
            name: "job".into(),
            due_in: 60,
            command: "echo YAY".into(),
        });
        scene.sleep(secs(5)).await;
        scene.replicas[0].jump_clock(&scene.sim, 0);
        succeeds_within(&scene, secs(150)).await
    });
    assert_ok(&report);
}

/// The At's pod.
fn pod_of(scene: &Scene, ns: &str, at: &str) -> Result<serde_json::Value, String> {
    scene
        .get(Kind::Pod, ns, &format!("{at}-pod"))
        .ok_or_else(|| format!("no pod of At {ns}/{at}"))
}

/// The edit of At `ns-a/job` to a schedule `due_in` seconds away and a new command.
fn edit(due_in: i64) -> Action {
    Action::EditAt {
        ns: "ns-a",
        at: "job".into(),
        due_in: Some(due_in),
        command: "echo EDITED".into(),
    }
}

/// Found by the search (seed 500548, with the oracle's check of the command a released pod
/// runs): RUNNING was recorded first, the create did not get through, the spec was edited,
/// and the successor made the pod from the edited spec. The At said the edit was ignored,
/// and ran it. Since the pod comes first and RUNNING is recorded with its UID, under the
/// version the pod was made from, the command that runs is the one recorded.
#[test]
fn an_edit_after_the_at_started_never_changes_the_command_that_runs() {
    let report = play(12, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let stuck = plan(Before::Hang, After::Reply);
        scene.rule(rule(Some(l), Method::POST, "/pods", stuck, 1));
        scene.user(due_now("ns-a", "job"));
        scene.sleep(secs(5)).await;
        scene.user(edit(-5));
        scene.replicas[l].crash(&scene.sim);
        succeeds_within(&scene, secs(200)).await
    });
    assert_ok(&report);
}

/// The hazard of making the pod first: a create held at the server lands after the user
/// moved the schedule ten minutes later and changed the command. The pod, gated, must not run
/// (its record is refused: the At changed), and is deleted; the new command runs at the new
/// time.
#[test]
fn a_pod_made_from_a_spec_edited_since_never_runs() {
    let report = play(13, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let held = plan(Before::Hold(secs(10)), After::Reply);
        scene.rule(rule(Some(l), Method::POST, "/pods", held, 1));
        scene.user(due_now("ns-a", "job"));
        scene.sleep(secs(2)).await;
        scene.user(edit(600));
        // Nothing is recorded until the held create lands and its record is refused.
        scene
            .until("the stale pod deleted, the At PENDING", secs(60), |s| {
                let pending = s
                    .objects(Kind::At, Some("ns-a"))
                    .any(|a| a["status"]["phase"] == "PENDING");
                let pod = s
                    .objects(Kind::Pod, Some("ns-a"))
                    .any(|p| p["metadata"]["name"] == "job-pod");
                pending && !pod
            })
            .await?;
        scene.sleep(secs(590)).await;
        scene
            .until("a verdict", secs(60), done("ns-a", "job"))
            .await?;
        let command = pod_of(&scene, "ns-a", "job")?["spec"]["containers"][0]["command"][2].clone();
        match command.as_str() {
            Some("echo EDITED") => at_succeeded(&scene, "ns-a", "job"),
            other => Err(format!("the pod ran {other:?}")),
        }
    });
    assert_ok(&report);
}

/// Found by reading, after a sieve run on a real cluster failed once: with the pod made
/// first, a reconcile that read a stale copy of the At (PENDING, its RUNNING record not yet
/// seen) beside the pod's watch event took the gated pod it had just recorded for one it
/// should delete, deleted it, and the At ended PodVanished: the command never ran. A gated
/// pod is deleted only when it cannot be recorded (an older generation, a DONE At), which a
/// stale copy cannot make true.
#[test]
fn a_stale_copy_of_the_at_never_deletes_the_pod_it_recorded() {
    let report = play(14, Setup::default(), |scene| async move {
        // The leader's At watch (from about 17 s) goes quiet from 27 s to 87 s; its pod watch
        // (from 17.014 s) from 32.004 s, between the pod's create (32.002 s) and its release
        // (32.010 s): the next reconcile sees the pod gated and the At as it was before.
        let watch = "/apis/cnat.programming-kubernetes.info/v1beta1/ats?&watch=true";
        scene.rule(rule(None, Method::GET, watch, quiet(10, 60), 1));
        let pods = RequestPlan {
            watch: Some(WatchPlan {
                stall: Some((Duration::from_millis(14_990), secs(60))),
                cut: None,
            }),
            ..RequestPlan::default()
        };
        scene.rule(rule(None, Method::GET, "/api/v1/pods?&watch=true", pods, 1));
        leader(&scene).await?;
        scene.user(Action::CreateAt {
            ns: "ns-a",
            name: "job".into(),
            due_in: 12,
            command: "echo YAY".into(),
        });
        succeeds_within(&scene, secs(200)).await
    });
    assert_ok(&report);
}

/// Found by the Sieve walkthrough of an At deleted a second before it is due, behind a held
/// At watch: the stale cache made its pod, the status write answered 404, the garbage
/// collector removed the pod, and that removal brought the next round: over a hundred writes
/// in 3 s, for as long as the watch stayed behind.
#[test]
fn an_at_deleted_behind_a_quiet_watch_is_not_acted_on_in_a_loop() {
    deleted_behind_a_quiet_watch(28, None);
}

/// Found by the search (seed 953 with `UngateAtPod` in the workload): the same, but the
/// status write's 404 never answered (the connection hung). The round failed, and the next made
/// the pod again on the same stale cache. A create after a failed round reads the At first,
/// as the PodSet's does.
#[test]
fn an_at_deleted_behind_a_quiet_watch_is_not_made_a_pod_again_after_an_unanswered_write() {
    let lost = plan(Before::Pass, After::Hang);
    deleted_behind_a_quiet_watch(
        30,
        Some(rule(None, Method::PATCH, "/ats/later/status", lost, 1)),
    );
}

/// At `ns-a/later` is deleted a second before it is due, behind an At watch quiet for a
/// minute (and `fault` on the operator's requests from then on): no more than one pod is
/// made for it.
fn deleted_behind_a_quiet_watch(seed: u64, fault: Option<Rule>) {
    let report = play(seed, Setup::default(), |scene| async move {
        let watch = "/apis/cnat.programming-kubernetes.info/v1beta1/ats?&watch=true";
        scene.rule(rule(None, Method::GET, watch, quiet(20, 60), 2));
        leader(&scene).await?;
        scene.user(Action::CreateAt {
            ns: "ns-a",
            name: "later".into(),
            due_in: 20,
            command: "echo YAY".into(),
        });
        scene.sleep(secs(19)).await;
        let policy = Default::default();
        let at = "later".into();
        scene.user(Action::DeleteAt {
            ns: "ns-a",
            at,
            policy,
        });
        if let Some(fault) = fault {
            scene.rule(fault);
        }
        scene.sleep(secs(90)).await;
        scene.converged(secs(60)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by reading, with `UngateAtPod` in the workload: a gated pod that can never be
/// recorded (made from a spec edited since) was deleted by its UID alone. Someone else took
/// its gate off first, so it ran, and its deletion let the edited spec run too: the command
/// twice. A pod is discarded only while it is still the gated pod that was seen.
#[test]
fn a_pod_someone_else_ungated_is_never_discarded_and_run_again() {
    let report = play(29, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let held = plan(Before::Hold(secs(10)), After::Reply);
        scene.rule(rule(Some(l), Method::POST, "/pods", held, 1));
        let discard = plan(Before::Hold(secs(5)), After::Reply);
        scene.rule(rule(Some(l), Method::DELETE, "/pods/job-pod", discard, 1));
        scene.user(due_now("ns-a", "job"));
        scene.sleep(secs(2)).await;
        scene.user(edit(600));
        scene
            .until("the stale pod made", secs(30), |s| {
                s.objects(Kind::Pod, Some("ns-a"))
                    .any(|p| p["metadata"]["name"] == "job-pod")
            })
            .await?;
        scene.sleep(Duration::from_millis(500)).await;
        scene.user(Action::UngateAtPod {
            ns: "ns-a",
            at: "job".into(),
        });
        scene.sleep(secs(600)).await;
        scene
            .until("a verdict", secs(60), done("ns-a", "job"))
            .await?;
        Ok(())
    });
    assert_ok(&report);
}
