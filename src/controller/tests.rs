//! The controllers' supervision (a stop unasked takes the process down), their logs of failed reconciles, and their work queues.

use super::*;

/// Supervises a PodSet controller that runs on, beside `other`; says what `supervise`
/// returned, whether the process is still live, and whether the PodSet one was aborted.
async fn beside(
    other: impl Future<Output = &'static str> + Send + 'static,
    asked: bool,
) -> (anyhow::Result<()>, bool, bool) {
    let (health, shutdown) = (Health::default(), CancellationToken::new());
    let (alive, gone) = tokio::sync::oneshot::channel::<()>();
    let mut set = JoinSet::new();
    let podset_stop = shutdown.clone();
    set.spawn(async move {
        let _alive = alive;
        podset_stop.cancelled().await;
        "podset"
    });
    set.spawn(other);
    if asked {
        shutdown.cancel();
    }
    let result = supervise(set, &shutdown, &health).await;
    let aborted = gone.await.is_err();
    (result, health.is_live(), aborted)
}

#[tokio::test]
async fn a_controller_that_stops_unasked_takes_the_process_down() {
    let (result, live, aborted) = beside(async { "at" }, false).await;
    assert_eq!(
        result.unwrap_err().to_string(),
        "the at controller stopped unasked"
    );
    assert!(!live && aborted, "live {live}, podset aborted {aborted}");

    let (result, live, aborted) = beside(async { a_bug() }, false).await;
    let error = result.unwrap_err().to_string();
    assert!(error.contains("panicked"), "{error}");
    assert!(!live && aborted, "live {live}, podset aborted {aborted}");
}

fn a_bug() -> &'static str {
    panic!("a bug in a reconcile")
}

#[tokio::test]
async fn controllers_asked_to_stop_stop_cleanly() {
    let (result, live, _) = beside(async { "at" }, true).await;
    result.unwrap();
    assert!(live);
}
use crate::controller::fixtures::{context, podset};

#[tokio::test]
async fn a_failed_reconcile_is_logged_once() {
    let ctx = context();
    let ps = Arc::new(podset());
    let failure = || Error::PodApi(kube::Error::LinesCodecMaxLineLengthExceeded);
    let lines = crate::telemetry::captured(|| {
        podset::error_policy(ps.clone(), &failure(), ctx.clone());
        let res: Result<
            (ObjectRef<crate::api::PodSet>, Action),
            kube::runtime::controller::Error<Error, std::convert::Infallible>,
        > = Err(kube::runtime::controller::Error::ReconcilerFailed(
            failure(),
            Box::new(ObjectRef::from_obj(ps.as_ref()).erase()),
        ));
        log_result(res);
    });
    let failed = lines.iter().filter(|l| l["message"] == "reconcile failed");
    assert_eq!(failed.count(), 1, "{lines:?}");
}

/// Sim seed 1046712: a pod's trigger queued a PodSet after its delete event had dropped
/// it, before the store lost it; the controller found it gone and the gauge kept it.
#[tokio::test]
async fn an_object_found_gone_when_its_turn_comes_leaves_the_queue() {
    let ctx = context();
    let queues = Queued {
        controller: "podset",
        metrics: ctx.metrics.clone(),
    };
    let ps = podset();
    queues.add(key_of(ps.meta()));
    assert_eq!(ctx.metrics.queues.depth("podset"), 1);
    let res: Result<
        (ObjectRef<crate::api::PodSet>, Action),
        kube::runtime::controller::Error<Error, std::convert::Infallible>,
    > = Err(kube::runtime::controller::Error::ObjectNotFound(Box::new(
        ObjectRef::from_obj(&ps).erase(),
    )));
    queues.settled(&res);
    assert_eq!(ctx.metrics.queues.depth("podset"), 0);
}
