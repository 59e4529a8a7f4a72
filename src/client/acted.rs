//! What a failed create or delete may still have done.

/// Whether a failed create or delete may still have been carried out. Only what the API
/// server turned away (a 4xx, a 500 ServerTimeout, its "made nothing, try again", or a 500
/// from admission, which runs before anything is stored) or what was never sent (no
/// connection, a request that could not be built) surely made nothing. A connection reset or
/// read timeout after sending, another 5xx, or a success that could not be read may all
/// follow a write that reached etcd.
pub fn may_have_acted(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(s) => {
            s.code >= 500 && s.reason != "ServerTimeout" && !refused_by_admission(&s.message)
        }
        kube::Error::Service(e) => !never_sent(e.as_ref()),
        kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => false,
        _ => true,
    }
}

/// The messages of admission's own failures, which the API server answers 500
/// (`InternalError`): a webhook it could not call (down, timed out, a bad certificate) with
/// `failurePolicy: Fail`, or a quota it could not evaluate in time. Both come before
/// storage; nothing else that answers 500 says either.
const ADMISSION_FAILURES: [&str; 2] = [
    "failed calling webhook",
    "resource quota evaluation timed out",
];

fn refused_by_admission(message: &str) -> bool {
    ADMISSION_FAILURES.iter().any(|m| message.contains(m))
}

/// A transport's error for a request that never left the process (see `client::over`).
#[derive(Debug, thiserror::Error)]
#[error("not sent: {0}")]
pub struct NotSent(pub tower::BoxError);

/// A connection that could not be made, or a write the leader's fence refused: the request
/// never left.
fn never_sent(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(error);
    while let Some(e) = cause {
        if fenced(e) || e.is::<NotSent>() {
            return true;
        }
        if let Some(e) = e.downcast_ref::<hyper_util::client::legacy::Error>() {
            return e.is_connect();
        }
        cause = e.source();
    }
    false
}

/// Whether the leader's fence refused the request of `error` (it was not sent).
pub fn refused_by_fence(error: &(dyn std::error::Error + 'static)) -> bool {
    std::iter::successors(Some(error), |e| e.source()).any(fenced)
}

fn fenced(e: &(dyn std::error::Error + 'static)) -> bool {
    // The connection refused to write (`client::gated`): io::Error hides its cause from
    // `source()`.
    e.is::<super::NotLeading>()
        || e.downcast_ref::<std::io::Error>()
            .and_then(std::io::Error::get_ref)
            .is_some_and(|inner| inner.is::<super::NotLeading>())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client::{ControllerWrites, build};
    use crate::fence::Fence;

    fn api_error(code: u16, reason: &str) -> kube::Error {
        api_error_saying(code, reason, "m")
    }

    fn api_error_saying(code: u16, reason: &str, message: &str) -> kube::Error {
        let status: kube::core::Status = serde_json::from_value(serde_json::json!({
            "status": "Failure", "code": code, "reason": reason, "message": message
        }))
        .unwrap();
        kube::Error::Api(Box::new(status))
    }

    /// What the API server turned away made nothing; anything else may have acted.
    #[test]
    fn only_a_refusal_counts_as_not_done() {
        for (code, reason) in [
            (504, "Timeout"),
            (500, "InternalError"),
            (503, "ServiceUnavailable"),
            (502, "BadGateway"),
        ] {
            assert!(may_have_acted(&api_error(code, reason)), "{code} {reason}");
        }
        let webhook_down = "Internal error occurred: failed calling webhook \"deny.example.com\": failed to call webhook: Post \"https://127.0.0.1:1/validate?timeout=10s\": dial tcp 127.0.0.1:1: connect: connection refused";
        assert!(
            !may_have_acted(&api_error_saying(500, "InternalError", webhook_down)),
            "a webhook that could not be called stored nothing"
        );
        for (code, reason) in [
            (403, "Forbidden"),
            (422, "Invalid"),
            (429, "TooManyRequests"),
            (409, "AlreadyExists"),
            (500, "ServerTimeout"),
        ] {
            assert!(!may_have_acted(&api_error(code, reason)), "{code} {reason}");
        }
    }

    /// A create through the operator's real client (the controllers' controller_writes, behind `fence`)
    /// against a local socket.
    async fn create_through(addr: std::net::SocketAddr, fence: Fence) -> kube::Error {
        let config = kube::Config::new(format!("http://{addr}").parse().unwrap());
        let controller_writes = ControllerWrites {
            max_in_flight: 1,
            fence,
        };
        let client = build(config, "test", Default::default(), Some(controller_writes)).unwrap();
        let api: kube::Api<k8s_openapi::api::core::v1::Pod> = kube::Api::namespaced(client, "ns");
        api.create(&Default::default(), &api_pod())
            .await
            .expect_err("the server never answers")
    }

    /// The server reads the whole request, then resets the connection: the reply is lost
    /// after the create may have been stored.
    #[tokio::test]
    async fn a_create_whose_reply_is_lost_may_have_acted() {
        use tokio::io::AsyncReadExt;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = Vec::new();
            let mut buf = [0u8; 4096];
            while !whole_request(&request) {
                let n = socket.read(&mut buf).await.unwrap();
                assert!(n > 0, "the client closed first");
                request.extend_from_slice(&buf[..n]);
            }
            socket.set_zero_linger().unwrap();
        });
        let error = create_through(addr, Fence::always_open()).await;
        assert!(may_have_acted(&error), "taken as not created: {error}");
    }

    /// Nothing listens: the request was never sent.
    #[tokio::test]
    async fn a_create_that_could_not_connect_did_not_land() {
        let addr = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap();
        let error = create_through(addr, Fence::always_open()).await;
        assert!(!may_have_acted(&error), "{error}");
    }

    /// Issue 20: a create the leader's fence refused never reached the server, so it made
    /// nothing and leaves no expectation behind.
    #[tokio::test]
    async fn a_create_the_fence_refused_was_never_sent() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let error = create_through(addr, Fence::closed()).await;
        assert!(!may_have_acted(&error), "{error}");
        let accepted =
            tokio::time::timeout(std::time::Duration::from_millis(200), listener.accept()).await;
        assert!(accepted.is_err(), "a connection reached the server");
    }

    fn whole_request(bytes: &[u8]) -> bool {
        let text = String::from_utf8_lossy(bytes);
        let Some(end) = text.find("\r\n\r\n") else {
            return false;
        };
        let length = text[..end]
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse::<usize>().unwrap())
            })
            .unwrap_or(0);
        bytes.len() >= end + 4 + length
    }

    fn api_pod() -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({"metadata": {"generateName": "p-"}})).unwrap()
    }
}
