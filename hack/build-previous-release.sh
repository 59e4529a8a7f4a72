#!/usr/bin/env bash
# The previous release's artifacts, made from its commit by its own scripts, for the upgrade
# and downgrade tests (tests/in_cluster/releases/README.md): its image (its
# hack/build-image.sh: an OCI archive), its chart packaged (its `make helm-package`'s script)
# and its install.yaml (its `make build-installer`'s script), both naming the image
# IMAGE_PLACEHOLDER below, which the tests replace with the cluster registry's copy.
#
# The commit is unpacked (git archive) into target/previous-release/<commit>, a scratch dir
# with its own cargo target dir (its hack/build-static.sh builds into its target/static), so
# nothing of this checkout's build is reused or overwritten.
#
# Usage: hack/build-previous-release.sh [COMMIT]   (default: d5a0774, chart 0.2.0)
# Writes tests/in_cluster/releases/<its chart version>/.
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[build-previous-release]\033[0m %s\n' "$*" >&2; }

COMMIT=$(git rev-parse --short "${1:-d5a0774}^{commit}")
SCRATCH="$PWD/target/previous-release/$COMMIT"
VERSION=$(git show "$COMMIT:charts/podset-operator/Chart.yaml" | sed -n 's/^version: //p')
[[ -n $VERSION ]] || { say "no chart version at $COMMIT"; exit 2; }
# What the chart and install.yaml run; the tests push the image under this name's tag and
# point both at it.
IMAGE_PLACEHOLDER="podset-operator:$VERSION"
OUT="$PWD/tests/in_cluster/releases/$VERSION"

say "unpacking $COMMIT (chart $VERSION) into $SCRATCH"
rm -rf "$SCRATCH"
mkdir -p "$SCRATCH" "$OUT"
git archive "$COMMIT" | tar -x -C "$SCRATCH"
cd "$SCRATCH"
# Its own target dir: a CARGO_TARGET_DIR of the caller's would mix two releases' builds.
unset CARGO_TARGET_DIR

say "its image, by its hack/build-image.sh"
IMAGE_NAME="$IMAGE_PLACEHOLDER" bash hack/build-image.sh "$OUT/podset-operator.tar"
say "its chart, by its hack/release.sh chart (make helm-package)"
bash hack/release.sh chart "$IMAGE_PLACEHOLDER" "$VERSION" "$OUT"
say "its install.yaml, by its hack/release.sh installer (make build-installer)"
bash hack/release.sh installer "$IMAGE_PLACEHOLDER" "$OUT/install.yaml"
printf '%s\n' "$(git -C "$OLDPWD" rev-parse "$COMMIT")" >"$OUT/COMMIT"

cd "$OLDPWD"
rm -rf "$SCRATCH"
say "wrote $OUT: $(cd "$OUT" && du -h -- * | tr '\t' ' ' | paste -sd, -)"
