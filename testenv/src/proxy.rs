//! A fault-injecting TCP proxy, put between one operator process and the API server, for
//! the faults the control plane cannot produce on demand: a connection that hangs, a reply
//! lost after its request was forwarded, a connection refused. It works below TLS: it sees
//! bytes, not requests, which is what a network fault sees too.

use std::net::SocketAddr;

use anyhow::Result;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::task::AbortOnDropHandle;

/// What the proxy does to the traffic from now on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward everything.
    Pass,
    /// Forward nothing either way and keep the connections open, as a dead network path does;
    /// once this ends, the hung connections are reset (as their keepalives would), never
    /// delivered late. New connections hang as well.
    Hang,
    /// Forward requests, but reset each connection when its reply starts: the server acted,
    /// the client never hears. A new connection fails in its TLS handshake.
    ResetReplies,
    /// Reset every connection, open or new.
    Refuse,
    /// The connections open now hang for good, as behind a path that died without a reset
    /// (packets dropped both ways); new connections pass.
    Blackhole,
}

pub struct FaultProxy {
    addr: SocketAddr,
    fault: watch::Sender<Fault>,
    _accept: AbortOnDropHandle<()>,
}

impl FaultProxy {
    /// Listens on a free port of `upstream`'s address (so that the server's certificate,
    /// which names that address, still verifies) and forwards to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Result<Self> {
        let listener = TcpListener::bind((upstream.ip(), 0)).await?;
        let addr = listener.local_addr()?;
        let (fault, _) = watch::channel(Fault::Pass);
        let faults = fault.clone();
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                tokio::spawn(connection(client, upstream, faults.subscribe()));
            }
        });
        Ok(Self {
            addr,
            fault,
            _accept: AbortOnDropHandle::new(accept),
        })
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn set(&self, fault: Fault) {
        self.fault.send_replace(fault);
    }
}

/// One client connection, until either side closes or a fault resets it.
async fn connection(client: TcpStream, upstream: SocketAddr, mut fault: watch::Receiver<Fault>) {
    let _ = client.set_nodelay(true);
    if *fault.borrow_and_update() == Fault::Refuse {
        return reset(client);
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return reset(client);
    };
    let _ = server.set_nodelay(true);
    let (mut client_rx, mut client_tx) = client.into_split();
    let (mut server_rx, mut server_tx) = server.into_split();
    let (mut up, mut down) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    let mut hung = false;
    // A connection made while the fault holds is one of the new ones: it passes.
    let mut passes_blackhole = *fault.borrow() == Fault::Blackhole;
    loop {
        let now = *fault.borrow_and_update();
        if now == Fault::Blackhole && !passes_blackhole {
            // Silent for good: nothing either way, no reset, until the proxy goes.
            while fault.changed().await.is_ok() {}
            break;
        }
        passes_blackhole &= now == Fault::Blackhole;
        if hung && now != Fault::Hang || now == Fault::Refuse {
            break;
        }
        hung = now == Fault::Hang;
        tokio::select! {
            changed = fault.changed() => if changed.is_err() { break },
            n = client_rx.read(&mut up), if !hung => match n {
                Ok(n) if n > 0 && server_tx.write_all(&up[..n]).await.is_ok() => {}
                _ => break,
            },
            n = server_rx.read(&mut down), if !hung => match n {
                Ok(n) if n > 0 && *fault.borrow() == Fault::ResetReplies => break,
                Ok(n) if n > 0 && client_tx.write_all(&down[..n]).await.is_ok() => {}
                _ => break,
            },
        }
    }
    if let Ok(client) = client_rx.reunite(client_tx) {
        reset(client);
    }
}

/// Closes with a RST rather than a FIN: the client sees "connection reset".
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An echo server behind the proxy.
    async fn echo_behind_proxy() -> FaultProxy {
        let server = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = server.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = server.accept().await {
                tokio::spawn(async move {
                    let (mut rx, mut tx) = s.split();
                    let _ = tokio::io::copy(&mut rx, &mut tx).await;
                });
            }
        });
        FaultProxy::start(upstream).await.unwrap()
    }

    async fn round_trip(stream: &mut TcpStream) -> std::io::Result<Vec<u8>> {
        stream.write_all(b"ping").await?;
        let mut buf = [0u8; 4];
        let n = tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut buf))
            .await
            .map_err(|_| std::io::Error::other("no reply in 5 s"))??;
        Ok(buf[..n].to_vec())
    }

    /// The connection ended (closed or reset) instead of answering: `read` got no bytes.
    fn cut_off(read: &std::io::Result<usize>) -> bool {
        matches!(read, Ok(0) | Err(_))
    }

    #[tokio::test]
    async fn passes_then_loses_replies_then_refuses() {
        let proxy = echo_behind_proxy().await;
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c).await.unwrap(), b"ping");

        proxy.set(Fault::ResetReplies);
        let lost = round_trip(&mut c).await.map(|b| b.len());
        assert!(cut_off(&lost), "a reply got through: {lost:?}");

        proxy.set(Fault::Refuse);
        let mut refused = TcpStream::connect(proxy.addr()).await.unwrap();
        let answer = round_trip(&mut refused).await.map(|b| b.len());
        assert!(cut_off(&answer), "{answer:?}");

        proxy.set(Fault::Pass);
        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again).await.unwrap(), b"ping");
    }

    #[tokio::test]
    async fn a_blackhole_silences_open_connections_and_lets_new_ones_pass() {
        let proxy = echo_behind_proxy().await;
        let mut old = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut old).await.unwrap(), b"ping");
        proxy.set(Fault::Blackhole);
        let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut new).await.unwrap(), b"ping");
        let silent = round_trip(&mut old).await;
        assert!(silent.is_err(), "the open connection answered: {silent:?}");
        proxy.set(Fault::Pass);
        let still = round_trip(&mut old).await;
        assert!(
            still.is_err(),
            "a blackholed connection came back: {still:?}"
        );
    }

    #[tokio::test]
    async fn a_hang_delivers_nothing_and_ends_in_a_reset() {
        let proxy = echo_behind_proxy().await;
        let mut c = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut c).await.unwrap(), b"ping");
        proxy.set(Fault::Hang);
        c.write_all(b"late").await.unwrap();
        let mut buf = [0u8; 4];
        let waited =
            tokio::time::timeout(std::time::Duration::from_millis(300), c.read(&mut buf)).await;
        assert!(waited.is_err(), "the hung connection answered: {waited:?}");
        proxy.set(Fault::Pass);
        let after = c.read(&mut buf).await;
        assert!(
            cut_off(&after),
            "the held request was delivered late: {after:?}"
        );
    }
}
