#!/usr/bin/env bash
# Runs a long build beside other work, so that `make test` keeps both cores busy: the Go build
# of Kubernetes alone uses about 1.5 of 2 cores, cargo about as much, and together they fill
# the gaps of each other's serial phases.
#   hack/in-background.sh start NAME COMMAND...   runs COMMAND, its output to the terminal
#                                                 (prefixed) and to target/background/NAME.log
#   hack/in-background.sh wait NAME               waits for it; fails as it failed
# The command dies with the make that started it (a failing step, Ctrl-C): a watchdog stops
# its process group once that make is gone.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=target/background
say() { printf '\033[1m[in-background]\033[0m %s\n' "$*" >&2; }

start() {
  local name=$1; shift
  mkdir -p "$DIR"
  rm -f "$DIR/$name.rc"
  # The make running this recipe line: our parent, or the parent of the recipe's shell.
  local owner=$PPID
  [ "$(ps -o comm= -p "$owner")" = make ] || owner=$(ps -o ppid= -p "$owner" | tr -d ' ')
  setsid bash -c '
    "$@" 2>&1 | tee "$0.log" | sed -u "s/^/['"$name"'] /" >&2
    echo "${PIPESTATUS[0]}" > "$0.rc"' "$DIR/$name" "$@" &
  local job=$!
  echo "$job" > "$DIR/$name.pid"
  (
    while kill -0 "$job" 2>/dev/null; do
      if ! kill -0 "$owner" 2>/dev/null; then
        kill -TERM -- "-$job" 2>/dev/null
        exit
      fi
      sleep 2
    done
  ) </dev/null >/dev/null 2>&1 &
  say "started $name in the background: $*"
}

wait_for() {
  local name=$1 pid
  pid=$(cat "$DIR/$name.pid")
  if kill -0 "$pid" 2>/dev/null; then
    say "waiting for $name (its progress above, log in $DIR/$name.log)"
    while kill -0 "$pid" 2>/dev/null; do sleep 1; done
  fi
  local rc
  rc=$(cat "$DIR/$name.rc" 2>/dev/null || echo 1)
  if [ "$rc" != 0 ]; then
    say "$name failed (exit $rc):"
    tail -n 30 "$DIR/$name.log" >&2
    exit "$rc"
  fi
  say "$name done"
}

case "${1:-}" in
  start) shift; start "$@" ;;
  wait) wait_for "$2" ;;
  *) echo "usage: $0 start NAME COMMAND... | wait NAME" >&2; exit 2 ;;
esac
