//! The At reconcile's tests once its pod is made: the record before the release, a conflict
//! with its own write, a lost reply, the wait for the schedule, and a stale copy.

use super::*;
use std::time::Duration;

/// Issue 19, item 9: the client re-sent a RUNNING write that had landed (a 504 on the
/// first send), and the re-send met a 409: our own write, not a stale copy. A read of the
/// At settles it, and the pod is released.
#[tokio::test]
async fn a_conflict_with_our_own_running_write_still_releases_the_pod() {
    let landed: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
    let stored = landed.clone();
    let (ctx, log) = scripted_context(move |sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => {
            if let Answer::Reply(_, at) = patched(sent) {
                *stored.lock() = Some(at);
            }
            Answer::status(409, "Conflict")
        }
        _ if sent.is(&Method::GET, ATS) => listed(stored.lock().clone().unwrap()),
        _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, created(sent)),
        _ if sent.is(&Method::PATCH, POD) => Answer::Reply(200, released()),
        _ => Answer::status(404, "NotFound"),
    });
    reconcile(Arc::new(due_at()), ctx).await.unwrap();
    let log = log.lock();
    assert!(log.iter().any(|s| s.is(&Method::PATCH, POD)), "{log:#?}");
}

/// An At recorded RUNNING with `status`, reconciled with no pod anywhere: the status writes
/// and pod creates it caused.
async fn reconcile_running_without_pod(status: AtStatus) -> Vec<Vec<Value>> {
    let mut at = due_at();
    at.status = Some(status);
    let (ctx, log) = scripted_context(|sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, created(sent)),
        _ if sent.is(&Method::PATCH, POD) => Answer::Reply(200, released()),
        _ => Answer::status(404, "NotFound"),
    });
    reconcile(Arc::new(at), ctx).await.unwrap();
    writes(&log.lock())
}

/// Issue 19, item 8, and issue 26, faults 3 and 4: RUNNING with no pod recorded means no
/// pod of this At ever ran (each is created gated), however old the RUNNING and whoever
/// wrote it: the pod is created at once, with no window to wait out. A recorded pod that
/// is gone ends the At at once, and is not run again.
#[tokio::test]
async fn a_running_at_creates_its_pod_unless_one_was_recorded() {
    let an_hour_ago = Timestamp::now() - jiff::SignedDuration::from_hours(1);
    // As an operator from before the create came first recorded it, ahead of the create.
    let starting = AtStatus {
        phase: Some(AtPhase::Running),
        pod_name: Some("job-pod".into()),
        start_time: Some(Time(an_hour_ago)),
        ..AtStatus::default()
    };
    let writes = reconcile_running_without_pod(starting.clone()).await;
    assert_eq!(
        writes[0],
        vec![Value::from("create"), "job-pod".into()],
        "{writes:#?}"
    );
    let recorded = AtStatus {
        pod_uid: Some("gone-uid".into()),
        ..starting
    };
    let writes = reconcile_running_without_pod(recorded).await;
    assert_eq!(writes, [status("7", "DONE", "job-pod".into())]);
}

/// The pod is created gated, its UID recorded in the At, and only then released, with the
/// UID as a precondition: no other pod of the name is ever released.
#[tokio::test]
async fn the_pod_is_recorded_before_it_is_released() {
    let (ctx, log) = scripted_context(|sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ if sent.is(&Method::POST, PODS) => Answer::Reply(201, created(sent)),
        _ if sent.is(&Method::PATCH, POD) => Answer::Reply(200, released()),
        _ => Answer::status(404, "NotFound"),
    });
    reconcile(Arc::new(due_at()), ctx).await.unwrap();
    let log = log.lock();
    let create = log.iter().find(|s| s.is(&Method::POST, PODS)).unwrap();
    assert_eq!(
        create.body["spec"]["schedulingGates"][0]["name"],
        plan::GATE,
        "created gated"
    );
    let record = log
        .iter()
        .position(|s| s.is(&Method::PATCH, STATUS) && s.body["status"]["podUID"] == "pod-uid")
        .expect("the pod's UID recorded");
    let release = log
        .iter()
        .position(|s| s.is(&Method::PATCH, POD))
        .expect("the pod released");
    assert!(record < release, "released before it was recorded");
    assert_eq!(
        log[release].body,
        json!([
            {"op": "test", "path": "/metadata/uid", "value": "pod-uid"},
            {"op": "test", "path": "/spec/schedulingGates/0/name", "value": plan::GATE},
            {"op": "remove", "path": "/spec/schedulingGates/0"},
        ]),
        "only the At's own gate, of that pod, removed"
    );
}

/// Issue 26, fault 4, in the order the pod comes first: the RUNNING write landed but its
/// reply was lost; the next reconcile, with the pod not yet in the cache, reads it live and
/// releases it, and never makes a second one.
#[tokio::test]
async fn a_running_write_whose_reply_was_lost_is_followed_by_the_release() {
    let landed: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
    let made: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
    let (stored, pod) = (landed.clone(), made.clone());
    let (ctx, log) = scripted_context(move |sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) && stored.lock().is_none() => {
            if let Answer::Reply(_, at) = patched(sent) {
                *stored.lock() = Some(at);
            }
            Answer::Lost
        }
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ if sent.is(&Method::POST, PODS) => {
            *pod.lock() = Some(created(sent));
            Answer::Reply(201, created(sent))
        }
        _ if sent.is(&Method::GET, POD) => Answer::Reply(200, pod.lock().clone().unwrap()),
        _ if sent.is(&Method::PATCH, POD) => Answer::Reply(200, released()),
        _ => Answer::status(404, "NotFound"),
    });
    assert!(reconcile(Arc::new(due_at()), ctx.clone()).await.is_err());
    let running: At = serde_json::from_value(landed.lock().clone().unwrap()).unwrap();
    reconcile(Arc::new(running), ctx).await.unwrap();
    let log = log.lock();
    let creates = log.iter().filter(|s| s.is(&Method::POST, PODS)).count();
    assert_eq!(creates, 1, "{log:#?}");
    assert!(log.iter().any(|s| s.is(&Method::PATCH, POD)), "{log:#?}");
}

/// Issue 45, fault 5: the wait for the schedule was computed before the PENDING write, so
/// an At was late by as long as that write took. It is counted from when it is armed.
#[tokio::test]
async fn the_wait_for_the_schedule_is_counted_from_after_the_status_write() {
    let t0: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
    let spent = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let taken = spent.clone();
    let (mut ctx, _log) = scripted_context(move |sent, _| {
        if sent.is(&Method::PATCH, STATUS) {
            // The write takes 3 s: a slow etcd, a queue for a write slot.
            taken.fetch_add(3, std::sync::atomic::Ordering::SeqCst);
            return patched(sent);
        }
        Answer::status(404, "NotFound")
    });
    Arc::get_mut(&mut ctx).unwrap().clock = crate::clock::Clock::new(move || {
        t0 + jiff::SignedDuration::from_secs(spent.load(std::sync::atomic::Ordering::SeqCst))
    });
    let mut at = due_at();
    at.spec.schedule = "2020-01-01T00:00:10Z".into();
    let action = reconcile(Arc::new(at), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(7)));
}

/// Issue 45, fault 3: a reconcile that holds a copy from before this instance's own DONE
/// write (the pod's watch event came before the At's) computes the same DONE; its write
/// meets a conflict, the status read back is the same, and the events of the change were
/// published again. What this instance wrote over a copy is what that copy now is.
#[tokio::test]
async fn a_stale_copy_publishes_no_event_of_a_status_already_written() {
    let now: Timestamp = "2020-01-01T00:01:00Z".parse().unwrap();
    let running = running_since(now);
    let stored = Arc::new(parking_lot::Mutex::new(
        serde_json::to_value(&running).unwrap(),
    ));
    let store = stored.clone();
    let (mut ctx, log) = scripted_context(move |sent, _| {
        let mut at = store.lock();
        match () {
            _ if sent.is(&Method::PATCH, STATUS) => {
                if sent.body["metadata"]["resourceVersion"] != at["metadata"]["resourceVersion"] {
                    return Answer::status(409, "Conflict");
                }
                let Answer::Reply(code, written) = patched(sent) else {
                    unreachable!()
                };
                *at = written;
                Answer::Reply(code, at.clone())
            }
            _ if sent.is(&Method::GET, ATS) => listed(at.clone()),
            _ => Answer::status(404, "NotFound"),
        }
    });
    Arc::get_mut(&mut ctx).unwrap().clock = crate::clock::Clock::new(move || now);
    let pod = serde_json::json!({
        "metadata": {"name": "job-pod", "namespace": "ns", "uid": "pod-uid",
            "ownerReferences": [{"apiVersion": "cnat.programming-kubernetes.info/v1beta1",
                "kind": "At", "name": "job", "uid": "at-uid", "controller": true}]},
        "spec": {"containers": [{"name": "busybox"}]},
        "status": {"phase": "Succeeded", "containerStatuses": [{"name": "busybox",
            "ready": false, "restartCount": 0, "image": "busybox", "imageID": "",
            "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]},
    });
    ctx.pods.apply(kube::runtime::watcher::Event::Apply(
        serde_json::from_value(pod).unwrap(),
    ));
    // A repeat is a PATCH of the first event's series: counted too.
    let events = |log: &[Sent]| log.iter().filter(|s| s.path.contains("/events")).count();
    reconcile(Arc::new(running.clone()), ctx.clone())
        .await
        .unwrap();
    let told = events(&log.lock());
    assert!(told > 0, "DONE is told");
    assert_eq!(stored.lock()["status"]["phase"], "DONE");
    reconcile(Arc::new(running), ctx).await.unwrap();
    let log = log.lock();
    assert_eq!(events(&log), told, "{log:#?}");
}

/// Found by the search (seed 19101306), on the code that first had the At decide once: a
/// RUNNING At whose pod left the watch looked again at a wall-clock time, and a clock stepped
/// back an hour during the live read set that look an hour and more away. The poll is timed
/// on the monotonic clock.
#[tokio::test]
async fn a_pod_out_of_the_watch_is_polled_however_the_clock_steps() {
    let t0: Timestamp = "2020-01-01T00:01:00Z".parse().unwrap();
    let stepped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let step = stepped.clone();
    let (mut ctx, _log) = scripted_context(move |sent, _| match () {
        _ if sent.is(&Method::GET, POD) => {
            step.store(true, std::sync::atomic::Ordering::SeqCst);
            let mut pod = live_stray(false);
            pod["metadata"]["uid"] = "pod-uid".into();
            pod["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "At",
                "name": "job", "uid": "at-uid", "controller": true}]);
            Answer::Reply(200, pod)
        }
        _ if sent.is(&Method::PATCH, STATUS) => patched(sent),
        _ => Answer::status(404, "NotFound"),
    });
    Arc::get_mut(&mut ctx).unwrap().clock = crate::clock::Clock::new(move || {
        let back = stepped.load(std::sync::atomic::Ordering::SeqCst);
        t0 - jiff::SignedDuration::from_hours(if back { 1 } else { 0 })
    });
    let at = running_since(t0);
    let action = reconcile(Arc::new(at), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(plan::UNWATCHED_POD_POLL));
}

/// Found by the search (seed 19302362), once an At's own status write no longer woke it: the
/// wait armed after the PENDING write was counted on a clock stepped back an hour and a half
/// during that write, and the At slept that long past its schedule. (Before, the wake of its
/// own write brought a reconcile that capped the wait, and hid this.) A look is never more
/// than MAX_WAIT away.
#[tokio::test]
async fn a_wait_armed_on_a_clock_stepped_back_is_at_most_a_minute() {
    let t0: Timestamp = "2020-01-01T00:00:00Z".parse().unwrap();
    let stepped = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let step = stepped.clone();
    let (mut ctx, _log) = scripted_context(move |sent, _| {
        if sent.is(&Method::PATCH, STATUS) {
            step.store(true, std::sync::atomic::Ordering::SeqCst);
            return patched(sent);
        }
        Answer::status(404, "NotFound")
    });
    Arc::get_mut(&mut ctx).unwrap().clock = crate::clock::Clock::new(move || {
        let back = stepped.load(std::sync::atomic::Ordering::SeqCst);
        t0 - jiff::SignedDuration::from_mins(if back { 90 } else { 0 })
    });
    let mut at = due_at();
    at.spec.schedule = "2020-01-01T00:00:30Z".into();
    let action = reconcile(Arc::new(at), ctx).await.unwrap();
    assert_eq!(action, Action::requeue(plan::MAX_WAIT));
}

/// Found by the search (seed 19317134, on every commit back to issue 46's): a status write
/// met a 409, and the At read back showed the status written, so the write was taken for
/// ours, landed; but its spec had been edited since (generation 2). The version read was
/// recorded as our write's, and the next reconcile put it on the old copy: the pod was made
/// from the old spec and recorded RUNNING under the new spec's version, so the old command
/// ran. A write is ours only if the At read back is still the spec we wrote over.
#[tokio::test]
async fn a_write_is_not_taken_for_ours_over_a_spec_edited_since() {
    let edited: Arc<parking_lot::Mutex<Option<Value>>> = Default::default();
    let (stored, read) = (edited.clone(), edited.clone());
    let (ctx, _log) = scripted_context(move |sent, _| match () {
        _ if sent.is(&Method::PATCH, STATUS) => {
            if let Answer::Reply(_, mut at) = patched(sent) {
                at["metadata"]["generation"] = 2.into();
                at["metadata"]["resourceVersion"] = "9".into();
                at["spec"]["command"] = "echo EDITED".into();
                *stored.lock() = Some(at);
            }
            Answer::status(409, "Conflict")
        }
        _ if sent.is(&Method::GET, ATS) => listed(read.lock().clone().unwrap()),
        _ => Answer::status(404, "NotFound"),
    });
    let mut at = due_at();
    at.spec.schedule = "2999-01-01T00:00:00Z".into();
    reconcile(Arc::new(at), ctx.clone()).await.unwrap();
    assert!(edited.lock().is_some(), "the PENDING write was sent");
    let recorded = ctx
        .memory
        .written_over::<AtStatus>("at-uid", "7", Instant::now());
    assert_eq!(recorded, None, "version 9 taken for our write over 7");
}

/// The At recorded RUNNING since `start` with its pod `job-pod` (UID `pod-uid`).
fn running_since(start: Timestamp) -> At {
    let mut at = due_at();
    at.status = Some(AtStatus {
        phase: Some(AtPhase::Running),
        pod_name: Some("job-pod".into()),
        pod_uid: Some("pod-uid".into()),
        start_time: Some(Time(start)),
        ..AtStatus::default()
    });
    at
}
