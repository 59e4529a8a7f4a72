#!/usr/bin/env bash
# Builds the Kubernetes 1.20.2 control plane (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubemark) from Debian's source package, once, into a cache outside
# the repo. Idempotent: a second run with the binaries present does nothing.
set -euo pipefail

K8S_DEB_VERSION="1.20.5+really1.20.2-1.1+deb12u1"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/podset-operator/kubernetes-v1.20.2"
BIN="$CACHE/bin"
BINARIES=(kube-apiserver kube-controller-manager kube-scheduler kubemark kubelet)

say() { printf '\033[1m[build-kubernetes]\033[0m %s\n' "$*" >&2; }

have_all() {
  for b in "${BINARIES[@]}"; do [ -x "$BIN/$b" ] || return 1; done
}

as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }

enable_deb_src() {
  local f=/etc/apt/sources.list.d/debian.sources
  if [ -f "$f" ] && ! grep -q '^Types: deb deb-src' "$f"; then
    say "enabling Debian source packages in $f"
    as_root sed -i 's/^Types: deb$/Types: deb deb-src/' "$f"
    APT_UPDATED=""
  fi
  if [ -f /etc/apt/sources.list ] && grep -q '^deb ' /etc/apt/sources.list && ! grep -q '^deb-src ' /etc/apt/sources.list; then
    sed -n 's/^deb /deb-src /p' /etc/apt/sources.list | as_root tee -a /etc/apt/sources.list >/dev/null
    APT_UPDATED=""
  fi
}

install_build_deps() {
  local pkgs=(golang-go etcd-server rsync jq golang-github-modern-go-reflect2-dev golang-github-json-iterator-go-dev dpkg-dev patch)
  local missing=()
  for p in "${pkgs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
  if [ ${#missing[@]} -gt 0 ] || [ -z "${APT_UPDATED:-}" ]; then
    say "apt-get update"
    as_root apt-get update -qq
    APT_UPDATED=1
  fi
  if [ ${#missing[@]} -gt 0 ]; then
    say "installing ${missing[*]}"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq -t bookworm "${missing[@]}"
  fi
}

fetch_source() {
  local src="$CACHE/src"
  if [ -f "$src/.unpacked" ]; then return; fi
  mkdir -p "$CACHE/dl"
  say "downloading Debian source package kubernetes=$K8S_DEB_VERSION"
  (cd "$CACHE/dl" && apt-get source --download-only "kubernetes=$K8S_DEB_VERSION" >/dev/null)
  local tarball
  tarball=$(ls "$CACHE"/dl/kubernetes_*.orig.tar.gz | head -n1)
  say "unpacking $(basename "$tarball")"
  rm -rf "$src" && mkdir -p "$src"
  tar -xzf "$tarball" -C "$src" --strip-components=1
  touch "$src/.unpacked"
}

# reflect2 1.0.1 faults under Go >= 1.18 ("fatal error: fault" in mapiterinit) on the
# first custom-resource write; Debian's packaged copies are fixed.
patch_vendor() {
  local src="$CACHE/src"
  [ -f "$src/.vendor-patched" ] && return
  say "replacing vendored reflect2 and json-iterator with Debian's fixed copies"
  for pkg in github.com/modern-go/reflect2 github.com/json-iterator/go; do
    rm -rf "$src/vendor/$pkg"
    mkdir -p "$src/vendor/$pkg"
    cp -a "/usr/share/gocode/src/$pkg/." "$src/vendor/$pkg/"
    find "$src/vendor/$pkg" -name '*_test.go' -delete
  done
  touch "$src/.vendor-patched"
}

# Our fixes to the Kubernetes source (hack/patches/*.patch). Each leaves a stamp, so a
# cached build without it is rebuilt (incrementally, from Go's build cache).
PATCHES=("$(dirname "$0")"/patches/*.patch)

patches_applied() {
  local p
  for p in "${PATCHES[@]}"; do [ -f "$CACHE/src/.patched-$(basename "$p")" ] || return 1; done
}

apply_patches() {
  local p stamp
  for p in "${PATCHES[@]}"; do
    stamp="$CACHE/src/.patched-$(basename "$p")"
    [ -f "$stamp" ] && continue
    say "patching the source: $(basename "$p") ($(head -n1 "$p"))"
    patch --forward --silent -p1 -d "$CACHE/src" < "$p"
    touch "$stamp"
  done
}

compile() {
  local src="$CACHE/src"
  say "compiling ${BINARIES[*]} with $(go version | cut -d' ' -f3) (about 15 minutes on 2 cores the first time)"
  mkdir -p "$CACHE/home"
  local start=$SECONDS
  (
    cd "$src"
    HOME="$CACHE/home" GOFLAGS=-mod=vendor make WHAT="cmd/kube-apiserver cmd/kube-controller-manager cmd/kube-scheduler cmd/kubemark cmd/kubelet" \
      KUBE_BUILD_PLATFORMS=linux/amd64 2>&1 | sed -u 's/^/  [go] /'
  ) &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 30
    kill -0 "$pid" 2>/dev/null && say "still compiling... $((SECONDS - start))s elapsed"
  done
  wait "$pid"
  mkdir -p "$BIN"
  for b in "${BINARIES[@]}"; do cp "$src/_output/local/bin/linux/amd64/$b" "$BIN/$b"; done
  say "built in $((SECONDS - start))s"
}

main() {
  if have_all && patches_applied; then
    say "control plane binaries cached in $BIN"
  else
    enable_deb_src
    install_build_deps
    fetch_source
    patch_vendor
    apply_patches
    compile
  fi
  command -v etcd >/dev/null || { APT_UPDATED=""; install_build_deps; }
  echo "$BIN"
}

main "$@"
