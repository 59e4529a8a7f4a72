#!/usr/bin/env bash
# Fails if the tests left anything behind. Test clusters, their nodes and test operators carry
# "podset-testenv-" in their arguments or paths; a `make cluster-up` cluster does not (its
# bridges are psl*, the tests' pst*).
#  - processes: control plane, operators, kubelets, containerds, their shims, registries
#    (by argument), and any process still in a container's cgroup (/k8s.io/<id>);
#  - mounts: anything mounted under a test cluster's directory;
#  - network interfaces: a test node's bridge (pst*) or a veth still attached to one;
#  - netfilter: any KUBE-* chain or rule in iptables, ip6tables or nftables (a kubelet's);
#  - /tmp: kubemark's scratch directories (hollow-kubelet.*).
set -uo pipefail
fail=0
report() { echo "$1" >&2; echo "$2" | sed 's/^/  /' >&2; fail=1; }

left=$(pgrep -a -f 'podset-testenv-' || true)
[ -z "$left" ] || report "processes left behind by the tests:" "$left"

pods=""
for procs in /sys/fs/cgroup/pids/k8s.io/*/cgroup.procs; do
  [ -f "$procs" ] || continue
  for pid in $(cat "$procs"); do pods+="$(ps -o pid=,args= -p "$pid")"$'\n'; done
done
if [ -n "${pods//[$'\n ']/}" ] && ! pgrep -f 'local-cluster --dir' >/dev/null; then
  report "container processes left behind (no make cluster-up cluster is running):" "$pods"
fi

mounts=$(grep 'podset-testenv-' /proc/self/mountinfo || true)
[ -z "$mounts" ] || report "mounts left behind by the tests:" "$mounts"

links=$(ip -o link show 2>/dev/null | grep -E ': pst[0-9a-f]{8}[:@]|master pst[0-9a-f]{8} ' || true)
[ -z "$links" ] || report "network interfaces left behind by the tests:" "$links"

rules=""
for cmd in iptables-save ip6tables-save "nft list ruleset"; do
  command -v "${cmd%% *}" >/dev/null || continue
  rules+=$($cmd 2>/dev/null | grep 'KUBE-' | sed "s|^|${cmd%% *}: |")
done
[ -z "$rules" ] || report "netfilter chains or rules left behind by a kubelet:" "$rules"

scratch=$(ls -d /tmp/hollow-kubelet.* 2>/dev/null || true)
[ -z "$scratch" ] || report "kubemark scratch directories left behind:" "$scratch"

[ $fail = 0 ] && echo "no test process, mount, network interface, netfilter rule or scratch directory left behind"
exit $fail
