#!/usr/bin/env bash
# Runs the workspace's tests with several test binaries at once: `make test`'s test step.
#
# `cargo test` runs one test binary after another, and the end-to-end binaries spend most of
# their time waiting on their control planes (the leadership suite keeps 2 cores 40% busy).
# So this runs TEST_JOBS binaries at a time, each with TEST_THREADS test threads, the slowest
# first (by the durations the last green run recorded, else by the hint below), and prints
# each binary's output whole when it ends. Each job is a plain `cargo test` of one target, so cargo
# sets up the test's environment exactly as it always does.
#
# Usage: hack/run-tests.sh [--oldest VERSION TARGET... -- FILTER...]
#   --oldest: also run these integration targets, with these name filters,
#   on Kubernetes VERSION (its kubectl first on PATH, K8S_VERSION set).
# Env: TEST_JOBS (default 2), TEST_THREADS (default 2), CARGO (default cargo).
set -euo pipefail
cd "$(dirname "$0")/.."
say() { printf '\033[1m[run-tests]\033[0m %s\n' "$*"; }

CARGO="${CARGO:-cargo}"
JOBS="${TEST_JOBS:-2}"
THREADS="${TEST_THREADS:-2}"
LOGS=target/test-logs
DURATIONS=target/test-durations.tsv
# The slowest binaries of a clean clone, which has no recorded durations: started first, they
# do not end alone at the tail of the run.
HINT="in_cluster leadership prometheus lifecycle faults shipping network_faults sieve"

oldest=""
oldest_targets=()
oldest_filters=()
if [[ "${1:-}" == --oldest ]]; then
  oldest="$2"
  shift 2
  while [[ $# -gt 0 && "$1" != -- ]]; do oldest_targets+=("$1"); shift; done
  [[ "${1:-}" == -- ]] && shift
  oldest_filters=("$@")
fi

# One line per job: "<target>[@<version>]", every integration target of that name in the
# workspace (`--workspace` keeps cargo's feature unification, so nothing is rebuilt). The unit
# and doc tests of the whole workspace are one job.
jobs_list() {
  echo "unit"
  "$CARGO" metadata --no-deps --format-version 1 | python3 -c '
import json, sys
names = {t["name"] for p in json.load(sys.stdin)["packages"] for t in p["targets"]
         if t["kind"] == ["test"]}
print("\n".join(sorted(names)))'
  for t in "${oldest_targets[@]}"; do echo "$t@$oldest"; done
}

# Orders jobs (stdin) by recorded seconds, longest first; unrecorded ones by the hint, then
# the rest.
ordered() {
  python3 -c '
import os, sys
path, hint = sys.argv[1], sys.argv[2].split()
recorded = {}
if os.path.exists(path):
    for line in open(path):
        name, secs = line.split()
        recorded[name] = float(secs)
def key(job):
    if job in recorded:
        return (0, -recorded[job])
    if job.split("@")[0] in hint:
        return (1, hint.index(job.split("@")[0]))
    return (2, 0)
jobs = [l.strip() for l in sys.stdin if l.strip()]
print("\n".join(sorted(jobs, key=key)))' "$DURATIONS" "$HINT"
}

# Runs one job, its output into its log; exits with cargo's status. A job "<target>@<version>"
# runs on that Kubernetes version, with the name filters given for it.
run_job() {
  local job="$1" target="${1%@*}" env=() filters=()
  if [[ "$job" == *@* ]]; then
    env=(PATH="${PATH//kubernetes-v$K8S_VERSION/kubernetes-v${job#*@}}" K8S_VERSION="${job#*@}")
    filters=("${oldest_filters[@]}")
  fi
  exec > "$LOGS/$job.log" 2>&1
  if [[ "$job" == unit ]]; then
    "$CARGO" test --workspace --lib --bins --no-fail-fast -- --test-threads="$THREADS" || exit
    exec "$CARGO" test --workspace --doc --no-fail-fast
  fi
  exec env "${env[@]}" "$CARGO" test --workspace --test "$target" --no-fail-fast -- \
    --test-threads="$THREADS" "${filters[@]}"
}

# The oldest version's subset is chosen by name filters: a renamed test would silently drop
# out of it. Each filter must name a test of the oldest targets, and each target must run one.
check_oldest_subset() {
  [[ -n "$oldest" ]] || return 0
  local t listed="" filter matched
  for t in "${oldest_targets[@]}"; do
    local names
    names=$("$CARGO" test --workspace --test "$t" -q -- --list 2>/dev/null | sed -n 's/: test$//p')
    [[ -n "$names" ]] || { say "--oldest target $t lists no tests"; return 1; }
    matched=0
    for filter in "${oldest_filters[@]}"; do
      grep -qF -- "$filter" <<<"$names" && matched=1
    done
    [[ $matched == 1 || ${#oldest_filters[@]} == 0 ]] || {
      say "--oldest target $t has no test matching ${oldest_filters[*]}"; return 1; }
    listed+="$names"$'\n'
  done
  for filter in "${oldest_filters[@]}"; do
    grep -qF -- "$filter" <<<"$listed" || {
      say "--oldest filter $filter names no test of ${oldest_targets[*]}: renamed?"; return 1; }
  done
  say "the $oldest subset: $(grep -cF -f <(printf '%s\n' "${oldest_filters[@]}") <<<"$listed") tests of ${oldest_targets[*]}"
}
check_oldest_subset

rm -rf "$LOGS"
mkdir -p "$LOGS"
mapfile -t queue < <(jobs_list | ordered)
if [[ ${#queue[@]} -lt 2 ]]; then
  say "found no integration test targets (cargo metadata failed?)"
  exit 1
fi
: > "$LOGS/durations.tsv"
total=${#queue[@]}
say "$total test binaries, $JOBS at a time, $THREADS test threads each; logs in $LOGS"

declare -A job_of=() started=()
failed=()
# Prints a job's log whole, under a line saying how it ended.
report() {
  local job="$1" secs="$2" rc="$3"
  say "=== $job: $([[ $rc == 0 ]] && echo passed || echo FAILED) in ${secs}s"
  cat "$LOGS/$job.log"
  if [[ $rc == 0 ]]; then
    printf '%s %s\n' "$job" "$secs" >> "$LOGS/durations.tsv"
  else
    failed+=("$job")
  fi
}

# Takes into $job the first queued job whose target is not running ("" if none): the same
# target on two versions would build the operator's image into the same paths at once.
take_next() {
  local i running
  job=""
  for i in "${!queue[@]}"; do
    for running in "${job_of[@]}"; do
      [[ "${running%@*}" == "${queue[$i]%@*}" ]] && continue 2
    done
    job="${queue[$i]}"
    unset "queue[$i]"
    return
  done
}

while [[ ${#queue[@]} -gt 0 || ${#job_of[@]} -gt 0 ]]; do
  job=""
  [[ ${#job_of[@]} -lt $JOBS ]] && take_next
  if [[ -n "$job" ]]; then
    say "starting $job"
    run_job "$job" &
    job_of[$!]="$job"
    started[$!]=$SECONDS
  else
    rc=0
    wait -n -p pid || rc=$?
    report "${job_of[$pid]}" "$((SECONDS - started[$pid]))" "$rc"
    unset "job_of[$pid]" "started[$pid]"
  fi
done

# Only a run that passed whole records durations: a failed binary's time says little.
if [[ ${#failed[@]} -eq 0 ]]; then
  mv "$LOGS/durations.tsv" "$DURATIONS"
  say "all $total test binaries passed in ${SECONDS}s"
else
  say "FAILED: ${failed[*]} (their output is above, and in $LOGS)"
  exit 1
fi
