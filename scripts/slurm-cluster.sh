#!/usr/bin/env bash
# A real N-node Slurm cluster on this one machine, for cluster-wide acceptance (docs/acceptance.md):
# each slurmd in its own network namespace (and hostname), with its own address on a bridge.
#
#   bash scripts/slurm-cluster.sh start [N] [DIR]     N nodes n01..nNN (default 16, 2..32); idempotent
#   bash scripts/slurm-cluster.sh stop [DIR]          daemons (TERM, then KILL, checked in /proc), every
#                                                     namespace, veth, the bridge, the cgroups, /etc/netns files
#   bash scripts/slurm-cluster.sh status [DIR]
# Faults, to show the acceptance at work (DIR from $EXABENCH_CLUSTER_DIR, else the default):
#   slow-node NODE FACTOR    CPU quota of 1/FACTOR of a core on the node's slurmd and all it starts (1: lifted)
#   slow-link NODE RATE      token-bucket rate limit (tc tbf, e.g. 200mbit) on the node's link, both ways (off: lifted)
#   dead-node NODE           the node's slurmd and everything it started are killed (the controller finds out)
#   revive-node NODE         start the node's slurmd again (ReturnToService=2 brings it back)
#   broken-node NODE         every task started there fails at start (the TaskProlog fails; fix-node NODE undoes it)
#   mem-cap NODE MB          memory cgroup limit on the node's slurmd and all it starts: the kernel's OOM killer
#                            ends what goes past it, as on a node with too little memory (off: lifted)
#
# Network: bridge xbc-br with the host at 10.217.0.1/24 (slurmctld and munged run in the host namespace);
# node nNN is namespace xbc-nNN, veth xbc-nNN (host side, on the bridge) / eth0 (node side) at
# 10.217.0.(10+NN). The range exists only on this bridge: no route, no forwarding off the machine.
# Inside a node, names of the nodes resolve through /etc/netns/xbc-nNN/hosts (ip netns exec binds it).
# Clients find the cluster through SLURM_CONF: `source DIR/env.sh`.
set -euo pipefail

me=slurm-cluster
# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

cmd=${1:-}
default_dir=${EXABENCH_CLUSTER_DIR:-/tmp/exabench-cluster}
ctld_port=${EXABENCH_CLUSTER_PORT:-17920}
slurmd_port=$((ctld_port + 1))          # the same in every node: each has its own address
# Jobs that may run at once in the whole cluster (a Slurm license each job asks for per rank):
# the simulated nodes share the host's cores, so more would measure the sharing, not the node.
slots=${EXABENCH_CLUSTER_SLOTS:-$(nproc)}
cpus_per_node=2
mem_per_node=2000                       # MB; CR_CPU, so memory is a limit, not a consumable
prefix=xbc                              # namespaces xbc-nNN, links xbc-nNN and bridge xbc-br
bridge=$prefix-br
net=10.217.0
host_ip=$net.1
cgroot=/sys/fs/cgroup/cpu/exabench-cluster
memroot=/sys/fs/cgroup/memory/exabench-cluster   # mem-cap's cgroups (created by the fault only)

node_name() { printf 'n%02d' "$1"; }
node_index() { [[ "$1" =~ ^n0*([1-9][0-9]?)$ ]] || die "node '$1' is not valid; valid: n01..n32"; echo "${BASH_REMATCH[1]}"; }
node_ip() { echo "$net.$((10 + $(node_index "$1")))"; }
node_ns() { echo "$prefix-$1"; }

# The node count the cluster in DIR was started with (faults and status need it).
cluster_nodes() {
    local dir=$1
    [ -s "$dir/nodes" ] || die "no cluster in $dir (start it: $0 start N $dir)"
    cat "$dir/nodes"
}

require_node() {
    local dir=$1 node=$2 n
    n=$(cluster_nodes "$dir")
    [ "$(node_index "$node")" -le "$n" ] || die "node '$node' is not in the cluster of $dir; valid: n01..$(node_name "$n")"
}

write_config() {
    local dir=$1 n=$2 i node
    mkdir -p "$dir"/{spool,state,log,run,faults/broken}
    munge_key "$dir"
    {
        cat <<CONF
# Written by scripts/slurm-cluster.sh: $n slurmd, each in its own network namespace on bridge $bridge.
ClusterName=exabench-cluster
SlurmctldHost=$(hostname -s)($host_ip)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
TaskProlog=$dir/task-prolog.sh
# One license per rank: no more ranks run at once than the host has cores (the simulated nodes share them).
Licenses=cores:$slots
# A node that stops answering is DOWN within about SlurmdTimeout; one that registers again returns.
ReturnToService=2
SlurmdTimeout=20
JobRequeue=0
CONF
        common_conf "$dir"
        for i in $(seq 1 "$n"); do
            node=$(node_name "$i")
            echo "NodeName=$node NodeHostname=$node NodeAddr=$(node_ip "$node") CPUs=$cpus_per_node RealMemory=$mem_per_node State=UNKNOWN"
        done
        echo "PartitionName=debug Nodes=n[01-$(node_name "$n" | cut -c2-)] Default=YES MaxTime=60 MaxNodes=$n State=UP OverSubscribe=NO"
    } > "$dir/slurm.conf"
    # broken-node: a failing TaskProlog fails each task at its start, before the program runs.
    cat > "$dir/task-prolog.sh" <<PROLOG
#!/bin/sh
# Written by scripts/slurm-cluster.sh: tasks on a node marked broken (broken-node NODE) fail at start.
if [ -e "$dir/faults/broken/\$SLURMD_NODENAME" ]; then
    echo "print node \$SLURMD_NODENAME is marked broken (scripts/slurm-cluster.sh broken-node)"
    exit 1
fi
exit 0
PROLOG
    chmod 755 "$dir/task-prolog.sh"
    echo "export SLURM_CONF=$dir/slurm.conf" > "$dir/env.sh"
    echo "$n" > "$dir/nodes"
}

make_network() {
    local n=$1 i node ns hosts
    ip link add "$bridge" type bridge
    ip addr add "$host_ip/24" dev "$bridge"
    ip link set "$bridge" up
    hosts="127.0.0.1 localhost"$'\n'"$host_ip $(hostname -s) ctl"
    for i in $(seq 1 "$n"); do node=$(node_name "$i"); hosts+=$'\n'"$(node_ip "$node") $node"; done
    for i in $(seq 1 "$n"); do
        node=$(node_name "$i"); ns=$(node_ns "$node")
        ip netns add "$ns"
        ip link add "$ns" type veth peer name eth0 netns "$ns"
        ip link set "$ns" master "$bridge" up
        ip -n "$ns" link set lo up
        ip -n "$ns" addr add "$(node_ip "$node")/24" dev eth0
        ip -n "$ns" link set eth0 up
        mkdir -p "/etc/netns/$ns"
        echo "$hosts" > "/etc/netns/$ns/hosts"
    done
}

# slurmd of one node: in its namespace, its own hostname (a UTS namespace), its own cpu cgroup
# (joined by the subshell before exec, so slurmd and everything it starts are under the node's
# quota). Not `ip netns exec`: it remounts /sys, where slurmd needs the cgroup tree; so the node's
# hosts file is bound over /etc/hosts in a mount namespace of its own, as ip netns exec would.
start_slurmd() {
    local dir=$1 node=$2 cg=$cgroot/$2 ns
    ns=$(node_ns "$node")
    mkdir -p "$cg" "$dir/tmp/$node"
    echo -1 > "$cg/cpu.cfs_quota_us"
    rm -f "$dir/faults/dead-$node"
    (echo "$BASHPID" > "$cg/cgroup.procs"
     exec nsenter --net="/run/netns/$ns" unshare --mount --uts sh -c \
         "mount --bind /etc/netns/$ns/hosts /etc/hosts && hostname $node && exec slurmd -f $dir/slurm.conf -N $node")
}

start() {
    local n=$1 dir=$2 i
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, cgroups, and slurmd runs jobs as their users)"
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 32 ] || die "node count '$n' is not valid; valid: 2..32"
    command -v ip >/dev/null || die "the ip command (iproute2) is missing"
    [ -d /sys/fs/cgroup/cpu ] || die "no cgroup v1 cpu controller at /sys/fs/cgroup/cpu (slow-node needs it)"
    install_if_missing
    stop_all "$dir" quiet
    trap 'echo "$me: start failed; cleaning up" >&2; stop_all "$dir" quiet' ERR
    write_config "$dir" "$n"
    make_network "$n"
    # The nodes' cgroups sit in one parent, which the kernel weighs against the host's other
    # processes: weighed as 8 processes per job slot, the cluster's jobs take precedence over
    # the host's other work (as a real node runs its job alone) without starving it.
    mkdir -p "$cgroot"
    echo $((8 * 1024 * slots)) > "$cgroot/cpu.shares"
    start_munged "$dir"
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF" -i
    for i in $(seq 1 "$n"); do start_slurmd "$dir" "$(node_name "$i")"; done
    if ! wait_nodes_up "$SLURM_CONF" "$n" 120; then
        tail -n 5 "$dir"/log/*.log >&2 || true
        stop_all "$dir" quiet
        die "nodes did not come up; logs were in $dir/log"
    fi
    echo "$me: up: $n nodes n01..$(node_name "$n") on $bridge ($net.0/24), $slots job slots (SLURM_CONF=$dir/slurm.conf; source $dir/env.sh)"
}

# Every process in a node's cgroup (a dead node's, or leftovers at stop): TERM, then KILL.
kill_cgroup() {
    local cg=$cgroot/$1 pid
    [ -d "$cg" ] || return 0
    for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null || true; done
    for pid in $(cat "$cg/cgroup.procs" 2>/dev/null); do stop_pid "$pid" "in cgroup $cg"; done
}

stop_all() {
    local dir=$1 quiet=${2:-} f ns node pid
    if [ -s "$dir/run/slurmctld.pid" ] && alive "$(cat "$dir/run/slurmctld.pid")"; then
        # Cancel jobs first so that their steps end before slurmd goes.
        SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet -u "$(id -un)" 2>/dev/null || true
    fi
    for f in "$dir"/run/slurmd-*.pid; do [ -e "$f" ] && stop_pidfile "$f"; done
    # Whatever is still alive in a node: in its cgroup or its namespace.
    if [ -d "$cgroot" ]; then
        for f in "$cgroot"/*/; do [ -d "$f" ] && kill_cgroup "$(basename "$f")"; done
    fi
    stop_pidfile "$dir/run/slurmctld.pid"
    stop_pidfile "$dir/run/munged.pid"
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$prefix-n[0-9]+$" || true); do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do stop_pid "$pid" "in namespace $ns"; done
        ip netns del "$ns" 2>/dev/null || true   # takes its veth pair with it
        rm -rf "/etc/netns/$ns"
    done
    rmdir /etc/netns 2>/dev/null || true   # only when empty: another tool's files stay
    for f in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$prefix-" || true); do
        ip link del "$f" 2>/dev/null || true
    done
    if [ -d "$cgroot" ]; then
        for f in "$cgroot"/*/; do [ -d "$f" ] && rmdir "$f" 2>/dev/null; done
        rmdir "$cgroot" 2>/dev/null || echo "$me: could not remove $cgroot (processes left in it?)" >&2
    fi
    if [ -d "$memroot" ]; then
        for f in "$memroot"/*/; do [ -d "$f" ] && rmdir "$f" 2>/dev/null; done
        rmdir "$memroot" 2>/dev/null || echo "$me: could not remove $memroot (processes left in it?)" >&2
    fi
    rm -rf "$dir/faults"
    [ "$quiet" = quiet ] || echo "$me: stopped ($dir)"
}

status() {
    local dir=$1 f
    for f in "$dir"/run/*.pid; do
        [ -e "$f" ] || continue
        if alive "$(cat "$f")"; then echo "$(basename "$f" .pid) running ($(cat "$f"))"
        else echo "$(basename "$f" .pid) dead"; fi
    done
    echo "namespaces: $(ip netns list 2>/dev/null | awk '{print $1}' | grep -cE "^$prefix-n[0-9]+$" || true)"
    ip -br link show "$bridge" 2>/dev/null || echo "bridge $bridge: absent"
    [ -s "$dir/slurm.conf" ] && SLURM_CONF="$dir/slurm.conf" sinfo -N -o '%N %t %E' 2>/dev/null || true
    faults "$dir"
}

faults() {
    local dir=$1 cg node q
    for cg in "$cgroot"/n*; do
        [ -d "$cg" ] || continue
        node=$(basename "$cg"); q=$(cat "$cg/cpu.cfs_quota_us")
        [ "$q" = -1 ] || echo "fault: $node slow: cpu quota $q/$(cat "$cg/cpu.cfs_period_us") us"
        tc qdisc show dev "$(node_ns "$node")" 2>/dev/null | grep -q tbf &&
            echo "fault: $node link: $(tc qdisc show dev "$(node_ns "$node")" | grep tbf)"
    done
    for cg in "$memroot"/n*; do
        [ -d "$cg" ] || continue
        [ "$(cat "$cg/memory.limit_in_bytes")" -ge $((1 << 50)) ] ||
            echo "fault: $(basename "$cg") memory capped at $(( $(cat "$cg/memory.limit_in_bytes") >> 20 )) MB"
    done
    for f in "$dir"/faults/dead-* "$dir"/faults/broken/*; do
        [ -e "$f" ] && echo "fault: $(basename "$f") $([[ $f == */broken/* ]] && echo broken || echo '(dead)')"
    done
    return 0
}

slow_node() {
    local dir=$1 node=$2 factor=$3 quota
    require_node "$dir" "$node"
    [[ "$factor" =~ ^[0-9]+(\.[0-9]+)?$ ]] && awk "BEGIN{exit !($factor >= 1)}" ||
        die "slow-node factor '$factor' is not valid; valid: a number >= 1 (1 lifts the quota)"
    # The kernel's smallest quota (1 ms) per a period FACTOR times as long: throttling comes in
    # short steps, so a benchmark's 10 ms samples are each slowed, not some fast and some stalled
    # (with the default 100 ms period, a median of short samples would hide the quota). The kernel
    # charges the quota at its tick (4 ms at HZ=250): a burst of up to a tick runs before the
    # throttle, so a sample shorter than ~5 ms may escape it (judge on samples of several ticks).
    period=$(awk "BEGIN{printf \"%d\", 1000 * $factor}")
    quota=1000
    [ "$factor" = 1 ] && { period=100000; quota=-1; }
    echo "$quota" > "$cgroot/$node/cpu.cfs_quota_us"   # -1 first: a period below the quota is refused
    echo "$period" > "$cgroot/$node/cpu.cfs_period_us"
    [ "$quota" = -1 ] || echo "$quota" > "$cgroot/$node/cpu.cfs_quota_us"
    echo "$me: $node: cpu quota $quota us per $period us"
}

slow_link() {
    local dir=$1 node=$2 rate=$3 ns
    require_node "$dir" "$node"
    ns=$(node_ns "$node")
    if [ "$rate" = off ]; then
        tc qdisc del dev "$ns" root 2>/dev/null || true
        ip netns exec "$ns" tc qdisc del dev eth0 root 2>/dev/null || true
        echo "$me: $node: link rate limit lifted"; return
    fi
    [[ "$rate" =~ ^[0-9]+(\.[0-9]+)?([kmg]?bit)$ ]] || die "slow-link rate '$rate' is not valid; valid: e.g. 200mbit, 1gbit, 500kbit, or off"
    # Both directions: the host-side end shapes what the node receives, the node's eth0 what it sends.
    tc qdisc replace dev "$ns" root tbf rate "$rate" burst 64kb latency 100ms
    ip netns exec "$ns" tc qdisc replace dev eth0 root tbf rate "$rate" burst 64kb latency 100ms
    echo "$me: $node: link limited to $rate each way"
}

mem_cap() {
    local dir=$1 node=$2 mb=$3 cg=$memroot/$2 pid
    require_node "$dir" "$node"
    [ -d /sys/fs/cgroup/memory ] || die "no cgroup v1 memory controller at /sys/fs/cgroup/memory (mem-cap needs it)"
    [[ "$mb" =~ ^[0-9]+$ && "$mb" -ge 50 || "$mb" = off ]] || die "mem-cap size '$mb' is not valid; valid: MB >= 50, or off"
    mkdir -p "$cg"
    if [ "$mb" = off ]; then echo -1 > "$cg/memory.limit_in_bytes"; echo "$me: $node: memory cap lifted"; return; fi
    # slurmd and everything it runs now: later children are born in the cgroup of their parent
    for pid in $(cat "$cgroot/$node/cgroup.procs"); do echo "$pid" > "$cg/cgroup.procs" 2>/dev/null || true; done
    echo $((mb << 20)) > "$cg/memory.limit_in_bytes"
    [ -e "$cg/memory.memsw.limit_in_bytes" ] && echo $((mb << 20)) > "$cg/memory.memsw.limit_in_bytes" 2>/dev/null || true
    echo "$me: $node: memory capped at $mb MB (the kernel's OOM killer ends what goes past it)"
}

dead_node() {
    local dir=$1 node=$2
    require_node "$dir" "$node"
    stop_pidfile "$dir/run/slurmd-$node.pid"
    kill_cgroup "$node"   # its running jobs die with it, as on a node that loses power
    touch "$dir/faults/dead-$node"
    echo "$me: $node: slurmd and its jobs stopped (the controller marks it DOWN within about 20 s)"
}

revive_node() {
    local dir=$1 node=$2
    require_node "$dir" "$node"
    if [ -s "$dir/run/slurmd-$node.pid" ] && alive "$(cat "$dir/run/slurmd-$node.pid")"; then
        echo "$me: $node: slurmd already running"; return
    fi
    SLURM_CONF="$dir/slurm.conf" start_slurmd "$dir" "$node"
    for _ in $(seq 1 60); do
        SLURM_CONF="$dir/slurm.conf" sinfo -h -n "$node" -o '%t' | grep -qE '^(idle|mix|alloc)$' && {
            echo "$me: $node: back"; return; }
        sleep 0.5
    done
    die "$node did not come back; see $dir/log/slurmd-$node.log"
}

broken_node() {
    local dir=$1 node=$2 how=$3
    require_node "$dir" "$node"
    if [ "$how" = broken ]; then touch "$dir/faults/broken/$node"; echo "$me: $node: tasks fail at start"
    else rm -f "$dir/faults/broken/$node"; echo "$me: $node: tasks start again"; fi
}

case "$cmd" in
    start) start "${2:-16}" "${3:-$default_dir}" ;;
    stop) stop_all "${2:-$default_dir}" ;;
    status) status "${2:-$default_dir}" ;;
    slow-node) [ $# -ge 3 ] || die "usage: $0 slow-node NODE FACTOR"; slow_node "$default_dir" "$2" "$3" ;;
    slow-link) [ $# -ge 3 ] || die "usage: $0 slow-link NODE RATE"; slow_link "$default_dir" "$2" "$3" ;;
    dead-node) [ $# -ge 2 ] || die "usage: $0 dead-node NODE"; dead_node "$default_dir" "$2" ;;
    revive-node) [ $# -ge 2 ] || die "usage: $0 revive-node NODE"; revive_node "$default_dir" "$2" ;;
    broken-node) [ $# -ge 2 ] || die "usage: $0 broken-node NODE"; broken_node "$default_dir" "$2" broken ;;
    fix-node) [ $# -ge 2 ] || die "usage: $0 fix-node NODE"; broken_node "$default_dir" "$2" fixed ;;
    mem-cap) [ $# -ge 3 ] || die "usage: $0 mem-cap NODE MB"; mem_cap "$default_dir" "$2" "$3" ;;
    *) die "usage: $0 start [N] [DIR] | stop [DIR] | status [DIR] | slow-node NODE FACTOR | slow-link NODE RATE | dead-node NODE | revive-node NODE | broken-node NODE | fix-node NODE | mem-cap NODE MB" ;;
esac
