#!/usr/bin/env bash
# make cluster-up / cluster-down: the local control plane in the background.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR="${CLUSTER_DIR:-$PWD/.local/cluster}"
REAL_NODES="${REAL_NODES:-1}"
HOLLOW_NODES="${HOLLOW_NODES:-0}"
PIDFILE="$DIR/local-cluster.pid"
say() { printf '\033[1m[cluster]\033[0m %s\n' "$*" >&2; }

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

up() {
  if running && [ -f "$DIR/ready" ]; then
    say "already running (pid $(cat "$PIDFILE")); export KUBECONFIG=$DIR/kubeconfig"
    return
  fi
  mkdir -p "$DIR"
  local crds="$DIR/crds.yaml"
  target/debug/podset-operator crds > "$crds"
  say "starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler, $REAL_NODES real node(s) (kubelet, containerd, runc) and $HOLLOW_NODES hollow node(s) (log: $DIR/local-cluster.log)"
  rm -f "$DIR/ready"
  setsid nohup target/debug/local-cluster --dir "$DIR" --real-nodes "$REAL_NODES" --nodes "$HOLLOW_NODES" --crds "$crds" > "$DIR/local-cluster.log" 2>&1 < /dev/null &
  echo $! > "$PIDFILE"
  local deadline=$((SECONDS + 180))
  until [ -f "$DIR/ready" ]; do
    if ! running; then say "the local cluster failed to start:"; tail -n 40 "$DIR/local-cluster.log" >&2; exit 1; fi
    if [ $SECONDS -gt $deadline ]; then say "not ready after 180s"; tail -n 40 "$DIR/local-cluster.log" >&2; exit 1; fi
    sleep 0.5
  done
  say "ready: $(kubectl --kubeconfig "$DIR/kubeconfig" get nodes --no-headers 2>/dev/null | wc -l) node(s), images from the cluster's registry $(cat "$DIR/registry-address" 2>/dev/null || echo -). Use it with:"
  echo "export KUBECONFIG=$DIR/kubeconfig"
}

down() {
  if ! running; then say "not running"; rm -f "$PIDFILE"; return; fi
  local pid; pid=$(cat "$PIDFILE")
  say "stopping (pid $pid)"
  kill -TERM "$pid"
  # Real nodes stop their pods, shims, mounts and bridges first: give them time.
  for _ in $(seq 1 300); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -0 "$pid" 2>/dev/null && kill -KILL -- "-$pid" 2>/dev/null || true
  rm -f "$PIDFILE"
  say "stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  *) echo "usage: $0 up|down" >&2; exit 2 ;;
esac
