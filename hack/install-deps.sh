#!/usr/bin/env bash
# Installs what the project needs from Debian and checks the Rust toolchain. Idempotent.
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
missing=()
command -v kubectl >/dev/null || missing+=(kubernetes-client)
command -v etcd >/dev/null || missing+=(etcd-server)
command -v jq >/dev/null || missing+=(jq)
command -v python3 >/dev/null || missing+=(python3)
# Real nodes: a containerd per node with runc and the CNI bridge plugin; the cluster's own
# registry; busybox and the operator's image built offline (buildah) and pushed (skopeo).
for pkg in containerd runc containernetworking-plugins busybox-static docker-registry buildah skopeo iproute2; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if [ ${#missing[@]} -gt 0 ]; then
  say "apt-get install ${missing[*]}"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
fi
