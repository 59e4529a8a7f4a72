//! Against local sockets: testenv's CONNECT proxy in front of a server that answers any
//! request with a Pod.

use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use testenv::connect_proxy::{ConnectProxy, read_head};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;

use crate::client::{ControllerWrites, build};
use crate::fence::Fence;

/// A server answering every request on a connection with a Pod; how many connections it took.
async fn server() -> (u16, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let accepted = Arc::new(Mutex::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            *counted.lock().unwrap() += 1;
            tokio::spawn(async move {
                while !read_head(&mut socket).await.is_empty() {
                    let body = r#"{"apiVersion":"v1","kind":"Pod","metadata":{"name":"p"}}"#;
                    let reply = format!(
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                         content-length: {}\r\n\r\n{body}",
                        body.len()
                    );
                    socket.write_all(reply.as_bytes()).await.unwrap();
                }
            });
        }
    });
    (port, accepted)
}

fn config(server: u16, proxy: &str) -> kube::Config {
    let mut config = kube::Config::new(format!("http://127.0.0.1:{server}").parse().unwrap());
    config.proxy_url = Some(proxy.parse().unwrap());
    config
}

/// Issue 46: the kubeconfig's `proxy-url` was ignored, so an API server reachable only
/// through a proxy could not be reached at all. Reads and the controllers' writes (each on
/// connections of their own) go through it, with its credentials.
#[tokio::test]
async fn reads_and_writes_go_through_the_kubeconfigs_proxy() {
    let (server, accepted) = server().await;
    let proxy = ConnectProxy::start().await.unwrap();
    let writes = ControllerWrites {
        max_in_flight: 1,
        fence: Fence::always_open(),
    };
    let proxied = config(server, &proxy.url(Some("user:secret")));
    let client = build(proxied, "test", Default::default(), Some(writes)).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, "ns");
    pods.get("p").await.expect("a read through the proxy");
    let pod = serde_json::from_value(serde_json::json!({"metadata": {"name": "p"}})).unwrap();
    pods.create(&Default::default(), &pod)
        .await
        .expect("a write through the proxy");

    let asked = proxy.asked();
    assert_eq!(asked.len(), 2, "reads and writes each tunnel: {asked:?}");
    for head in &asked {
        assert!(
            head.starts_with(&format!("CONNECT 127.0.0.1:{server} ")),
            "{head}"
        );
        // base64("user:secret")
        assert!(
            head.contains("Proxy-Authorization: Basic dXNlcjpzZWNyZXQ="),
            "{head}"
        );
    }
    assert_eq!(
        *accepted.lock().unwrap(),
        asked.len(),
        "a connection around the proxy"
    );
}

#[tokio::test]
async fn a_proxy_it_cannot_speak_is_refused_naming_it_without_its_password() {
    let refused = build(
        config(1, "https://user:secret@proxy.example:3128"),
        "test",
        Default::default(),
        None,
    )
    .err()
    .expect("an https proxy taken")
    .to_string();
    assert!(
        refused.contains("proxy-url https://proxy.example:3128/"),
        "{refused}"
    );
    assert!(refused.contains("socks5"), "{refused}");
    assert!(!refused.contains("secret"), "{refused}");
}
