# Sourced by the Go build scripts: the pinned versions, and a Go environment whose module and
# build caches live in the project's cache directory (cold once, then seconds).
# shellcheck shell=bash
GO_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# The environment's K8S_VERSION (K8S_VERSION=1.33 make test) wins over the default.
_asked_k8s_version=${K8S_VERSION:-}
# shellcheck source=versions.env
source "$GO_DIR/versions.env"
K8S_VERSION=${_asked_k8s_version:-$K8S_VERSION}
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/podset-operator"
export GOMODCACHE="$CACHE/go/mod" GOCACHE="$CACHE/go/build"
# The Go that is installed, never one the go.mod files would download.
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
# Every binary of a local cluster, for each version (kubemark runs hollow nodes).
KUBERNETES_COMMANDS="kube-apiserver kube-controller-manager kube-scheduler kubelet kubectl kubemark"

say() { printf '\033[1m[%s]\033[0m %s\n' "${SAY_AS:-go-build}" "$*" >&2; }

# The Kubernetes version a wrapper go.mod requires.
pinned_k8s_version() {
  sed -nE 's/^(require)?[[:space:]]*k8s\.io\/kubernetes v([0-9.]+)( \/\/ indirect)?$/\2/p' "$1"
}

# `1.33` or `v1.33.13` -> `1.33.13` (a minor alone means its wrapper's version).
resolve_k8s_version() {
  local v=${1#v}
  if [[ $v =~ ^1\.[0-9]+$ ]]; then
    local mod="$GO_DIR/kubernetes-$v/go.mod"
    [ -f "$mod" ] || { say "no wrapper module for Kubernetes $v in $GO_DIR"; return 1; }
    v=$(pinned_k8s_version "$mod")
  fi
  [[ $v =~ ^1\.[0-9]+\.[0-9]+$ ]] || { say "K8S_VERSION=$1: expected 1.MINOR.PATCH"; return 1; }
  echo "$v"
}

# go build PACKAGES into OUT, printing how many of the packages it needs are compiled every
# 20 s: a cold build of Kubernetes is thousands of packages and many minutes.
go_build_with_progress() {
  local module_dir=$1 out=$2; shift 2
  local -a flags=() pkgs=()
  while [ $# -gt 0 ] && [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  pkgs=("$@")
  local total log start=$SECONDS
  total=$(cd "$module_dir" && go list "${flags[@]}" -deps "${pkgs[@]}" | wc -l)
  log=$(mktemp)
  mkdir -p "$out"
  (cd "$module_dir" && go build -v "${flags[@]}" -o "$out/" "${pkgs[@]}") >"$log" 2>&1 &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    sleep 20
    kill -0 "$pid" 2>/dev/null &&
      say "  compiling: $(grep -c '^[a-z]' "$log") packages compiled so far, of at most $total ($((SECONDS - start)) s)"
  done
  if ! wait "$pid"; then
    tail -n 40 "$log" >&2
    rm -f "$log"
    return 1
  fi
  rm -f "$log"
  say "  built in $((SECONDS - start)) s"
}
