#!/usr/bin/env bash
# Builds, once, what a local cluster runs, from the Go module proxy into the cache
# (~/.cache/podset-operator): Kubernetes (kube-apiserver, kube-controller-manager,
# kube-scheduler, kubelet, kubectl, kubemark) for each version asked, etcd, containerd and
# its runc shim, the helm CLI, and promtool and prometheus. Each build is skipped when its binaries are there; a cold one takes minutes
# and says how far it is. Prints nothing on stdout.
# Usage: hack/build-kubernetes.sh [VERSION...]   (default: $K8S_VERSION, else versions.env's)
#        hack/build-kubernetes.sh --helm-only    (the helm CLI alone: make helm-lint)
#        hack/build-kubernetes.sh --prometheus-only  (promtool and prometheus alone)
set -euo pipefail
cd "$(dirname "$0")/.."
SAY_AS=build-kubernetes
source hack/go/env.sh

command -v go >/dev/null || { say "go not found: install Go 1.26 (https://go.dev/dl) first"; exit 1; }
command -v jq >/dev/null || bash hack/install-deps.sh

# Upstream's own build flags: no cgo, no debug info, and the tags of hack/lib/golang.sh.
BUILD_FLAGS=(-trimpath -tags "selinux,notest,grpcnotrace")
export CGO_ENABLED=0

# k8s.io/component-base/version and its client-go twin, as hack/lib/version.sh sets them:
# unset, every binary reports v0.0.0-master (in /version, the node's kubeletVersion, kubectl).
version_ldflags() {
  local v=$1 minor=${1#1.}
  minor=${minor%%.*}
  local -a pairs=("gitVersion=v$v" "gitMajor=1" "gitMinor=$minor" "gitTreeState=clean"
    "buildDate=$(date -u -d "@${SOURCE_DATE_EPOCH:-0}" +%Y-%m-%dT%H:%M:%SZ)")
  local flags="-s -w" p
  for p in "${pairs[@]}"; do
    flags+=" -X k8s.io/component-base/version.$p -X k8s.io/client-go/pkg/version.$p"
  done
  echo "$flags"
}

# The wrapper module for VERSION: the checked-in one of its minor when it pins VERSION,
# else one generated into the cache (another patch release, say).
wrapper_for() {
  local v=$1 minor=${1%.*}
  local checked_in="hack/go/kubernetes-$minor"
  if [ "$(pinned_k8s_version "$checked_in/go.mod" 2>/dev/null)" = "$v" ]; then
    echo "$checked_in"
    return
  fi
  local generated="$CACHE/kubernetes-v$v/wrapper"
  if [ ! -f "$generated/go.sum" ]; then
    say "no checked-in wrapper pins $v: generating one in $generated"
    bash hack/go/kubernetes-wrapper.sh "$v" "$generated" >&2
  fi
  echo "$generated"
}

build_kubernetes() {
  local v=$1 bin="$CACHE/kubernetes-v$1/bin" missing=() cmd
  for cmd in $KUBERNETES_COMMANDS; do [ -x "$bin/$cmd" ] || missing+=("$cmd"); done
  if [ ${#missing[@]} = 0 ]; then
    say "Kubernetes v$v cached in $bin"
    return
  fi
  local wrapper
  wrapper=$(wrapper_for "$v")
  say "Kubernetes v$v: downloading its modules (about 1.5 GB the first time) into $GOMODCACHE"
  (cd "$wrapper" && go mod download)
  say "Kubernetes v$v: compiling ${missing[*]} (about 11 minutes on 2 cores the first time)"
  local pkgs=()
  for cmd in "${missing[@]}"; do pkgs+=("k8s.io/kubernetes/cmd/$cmd"); done
  go_build_with_progress "$wrapper" "$bin.tmp" "${BUILD_FLAGS[@]}" -ldflags "$(version_ldflags "$v")" -- "${pkgs[@]}"
  mkdir -p "$bin"
  for cmd in "${missing[@]}"; do mv "$bin.tmp/$cmd" "$bin/$cmd"; done
  rmdir "$bin.tmp"
  say "Kubernetes v$v: $("$bin/kubectl" version --client 2>/dev/null | head -n1) in $bin"
}

# The name `go build -o DIR/` gives PACKAGE's binary: its last element, a major version
# suffix (/v3) skipped.
go_binary_name() {
  local p=$1
  [[ ${p##*/} =~ ^v[0-9]+$ ]] && p=${p%/*}
  echo "${p##*/}"
}

# build_go_tool NAME VERSION MODULE_DIR TAGS LDFLAGS "[BINARY=]PACKAGE..." VERSION_ARGS
# Builds the main PACKAGEs of the wrapper module MODULE_DIR (hack/go/NAME) into
# $CACHE/NAME-vVERSION/bin, each as BINARY (else go's name for it), unless all are there, then
# says the first one's `VERSION_ARGS` (its first line). Without cgo (CGO_ENABLED=0 above).
build_go_tool() {
  local name=$1 version=$2 module=$3 tags=$4 ldflags=$5 specs=$6 version_args=$7
  local bin="$CACHE/$name-v$version/bin" spec pkg first="" cached=1
  local -a pkgs=() outs=()
  for spec in $specs; do
    pkg=${spec#*=}
    pkgs+=("$pkg")
    if [[ $spec == *=* ]]; then outs+=("${spec%%=*}"); else outs+=("$(go_binary_name "$pkg")"); fi
    [ -x "$bin/${outs[-1]}" ] || cached=0
  done
  first=${outs[0]}
  if [ $cached = 1 ]; then say "$name v$version cached in $bin"; return; fi
  say "$name v$version: downloading and compiling ${outs[*]} (a few minutes the first time)"
  (cd "$module" && go mod download)
  go_build_with_progress "$module" "$bin.tmp" -trimpath -tags "$tags" -ldflags "$ldflags" -- "${pkgs[@]}"
  mkdir -p "$bin"
  local i
  for i in "${!pkgs[@]}"; do mv "$bin.tmp/$(go_binary_name "${pkgs[$i]}")" "$bin/${outs[$i]}"; done
  rmdir "$bin.tmp"
  # shellcheck disable=SC2086 # VERSION_ARGS are words
  say "$name: $("$bin/$first" $version_args | head -n1) in $bin"
}

# etcd's main package is the root of go.etcd.io/etcd/server/v3; its version is a constant.
build_etcd() {
  build_go_tool etcd "$ETCD_VERSION" hack/go/etcd "" "-s -w" \
    "etcd=go.etcd.io/etcd/server/v3" --version
}

# containerd and its runc shim (built without cgo, as upstream builds the shim; the btrfs
# snapshotter needs cgo and is left out). runc itself is Debian's, built with seccomp.
build_containerd() {
  build_go_tool containerd "$CONTAINERD_VERSION" hack/go/containerd no_btrfs \
    "-s -w -X github.com/containerd/containerd/v2/version.Version=v$CONTAINERD_VERSION" \
    "github.com/containerd/containerd/v2/cmd/containerd github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2" \
    --version
}

# The helm CLI: the README's Helm commands, `make helm-lint`, and every Helm test
# (testenv::helm runs it).
build_helm() {
  build_go_tool helm "$HELM_VERSION" hack/go/helm "" \
    "-s -w -X helm.sh/helm/v4/internal/version.version=v$HELM_VERSION" \
    helm.sh/helm/v4/cmd/helm "version --short"
}

# promtool (`promtool check rules`, `promtool test rules` on the shipped alert rules) and
# prometheus (the end-to-end test that scrapes the operator as a user's Prometheus would).
# No web UI assets (the tests use the API), and no service discovery but static targets
# (remove_all_sd): 1,284 packages to compile instead of 1,526.
build_prometheus() {
  build_go_tool prometheus "$PROMETHEUS_VERSION" hack/go/prometheus remove_all_sd \
    "-s -w -X github.com/prometheus/common/version.Version=v$PROMETHEUS_VERSION" \
    "github.com/prometheus/prometheus/cmd/promtool github.com/prometheus/prometheus/cmd/prometheus" \
    --version
}

# `kubectl` and `helm` in a new terminal: /usr/local/bin links to ours (kubectl of the local
# cluster's version, $K8S_VERSION), unless something else is installed there.
link_tool() {
  local target=$1 link="/usr/local/bin/$(basename "$1")"
  if [ -e "$link" ] && [[ "$(readlink "$link")" != "$CACHE"/* ]]; then
    say "leaving $link alone (not ours); ours is $target"
    return
  fi
  [ "$(readlink "$link" 2>/dev/null)" = "$target" ] && return
  if ln -sfn "$target" "$link" 2>/dev/null; then
    say "$link -> $target"
  else
    say "could not link $link; ours is $target"
  fi
}

main() {
  if [ "${1:-}" = --helm-only ]; then
    build_helm
    return
  fi
  if [ "${1:-}" = --prometheus-only ]; then
    build_prometheus
    return
  fi
  local versions=("$@") v
  [ ${#versions[@]} -gt 0 ] || versions=("${K8S_VERSION}")
  build_etcd
  build_containerd
  build_helm
  build_prometheus
  for v in "${versions[@]}"; do build_kubernetes "$(resolve_k8s_version "$v")"; done
  link_tool "$CACHE/kubernetes-v$(resolve_k8s_version "$K8S_VERSION")/bin/kubectl"
  link_tool "$CACHE/helm-v$HELM_VERSION/bin/helm"
}

main "$@"
