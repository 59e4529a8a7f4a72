//! The PodSet reconcile's tests of what it reads and when: a 404 that names the PodSet, a
//! read before making pods for one whose reconcile failed or that makes a second round, and
//! the watch event of its own status write.

use super::*;

/// A restarted API server answers 404 for a custom resource it has not registered again yet
/// ("the server could not find the requested resource", no details): the PodSet is not gone,
/// and is acted on again. Only a 404 naming the PodSet says it was deleted. The real-cluster
/// test apiserver_restart_mid_run_the_operator_reconnects_by_itself stalled on the first.
#[tokio::test]
async fn only_a_404_naming_the_podset_says_it_is_gone() {
    let unregistered = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": 404, "reason": "NotFound", "details": {},
        "message": "the server could not find the requested resource"});
    let deleted = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "code": 404, "reason": "NotFound",
        "details": {"name": "web", "group": "app.example.com", "kind": "podsets"},
        "message": "podsets.app.example.com \"web\" not found"});
    for (answer, gone) in [(unregistered, false), (deleted, true)] {
        let status = answer.clone();
        let (ctx, log) = scripted_context(move |sent, _| match sent {
            s if s.is(&Method::PATCH, STATUS) => Answer::Reply(404, status.clone()),
            s => otherwise(s),
        });
        // Its one pod is there: the reconcile only writes the status.
        ctx.pods
            .apply(kube::runtime::watcher::Event::Apply(owned_pod(
                "web-poda", "pa",
            )));
        reconcile_times(1, &podset(), &ctx).await;
        assert!(log.lock().iter().any(|s| s.is(&Method::PATCH, STATUS)));
        assert_eq!(ctx.memory.is_gone("ps-uid"), gone, "{answer}");
    }
}

/// A PodSet whose last reconcile failed is read from the API server before pods are made
/// for it: the failure may have hidden its deletion from a cache whose watch went quiet
/// (seeds 503849, 508526). Found gone (or another PodSet under its name), nothing is made and
/// it is not acted on again; found, the pods are made. One that never failed is not read.
#[tokio::test]
async fn a_podset_whose_reconcile_failed_is_read_before_pods_are_made_for_it() {
    let ours = serde_json::to_value(podset()).unwrap();
    let mut newer = ours.clone();
    newer["metadata"]["uid"] = json!("another-uid");
    for (failed, items, made) in [
        (true, json!([]), false),
        (true, json!([newer]), false),
        (true, json!([ours]), true),
        (false, json!([]), true),
    ] {
        let list = podset_list(items.clone());
        let (ctx, log) = scripted_context(move |sent, _| match sent {
            s if s.is(&Method::GET, PODSETS) => Answer::Reply(200, list.clone()),
            s if s.is(&Method::POST, PODS) => Answer::Reply(201, s.body.clone()),
            s => otherwise(s),
        });
        if failed {
            ctx.memory.retry_delay("ps-uid");
        }
        reconcile_times(1, &podset(), &ctx).await;
        let log = log.lock();
        let reads: Vec<&Sent> = log.iter().filter(|s| s.is(&Method::GET, PODSETS)).collect();
        assert_eq!(reads.len(), usize::from(failed), "{items}: {log:#?}");
        for read in reads {
            let query = &read.path;
            assert!(
                query.contains("fieldSelector=metadata.name%3Dweb"),
                "{query}"
            );
        }
        assert_eq!(creates(&log).len(), usize::from(made), "{items}: {log:#?}");
        assert_eq!(ctx.memory.is_gone("ps-uid"), !made, "{items}");
    }
}

/// Pods were made for this spec already, and are gone: so it looks when the garbage collector
/// removes the pods of a PodSet deleted behind a quiet watch (seed 2955364532304503145). The
/// PodSet is read before they are made again, and found gone, is not acted on. A round for a
/// new spec (a scale-up) is not read.
#[tokio::test]
async fn a_second_round_of_creates_for_one_spec_reads_the_podset_first() {
    for (made_for, replaces) in [(2, true), (1, false)] {
        let (ctx, log) = scripted_context(|sent, _| match sent {
            s if s.is(&Method::GET, PODSETS) => Answer::Reply(200, podset_list(json!([]))),
            s if s.is(&Method::POST, PODS) => Answer::Reply(201, s.body.clone()),
            s => otherwise(s),
        });
        ctx.memory.made_pods("ps-uid", made_for, Instant::now());
        let mut ps = podset();
        ps.metadata.generation = Some(2);
        reconcile_times(1, &ps, &ctx).await;
        let log = log.lock();
        let reads = log.iter().filter(|s| s.is(&Method::GET, PODSETS)).count();
        assert_eq!(reads, usize::from(replaces), "{log:#?}");
        assert_eq!(creates(&log).is_empty(), replaces, "{log:#?}");
        assert_eq!(ctx.memory.is_gone("ps-uid"), replaces);
    }
}

/// The store keeps a PodSet's pod names as a digest (`kept.rs`); the watch event of this
/// instance's own status write, arriving before the write's answer, must still be known as
/// its own, or it wakes one more reconcile: what a write remembers sending is the status as
/// the store keeps it.
#[tokio::test]
async fn the_watch_event_of_our_own_status_write_wakes_no_reconcile() {
    use crate::controller::routing::watch_into_store;
    use futures::{FutureExt, Stream, StreamExt, channel::mpsc};
    use kube::runtime::{reflector, watcher};
    use std::sync::OnceLock;
    use std::sync::atomic::{AtomicUsize, Ordering};
    type Woken = std::pin::Pin<Box<dyn Stream<Item = watcher::Result<PodSet>> + Send>>;
    let (events, rx) = mpsc::unbounded();
    let watch: Arc<OnceLock<parking_lot::Mutex<Woken>>> = Arc::default();
    let written = Arc::new(AtomicUsize::new(0));
    let woken = Arc::new(AtomicUsize::new(0));
    let (shown, counted, count) = (
        events.clone(),
        watch.clone(),
        (written.clone(), woken.clone()),
    );
    let (ctx, _log) = scripted_context(move |sent, _| {
        if !sent.is(&Method::PATCH, STATUS) {
            return otherwise(sent);
        }
        let mut ps = podset();
        ps.metadata.resource_version = Some("2".into());
        ps.status = serde_json::from_value(sent.body["status"].clone()).ok();
        count.0.fetch_add(1, Ordering::SeqCst);
        // The watch shows the write before its answer comes back.
        shown
            .unbounded_send(Ok(watcher::Event::Apply(ps.clone())))
            .unwrap();
        if let Some(Some(_)) = counted.get().unwrap().lock().next().now_or_never() {
            count.1.fetch_add(1, Ordering::SeqCst);
        }
        Answer::Reply(200, serde_json::to_value(ps).unwrap())
    });
    let (_reader, writer) = reflector::store();
    let (synced, _ready) = tokio::sync::watch::channel(false);
    let stream: Woken = Box::pin(watch_into_store(rx, writer, synced, ctx.clone()));
    let _ = watch.set(parking_lot::Mutex::new(stream));
    let mut ps = podset();
    ps.metadata.resource_version = Some("1".into());
    ps.spec.replicas = 2;
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(ps.clone()),
        watcher::Event::InitDone,
    ] {
        events.unbounded_send(Ok(event)).unwrap();
    }
    while let Some(Some(_)) = watch.get().unwrap().lock().next().now_or_never() {}
    for (name, uid) in [("web-pod1", "p1"), ("web-pod2", "p2")] {
        ctx.pods.apply(watcher::Event::Apply(owned_pod(name, uid)));
    }
    reconcile_times(1, &ps, &ctx).await;
    assert_eq!(written.load(Ordering::SeqCst), 1, "one status write");
    assert_eq!(
        woken.load(Ordering::SeqCst),
        0,
        "woken by our own status write"
    );
}
