#!/usr/bin/env bash
# Checks the binary hack/build-static.sh built, as the container image will hold it: statically
# linked (no ELF interpreter, no shared libraries), and it runs alone in an empty root as the
# image's non-root user (what a distroless/static image gives it).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[check-static]\033[0m %s\n' "$*" >&2; }
BIN="${1:-target/static/podset-operator}"

[ -x "$BIN" ] || { say "$BIN is missing: run hack/build-static.sh"; exit 1; }
kind=$(file -b "$BIN")
case "$kind" in
  *"static-pie linked"* | *"statically linked"*) ;;
  *) say "not statically linked: $kind"; exit 1 ;;
esac
if readelf -l "$BIN" | grep -q 'INTERP'; then
  say "has an ELF interpreter (dynamically linked)"; exit 1
fi
deps=$(ldd "$BIN" 2>&1 || true)
case "$deps" in
  *"statically linked"* | *"not a dynamic executable"*) ;;
  *) say "ldd lists shared libraries:"; echo "$deps" >&2; exit 1 ;;
esac
want="podset-operator $(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n1)"
got=$("$BIN" --version)
[ "$got" = "$want" ] || { say "--version printed '$got', want '$want'"; exit 1; }

# An empty root with nothing but the binary, as uid 65532: no libc, no /etc, no shell.
if [ "$(id -u)" = 0 ] && command -v chroot >/dev/null; then
  root=$(mktemp -d)
  trap 'rm -rf "$root"' EXIT
  chmod 0755 "$root"
  cp "$BIN" "$root/podset-operator"
  chmod 0555 "$root/podset-operator"
  got=$(chroot --userspec=65532:65532 "$root" /podset-operator --version)
  [ "$got" = "$want" ] || { say "in an empty root, --version printed '$got'"; exit 1; }
  crds=$(chroot --userspec=65532:65532 "$root" /podset-operator crds)
  [ "$(grep -c '^kind: CustomResourceDefinition' <<<"$crds")" = 2 ] \
    || { say "in an empty root, 'crds' did not print the 2 CRDs"; exit 1; }
  where="alone in an empty root as uid 65532"
else
  where="(not root: the empty-root run was skipped)"
fi
say "$BIN: $kind"
say "ok: static, no interpreter, '$got' runs $where"
