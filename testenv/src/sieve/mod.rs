//! An HTTP proxy between one operator process and the API server, for Sieve-style tests
//! (OSDI '22): it records the operator's writes in order, kills the operator right after a
//! chosen write was answered (an intermediate state), and holds back or thins out one watch
//! (stale and unobserved states). Unlike [`crate::proxy`] it terminates TLS and sees each
//! request. The operator's bearer token passes unchanged, so RBAC and the audit log still
//! see its ServiceAccount.

mod tls;
mod watch;

use std::fmt;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{Context as _, Result, bail};
use bytes::Bytes;
use http::{Method, Request, Response};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::{TlsAcceptor, TlsConnector};
use tokio_util::sync::{CancellationToken, DropGuard};
use tokio_util::task::AbortOnDropHandle;

pub use watch::{Perturbation, Tally};

/// A response body as the proxy hands it on: the API server's, or a perturbed watch's.
type Body = BoxBody<Bytes, Box<dyn std::error::Error + Send + Sync>>;

/// One write (POST, PUT, PATCH, DELETE) the proxy forwarded.
#[derive(Clone, Debug)]
pub struct Write {
    pub method: Method,
    pub path: String,
    /// The API server's status code; `None` if no answer came.
    pub code: Option<u16>,
}

impl fmt::Display for Write {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.code {
            Some(code) => write!(f, "{} {} -> {code}", self.method, self.path),
            None => write!(f, "{} {} -> no answer", self.method, self.path),
        }
    }
}

/// A kill hook, fired once.
type Kill = Box<dyn FnOnce() + Send>;

#[derive(Default)]
struct State {
    writes: Vec<Write>,
    /// The write to crash after (1-based), and the hook, until it fired.
    crash: Option<(usize, Option<Kill>)>,
    /// Bumped by the crash: a connection from before it is the killed process's.
    epoch: u64,
    /// The watch to perturb: its path, and how.
    watch: Option<(String, Perturbation)>,
}

impl State {
    fn crash_pending(&self) -> Option<usize> {
        match &self.crash {
            Some((after, Some(_))) => Some(*after),
            _ => None,
        }
    }

    fn arm(&mut self, k: usize, kill: Kill) -> Result<()> {
        if self.writes.len() >= k {
            bail!(
                "armed too late: {} writes went through already",
                self.writes.len()
            );
        }
        self.crash = Some((k, Some(kill)));
        Ok(())
    }

    /// Whether and how a request from a connection of `epoch` goes on.
    fn admit(&mut self, epoch: u64, method: &Method, path: &str) -> Option<Admitted> {
        if epoch < self.epoch {
            return None;
        }
        let writing = matches!(
            *method,
            Method::POST | Method::PUT | Method::PATCH | Method::DELETE
        );
        if !writing {
            return Some(Admitted {
                write: None,
                crash: false,
            });
        }
        let pending = self.crash_pending();
        // Past the crash point, the process is as good as dead: it sends nothing more.
        if pending.is_some_and(|k| self.writes.len() >= k) {
            return None;
        }
        self.writes.push(Write {
            method: method.clone(),
            path: path.to_string(),
            code: None,
        });
        Some(Admitted {
            write: Some(self.writes.len() - 1),
            crash: pending == Some(self.writes.len()),
        })
    }

    /// Fires the kill hook; from then on, the connections open now are dead.
    fn crash(&mut self) {
        if let Some(kill) = self.crash.as_mut().and_then(|(_, kill)| kill.take()) {
            kill();
        }
        self.epoch += 1;
    }

    fn crashed_after(&self) -> Option<Write> {
        match self.crash {
            Some((k, None)) => self.writes.get(k - 1).cloned(),
            _ => None,
        }
    }
}

/// What the proxy does with a request it forwards.
struct Admitted {
    /// Its index among the writes, for a write.
    write: Option<usize>,
    /// Whether the operator dies once it is answered.
    crash: bool,
}

struct Shared {
    state: Mutex<State>,
    watched: Arc<watch::Counters>,
    crashed: tokio::sync::watch::Sender<bool>,
    upstream: Upstream,
}

pub struct SieveProxy {
    addr: SocketAddr,
    ca_cert: PathBuf,
    shared: Arc<Shared>,
    _accept: AbortOnDropHandle<()>,
    /// Ends the open connections with the proxy.
    _stop: DropGuard,
}

impl SieveProxy {
    /// Listens on a free loopback port and forwards to the API server at `upstream`, whose
    /// certificate `upstream_ca` (a PEM file) signed. Writes the proxy's own CA into `dir`.
    pub async fn start(upstream: SocketAddr, upstream_ca: &Path, dir: &Path) -> Result<Self> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let (ca_pem, server) = tls::serving(addr.ip())?;
        let ca_cert = dir.join(format!("sieve-{}-ca.crt", addr.port()));
        std::fs::write(&ca_cert, ca_pem)?;
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            watched: Arc::default(),
            crashed: tokio::sync::watch::Sender::new(false),
            upstream: Upstream {
                addr: upstream,
                tls: TlsConnector::from(tls::trusting(upstream_ca)?),
            },
        });
        let stop = CancellationToken::new();
        let accept = tokio::spawn(accept(
            listener,
            TlsAcceptor::from(server),
            shared.clone(),
            stop.clone(),
        ));
        Ok(Self {
            addr,
            ca_cert,
            shared,
            _accept: AbortOnDropHandle::new(accept),
            _stop: stop.drop_guard(),
        })
    }

    /// The URL a kubeconfig names as its server.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// The PEM file of the CA that signed the proxy's certificate.
    pub fn ca_cert(&self) -> &Path {
        &self.ca_cert
    }

    /// Perturbs the watches of `path` (`/api/v1/namespaces/NS/pods`) from now on; writes
    /// and other reads pass.
    pub fn perturb_watch(&self, path: &str, perturbation: Perturbation) {
        self.shared.lock().watch = Some((path.to_string(), perturbation));
    }

    /// Once the `k`-th write (1-based) has been answered, calls `kill` and drops the
    /// answer; nothing more of the killed process's is forwarded. Connections opened after
    /// that (the restarted process's) pass. Fails if `k` writes went through already.
    pub fn crash_after(&self, k: usize, kill: impl FnOnce() + Send + 'static) -> Result<()> {
        self.shared.lock().arm(k, Box::new(kill))
    }

    /// Waits until the crash has happened.
    pub async fn crashed(&self) {
        let mut crashed = self.shared.crashed.subscribe();
        // The sender lives as long as `self`: this returns only once it is true.
        let _ = crashed.wait_for(|c| *c).await;
    }

    /// The events of the perturbed watches so far.
    pub fn watch_events(&self) -> Tally {
        self.shared.watched.tally()
    }

    /// The write the operator was killed after, once it was.
    pub fn crashed_after(&self) -> Option<Write> {
        self.shared.lock().crashed_after()
    }

    /// The writes forwarded so far, in order.
    pub fn writes(&self) -> Vec<Write> {
        self.shared.lock().writes.clone()
    }
}

async fn accept(
    listener: TcpListener,
    tls: TlsAcceptor,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    while let Ok((tcp, _)) = listener.accept().await {
        let _ = tcp.set_nodelay(true);
        let epoch = shared.lock().epoch;
        let serving = shared.clone().serve(tcp, tls.clone(), epoch);
        let stop = stop.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = serving => {}
                () = stop.cancelled() => {}
            }
        });
    }
}

/// The proxy's connection to the API server for one client connection: HTTP/1.1 has one
/// request at a time on each, so the client's connections map one to one onto the proxy's.
type Link = tokio::sync::Mutex<Option<SendRequest<Incoming>>>;

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().expect("sieve proxy state")
    }

    async fn serve(self: Arc<Self>, tcp: TcpStream, tls: TlsAcceptor, epoch: u64) {
        let Ok(stream) = tls.accept(tcp).await else {
            return;
        };
        let link = Arc::new(Link::default());
        let service = hyper::service::service_fn(move |req| {
            let (shared, link) = (self.clone(), link.clone());
            async move { shared.forward(req, epoch, &link).await }
        });
        let _ = hyper::server::conn::http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .await;
    }

    /// Forwards one request and hands its answer on; an error closes the client's
    /// connection without an answer.
    async fn forward(
        &self,
        mut req: Request<Incoming>,
        epoch: u64,
        link: &Link,
    ) -> Result<Response<Body>> {
        let admitted = self
            .lock()
            .admit(epoch, req.method(), req.uri().path())
            .context("not forwarded: its process was killed")?;
        let perturbation = self.perturbation(&req);
        if perturbation.is_some() {
            // The events are read line by line: no compressed stream.
            req.headers_mut().remove(http::header::ACCEPT_ENCODING);
        }
        let answer = self.upstream.send(link, req).await;
        if let Some(i) = admitted.write {
            self.lock().writes[i].code = answer.as_ref().ok().map(|r| r.status().as_u16());
        }
        if admitted.crash {
            self.lock().crash();
            self.crashed.send_replace(true);
            bail!("the operator was killed before this answer");
        }
        let answer = answer?;
        Ok(match perturbation {
            Some(p) => answer.map(|body| watch::perturb(body, p, self.watched.clone())),
            None => answer.map(|body| body.map_err(Into::into).boxed()),
        })
    }

    fn perturbation(&self, req: &Request<Incoming>) -> Option<Perturbation> {
        let state = self.lock();
        let (path, perturbation) = state.watch.as_ref()?;
        let watching = req
            .uri()
            .query()
            .is_some_and(|q| q.split('&').any(|kv| kv == "watch=true" || kv == "watch=1"));
        (req.method() == Method::GET && req.uri().path() == path && watching)
            .then_some(*perturbation)
    }
}

/// The API server, over TLS.
struct Upstream {
    addr: SocketAddr,
    tls: TlsConnector,
}

impl Upstream {
    /// Sends `req` on `link`, connected anew if the API server closed it; the answer's head.
    async fn send(&self, link: &Link, req: Request<Incoming>) -> Result<Response<Incoming>> {
        let mut link = link.lock().await;
        let ready = match link.as_mut() {
            Some(sender) => sender.ready().await.is_ok(),
            None => false,
        };
        if !ready {
            *link = Some(self.connect().await?);
        }
        let answer = link.as_mut().expect("connected").send_request(req);
        // The body streams on without the link: the next request waits in `ready`.
        drop(link);
        Ok(answer.await?)
    }

    async fn connect(&self) -> Result<SendRequest<Incoming>> {
        let tcp = TcpStream::connect(self.addr).await?;
        tcp.set_nodelay(true)?;
        let name = ServerName::IpAddress(self.addr.ip().into());
        let stream = self.tls.connect(name, tcp).await?;
        let (sender, connection) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
        // Ends when the link is dropped and idle, or the API server closes it.
        tokio::spawn(connection);
        Ok(sender)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use super::*;

    /// `state.admit` of a request to the pods: its write index and whether it crashes.
    fn admit(state: &mut State, epoch: u64, method: Method) -> Option<(Option<usize>, bool)> {
        let admitted = state.admit(epoch, &method, "/api/v1/namespaces/ns/pods")?;
        Some((admitted.write, admitted.crash))
    }

    #[test]
    fn writes_are_counted_in_order_and_the_kth_crashes() {
        let killed = Arc::new(AtomicBool::new(false));
        let mut state = State::default();
        assert_eq!(admit(&mut state, 0, Method::POST), Some((Some(0), false)));
        let kill = killed.clone();
        let hook = Box::new(move || kill.store(true, Ordering::SeqCst));
        state.arm(3, hook).unwrap();
        assert_eq!(admit(&mut state, 0, Method::GET), Some((None, false)));
        assert_eq!(admit(&mut state, 0, Method::PATCH), Some((Some(1), false)));
        assert_eq!(admit(&mut state, 0, Method::DELETE), Some((Some(2), true)));
        // Sent while the 3rd is in flight: the process dies before it; reads still pass.
        assert_eq!(admit(&mut state, 0, Method::PUT), None);
        assert_eq!(admit(&mut state, 0, Method::GET), Some((None, false)));
        assert!(state.crashed_after().is_none());

        state.crash();
        assert!(killed.load(Ordering::SeqCst));
        let methods: Vec<&Method> = state.writes.iter().map(|w| &w.method).collect();
        assert_eq!(methods, [Method::POST, Method::PATCH, Method::DELETE]);
        assert_eq!(
            state.crashed_after().map(|w| w.method),
            Some(Method::DELETE)
        );
        // The killed process's connections are dead; the restarted one's pass, writes too.
        assert_eq!(admit(&mut state, 0, Method::GET), None);
        assert_eq!(admit(&mut state, 1, Method::POST), Some((Some(3), false)));
    }

    #[test]
    fn a_crash_armed_after_its_write_went_through_is_refused() {
        let mut state = State::default();
        admit(&mut state, 0, Method::POST);
        assert!(state.arm(1, Box::new(|| {})).is_err());
        assert!(state.arm(2, Box::new(|| {})).is_ok());
    }
}
