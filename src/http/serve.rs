//! The accept loop of both endpoints. Any pod in the cluster can reach them, so what one
//! client can hold is bounded: connections at once (in all, and per address), the time to
//! finish a TLS handshake and to send a request's headers, the size of those headers, and a
//! connection's lifetime (connection.rs). Beyond a bound a connection is closed, never queued; at the cap,
//! the address holding the most connections gives one up to an address holding fewer, and
//! when every address holds as few, the oldest connection gives way: a newcomer (the
//! kubelet's probe) is never refused for room.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use parking_lot::Mutex;
use tokio::net::TcpListener;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tracing::{debug, warn};

use super::connection::{self, Closing};

/// After a failed accept, as axum's own server waits.
const ACCEPT_BACKOFF: Duration = Duration::from_secs(1);
/// How many connections an endpoint serves at once: in all, and from one address (a single
/// pod cannot take every slot). Beyond them a connection is closed as it comes, or makes room.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    pub total: usize,
    pub per_address: usize,
}

impl Limits {
    /// The probes and `/metrics`: a scraper or a kubelet needs one, and the kubelet's probes
    /// and Prometheus come from addresses of their own.
    pub const PROBES_AND_METRICS: Limits = Limits {
        total: 64,
        per_address: 8,
    };
    /// The conversion webhook: the API server (an address or a few) opens a connection per
    /// conversion in flight.
    pub const WEBHOOK: Limits = Limits {
        total: 128,
        per_address: 64,
    };
}
/// The most a connection buffers of a request's head (hyper's minimum is 8 KiB). A
/// ServiceAccount token is about 1 KiB; a longer head is answered 431.
pub const MAX_HEAD_BYTES: usize = 64 * 1024;

/// Serves `app` on `listener` until `shutdown`, over TLS if `tls` is given, within `limits`.
pub async fn serve(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    app: Router,
    limits: Limits,
    shutdown: CancellationToken,
) {
    let slots = Slots::new(limits);
    loop {
        let (tcp, peer) = tokio::select! {
            biased;
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, typically: accepting again at once would spin.
                    warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => return,
        };
        let Some(slot) = slots.take(peer.ip()) else {
            debug!(%peer, "too many connections; closing this one");
            continue;
        };
        // A response's last segment waits for no ACK: with Nagle's algorithm, a client that
        // delays its ACKs (Go's, the API server calling the webhook) waited 40 ms a request.
        if let Err(e) = tcp.set_nodelay(true) {
            debug!(%peer, error = %e, "TCP_NODELAY not set");
        }
        let closing = Closing::new(shutdown.clone(), slot.closed.clone());
        let (tls, app) = (tls.clone(), app.clone());
        tokio::spawn(async move {
            connection::serve(tcp, peer, tls, app, closing).await;
            drop(slot);
        });
    }
}

/// The connections being served, by address, oldest first.
#[derive(Clone)]
struct Slots(Arc<Mutex<Held>>);

struct Held {
    limits: Limits,
    by_address: HashMap<IpAddr, VecDeque<(u64, CancellationToken)>>,
    total: usize,
    next_id: u64,
}

impl Slots {
    fn new(limits: Limits) -> Self {
        Self(Arc::new(Mutex::new(Held {
            limits,
            by_address: HashMap::new(),
            total: 0,
            next_id: 0,
        })))
    }

    /// A slot for a connection from `ip`: none if that address holds its share; at the cap in
    /// all, the oldest connection of the address holding the most gives way if it holds more
    /// than `ip` would, else the oldest connection of all. So a client with few connections
    /// (a kubelet, a Prometheus) gets in however many addresses fill the rest, even one
    /// connection each: its request, sent as it connects, is answered long before as many
    /// newer connections have come as there are slots.
    fn take(&self, ip: IpAddr) -> Option<Slot> {
        let mut held = self.0.lock();
        let from_ip = held.by_address.get(&ip).map_or(0, VecDeque::len);
        if from_ip >= held.limits.per_address {
            return None;
        }
        if held.total >= held.limits.total {
            let gives_way = held.to_give_way(from_ip)?;
            held.release(gives_way, None)?.cancel();
        }
        let (id, closed) = (held.next_id, CancellationToken::new());
        held.next_id += 1;
        held.total += 1;
        held.by_address
            .entry(ip)
            .or_default()
            .push_back((id, closed.clone()));
        Some(Slot {
            slots: self.clone(),
            ip,
            id,
            closed,
        })
    }
}

impl Held {
    /// The address whose oldest connection makes room for one from an address holding
    /// `from_ip`: the busiest, if it holds more than that address would; else the address of
    /// the oldest connection.
    fn to_give_way(&self, from_ip: usize) -> Option<IpAddr> {
        let (&most, n) = self
            .by_address
            .iter()
            .map(|(address, conns)| (address, conns.len()))
            .max_by_key(|(_, n)| *n)?;
        if n > from_ip + 1 {
            return Some(most);
        }
        let oldest = self
            .by_address
            .iter()
            .min_by_key(|(_, conns)| conns.front().map_or(u64::MAX, |(id, _)| *id))?;
        Some(*oldest.0)
    }

    /// Removes the connection `id` of `ip` (its oldest if `None`); its token, if it held one.
    fn release(&mut self, ip: IpAddr, id: Option<u64>) -> Option<CancellationToken> {
        let conns = self.by_address.get_mut(&ip)?;
        let at = match id {
            Some(id) => conns.iter().position(|(i, _)| *i == id)?,
            None => 0,
        };
        let (_, closed) = conns.remove(at)?;
        if conns.is_empty() {
            self.by_address.remove(&ip);
        }
        self.total -= 1;
        Some(closed)
    }
}

/// A connection's place in [`Slots`], given back when it is dropped; `closed` fires when it
/// must give way.
struct Slot {
    slots: Slots,
    ip: IpAddr,
    id: u64,
    closed: CancellationToken,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots.0.lock().release(self.ip, Some(self.id));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    const MAX_CONNECTIONS: usize = Limits::PROBES_AND_METRICS.total;
    const PER_ADDRESS: usize = Limits::PROBES_AND_METRICS.per_address;

    #[test]
    fn one_address_cannot_take_more_than_its_share() {
        let slots = Slots::new(Limits::PROBES_AND_METRICS);
        let one: IpAddr = "10.0.0.1".parse().unwrap();
        let held: Vec<_> = (0..PER_ADDRESS)
            .map(|_| slots.take(one).expect("a slot"))
            .collect();
        assert!(
            slots.take(one).is_none(),
            "one address took more than its share"
        );
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(slots.take(other).is_some(), "another address was refused");
        drop(held);
        assert!(slots.take(one).is_some(), "slots were not given back");
        assert!(
            slots.0.lock().by_address.is_empty(),
            "addresses kept with no connection"
        );
    }

    /// Issue 46: 1,200 idle connections from as many addresses (pods of their own) held every
    /// slot, one each, and the kubelet's probe was closed unanswered until they timed out: a
    /// restart for the operator. At the cap a newcomer always gets in.
    #[tokio::test]
    async fn a_probe_is_answered_while_1200_idle_connections_are_held() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let app = Router::new().route("/readyz", axum::routing::get(|| async { "ok" }));
        let shutdown = CancellationToken::new();
        let limits = Limits::PROBES_AND_METRICS;
        tokio::spawn(serve(listener, None, app, limits, shutdown.clone()));
        let mut idle = Vec::new();
        for k in 0..1200u32 {
            let from = IpAddr::from([127, 0, 1 + (k / 250) as u8, 2 + (k % 250) as u8]);
            let socket = tokio::net::TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::new(from, 0)).unwrap();
            idle.push(socket.connect(([127, 0, 0, 1], port).into()).await.unwrap());
        }
        let probe = reqwest::Client::builder()
            .timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        for n in 0..10 {
            let answer = probe
                .get(format!("http://127.0.0.1:{port}/readyz"))
                .send()
                .await;
            assert!(
                answer.is_ok_and(|a| a.status() == 200),
                "probe {n} unanswered beside {} idle connections",
                idle.len()
            );
        }
        shutdown.cancel();
    }

    /// Every bound above is HTTP/1's (the head's size, the time to send it, one request at a
    /// time): a client that opens with HTTP/2's preface (h2c, or TLS without ALPN) is answered
    /// in HTTP/1 or not at all, never with HTTP/2's 200 streams a connection and no header
    /// timer.
    #[tokio::test]
    async fn a_client_speaking_http2_by_prior_knowledge_is_not_served_http2() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let app = Router::new().route("/readyz", axum::routing::get(|| async { "ok" }));
        let shutdown = CancellationToken::new();
        let limits = Limits::PROBES_AND_METRICS;
        tokio::spawn(serve(listener, None, app, limits, shutdown.clone()));
        let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        // The preface, then an empty SETTINGS frame (length 0, type 4, no flags, stream 0).
        tcp.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
            .await
            .unwrap();
        let mut answer = [0u8; 9];
        let read = tokio::time::timeout(Duration::from_secs(5), tcp.read(&mut answer)).await;
        let n = read.expect("answered or closed within 5 s").unwrap_or(0);
        let settings_frame = n >= 4 && answer[3] == 0x04;
        assert!(
            !settings_frame,
            "answered with an HTTP/2 SETTINGS frame: {:?}",
            &answer[..n]
        );
        shutdown.cancel();
    }

    /// Many addresses fill every slot: a newcomer still gets in, and the connection that
    /// gives way is the oldest of an address holding the most.
    #[test]
    fn at_the_cap_the_busiest_address_makes_room_for_a_newcomer() {
        let slots = Slots::new(Limits::PROBES_AND_METRICS);
        let flooders = MAX_CONNECTIONS / PER_ADDRESS;
        let mut all = Vec::new();
        for a in 0..flooders {
            for _ in 0..PER_ADDRESS {
                all.push(
                    slots
                        .take(IpAddr::from([10, 1, 0, a as u8]))
                        .expect("under the cap"),
                );
            }
        }
        let kubelet: IpAddr = "10.9.9.9".parse().unwrap();
        let probe = slots.take(kubelet).expect("a newcomer at the cap");
        let gave_way: Vec<_> = (0..all.len())
            .filter(|i| all[*i].closed.is_cancelled())
            .collect();
        assert_eq!(gave_way.len(), 1, "{gave_way:?}");
        assert_eq!(gave_way[0] % PER_ADDRESS, 0, "not its address's oldest");
        assert_eq!(slots.0.lock().total, MAX_CONNECTIONS);
        assert!(!probe.closed.is_cancelled());

        // Once every address holds one, the oldest connection of all gives way.
        drop(all);
        let ones: Vec<_> = (0..MAX_CONNECTIONS - 1)
            .map(|i| {
                slots
                    .take(IpAddr::from([10, 2, (i / 256) as u8, i as u8]))
                    .unwrap()
            })
            .collect();
        let newcomer = slots.take("10.3.0.1".parse().unwrap());
        assert!(newcomer.is_some(), "a newcomer refused at the cap");
        assert!(probe.closed.is_cancelled(), "the oldest did not give way");
        assert!(ones.iter().all(|s| !s.closed.is_cancelled()));
    }

    /// A connection closed for room, at its lifetime's end or at shutdown finishes the request
    /// in flight first: the API server's conversion call on it is answered, not reset (a
    /// reset is a failed read of an At for the API server's client).
    #[tokio::test]
    async fn a_request_in_flight_is_answered_when_its_connection_is_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (arrived, release) = (
            Arc::new(tokio::sync::Notify::new()),
            Arc::new(tokio::sync::Notify::new()),
        );
        let handler = {
            let (arrived, release) = (arrived.clone(), release.clone());
            move || async move {
                arrived.notify_one();
                release.notified().await;
                "converted"
            }
        };
        let app = Router::new().route("/convert", axum::routing::get(handler));
        let shutdown = CancellationToken::new();
        tokio::spawn(serve(
            listener,
            None,
            app,
            Limits::WEBHOOK,
            shutdown.clone(),
        ));
        let client = reqwest::Client::new();
        let call = tokio::spawn(client.get(format!("http://{addr}/convert")).send());
        arrived.notified().await;
        shutdown.cancel();
        // The test runs on one thread: a yield runs every task the cancel woke (the
        // connection's among them) before the handler is let go.
        tokio::task::yield_now().await;
        release.notify_one();
        let answer = tokio::time::timeout(Duration::from_secs(5), call).await;
        let answer = answer.expect("answered within 5 s").unwrap();
        assert!(
            answer.as_ref().is_ok_and(|a| a.status() == 200),
            "the request in flight was not answered: {answer:?}"
        );
    }
}
