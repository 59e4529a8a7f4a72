//! The cluster's own image registry (Debian's `docker-registry`, the CNCF distribution
//! registry) on a free loopback port, with its data in the cluster's directory. Real nodes
//! use it as their mirror for `docker.io` and `registry.k8s.io`, so pods name images as on
//! a real cluster (`image: busybox`) and nothing is pulled from outside.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};

use crate::process::Process;

/// Starts the registry; returns it with its `host:port`.
pub async fn start(dir: &Path) -> Result<(Process, String)> {
    let addr = format!("127.0.0.1:{}", crate::ports::sticky_port(dir, "registry")?);
    let conf = dir.join("registry.yml");
    std::fs::write(
        &conf,
        format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {addr}\n",
            dir.join("registry").display()
        ),
    )?;
    let mut p = Process::new(
        "registry",
        "docker-registry",
        vec!["serve".into(), conf.to_string_lossy().into_owned()],
        dir,
    );
    p.start()?;
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(1))
        .build()?;
    let url = format!("http://{addr}/v2/");
    crate::poll(Duration::from_secs(30), "the image registry", || async {
        Ok(http
            .get(&url)
            .send()
            .await
            .is_ok_and(|r| r.status().is_success()))
    })
    .await
    .with_context(|| p.log_tail(20))?;
    Ok((p, addr))
}

/// Pushes an OCI archive to `registry` as `repo` (`library/busybox:latest`).
pub async fn push(registry: &str, archive: &Path, repo: &str) -> Result<()> {
    if !archive.exists() {
        bail!(
            "{} is missing: run hack/build-node-images.sh (make kubernetes) first",
            archive.display()
        );
    }
    let mut cmd = Command::new("skopeo");
    cmd.args([
        "copy",
        "--quiet",
        "--insecure-policy",
        "--dest-tls-verify=false",
    ])
    .arg(format!("oci-archive:{}", archive.display()))
    .arg(format!("docker://{registry}/{repo}"));
    let out = tokio::task::spawn_blocking(move || cmd.output())
        .await?
        .context("running skopeo")?;
    if !out.status.success() {
        bail!(
            "skopeo copy {} to {registry}/{repo}: {}",
            archive.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}
