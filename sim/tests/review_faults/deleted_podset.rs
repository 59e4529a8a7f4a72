//! Issue 45, fault 10: a PodSet deleted behind a PodSet watch that was never answered, its
//! held create sent again. Replayed from the trace of seed 1837710828703869221 on a91a360 and
//! scripted here, since a seed's path changes with the code.

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
        let podsets = "/apis/app.example.com/v1alpha1/podsets?&watch=true";
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
