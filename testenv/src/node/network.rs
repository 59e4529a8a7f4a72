//! A node's pod network: a Linux bridge of its own with a /24 no other bridge on the machine
//! uses. Nothing leaves the machine: the bridge has no uplink and no masquerade.

use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

use anyhow::{Context, Result, bail};

/// A bridge and its subnet; the bridge holds the gateway address (`.1`).
#[derive(Clone, Debug)]
pub struct Bridge {
    pub name: String,
    pub subnet: Ipv4Addr,
}

impl Bridge {
    /// Brings up the bridge of the node whose directory is `dir`: the one it had before
    /// (a restarted `make cluster-up` keeps its addresses: the API server listens on the
    /// first bridge's gateway, and kubeconfigs and deployed pods name it), else a new one
    /// with an unused 10.x.y.0/24 and a unique name. `prefix` (3 letters) tells test
    /// clusters from `make cluster-up`'s in interface listings.
    pub fn create(prefix: &str, dir: &Path) -> Result<Self> {
        let file = dir.join("bridge");
        let before = std::fs::read_to_string(&file).ok().and_then(|s| {
            let (name, subnet) = s.trim().split_once(' ')?;
            Some(Self {
                name: name.to_string(),
                subnet: subnet.parse().ok()?,
            })
        });
        let bridge = match before {
            Some(b) if !subnet_in_use(b.subnet)? && b.bring_up().is_ok() => b,
            _ => Self::create_new(prefix)?,
        };
        std::fs::create_dir_all(dir)?;
        std::fs::write(&file, format!("{} {}", bridge.name, bridge.subnet))?;
        Ok(bridge)
    }

    fn create_new(prefix: &str) -> Result<Self> {
        for _ in 0..20 {
            let r = super::random_u32();
            let subnet = Ipv4Addr::new(10, 64 + (r % 64) as u8, (r >> 8) as u8, 0);
            let bridge = Self {
                name: format!("{prefix}{:08x}", super::random_u32()),
                subnet,
            };
            if subnet_in_use(subnet)? {
                continue;
            }
            bridge.bring_up()?;
            return Ok(bridge);
        }
        bail!("no free 10.64.0.0/10 subnet for a node bridge")
    }

    pub fn gateway(&self) -> Ipv4Addr {
        let [a, b, c, _] = self.subnet.octets();
        Ipv4Addr::new(a, b, c, 1)
    }

    pub fn cidr(&self) -> String {
        format!("{}/24", self.subnet)
    }

    fn bring_up(&self) -> Result<()> {
        ip(&["link", "add", &self.name, "type", "bridge"])?;
        ip(&[
            "addr",
            "add",
            &format!("{}/24", self.gateway()),
            "dev",
            &self.name,
        ])?;
        ip(&["link", "set", &self.name, "up"])
    }

    /// Deletes the bridge (veths still attached go with their network namespaces).
    pub fn delete(name: &str) {
        let _ = ip(&["link", "del", name]);
    }
}

/// Whether any interface already has an address in `subnet`/24.
fn subnet_in_use(subnet: Ipv4Addr) -> Result<bool> {
    let out = Command::new("ip")
        .args(["-4", "-o", "addr", "show"])
        .output()
        .context("running ip (iproute2)")?;
    let [a, b, c, _] = subnet.octets();
    let prefix = format!(" inet {a}.{b}.{c}.");
    Ok(String::from_utf8_lossy(&out.stdout).contains(&prefix))
}

fn ip(args: &[&str]) -> Result<()> {
    let out = Command::new("ip")
        .args(args)
        .output()
        .context("running ip (iproute2)")?;
    if !out.status.success() {
        bail!(
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
