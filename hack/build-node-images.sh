#!/usr/bin/env bash
# Builds, once, the two images a real node of the local control plane pulls: busybox (from
# Debian's busybox-static) and pause (from the Kubernetes 1.20.2 source), as OCI archives in
# the cache. testenv pushes them into each cluster's own registry. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/podset-operator"
OUT="$CACHE/images"
SRC="$CACHE/kubernetes-v1.20.2/src"
say() { printf '\033[1m[node-images]\033[0m %s\n' "$*" >&2; }

if [ -f "$OUT/busybox.tar" ] && [ -f "$OUT/pause.tar" ]; then
  say "busybox and pause images cached in $OUT"
  exit 0
fi
[ -f "$SRC/build/pause/linux/pause.c" ] || { say "missing $SRC: run hack/build-kubernetes.sh first"; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$OUT"

say "busybox: /bin/busybox of busybox-static, $(busybox --list | wc -l) applets"
mkdir -p "$work/busybox/rootfs/bin" "$work/busybox/rootfs/etc" "$work/busybox/rootfs/tmp"
cp /bin/busybox "$work/busybox/rootfs/bin/busybox"
for applet in $(/bin/busybox --list); do
  [ "$applet" = busybox ] || ln -s busybox "$work/busybox/rootfs/bin/$applet"
done
chmod 1777 "$work/busybox/rootfs/tmp"
printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/home:/bin/false\n' > "$work/busybox/rootfs/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\n' > "$work/busybox/rootfs/etc/group"
bash hack/oci-build.sh hack/images/busybox.Dockerfile "$work/busybox" docker.io/library/busybox:latest "$OUT/busybox.tar"

say "pause: gcc -static build/pause/linux/pause.c"
mkdir -p "$work/pause"
gcc -Os -static -DVERSION=3.2 -o "$work/pause/pause" "$SRC/build/pause/linux/pause.c"
strip "$work/pause/pause"
bash hack/oci-build.sh hack/images/pause.Dockerfile "$work/pause" registry.k8s.io/pause:3.2 "$OUT/pause.tar"
say "built $OUT/busybox.tar and $OUT/pause.tar"
