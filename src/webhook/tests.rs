use std::net::SocketAddr;

use serde_json::{Value, json};

use super::*;
use crate::webhook::certs::{CA_CRT, Need, TLS_CRT, TLS_KEY};

/// A webhook served on loopback with a certificate for `localhost`, and a client trusting its
/// CA.
async fn served() -> (u16, reqwest::Client, CancellationToken) {
    let Need::Write(stored) =
        certs::need(None, &["localhost".into()], jiff::Timestamp::now()).unwrap()
    else {
        unreachable!()
    };
    let held = tls::Held::new(stored.get(TLS_CRT).unwrap(), stored.get(TLS_KEY).unwrap()).unwrap();
    let stop = CancellationToken::new();
    let acceptor = tokio_rustls::TlsAcceptor::from(held.config().unwrap());
    let addr = SocketAddr::from(([127, 0, 0, 1], 0));
    let bound = http::serve_on(
        addr,
        Some(acceptor),
        router(),
        Limits::WEBHOOK,
        stop.clone(),
    )
    .await
    .unwrap();
    let ca = reqwest::Certificate::from_pem(stored.get(CA_CRT).unwrap()).unwrap();
    let client = reqwest::Client::builder()
        .add_root_certificate(ca)
        .build()
        .unwrap();
    (bound.port(), client, stop)
}

/// Over TLS, verified against the CA the CRD would carry, a review is answered with every
/// object converted in order.
#[tokio::test]
async fn a_review_is_answered_over_tls_with_each_object_converted() {
    let (port, client, stop) = served().await;
    let at = json!({"apiVersion": "cnat.programming-kubernetes.info/v1alpha1", "kind": "At",
        "metadata": {"name": "a", "namespace": "ns"},
        "spec": {"schedule": "2019-04-12T10:12:00Z", "command": "echo YAY"}});
    let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "u1", "desiredAPIVersion": "cnat.programming-kubernetes.info/v1beta1",
                    "objects": [at.clone(), at]}});
    let answer = client
        .post(format!("https://localhost:{port}/convert"))
        .body(review.to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let answer: Value = serde_json::from_slice(&answer).unwrap();
    assert_eq!(answer["kind"], "ConversionReview");
    assert_eq!(answer["response"]["uid"], "u1");
    assert_eq!(answer["response"]["result"]["status"], "Success");
    let objects = answer["response"]["convertedObjects"].as_array().unwrap();
    assert_eq!(objects.len(), 2);
    assert_eq!(
        objects[0]["spec"]["template"]["spec"]["containers"][0]["command"],
        json!(["sh", "-c", "echo YAY"])
    );
    stop.cancel();
}

/// Anyone can reach the port: a body past the bound is refused unread, and what is no review
/// is told so.
#[tokio::test]
async fn a_body_past_the_bound_or_no_review_is_refused() {
    let (port, client, stop) = served().await;
    let url = format!("https://localhost:{port}/convert");
    let huge = vec![b' '; MAX_REVIEW_BYTES + 1];
    let answer = client.post(&url).body(huge).send().await.unwrap();
    assert_eq!(answer.status(), 413);
    let answer = client
        .post(&url)
        .body("{\"kind\": 3}")
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    stop.cancel();
}
