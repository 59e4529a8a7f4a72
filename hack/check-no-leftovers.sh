#!/usr/bin/env bash
# Fails if a test left a control-plane or operator process running. Test clusters and test
# operators carry "podset-testenv-" in their arguments; a `make run` cluster does not.
set -uo pipefail
left=$(pgrep -a -f 'podset-testenv-' || true)
if [ -n "$left" ]; then
  echo "processes left behind by the tests:" >&2
  echo "$left" >&2
  exit 1
fi
echo "no test process left behind"
