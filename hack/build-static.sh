#!/usr/bin/env bash
# Builds the statically linked release binary of podset-operator: the one recipe used by the
# Dockerfile and by `make static` / `make test` (so the image recipe cannot rot unnoticed).
#
# Only the x86_64-unknown-linux-gnu target is available, so the binary is linked statically
# against glibc (libc.a from libc6-dev) with crt-static. Naming --target keeps RUSTFLAGS off
# build scripts and proc macros, which must stay dynamic host code. A separate target dir
# keeps it from invalidating the debug build.
#
# Usage: hack/build-static.sh [OUT]   (default OUT: target/static/podset-operator)
# Env:   STATIC_TARGET_DIR (default target/static), CARGO (default cargo)
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[build-static]\033[0m %s\n' "$*" >&2; }

TARGET=x86_64-unknown-linux-gnu
TARGET_DIR="${STATIC_TARGET_DIR:-target/static}"
OUT="${1:-$TARGET_DIR/podset-operator}"
CARGO="${CARGO:-cargo}"

# Run from a test (the in-cluster tests build the image), cargo's variables for that test are
# in the environment. ring's build script tracks CARGO_MANIFEST_DIR, so a value there that the
# build before did not see reruns it and rebuilds ring, rustls, kube and the operator: seven
# minutes of `make test` on 2 cores, spent for nothing.
for var in $(compgen -e | grep -E '^CARGO_(MANIFEST_|PKG_|CRATE_|BIN_|PRIMARY_PACKAGE|TARGET_TMPDIR)'); do
  unset "$var"
done

say "cargo build --release --target $TARGET (crt-static) into $TARGET_DIR (several minutes on 2 cores the first time)"
start=$SECONDS
RUSTFLAGS="${RUSTFLAGS:-} -C target-feature=+crt-static" \
  "$CARGO" build --release --locked --bin podset-operator --target "$TARGET" --target-dir "$TARGET_DIR"
mkdir -p "$(dirname "$OUT")"
cp "$TARGET_DIR/$TARGET/release/podset-operator" "$OUT.tmp.$$"
strip "$OUT.tmp.$$" 2>/dev/null || true
mv "$OUT.tmp.$$" "$OUT"
say "built $OUT in $((SECONDS - start))s ($(du -h "$OUT" | cut -f1))"
