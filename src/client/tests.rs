use super::*;
use crate::metrics;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// An API server that answers the first `collisions` creates with ServerTimeout, as a
/// colliding generateName gets, and counts the creates it sees.
fn colliding_server(collisions: usize) -> (kube::Client, Arc<AtomicUsize>) {
    let seen = Arc::new(AtomicUsize::new(0));
    let counter = seen.clone();
    let svc = tower::service_fn(move |_req: Request<Body>| {
        let n = counter.fetch_add(1, Ordering::SeqCst);
        async move {
            let (code, body) = if n < collisions {
                (
                    500,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "code": 500, "reason": "ServerTimeout", "message": "try again"}),
                )
            } else {
                (
                    201,
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": "p-abcde", "namespace": "default"}}),
                )
            };
            let body = Body::from(serde_json::to_vec(&body).unwrap());
            Ok::<_, BoxError>(Response::builder().status(code).body(body).unwrap())
        }
    });
    (kube::Client::new(svc, "default"), seen)
}

#[tokio::test]
async fn a_create_told_to_try_again_is_sent_again() {
    let (client, seen) = colliding_server(2);
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
    let pod = api_pod();
    let created = create(&api, &pod)
        .await
        .expect("created on the third attempt");
    assert_eq!(created.metadata.name.as_deref(), Some("p-abcde"));
    assert_eq!(seen.load(Ordering::SeqCst), 3);
}

/// A collision says "try again", not "at once": an immediate re-send mostly collides
/// with the same load.
#[tokio::test]
async fn a_create_told_to_try_again_waits_before_sending_again() {
    let (client, _) = colliding_server(2);
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
    let start = std::time::Instant::now();
    create(&api, &api_pod())
        .await
        .expect("created on the third attempt");
    assert!(
        start.elapsed() >= Duration::from_millis(50),
        "{:?}",
        start.elapsed()
    );
}

#[tokio::test]
async fn a_create_gives_up_after_five_attempts() {
    let (client, seen) = colliding_server(usize::MAX);
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
    let err = create(&api, &api_pod()).await.expect_err("never created");
    assert!(matches!(err, kube::Error::Api(s) if s.reason == "ServerTimeout"));
    assert_eq!(seen.load(Ordering::SeqCst), 5);
}

/// Issue 28, item 4: a write the API server throttles is counted, halves the write window,
/// and is sent again after its Retry-After.
#[tokio::test]
async fn a_throttled_write_is_counted_and_shrinks_the_write_window() {
    let metrics = Arc::new(Metrics::default());
    let sent = Arc::new(AtomicUsize::new(0));
    let counter = sent.clone();
    let server = tower::service_fn(move |_req: Request<Body>| {
        let first = counter.fetch_add(1, Ordering::SeqCst) == 0;
        async move {
            let answer = match first {
                true => Response::builder().status(429).header("Retry-After", "0"),
                false => Response::builder().status(201),
            };
            let pod = serde_json::to_vec(&api_pod()).unwrap();
            Ok::<_, BoxError>(answer.body(Body::from(pod)).unwrap())
        }
    });
    let writes = ControllerWrites {
        max_in_flight: 64,
        fence: Fence::always_open(),
    };
    let client = over(server, "default", metrics.clone(), Some(writes));
    let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::default_namespaced(client);
    let before = metrics.write_window.get();
    api.create(&Default::default(), &api_pod())
        .await
        .expect("created once sent again");
    assert_eq!(sent.load(Ordering::SeqCst), 2);
    let post = metrics::MethodLabels {
        method: "POST".into(),
    };
    assert_eq!(metrics.api_throttled.get_or_create(&post).get(), 1);
    assert_eq!(metrics.write_window.get(), before / 2);
}

fn api_pod() -> k8s_openapi::api::core::v1::Pod {
    serde_json::from_value(serde_json::json!({"metadata": {"generateName": "p-"}})).unwrap()
}
