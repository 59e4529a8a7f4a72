//! The kubeconfig's `proxy-url`, as kubectl and client-go honor it: an API server reached
//! only through a proxy (a bastion, a corporate egress) is reached through it. `http://`
//! opens an HTTP CONNECT tunnel, `socks5://` a SOCKS5 one with the name resolved here and
//! `socks5h://` one resolved by the proxy; `user:password@` in the URL authenticates. TLS to
//! the API server runs inside the tunnel, so the proxy sees only where the bytes go. The
//! operator's own connector (TCP options, timeouts, a write fence) stays underneath: kube's
//! proxy support belongs to its connector, which the operator does not use.

use std::task::{Context, Poll};

use base64::Engine as _;
use futures::future::BoxFuture;
use http::{HeaderValue, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use tower::{BoxError, Service};

use super::connection::tcp_connector;

/// Opens the TCP connection a request's TLS and HTTP run on: to the API server, or through
/// the kubeconfig's proxy to it.
#[derive(Clone)]
pub(super) enum Dial {
    Direct(HttpConnector),
    Connect(Tunnel<HttpConnector>),
    Socks(SocksV5<HttpConnector>),
}

impl Dial {
    /// The dialer for `config`: through its `proxy_url` if it has one.
    pub(super) fn new(config: &kube::Config) -> Result<Self, kube::Error> {
        let Some(proxy) = &config.proxy_url else {
            return Ok(Self::Direct(tcp_connector()));
        };
        let refuse = |why: &str| {
            kube::Error::Service(format!("proxy-url {}: {why}", redacted(proxy)).into())
        };
        let credentials = proxy
            .authority()
            .and_then(|a| a.as_str().rsplit_once('@'))
            .map(|(userinfo, _)| userinfo.split_once(':').unwrap_or((userinfo, "")));
        let to_proxy = without_userinfo(proxy).map_err(|_| refuse("not a URL"))?;
        match proxy.scheme_str() {
            Some("http") => {
                let tunnel = Tunnel::new(to_proxy, tcp_connector());
                Ok(Self::Connect(match credentials {
                    Some((user, password)) => tunnel.with_auth(basic(user, password)),
                    None => tunnel,
                }))
            }
            Some(scheme @ ("socks5" | "socks5h")) => {
                let socks = SocksV5::new(to_proxy, tcp_connector()).local_dns(scheme == "socks5");
                Ok(Self::Socks(match credentials {
                    Some((user, password)) => socks.with_auth(user.into(), password.into()),
                    None => socks,
                }))
            }
            _ => Err(refuse(
                "only http://, socks5:// and socks5h:// proxies are supported",
            )),
        }
    }
}

impl Service<Uri> for Dial {
    type Response = TokioIo<TcpStream>;
    type Error = BoxError;
    type Future = BoxFuture<'static, Result<Self::Response, BoxError>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        match self {
            Self::Direct(c) => c.poll_ready(cx).map_err(Into::into),
            Self::Connect(c) => c.poll_ready(cx).map_err(Into::into),
            Self::Socks(c) => c.poll_ready(cx).map_err(Into::into),
        }
    }

    fn call(&mut self, to: Uri) -> Self::Future {
        match self {
            Self::Direct(c) => boxed(c.call(to)),
            Self::Connect(c) => boxed(c.call(to)),
            Self::Socks(c) => boxed(c.call(to)),
        }
    }
}

fn boxed<F, E>(connecting: F) -> BoxFuture<'static, Result<TokioIo<TcpStream>, BoxError>>
where
    F: Future<Output = Result<TokioIo<TcpStream>, E>> + Send + 'static,
    E: Into<BoxError>,
{
    Box::pin(async move { connecting.await.map_err(Into::into) })
}

/// `Proxy-Authorization: Basic ...`, as client-go sends the URL's user and password.
fn basic(user: &str, password: &str) -> HeaderValue {
    let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    HeaderValue::from_str(&format!("Basic {encoded}")).expect("base64 is a valid header")
}

/// The proxy's address alone, for the connection to it.
fn without_userinfo(proxy: &Uri) -> Result<Uri, http::Error> {
    let host = proxy.authority().map_or("", |a| {
        a.as_str().rsplit_once('@').map_or(a.as_str(), |(_, h)| h)
    });
    Uri::builder()
        .scheme(proxy.scheme_str().unwrap_or("http"))
        .authority(host)
        .path_and_query("/")
        .build()
}

/// The URL as errors may show it: no password.
fn redacted(proxy: &Uri) -> String {
    without_userinfo(proxy).map_or_else(|_| "(unreadable)".into(), |u| u.to_string())
}

#[cfg(test)]
mod tests;
