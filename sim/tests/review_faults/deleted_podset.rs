//! PodSets deleted behind a quiet or unanswered PodSet watch, in the background or the
//! foreground: a stale cache must not make their pods in a loop. Issue 45, fault 10 is
//! replayed from the trace of seed 1837710828703869221 on a91a360 and scripted here, since a
//! seed's path changes with the code.

use super::*;

/// Seed 1837710828703869221 failed on a91a360: "made 2 pods for PodSet ... after it was
/// deleted, over its 1 replicas: a loop on a stale cache". The leader's PodSet watch was sent
/// and never answered, so the PodSet was known from the list alone and its deletion not seen.
/// Its first create left after the deletion, and the server held it past the client's 30 s
/// deadline; the status write after that failure answered 500. The retry found the create
/// unsettled and sent it again on the stale cache without reading the PodSet (only a first
/// create in doubt was read for): the resend made the pod, the garbage collector removed it,
/// and the held create then made it a second time. Fixed by 88d794f: a create sent again
/// while the PodSet is in doubt reads the PodSet first, and finds it gone.
#[test]
fn a_create_sent_again_for_a_podset_deleted_behind_an_unanswered_watch_reads_it_first() {
    let report = play(45, Setup::default(), |scene| async move {
        // The leader's PodSet watch, right after its list, is never answered; nor are the two
        // next tries (each given up at the client's 30 s deadline): blind for some 95 s.
        let podsets = "/apis/app.example.com/v1beta1/podsets?&watch=true";
        let unanswered = plan(Before::Pass, After::Hang);
        scene.rule(rule(None, Method::GET, podsets, unanswered, 3));
        // The first create leaves 20 s late, after the deletion, and the server holds it 50 s:
        // the client gives up at 30 s, the create lands 70 s after it was sent.
        let late_and_held = RequestPlan {
            connect: Connect::Slow(secs(20)),
            before: Before::Hold(secs(50)),
            ..RequestPlan::default()
        };
        let pods = "/namespaces/ns-a/pods";
        scene.rule(rule(None, Method::POST, pods, late_and_held, 1));
        // The status write that reports the create's failure answers 500.
        let status = "/namespaces/ns-a/podsets/web/status";
        let failed = plan(Before::Status(500, "InternalError"), After::Reply);
        scene.rule(rule(None, Method::PATCH, status, failed, 1));
        // Made before anyone leads: the leader knows it from its list alone.
        scene.user(create_web(1));
        leader(&scene).await?;
        scene.user(delete_web());
        scene.sleep(secs(90)).await;
        scene.converged(secs(120)).await;
        Ok(())
    });
    assert_ok(&report);
    // The window was reached: the reconcile failed writing the status, and the held create
    // landed after the deletion (one pod for the stale cache's one round, which the oracle
    // allows); a resend made on the stale cache would be a second.
    let failed_status = |l: &String| l.contains("writing status") && l.contains("InternalError");
    assert!(
        report.trace.iter().any(failed_status),
        "the status write after the failed create did not fail"
    );
    let made = pods_made_after_deletion(&report.trace);
    assert!(
        made.iter().any(|l| l.contains("by the server)")),
        "the held create did not land after the deletion: {made:?}"
    );
    assert_eq!(made.len(), 1, "pods made after the deletion: {made:?}");
}

/// The trace's lines of pods a replica made for `ns-a/web` after the user deleted it.
fn pods_made_after_deletion(trace: &[String]) -> Vec<&String> {
    let deleted = trace
        .iter()
        .position(|l| l.contains("user deleted PodSet ns-a/web "))
        .expect("PodSet ns-a/web was deleted");
    trace[deleted..]
        .iter()
        .filter(|l| l.contains('#') && l.contains(" created Pod ns-a/web-"))
        .collect()
}

/// Found by the search (seed 508014): the leader's PodSet watch went quiet, and a PodSet was
/// deleted meanwhile. The stale cache still showed it: each reconcile made a pod for it, its
/// status write answered 404, and the garbage collector's removal of the pod brought the next
/// reconcile, some 350 rounds until the watch came back.
#[test]
fn a_podset_deleted_behind_a_quiet_watch_is_not_acted_on_in_a_loop() {
    deleted_behind_a_quiet_watch(21, QuietDeletion::default());
}

/// Found by the search (seed 83, once deletions could wait for finalizers): as above, but
/// deleted in the foreground, so the PodSet stays, marked, until the garbage collector has
/// removed its pods. The read that stands in for the quiet watch found it there, and each
/// reconcile made pods the garbage collector then removed.
#[test]
fn a_podset_deleted_in_the_foreground_behind_a_quiet_watch_is_not_acted_on_in_a_loop() {
    let deletion = QuietDeletion {
        policy: Propagation::Foreground,
        ..QuietDeletion::default()
    };
    deleted_behind_a_quiet_watch(26, deletion);
}

/// Found by the search (seeds 503849, 508526): as above, but the first status write after the
/// deletion failed (its answer lost, or a 500) instead of answering 404, once the garbage
/// collector had removed the pods just made. The failure brought a retry, which trusted the
/// stale cache again and made the PodSet's pods a second time.
#[test]
fn a_podset_deleted_behind_a_quiet_watch_is_not_acted_on_again_after_a_failed_write() {
    // Its answer lost, 5 s on: the garbage collector has deleted the pods just made.
    let lost = RequestPlan {
        before: Before::Hold(secs(5)),
        after: After::Lost,
        ..RequestPlan::default()
    };
    let deletion = QuietDeletion {
        status_write: Some(lost),
        ..QuietDeletion::default()
    };
    deleted_behind_a_quiet_watch(22, deletion);
}

/// Found by the search (seed 2955364532304502520), a fault of the oracle: a create the
/// server held until after the PodSet's deletion was counted as made after it, as if the
/// operator had acted on its stale cache once more. The create was sent before the deletion;
/// its resend had made the pod meanwhile, and the held one made it again once the garbage
/// collector had removed it.
#[test]
fn a_create_held_past_the_podsets_deletion_is_not_taken_for_a_loop() {
    // Carried out 60 s on: the client gives up after 30 s, and its resend makes the pod.
    let held = RequestPlan {
        before: Before::Hold(secs(60)),
        ..RequestPlan::default()
    };
    let deletion = QuietDeletion {
        replicas: 1,
        first_create: Some(held),
        deleted_after: 42,
        ..QuietDeletion::default()
    };
    deleted_behind_a_quiet_watch(24, deletion);
}

/// Found by the search (seed 2955364532304503145): a PodSet was deleted behind a quiet watch
/// while its first creates were on their way. Their status write waits for the pod watch,
/// which was quiet too: when it spoke, it showed the pods already removed by the garbage
/// collector, and the reconcile it brought made them all again, a second round for a
/// deleted PodSet (the status write that would have said 404 never came in between).
#[test]
fn a_podset_deleted_while_its_pods_were_made_is_not_given_them_twice() {
    // The first create leaves 20 s late: after the PodSet's deletion.
    let slow = RequestPlan {
        connect: Connect::Slow(secs(20)),
        ..RequestPlan::default()
    };
    let deletion = QuietDeletion {
        podsets_quiet: (15, 80),
        pods_quiet: Some((25, 16)),
        first_create: Some(slow),
        deleted_after: 15,
        ..QuietDeletion::default()
    };
    deleted_behind_a_quiet_watch(25, deletion);
}

/// Found by the search (seed 1837710828703869221): a PodSet was deleted behind a quiet watch
/// just before its first create left; the server held that create past the client's deadline,
/// and the status write after it failed (500). The retry sent the unanswered create again on
/// the stale cache without reading the PodSet, as a first create in doubt would have: it made
/// the pod, the garbage collector removed it, and the held create then made it once more.
#[test]
fn a_create_sent_again_while_its_podset_is_in_doubt_reads_the_podset_first() {
    // Leaves 20 s late, after the deletion, and is held past the client's 30 s deadline.
    let late_and_held = RequestPlan {
        connect: Connect::Slow(secs(20)),
        before: Before::Hold(secs(35)),
        ..RequestPlan::default()
    };
    let deletion = QuietDeletion {
        replicas: 1,
        podsets_quiet: (15, 120),
        first_create: Some(late_and_held),
        status_write: Some(plan(Before::Status(500, "InternalError"), After::Reply)),
        deleted_after: 15,
        ..QuietDeletion::default()
    };
    deleted_behind_a_quiet_watch(27, deletion);
}

/// PodSet `ns-a/web`, deleted while the leader's PodSet watch is quiet.
struct QuietDeletion {
    replicas: i64,
    /// When the PodSet watch goes quiet (seconds after its start) and for how long.
    podsets_quiet: (u64, u64),
    /// The same for the pod watch, if it goes quiet too.
    pods_quiet: Option<(u64, u64)>,
    /// What befalls the leader's first pod create.
    first_create: Option<RequestPlan>,
    /// What befalls the first status write after the deletion.
    status_write: Option<RequestPlan>,
    /// Seconds from the PodSet's creation to its deletion.
    deleted_after: u64,
    /// How the user deletes it.
    policy: Propagation,
}

impl Default for QuietDeletion {
    fn default() -> Self {
        Self {
            replicas: 2,
            podsets_quiet: (30, 70),
            pods_quiet: None,
            first_create: None,
            status_write: None,
            deleted_after: 35,
            policy: Propagation::Background,
        }
    }
}

fn deleted_behind_a_quiet_watch(seed: u64, d: QuietDeletion) {
    let report = play(seed, Setup::default(), move |scene| async move {
        let watch = "/apis/app.example.com/v1beta1/podsets?&watch=true";
        let (from, long) = d.podsets_quiet;
        scene.rule(rule(None, Method::GET, watch, quiet(from, long), 1));
        if let Some((from, long)) = d.pods_quiet {
            let watch = "/api/v1/pods?&watch=true";
            scene.rule(rule(None, Method::GET, watch, quiet(from, long), 1));
        }
        let l = leader(&scene).await?;
        if let Some(plan) = d.first_create {
            scene.rule(rule(
                Some(l),
                Method::POST,
                "/namespaces/ns-a/pods",
                plan,
                1,
            ));
        }
        scene.user(create_web(d.replicas));
        scene.sleep(secs(d.deleted_after)).await;
        if let Some(plan) = d.status_write {
            let status = "/namespaces/ns-a/podsets/web/status";
            scene.rule(rule(None, Method::PATCH, status, plan, 1));
        }
        scene.user(Action::DeletePodSet {
            ns: "ns-a",
            name: "web".into(),
            policy: d.policy,
        });
        scene.sleep(secs(60)).await;
        scene.converged(secs(60)).await;
        Ok(())
    });
    assert_ok(&report);
}
