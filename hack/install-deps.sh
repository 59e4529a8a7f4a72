#!/usr/bin/env bash
# Installs what the project needs from Debian and checks the Rust toolchain. Idempotent.
# `install-deps.sh rust`: the Rust toolchain alone, all that building and running the
# operator needs (`make run` against a cluster that answers); Go and the packages below are
# for the bundled local cluster (`make kubernetes`, `make test`).
set -euo pipefail
say() { printf '\033[1m[deps]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

command -v cargo >/dev/null || { say "cargo not found: install Rust (rustup) first"; exit 1; }
for comp in rustfmt clippy; do
  if ! cargo $([ $comp = rustfmt ] && echo fmt || echo clippy) --version >/dev/null 2>&1; then
    say "adding rust component $comp"
    rustup component add $comp
  fi
done
[ "${1:-all}" = rust ] && exit 0
command -v go >/dev/null || { say "go not found: install Go 1.26 first (Kubernetes, etcd and containerd are built from the Go module proxy)"; exit 1; }
missing=()
command -v jq >/dev/null || missing+=(jq)
command -v python3 >/dev/null || missing+=(python3)
# Real nodes: runc (with seccomp) and the CNI bridge plugin under the containerd that
# hack/build-kubernetes.sh builds; the cluster's own registry; busybox and the operator's
# image built offline (buildah) and pushed (skopeo); iptables to check that nodes leave the
# host's tables as they found them.
for pkg in runc containernetworking-plugins busybox-static docker-registry buildah skopeo iproute2 iptables; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
