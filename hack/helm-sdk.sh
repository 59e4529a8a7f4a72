#!/usr/bin/env bash
# Installs real Helm v4 for the tests: the PyPI package helm-python-sdk (Helm's Go library as a
# shared library with Python bindings; no helm binary exists on these machines) into a venv.
# Idempotent: a venv that already has the pinned version is left alone.
# Usage: hack/helm-sdk.sh VENV VERSION
set -euo pipefail
say() { printf '\033[1m[helm-sdk]\033[0m %s\n' "$*" >&2; }
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
VENV="$1"
VERSION="$2"

if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c "import helm_python, sys; sys.exit(helm_python.__version__ != '$VERSION')" 2>/dev/null; then
  say "helm-python-sdk $VERSION present in $VENV"
  exit 0
fi
if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c 'import ensurepip' 2>/dev/null; then
  say "apt-get install python3-venv"
  as_root apt-get update -qq
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3-venv
fi
say "creating $VENV and installing helm-python-sdk==$VERSION from PyPI (real Helm v4, ~85 MB)"
rm -rf "$VENV"
python3 -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "helm-python-sdk==$VERSION"
"$VENV/bin/python" "$(dirname "$0")/helm.py" version >&2
