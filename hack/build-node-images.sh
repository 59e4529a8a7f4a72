#!/usr/bin/env bash
# Builds, once, the two images a real node of the local control plane pulls: busybox (from
# Debian's busybox-static) and pause (build/pause/linux/pause.c of the Kubernetes module), as
# OCI archives in the cache. testenv pushes them into each cluster's own registry. Idempotent.
set -euo pipefail
cd "$(dirname "$0")/.."
SAY_AS=node-images
source hack/go/env.sh
OUT="$CACHE/images"
PAUSE_TAG=${PAUSE_IMAGE##*:}

if [ -f "$OUT/busybox.tar" ] && [ -f "$OUT/pause-$PAUSE_TAG.tar" ]; then
  say "busybox and pause images cached in $OUT"
  exit 0
fi
default_version=$(sed -n 's/^K8S_VERSION=//p' hack/go/versions.env)
SRC=$(go mod download -json "k8s.io/kubernetes@v$default_version" | jq -r .Dir)
[ -f "$SRC/build/pause/linux/pause.c" ] || { say "no build/pause/linux/pause.c in $SRC"; exit 1; }
grep -qx "TAG ?= $PAUSE_TAG" "$SRC/build/pause/Makefile" ||
  say "note: Kubernetes v$default_version tags its pause $(sed -n 's/^TAG ?= //p' "$SRC/build/pause/Makefile"), versions.env says $PAUSE_TAG"
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
gcc -Os -static -DVERSION="$PAUSE_TAG" -o "$work/pause/pause" "$SRC/build/pause/linux/pause.c"
strip "$work/pause/pause"
bash hack/oci-build.sh hack/images/pause.Dockerfile "$work/pause" "$PAUSE_IMAGE" "$OUT/pause-$PAUSE_TAG.tar"
say "built $OUT/busybox.tar and $OUT/pause-$PAUSE_TAG.tar"
