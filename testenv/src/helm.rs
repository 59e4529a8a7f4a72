//! The helm CLI that `hack/build-kubernetes.sh` builds (`HELM_VERSION` of
//! `hack/go/versions.env`), the one Helm the tests drive: lint, template, install, upgrade,
//! uninstall, each a run of the binary that returns its stdout, or an error with the command,
//! its exit status and what helm said on stdout and stderr.
//!
//! `$HELM` names another binary; else the build's cache, as [`crate::versions::kubectl`]
//! finds kubectl: a helm of another major version would render and install differently.

use std::path::{Path, PathBuf};

use anyhow::{Result, bail};

const VERSIONS_ENV: &str = include_str!("../../hack/go/versions.env");

/// The pinned Helm version (`4.2.3`).
pub fn version() -> &'static str {
    VERSIONS_ENV
        .lines()
        .find_map(|l| l.strip_prefix("HELM_VERSION="))
        .expect("hack/go/versions.env has HELM_VERSION")
}

/// `$HELM`, else `helm-v<version>/bin/helm` in the cache hack/build-kubernetes.sh fills.
pub fn binary() -> PathBuf {
    if let Some(helm) = std::env::var_os("HELM").filter(|h| !h.is_empty()) {
        return helm.into();
    }
    let cache = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        });
    cache
        .join("podset-operator")
        .join(format!("helm-v{}/bin/helm", version()))
}

/// `helm ARGS...`: its stdout, or an error saying the command, its status, stdout and stderr.
pub async fn run(args: &[&str]) -> Result<String> {
    let helm = binary();
    if !helm.exists() {
        bail!(
            "{} is missing: build it with `hack/build-kubernetes.sh --helm-only` (or make kubernetes), or set $HELM",
            helm.display()
        );
    }
    let here = std::env::current_dir()?;
    crate::run_command(&here, &helm.to_string_lossy(), args, &[]).await
}

fn path(p: &Path) -> Result<&str> {
    p.to_str()
        .ok_or_else(|| anyhow::anyhow!("not UTF-8: {}", p.display()))
}

/// `helm lint CHART --strict MORE...`: warnings fail too.
pub async fn lint(chart: &Path, more: &[&str]) -> Result<String> {
    run(&[&["lint", path(chart)?, "--strict"], more].concat()).await
}

/// `helm template RELEASE CHART --namespace NS --skip-tests MORE...`: what `helm install`
/// creates, as one YAML stream (the CRDs, NOTES.txt and the `helm test` hooks left out),
/// rendered without a cluster.
pub async fn template(
    release: &str,
    chart: &Path,
    namespace: &str,
    more: &[&str],
) -> Result<String> {
    let args = [
        "template",
        release,
        path(chart)?,
        "--namespace",
        namespace,
        "--skip-tests",
    ];
    run(&[&args[..], more].concat()).await
}

/// What [`release`] does to a release.
#[derive(Clone, Copy, Debug)]
pub enum Release {
    Install,
    Upgrade,
}

/// `helm install|upgrade RELEASE CHART` in `namespace` of the cluster of `kubeconfig`, then
/// `more` (`--set`, `--create-namespace`, `--reuse-values`...). It returns once the objects
/// are written: waiting for them is the caller's.
pub async fn release(
    action: Release,
    kubeconfig: &Path,
    release: &str,
    chart: &Path,
    namespace: &str,
    more: &[&str],
) -> Result<String> {
    let verb = match action {
        Release::Install => "install",
        Release::Upgrade => "upgrade",
    };
    in_cluster(verb, kubeconfig, release, Some(chart), namespace, more).await
}

/// `helm uninstall RELEASE` in `namespace`; a release already gone is no error.
pub async fn uninstall(kubeconfig: &Path, release: &str, namespace: &str) -> Result<String> {
    let more = ["--ignore-not-found"];
    in_cluster("uninstall", kubeconfig, release, None, namespace, &more).await
}

async fn in_cluster(
    verb: &str,
    kubeconfig: &Path,
    release: &str,
    chart: Option<&Path>,
    namespace: &str,
    more: &[&str],
) -> Result<String> {
    let mut args = vec![verb, release];
    if let Some(chart) = chart {
        args.push(path(chart)?);
    }
    args.extend(["--namespace", namespace, "--kubeconfig", path(kubeconfig)?]);
    args.extend_from_slice(more);
    run(&args).await
}
