//! Ports for the processes a test starts to listen on.

use std::net::TcpListener;

use anyhow::Result;

/// A free TCP port on loopback. The port is released before use, so another process could
/// take it in between; the window is small and a collision fails loudly at start-up.
pub fn free_port() -> Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
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
        let ports: Vec<u16> = (0..200).map(|_| free_port().unwrap()).collect();
        for port in &ports {
            assert!(
                !ephemeral().contains(port),
                "{port} is in {:?}",
                ephemeral()
            );
        }
        let unique: std::collections::HashSet<_> = ports.iter().collect();
        assert_eq!(unique.len(), ports.len(), "a port handed out twice");
    }
}
