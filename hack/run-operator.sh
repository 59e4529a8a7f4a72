#!/usr/bin/env bash
# make run: the operator against the kubeconfig's cluster if one answers; otherwise against
# the bundled local control plane (started in the background, CRDs installed, left running
# for kubectl in another terminal; `make cluster-down` stops it).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[run]\033[0m %s\n' "$*" >&2; }
DIR="${CLUSTER_DIR:-$PWD/.local/cluster}"

if kubectl version --request-timeout=3s >/dev/null 2>&1; then
  say "the kubeconfig's cluster answers: $(kubectl config current-context 2>/dev/null || echo in-cluster)"
  say "installing the CRDs (server-side apply of config/crd)"
  kubectl apply --server-side --force-conflicts -k config/crd >&2
else
  say "no reachable cluster in the kubeconfig; using the bundled local control plane"
  say "building it (once, cached): Kubernetes $K8S_VERSION from the Go modules, and the local-cluster tool"
  make --no-print-directory kubernetes
  ${CARGO:-cargo} build --workspace --bins
  bash hack/cluster.sh up
  export KUBECONFIG="$DIR/kubeconfig"
  say "in another terminal: export KUBECONFIG=$KUBECONFIG"
  say "then: kubectl apply -f config/samples/app_v1alpha1_podset.yaml"
fi
say "starting the operator (Ctrl-C stops it${WATCH_NAMESPACE:+; namespace $WATCH_NAMESPACE})"
exec target/debug/podset-operator run --log-format "${LOG_FORMAT:-text}"
