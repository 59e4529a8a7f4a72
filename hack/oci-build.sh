#!/usr/bin/env bash
# Builds a Dockerfile with buildah (no Docker engine, no network: FROM scratch only) into an
# OCI archive. Buildah keeps its own storage (vfs, which needs no overlay mounts) in the cache.
# Usage: hack/oci-build.sh DOCKERFILE CONTEXT IMAGE-NAME OUT.tar
set -euo pipefail
dockerfile=$1 context=$2 name=$3 out=$4
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/podset-operator/buildah"
command -v buildah >/dev/null || bash "$(dirname "$0")/install-deps.sh"
b() { buildah --root "$CACHE/root" --runroot "$CACHE/run" --storage-driver vfs "$@"; }
tag="localhost/podset-build-$$:latest"
b bud --quiet --layers=false -f "$dockerfile" -t "$tag" "$context" >/dev/null
rm -f "$out.tmp"
b push --quiet "$tag" "oci-archive:$out.tmp:$name"
b rmi "$tag" >/dev/null
mv "$out.tmp" "$out"
