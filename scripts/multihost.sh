#!/usr/bin/env bash
# Runs an Open MPI job across N Linux network namespaces on this machine, as if they were N
# hosts: each namespace has its own network stack, joined to the others by veth pairs on a
# bridge, so MPI's bytes cross real TCP sockets and links (no shared memory between them).
#
#   scripts/multihost.sh [--hosts N] [--rate RATE] [--check] -- MPIRUN_ARGS...
#     e.g. scripts/multihost.sh --hosts 2 -- -np 2 build/meshtrain train --backend mpi \
#            --ranks-per-process 2 --dp 4
#   --hosts N    namespaces (default 2)
#   --slots S    MPI process slots per namespace (default 1: -np N puts one on each "host")
#   --rate RATE  shape every link with tc tbf (e.g. 1gbit): both ends of each veth
#   --check      only check that namespaces can be created here; exit 0 or 77 (skip)
#
# Needs root (ip netns, ip link, tc). Where that is unavailable it prints why and exits 77,
# the code ctest reads as "skipped". Everything it creates carries the prefix mth<pid> and
# is removed on exit, also on failure or Ctrl-C.
#
# How Open MPI gets into the namespaces: mpirun (in the root namespace, on the bridge) is
# given the namespaces' addresses as hosts and a launch agent (plm_rsh_agent) instead of
# ssh; the agent maps an address to its namespace and runs the command there with
# `ip netns exec`. Each namespace gets its own TMPDIR: the namespaces share one hostname,
# and Open MPI names its session directory and shared-memory segments after the hostname,
# so without it two "hosts" would collide on the same files (the shared-memory transport's
# segments, in /dev/shm by default, are moved there too: two processes per namespace
# otherwise crash in mca_btl_vader_poll_handle_frag).
# Latency cannot be added: this kernel has no sch_netem (docs/multihost.md).
set -euo pipefail

hosts=2 slots=1 rate="" check=0
while [ $# -gt 0 ]; do
  case "$1" in
    --hosts) hosts=$2; shift 2 ;;
    --slots) slots=$2; shift 2 ;;
    --rate) rate=$2; shift 2 ;;
    --check) check=1; shift ;;
    --) shift; break ;;
    *) echo "multihost: unknown option $1 (see the top of $0)" >&2; exit 2 ;;
  esac
done
case "$hosts$slots" in ''|*[!0-9]*) echo "multihost: --hosts and --slots must be numbers" >&2; exit 2 ;; esac
if [ "$hosts" -lt 1 ] || [ "$hosts" -gt 32 ]; then
  echo "multihost: --hosts must be in 1..32" >&2; exit 2
fi
if [ "$check" -eq 0 ] && [ $# -eq 0 ]; then
  echo "multihost: nothing to run (give mpirun's arguments after --)" >&2; exit 2
fi

skip() { echo "multihost: skipped: $*" >&2; exit 77; }
[ "$(id -u)" -eq 0 ] || skip "needs root for ip netns (running as uid $(id -u))"
command -v ip >/dev/null || skip "no ip command (iproute2)"
[ -z "$rate" ] || command -v tc >/dev/null || skip "no tc command for --rate"

id=$(( $$ % 100000 ))
prefix="mth${id}"
net="10.213.$(( $$ % 250 ))"
work=$(mktemp -d "/tmp/${prefix}.XXXX")
bridge="${prefix}br"

cleanup() {
  for i in $(seq 0 $((hosts - 1))); do
    ip netns del "${prefix}n$i" 2>/dev/null || true
    ip link del "${prefix}v$i" 2>/dev/null || true
  done
  ip link del "$bridge" 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ip netns add "${prefix}n0" 2>/dev/null || skip "cannot create a network namespace here (ip netns add failed)"
ip link add "$bridge" type bridge || skip "cannot create a bridge here"
ip addr add "$net.254/24" dev "$bridge"
ip link set "$bridge" up
for i in $(seq 0 $((hosts - 1))); do
  ns="${prefix}n$i"
  [ "$i" -eq 0 ] || ip netns add "$ns"
  ip link add "${prefix}v$i" type veth peer name eth0 netns "$ns"
  ip link set "${prefix}v$i" master "$bridge" up
  ip netns exec "$ns" ip link set lo up
  ip netns exec "$ns" ip addr add "$net.$((i + 1))/24" dev eth0
  ip netns exec "$ns" ip link set eth0 up
  if [ -n "$rate" ]; then
    tc qdisc add dev "${prefix}v$i" root tbf rate "$rate" burst 256kb latency 50ms
    ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst 256kb latency 50ms
  fi
  mkdir -p "$work/tmp$i"
done
if [ "$check" -eq 1 ]; then
  echo "multihost: $hosts namespaces can be created here"
  exit 0
fi

# The launch agent: AGENT [ssh-style options] HOST COMMAND...
agent="$work/agent.sh"
cat >"$agent" <<AGENT
#!/bin/sh
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
i=\$(( \${host##*.} - 1 ))
exec ip netns exec "${prefix}n\$i" env TMPDIR="$work/tmp\$i" \\
  OMPI_MCA_btl_vader_backing_directory="$work/tmp\$i" /bin/sh -c "\$*"
AGENT
chmod +x "$agent"

hostlist=""
for i in $(seq 1 "$hosts"); do hostlist="${hostlist:+$hostlist,}$net.$i:$slots"; done
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
set +e
mpirun --allow-run-as-root --host "$hostlist" --bind-to none \
  --mca plm_rsh_agent "$agent" \
  --mca oob_tcp_if_include "$net.0/24" --mca btl_tcp_if_include "$net.0/24" \
  --mca btl tcp,vader,self "$@"
rc=$?
set -e
exit $rc
