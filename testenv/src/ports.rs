//! Ports for the processes a test starts to listen on.

use std::net::TcpListener;
use std::sync::atomic::{AtomicU32, Ordering};

use anyhow::{Result, bail};

/// Where ports are handed out: below Linux's default ephemeral range (32768-60999), from
/// which `bind(:0)` and the local port of every outgoing connection are taken, and below
/// Kubernetes' NodePort range (30000-32767).
const PORTS: std::ops::Range<u32> = 16384..30000;

/// A TCP port free on loopback, for a process a test starts to listen on. The port is
/// released before that process binds it. A port of the ephemeral range could meanwhile
/// become the local port of any outgoing connection (CI saw the operator's metrics port
/// taken so); below it, only other callers compete. In this process each port is handed out
/// once (a counter walks the range); another process walks from its own pid-derived start,
/// and a port in use is skipped.
pub fn free_port() -> Result<u16> {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let start = std::process::id().wrapping_mul(7919);
    let span = PORTS.end - PORTS.start;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = (PORTS.start + start.wrapping_add(n) % span) as u16;
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    bail!("no free port on 127.0.0.1 in {PORTS:?}")
}

/// The port `name` had in `dir` before if it is still free (a restarted `make cluster-up`
/// keeps its API server's and registry's addresses, which kubeconfigs and deployed images
/// name), else a new one; remembered for next time.
pub fn sticky_port(dir: &std::path::Path, name: &str) -> Result<u16> {
    let file = dir.join(format!("{name}.port"));
    let before = std::fs::read_to_string(&file)
        .ok()
        .and_then(|p| p.trim().parse::<u16>().ok())
        .filter(|p| TcpListener::bind(("0.0.0.0", *p)).is_ok());
    let port = match before {
        Some(p) => p,
        None => free_port()?,
    };
    std::fs::write(&file, port.to_string())?;
    Ok(port)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The kernel's ephemeral range, from which it picks the local port of every outgoing
    /// connection without asking anyone.
    fn ephemeral() -> std::ops::RangeInclusive<u16> {
        let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap();
        let bounds: Vec<u16> = range
            .split_whitespace()
            .map(|n| n.parse().unwrap())
            .collect();
        bounds[0]..=bounds[1]
    }

    /// A port handed out for a later listener is never one an outgoing connection can take
    /// in the meantime (CI saw the operator's metrics port taken that way: "Address already
    /// in use"), and never handed out twice.
    #[test]
    fn ports_come_from_outside_the_ephemeral_range_and_are_not_repeated() {
        let ephemeral = ephemeral();
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        for port in &ports {
            assert!(!ephemeral.contains(port), "{port} is in {ephemeral:?}");
        }
        let unique: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
    }
}
