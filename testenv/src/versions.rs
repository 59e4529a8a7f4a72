//! Which Kubernetes a cluster runs, and where `hack/build-kubernetes.sh` left its binaries.
//!
//! The versions come from `hack/go/versions.env`, the one list the Makefile, the build scripts
//! and this crate share. `$K8S_VERSION` (`1.33`, `1.33.13` or `v1.33.13`) picks another
//! version for every cluster a process starts; [`Options::version`](crate::Options) for one.

use std::path::PathBuf;

const VERSIONS_ENV: &str = include_str!("../../hack/go/versions.env");

/// A value of `hack/go/versions.env`.
fn pinned(key: &str) -> &'static str {
    VERSIONS_ENV
        .lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix('='))
        .unwrap_or_else(|| panic!("hack/go/versions.env has no {key}"))
}

/// The newest supported Kubernetes: every cluster's default.
pub fn newest() -> &'static str {
    pinned("K8S_VERSION")
}

/// The oldest supported Kubernetes, which the walkthroughs and restart tests also run on.
pub fn oldest() -> &'static str {
    pinned("K8S_OLDEST")
}

/// The pod sandbox image real nodes run (built by `hack/build-node-images.sh`).
pub fn pause_image() -> &'static str {
    pinned("PAUSE_IMAGE")
}

/// The version clusters run unless told otherwise: `$K8S_VERSION`, else [`newest`]. A minor
/// alone (`1.33`) means the pinned version of that minor.
pub fn default_version() -> String {
    match std::env::var("K8S_VERSION") {
        Ok(v) if !v.trim().is_empty() => resolve(&v),
        _ => newest().to_string(),
    }
}

/// `v1.33.13` -> `1.33.13`; `1.33` -> the pinned version of 1.33 if there is one.
pub fn resolve(version: &str) -> String {
    let v = version.trim().trim_start_matches('v');
    if v.matches('.').count() == 1 {
        for pinned in [newest(), oldest()] {
            if pinned.rsplit_once('.').is_some_and(|(minor, _)| minor == v) {
                return pinned.to_string();
            }
        }
    }
    v.to_string()
}

/// The minor version of `1.33.13`: 33.
pub fn minor(version: &str) -> u32 {
    version
        .split('.')
        .nth(1)
        .and_then(|m| m.parse().ok())
        .unwrap_or_else(|| panic!("not a Kubernetes version: {version}"))
}

fn cache_dir() -> PathBuf {
    std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").unwrap_or_else(|| "/root".into())).join(".cache")
        })
        .join("podset-operator")
}

/// Where the Kubernetes binaries of `version` are: `$KUBE_BIN_DIR`, or the build's cache.
pub fn kube_bin_dir(version: &str) -> PathBuf {
    match std::env::var_os("KUBE_BIN_DIR") {
        Some(dir) => dir.into(),
        None => cache_dir().join(format!("kubernetes-v{version}/bin")),
    }
}

/// The kubectl of [`default_version`]: a client of the clusters' own version.
pub fn kubectl() -> PathBuf {
    kube_bin_dir(&default_version()).join("kubectl")
}

/// The etcd binary.
pub fn etcd() -> PathBuf {
    cache_dir().join(format!("etcd-v{}/bin/etcd", pinned("ETCD_VERSION")))
}

/// containerd and its runc shim.
pub fn containerd_bin_dir() -> PathBuf {
    cache_dir().join(format!("containerd-v{}/bin", pinned("CONTAINERD_VERSION")))
}

/// promtool and prometheus.
pub fn prometheus_bin_dir() -> PathBuf {
    cache_dir().join(format!("prometheus-v{}/bin", pinned("PROMETHEUS_VERSION")))
}

/// Where `hack/build-node-images.sh` leaves busybox.tar and the pause image.
pub fn images_dir() -> PathBuf {
    cache_dir().join("images")
}

/// The pause image's archive in [`images_dir`].
pub fn pause_archive() -> PathBuf {
    let tag = pause_image().rsplit(':').next().unwrap_or_default();
    images_dir().join(format!("pause-{tag}.tar"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_supported_range_is_pinned_newest_above_oldest() {
        assert!(minor(newest()) > minor(oldest()));
        assert!(
            minor(oldest()) >= 33,
            "k8s-openapi 0.29 supports 1.33 and later"
        );
    }

    #[test]
    fn a_minor_alone_means_its_pinned_release() {
        let (minor_only, _) = oldest().rsplit_once('.').unwrap();
        assert_eq!(resolve(minor_only), oldest());
        assert_eq!(resolve(&format!("v{}", newest())), newest());
        assert_eq!(resolve("1.34.4"), "1.34.4");
    }
}
