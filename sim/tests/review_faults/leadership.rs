//! Leadership: the fence, the Lease, and replicas asked to stop.

use super::*;

/// Fault 2: the fence was checked when a write's future was first polled, before its
/// connection opened. A create that passed the check, on a connection still opening when the
/// leader was paused past its lease, left once it resumed: after its successor acted.
/// (Random search: `Freeze` and `SlowConnect` seeds, "sent ... while its fence was closed".)
#[test]
fn a_write_never_leaves_after_the_fence_closed() {
    let report = play(2, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let slow = RequestPlan {
            connect: Connect::Slow(secs(5)),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::POST, "/pods", slow, 1));
        scene.user(create_web(1));
        // Paused past its lease, and resumed before the create's own 30 s deadline.
        scene.sleep(secs(1)).await;
        scene.replicas[l].gate.freeze();
        scene.sleep(secs(24)).await;
        scene.replicas[l].gate.thaw();
        scene.sleep(secs(5)).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Fault 6: with the Lease's namespace missing (a typo in `--leader-election-namespace`), a
/// 404 on the Lease's create was taken as a lost race: the operator retried silently for
/// good and reported ready. It must say so, and not be ready.
#[test]
fn a_missing_lease_namespace_is_reported_and_not_ready() {
    let setup = Setup {
        replicas: 1,
        namespaces: NAMESPACES.to_vec(),
        ..Setup::default()
    };
    let report = play(6, setup, |scene| async move {
        scene.sleep(secs(30)).await;
        if scene.replicas[0].ready() {
            return Err("ready, though it can never lead".into());
        }
        let said = podset_sim::trace::snapshot().iter().any(|l| {
            l.contains("ERROR")
                && l.contains(LEASE_NAMESPACE)
                && l.contains("leader-election-namespace")
        });
        match said {
            true => Ok(()),
            false => Err("no error naming the Lease's namespace and its flag".into()),
        }
    });
    assert_ok(&report);
}

/// Fault 7: a deleted Lease was created at once by a standby, while the old leader's fence
/// stayed open until its watch or its next renewal told it. Here the leader learns late (its
/// Lease reads are slow), and both act on a PodSet being scaled. (Random search:
/// `DeleteLease` seeds, "two leaders at once".)
#[test]
fn a_deleted_lease_is_not_taken_while_its_holder_may_still_act() {
    let report = play(7, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        scene.user(create_web(2));
        scene.sleep(secs(5)).await;
        let slow = RequestPlan {
            slow_reply: secs(4),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::GET, "/leases", slow.clone(), 100));
        scene.user(Action::DeleteLease);
        keep_scaling_web(&scene, Duration::from_millis(700), &[4, 1, 3, 2, 5, 1]).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Fault 7 again, found by the search (seed 72781): a standby saw no Lease, and a lease
/// duration later saw none again, and took it at once; in between another replica had
/// created it and led, and a person deleted it under that leader, which acted on until its
/// renew deadline. Absence seen twice is not absence throughout.
#[test]
fn a_lease_that_came_and_went_between_two_reads_is_not_taken_at_once() {
    let report = play(72, Setup::default(), |scene| async move {
        let hang = RequestPlan {
            before: Before::Hang,
            ..RequestPlan::default()
        };
        let held = |s| RequestPlan {
            before: Before::Hold(secs(s)),
            ..RequestPlan::default()
        };
        // Replica 1 never hears of the Lease from its watch; its next read of it is carried
        // out late; the leader's own attempt to write it again lands later still.
        scene.rule(rule(Some(1), Method::GET, "/leases?", hang, 1000));
        scene.sleep(secs(1)).await;
        scene.rule(rule(Some(1), Method::GET, "/leases/", held(8), 1));
        let l = leader(&scene).await?;
        if l != 0 {
            return Err(format!("replica {l} led first; the script needs replica 0"));
        }
        scene.user(create_web(2));
        scene.sleep(secs(1)).await;
        scene.rule(rule(Some(0), Method::POST, "/leases", held(4), 1));
        scene.user(Action::DeleteLease);
        keep_scaling_web(
            &scene,
            Duration::from_millis(400),
            &[4, 1, 3, 2, 5, 1, 4, 2, 3, 1, 5, 2],
        )
        .await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by the search (seed 108046): a standby created a deleted Lease, the reply was lost,
/// and its next read showed the Lease naming it: it led at once, as if renewing, while the
/// paused leader whose Lease was deleted could still act.
#[test]
fn a_lease_created_under_a_lost_reply_is_waited_out_too() {
    lease_created_under_lost_replies(15, &[Method::POST]);
}

/// Found by the search (seed 3011907650567911072): as above, and the first write over that
/// Lease lost its reply too. That attempt had used up the memory of the lost create, so the
/// one after led at once.
#[test]
fn a_lease_created_under_a_lost_reply_is_waited_out_though_the_next_write_is_lost_too() {
    lease_created_under_lost_replies(27, &[Method::POST, Method::PUT]);
}

/// The leader paused, its Lease deleted, and the standby's first write of each of `lost`
/// methods on the Lease carried out with its reply lost.
fn lease_created_under_lost_replies(seed: u64, lost: &'static [Method]) {
    let report = play(seed, Setup::default(), move |scene| async move {
        let l = leader(&scene).await?;
        let standby = 1 - l;
        let plan = RequestPlan {
            after: After::Lost,
            ..RequestPlan::default()
        };
        for method in lost {
            let path = format!("/namespaces/{LEASE_NAMESPACE}/leases");
            scene.rule(rule(Some(standby), method.clone(), &path, plan.clone(), 1));
        }
        scene.replicas[l].gate.freeze();
        scene.user(Action::DeleteLease);
        scene.sleep(secs(4)).await;
        scene.user(create_web(2));
        scene.sleep(secs(2)).await;
        scene.replicas[l].gate.thaw();
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// A replica that created a deleted Lease and is asked to stop while it waits must not
/// release it: that hands it over at once, while the holder it was deleted under may still
/// act. (Found by the search, seed 200423, in a first version of the wait.)
#[test]
fn a_creator_asked_to_stop_while_it_waits_does_not_hand_the_lease_over() {
    let setup = Setup {
        replicas: 3,
        ..Setup::default()
    };
    let report = play(16, setup, |scene| async move {
        let l = leader(&scene).await?;
        scene.replicas[l].gate.freeze();
        scene.user(Action::DeleteLease);
        scene.sleep(secs(1)).await;
        let holder = scene.get(Kind::Lease, LEASE_NAMESPACE, LEASE_NAME);
        let holder = holder
            .as_ref()
            .and_then(|l| l["spec"]["holderIdentity"].as_str());
        let Some(creator) = scene
            .replicas
            .iter()
            .find(|r| Some(r.identity().as_str()) == holder)
        else {
            return Err(format!("no replica created the Lease again: {holder:?}"));
        };
        scene.user(create_web(2));
        creator.terminate(&scene.sim).await;
        scene.sleep(secs(3)).await;
        scene.replicas[l].gate.thaw();
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by the search (seed 209364): a status write of the leader's, held by the server
/// past its answer's timeout, landed after the leader had reconciled again, with nothing
/// else changing: the PodSet showed the old status until the five-minute resync, since only
/// a new generation woke its reconcile. The same for a person's write to `/status`. The
/// ReplicaSet controller reconciles on every update; ours on every one but its own.
#[test]
fn a_status_written_by_another_is_put_right_at_once() {
    let report = play(17, Setup::default(), |scene| async move {
        leader(&scene).await?;
        scene.user(create_web(2));
        scene.converged(secs(30)).await;
        // Its pods started and ready: nothing else wakes its reconcile.
        scene.sleep(secs(10)).await;
        scene.user(Action::WriteStatus {
            ns: "ns-a",
            name: "web".into(),
        });
        scene.converged(secs(10)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Issue 26 (smaller): a leader that stepped down kept its pod cache, and its
/// `managed_pods` metric went on counting pods it no longer manages, from a cache no longer
/// watched. Now a warm standby watches them again (issue 28), and still counts none.
#[test]
fn a_replica_that_stepped_down_counts_no_pods() {
    let report = play(19, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        scene.user(create_web(3));
        scene.converged(secs(30)).await;
        let former = &scene.replicas[l];
        if former.managed_pods() != 3 {
            return Err(format!("the leader counts {} pods", former.managed_pods()));
        }
        former.gate.freeze();
        scene.sleep(secs(30)).await;
        former.gate.thaw();
        scene.sleep(secs(5)).await;
        if former.leads() {
            return Err("the frozen leader still leads".into());
        }
        match (former.managed_pods(), former.cached_pods()) {
            (0, 3) => Ok(()),
            (0, n) => Err(format!("a warm standby caches {n} pods, not the 3")),
            (n, _) => Err(format!("a standby counts {n} pods")),
        }
    });
    assert_ok(&report);
}

/// Fault 8: on SIGTERM the Lease was released right after in-flight reconciles were dropped,
/// while their writes could still be on their way: the successor acted before they landed.
#[test]
fn a_stopping_leader_does_not_hand_over_while_its_writes_may_land() {
    let setup = Setup {
        settings: podset_sim::replica::ReplicaSettings {
            shutdown_timeout: secs(1),
            ..Setup::default().settings
        },
        ..Setup::default()
    };
    let report = play(8, setup, |scene| async move {
        let l = leader(&scene).await?;
        let held = RequestPlan {
            before: Before::Hold(secs(4)),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::POST, "/pods", held, 10));
        scene.user(create_web(3));
        scene.sleep(Duration::from_millis(100)).await;
        scene.replicas[l].terminate(&scene.sim).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by the search (seed 107199): a leader asked to stop whose term lapsed while its
/// reconciles drained went back to waiting for the Lease, and hung there until killed.
#[test]
fn a_leader_asked_to_stop_stops_though_its_term_lapses_meanwhile() {
    let setup = Setup {
        settings: podset_sim::replica::ReplicaSettings {
            shutdown_timeout: secs(15),
            ..Setup::default().settings
        },
        ..Setup::default()
    };
    let report = play(13, setup, |scene| async move {
        let l = leader(&scene).await?;
        let hang = RequestPlan {
            before: Before::Hang,
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::PUT, "/leases/", hang.clone(), 100));
        scene.rule(rule(Some(l), Method::POST, "/pods", hang, 100));
        scene.user(create_web(3));
        scene.sleep(secs(1)).await;
        scene.replicas[l].terminate(&scene.sim).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by the search (seed 100096): a standby whose read of the Lease hung ignored SIGTERM
/// until it was killed.
#[test]
fn a_standby_asked_to_stop_stops_though_its_lease_read_hangs() {
    let report = play(14, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let standby = 1 - l;
        let hang = RequestPlan {
            before: Before::Hang,
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(standby), Method::GET, "/leases/", hang, 100));
        scene.sleep(secs(10)).await;
        scene.replicas[standby].terminate(&scene.sim).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Found by the search (seed 6710754656613301520): a standby's create of the Lease was held
/// at the server past the standby's deadline; the standby then saw another holder, and took
/// that for the end of its create. The Lease was deleted under that holder, and the held
/// create landed, naming the standby, which led at once while the holder still acted.
#[test]
fn a_create_of_the_lease_held_through_another_term_is_not_led_at_once() {
    let report = play(67, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let standby = 1 - l;
        let held = RequestPlan {
            before: Before::Hold(secs(40)),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(standby), Method::POST, "/leases", held, 1));
        scene.user(Action::DeleteLease);
        scene.sleep(secs(39)).await;
        // The standby's look at the Lease after the next deletion goes unanswered, so it
        // creates no Lease of its own before the held one lands.
        let lost = RequestPlan {
            after: After::Lost,
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(standby), Method::GET, "/leases/", lost, 1));
        scene.replicas[l].gate.freeze();
        scene.user(Action::DeleteLease);
        scene.user(create_web(2));
        scene.sleep(secs(10)).await;
        scene.replicas[l].gate.thaw();
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Issue 28: a warm standby acts as it wins, on the pod cache it kept while it stood by. Its
/// pod watch had gone quiet, so that cache had not shown the pods its predecessor made just
/// before it handed over; counting on it would make them again. It first gives its watch 3 s
/// to show what a consistent list of the pods shows, and watches anew when it does not.
/// (Fails without `Watching::caught_up`: 3 pods made again.)
#[test]
fn a_warm_standby_counts_its_predecessors_last_pods_before_it_acts() {
    let report = play(68, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        let standby = 1 - l;
        // The standby, restarted, lists no pods, and its pod watch goes quiet for a minute
        // from a second after it starts.
        let stalled = quiet(1, 60);
        let path = "/api/v1/pods?&watch=true";
        scene.rule(rule(Some(standby), Method::GET, path, stalled, 1));
        scene.replicas[standby].crash(&scene.sim);
        scene.replicas[standby].start(&scene.sim, false);
        scene.sleep(secs(5)).await;
        scene.user(create_web(3));
        scene.converged(secs(30)).await;
        scene.replicas[l].terminate(&scene.sim).await;
        for _ in 0..20 {
            if scene.replicas[standby].leads() {
                scene.converged(secs(90)).await;
                return Ok(());
            }
            scene.sleep(Duration::from_millis(100)).await;
        }
        Err("the standby did not take over within 2 s of the release".into())
    });
    assert_ok(&report);
}

/// Found by the search (seed 3894941002268962771): a standby's create of the Lease, sent as
/// the replicas started, was held at the server and answered 24 s later, after a person had
/// deleted the Lease under its holder. The creator timed its wait from the create's send,
/// so the wait was over at once; its next read found the Lease naming it, which it took for
/// a renewal, and it led while the holder, slow to hear of the deletion, still acted.
#[test]
fn a_create_of_the_lease_answered_late_is_waited_out_from_its_answer() {
    let report = play(69, Setup::default(), |scene| async move {
        let held = plan(Before::Hold(secs(24)), After::Reply);
        scene.rule(rule(Some(0), Method::POST, "/leases", held, 1));
        // Replica 1, the leader, hears of the deletion only from the answer to a renewal.
        scene.rule(rule(Some(1), Method::GET, "/leases?", quiet(0, 120), 100));
        let slow = RequestPlan {
            slow_reply: secs(4),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(1), Method::PUT, "/leases/", slow, 100));
        let l = leader(&scene).await?;
        if l != 1 {
            return Err(format!("replica {l} led first; the script needs replica 1"));
        }
        scene.user(create_web(2));
        scene
            .sleep(secs(22).saturating_sub(scene.sim.elapsed()))
            .await;
        scene.user(Action::DeleteLease);
        keep_scaling_web(
            &scene,
            Duration::from_millis(500),
            &[4, 1, 3, 2, 5, 1, 4, 2, 3, 1, 5, 2, 4, 1, 3, 2, 5, 1, 4, 2],
        )
        .await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Issue 45, fault 9: a lone replica behind a slow path (0.7 s each way) with a 6 s lease
/// never led: the watch showed each of its own Lease writes before the write's answer came,
/// and the leader stopped to confirm by a read (1.4 s) while its next renewal was due, which
/// then landed after the renew deadline: "no renewal landed within the renew deadline",
/// again and again. client-go's margins hold at that latency.
#[test]
fn a_lone_replica_behind_a_slow_path_leads_and_keeps_leading() {
    let setup = Setup {
        replicas: 1,
        settings: podset_sim::replica::ReplicaSettings {
            lease: Some(secs(6)),
            ..Setup::default().settings
        },
        ..Setup::default()
    };
    let report = play(9, setup, |scene| async move {
        let slow = RequestPlan {
            connect: Connect::Slow(Duration::from_millis(700)),
            slow_reply: Duration::from_millis(700),
            ..RequestPlan::default()
        };
        for method in [
            Method::GET,
            Method::POST,
            Method::PUT,
            Method::PATCH,
            Method::DELETE,
        ] {
            scene.rule(rule(Some(0), method, "", slow.clone(), u32::MAX));
        }
        scene.user(create_web(2));
        scene.sleep(secs(90)).await;
        let lapses = podset_sim::trace::snapshot()
            .iter()
            .filter(|l| l.contains("no renewal of the leader lease landed"))
            .count();
        if lapses > 0 {
            return Err(format!("the leader lease lapsed {lapses} times in 90 s"));
        }
        scene.converged(secs(60)).await;
        Ok(())
    });
    assert_ok(&report);
}

/// Someone else writes the Lease (another deployment of the operator, a person with
/// `kubectl`): the leader must stop acting within its renew deadline, and no replica may take
/// the Lease before that holder's lease runs out (40 s, longer than the replicas' 15 s), though
/// it never renews. Here the leader's
/// Lease watch is quiet and its Lease reads are slow, so only its next renewal tells it.
#[test]
fn a_lease_someone_else_took_is_neither_acted_under_nor_taken_back_early() {
    let report = play(25, Setup::default(), |scene| async move {
        let l = leader(&scene).await?;
        scene.user(create_web(2));
        scene.sleep(secs(5)).await;
        scene.rule(rule(
            Some(l),
            Method::GET,
            "/leases?&watch=true",
            quiet(0, 60),
            1,
        ));
        let slow = RequestPlan {
            slow_reply: secs(3),
            ..RequestPlan::default()
        };
        scene.rule(rule(Some(l), Method::GET, "/leases", slow, 100));
        scene.user(Action::WriteLease { seconds: Some(40) });
        keep_scaling_web(&scene, Duration::from_millis(900), &[4, 1, 3, 2, 5, 1]).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
}
