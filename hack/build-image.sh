#!/usr/bin/env bash
# Builds podset-operator's container image without a Docker engine: the static binary from
# hack/build-static.sh, packed by buildah (hack/images/operator.Dockerfile) into an OCI
# archive. `make image` runs it; `make deploy-local` pushes the archive into the local
# cluster's registry.
# Usage: hack/build-image.sh [OUT]   (default OUT: target/image/podset-operator.tar)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[build-image]\033[0m %s\n' "$*" >&2; }
OUT="${1:-target/image/podset-operator.tar}"
NAME="${IMAGE_NAME:-podset-operator:dev}"

bash hack/build-static.sh
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT
cp target/static/podset-operator "$ctx/podset-operator"
mkdir -p "$(dirname "$OUT")"
bash hack/oci-build.sh hack/images/operator.Dockerfile "$ctx" "$NAME" "$OUT"
say "built $OUT ($NAME, $(du -h "$OUT" | cut -f1))"
