//! Issue 31, item 2: hostile clients on the operator's ports. Any pod in the cluster can reach
//! `/metrics` (HTTPS, tokens reviewed by the API server) and the probes (plain HTTP), and
//! none needs a token to send bytes. Under each attack the operator's memory stays within
//! 16 MiB of idle, its file descriptors within its connection cap, and a scraper with a token
//! and the kubelet's probes keep being answered. Each test prints its figures.
//!
//! Attackers connect from 127.0.0.2 and up (pods of their own); the scraper and the kubelet
//! from 127.0.0.1.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, Result, ensure};
use futures::future::join_all;
use podset_operator::rbac;
use testenv::harness::{Operator, PROMPTLY, TestNs, cluster_without_nodes, poll};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpSocket, TcpStream};

/// How long each attack lasts.
const ATTACK: Duration = Duration::from_secs(10);
/// What an attack may add to the operator's peak memory.
const MEMORY_HEADROOM: u64 = 16 << 20;
/// Attacker addresses: more than the connection cap divided by the per-address cap.
const ATTACKERS: u8 = 12;

struct Target {
    _ns: TestNs,
    op: Operator,
    token: String,
}

/// An operator whose `/metrics` reviews tokens, and the token of an allowed scraper.
async fn target(prefix: &str) -> Result<Target> {
    let ns = TestNs::new_in(cluster_without_nodes().await?, prefix).await?;
    ns.grant_metrics_auth().await?;
    ns.create_service_account("scraper").await?;
    ns.grant_cluster_role("scraper", rbac::metrics_reader_cluster_role())
        .await?;
    let token = ns
        .cluster
        .service_account_token(&ns.name, "scraper")
        .await?;
    let op = ns.start_operator(&["--controllers=podset"]).await?;
    let target = Target { _ns: ns, op, token };
    poll(PROMPTLY, "the scraper and the probe answered", || async {
        Ok(answered(&target).await.is_ok())
    })
    .await?;
    Ok(target)
}

/// A field of `/proc/<pid>/status`, in bytes.
fn status_bytes(pid: u32, field: &str) -> Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let line = status
        .lines()
        .find(|l| l.starts_with(field))
        .with_context(|| format!("no {field}"))?;
    let kib: u64 = line[field.len()..]
        .trim()
        .trim_end_matches(" kB")
        .trim()
        .parse()?;
    Ok(kib * 1024)
}

fn open_fds(pid: u32) -> Result<usize> {
    Ok(std::fs::read_dir(format!("/proc/{pid}/fd"))?.count())
}

/// What happened under one attack.
#[derive(Debug)]
struct Figures {
    idle: u64,
    peak: u64,
    fds_idle: usize,
    fds_most: usize,
    checks: usize,
    failed: Vec<String>,
}

/// Runs `attack` against `target` for [`ATTACK`] while the scraper and the kubelet keep
/// asking; the figures.
async fn under(target: &Target, attack: impl Future<Output = String>) -> Result<Figures> {
    let pid = target
        .op
        .process
        .pid()
        .context("the operator is not running")?;
    let fds_idle = open_fds(pid)?;
    let idle = status_bytes(pid, "VmRSS:")?;
    // The peak from here on (VmHWM is reset by writing 5 to clear_refs).
    std::fs::write(format!("/proc/{pid}/clear_refs"), "5")?;
    let fds_most = AtomicUsize::new(fds_idle);
    let checking = async {
        let (mut checks, mut failed) = (0, Vec::new());
        let end = Instant::now() + ATTACK;
        while Instant::now() < end {
            fds_most.fetch_max(open_fds(pid).unwrap_or(0), Ordering::Relaxed);
            checks += 1;
            if let Err(e) = answered(target).await {
                failed.push(format!("{e:#}"));
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        (checks, failed)
    };
    let (said, (checks, failed)) = tokio::join!(attack, checking);
    let figures = Figures {
        idle,
        peak: status_bytes(pid, "VmHWM:")?,
        fds_idle,
        fds_most: fds_most.into_inner(),
        checks,
        failed,
    };
    println!(
        "{said}; RSS idle {:.1} MiB, peak {:.1} MiB (+{:.1}); fds idle {}, most {}; {} of {} \
         scrapes and probes answered",
        mib(figures.idle),
        mib(figures.peak),
        mib(figures.peak.saturating_sub(figures.idle)),
        figures.fds_idle,
        figures.fds_most,
        figures.checks - figures.failed.len(),
        figures.checks
    );
    Ok(figures)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / f64::from(1 << 20)
}

/// One scrape with the token and one readiness probe, each answered 200 within 5 s.
async fn answered(target: &Target) -> Result<()> {
    let scrape = tokio::time::timeout(
        Duration::from_secs(5),
        target.op.get_metrics(Some(&target.token)),
    );
    let (code, _) = scrape.await.context("a scrape unanswered in 5 s")??;
    ensure!(code == 200, "a scrape answered {code}");
    let probe = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?
        .get(format!("http://127.0.0.1:{}/readyz", target.op.health_port))
        .send()
        .await
        .context("a probe")?;
    ensure!(probe.status() == 200, "a probe answered {}", probe.status());
    Ok(())
}

/// The bounds every attack is held to.
fn bounded(figures: &Figures) -> Result<()> {
    let grown = figures.peak.saturating_sub(figures.idle);
    ensure!(
        grown <= MEMORY_HEADROOM,
        "peak RSS {:.1} MiB over idle",
        mib(grown)
    );
    // Both ports' connections at their cap, and a few of the operator's own.
    let cap = 2 * podset_operator::http::serve::Limits::PROBES_AND_METRICS.total + 16;
    ensure!(
        figures.fds_most <= figures.fds_idle + cap,
        "{} file descriptors open, {} at idle",
        figures.fds_most,
        figures.fds_idle
    );
    ensure!(
        figures.failed.is_empty(),
        "{} of {} scrapes and probes failed: {:?}",
        figures.failed.len(),
        figures.checks,
        &figures.failed[..figures.failed.len().min(5)]
    );
    Ok(())
}

fn attacker(i: usize) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(
        127,
        0,
        0,
        2 + (i % usize::from(ATTACKERS)) as u8,
    ))
}

/// A TCP connection to `port` from `from`.
async fn connect(from: IpAddr, port: u16) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(from, 0))?;
    socket
        .connect(SocketAddr::from(([127, 0, 0, 1], port)))
        .await
}

/// Issue 31, case 2: every request to `/metrics` with a new ~300 KB bearer token, from many
/// connections. Before: each reviewed token was kept whole in the answer cache (11 -> 313
/// MiB at 1,100 tokens, OOMKilled under the chart's limit).
#[tokio::test]
async fn a_new_large_token_on_every_request_costs_bounded_memory() -> Result<()> {
    let target = target("token-flood").await?;
    let port = target.op.metrics_port;
    let answers = Arc::new(std::sync::Mutex::new(std::collections::BTreeMap::new()));
    let sent = Arc::new(AtomicU64::new(0));
    let attack = async {
        let floods = (0..48).map(|i| {
            let (answers, sent) = (answers.clone(), sent.clone());
            async move {
                let client = reqwest::Client::builder()
                    .danger_accept_invalid_certs(true)
                    .local_address(attacker(i))
                    .timeout(Duration::from_secs(5))
                    .build()
                    .expect("a client");
                let end = Instant::now() + ATTACK;
                let mut n = 0;
                while Instant::now() < end {
                    n += 1;
                    let token = format!("{i}-{n}-{}", "t".repeat(300 * 1024));
                    let sent_ = client
                        .get(format!("https://127.0.0.1:{port}/metrics"))
                        .bearer_auth(token)
                        .send()
                        .await;
                    sent.fetch_add(1, Ordering::Relaxed);
                    let code = sent_.map_or("no answer".to_string(), |r| r.status().to_string());
                    *answers.lock().unwrap().entry(code).or_insert(0) += 1;
                }
            }
        });
        join_all(floods).await;
        format!(
            "{} requests with new 300 KB tokens, answered {:?}",
            sent.load(Ordering::Relaxed),
            answers.lock().unwrap()
        )
    };
    bounded(&under(&target, attack).await?)
}

/// Requests whose heads never end (1 MiB of header, then more) on both ports.
#[tokio::test]
async fn oversized_request_heads_cost_bounded_memory() -> Result<()> {
    let target = target("big-heads").await?;
    let ports = [target.op.health_port, target.op.metrics_port];
    let sent = Arc::new(AtomicU64::new(0));
    let attack = async {
        let floods = (0..48).map(|i| {
            let sent = sent.clone();
            async move {
                let end = Instant::now() + ATTACK;
                let chunk = vec![b'a'; 64 * 1024];
                while Instant::now() < end {
                    // The probe port in plain HTTP; the metrics port's TLS never starts, so
                    // its bytes are a handshake that never ends.
                    let Ok(mut conn) = connect(attacker(i), ports[i % 2]).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    let _ = conn
                        .write_all(b"GET /readyz HTTP/1.1\r\nHost: x\r\nX-Big: ")
                        .await;
                    for _ in 0..16 {
                        if conn.write_all(&chunk).await.is_err() {
                            break;
                        }
                        sent.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                    }
                }
            }
        });
        join_all(floods).await;
        format!(
            "{:.0} MiB of request heads sent",
            mib(sent.load(Ordering::Relaxed))
        )
    };
    bounded(&under(&target, attack).await?)
}

/// Connections opened and left idle, or fed one byte a second (slowloris), or stopped
/// midway through a TLS handshake, as many as the attackers can open.
#[tokio::test]
async fn idle_slow_and_half_open_connections_cost_bounded_descriptors() -> Result<()> {
    let target = target("idle-conns").await?;
    let ports = [target.op.health_port, target.op.metrics_port];
    let opened = Arc::new(AtomicU64::new(0));
    let attack = async {
        let holders = (0..300).map(|i| {
            let opened = opened.clone();
            async move {
                let end = Instant::now() + ATTACK;
                while Instant::now() < end {
                    let Ok(mut conn) = connect(attacker(i), ports[i % 2]).await else {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    };
                    opened.fetch_add(1, Ordering::Relaxed);
                    // A third idle, a third slow, a third a TLS record header and no more.
                    let first: &[u8] = match i % 3 {
                        0 => b"",
                        1 => b"G",
                        _ => &[0x16, 0x03, 0x01, 0x02, 0x00],
                    };
                    if conn.write_all(first).await.is_err() {
                        continue;
                    }
                    while Instant::now() < end {
                        tokio::time::sleep(Duration::from_secs(1)).await;
                        let more: &[u8] = if i % 3 == 1 { b"E" } else { b"" };
                        if conn.write_all(more).await.is_err() || closed(&conn) {
                            break;
                        }
                    }
                }
            }
        });
        join_all(holders).await;
        format!(
            "{} idle, slow or half-open connections opened",
            opened.load(Ordering::Relaxed)
        )
    };
    bounded(&under(&target, attack).await?)
}

/// Whether the server closed `conn` (a read would return 0 bytes now).
fn closed(conn: &TcpStream) -> bool {
    let mut buf = [0u8; 1];
    matches!(conn.try_read(&mut buf), Ok(0))
}
