#!/usr/bin/env bash
# A real two-node Slurm on loopback, for tests and for trying profiles/slurm-local by hand.
#
#   bash scripts/slurm-local.sh start [DIR]   install (Debian) if missing, write config, start daemons
#   bash scripts/slurm-local.sh stop  [DIR]   stop the daemons (TERM, then KILL), checked in /proc
#   bash scripts/slurm-local.sh status [DIR]
#
# Everything lives under DIR (default $EXABENCH_SLURM_DIR or /tmp/exabench-slurm): slurm.conf,
# its own munge key and socket, spool, logs, pid files. Nothing under /etc is touched, so it
# never collides with a system Slurm. Clients find it through SLURM_CONF: `source DIR/env.sh`.
# Facts this relies on (Debian 12, Slurm 22.05): ../shared/PLATFORM.md "Slurm (real, on loopback)".
set -euo pipefail

cmd=${1:-}
dir=${2:-${EXABENCH_SLURM_DIR:-/tmp/exabench-slurm}}
ctld_port=${EXABENCH_SLURM_PORT:-17817}
node_port1=$((ctld_port + 1))
node_port2=$((ctld_port + 2))
cpus_per_node=${EXABENCH_SLURM_CPUS:-4}   # more than the host's cores: tiny jobs oversubscribe
mem_per_node=4000                          # MB; CR_CPU, so memory is a limit, not a consumable

me=slurm-local
# shellcheck source=scripts/slurm-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/slurm-lib.sh"

write_config() {
    local host
    host=$(hostname -s)
    mkdir -p "$dir"/{spool,state,log,run,tmp/n1,tmp/n2}
    munge_key "$dir"
    {
        cat <<CONF
# Written by scripts/slurm-local.sh: two slurmd (n1, n2) on this host, loopback only.
ClusterName=exabench
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
ReturnToService=2
SlurmdTimeout=60
CONF
        common_conf "$dir"
        cat <<CONF
NodeName=n1 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node_port1 CPUs=$cpus_per_node RealMemory=$mem_per_node State=UNKNOWN
NodeName=n2 NodeHostname=$host NodeAddr=127.0.0.1 Port=$node_port2 CPUs=$cpus_per_node RealMemory=$mem_per_node State=UNKNOWN
PartitionName=debug Nodes=n1,n2 Default=YES MaxTime=30 MaxNodes=2 State=UP OverSubscribe=NO
CONF
    } > "$dir/slurm.conf"
    cat > "$dir/env.sh" <<ENV
export SLURM_CONF=$dir/slurm.conf
ENV
}

start() {
    [ "$(id -u)" = 0 ] || die "needs root (slurmd runs jobs as their users and Debian's daemons expect root)"
    install_if_missing
    stop_all quiet
    write_config
    start_munged "$dir"
    export SLURM_CONF="$dir/slurm.conf"
    slurmctld -f "$SLURM_CONF" -i
    slurmd -f "$SLURM_CONF" -N n1
    slurmd -f "$SLURM_CONF" -N n2
    if ! wait_nodes_up "$SLURM_CONF" 2; then
        tail -n 20 "$dir"/log/*.log >&2 || true
        stop_all quiet
        die "nodes did not come up; logs in $dir/log"
    fi
    echo "slurm-local: up (SLURM_CONF=$dir/slurm.conf; source $dir/env.sh)"
}

stop_all() {
    # Cancel jobs first so that their steps end before slurmd goes.
    if [ -s "$dir/run/slurmctld.pid" ] && alive "$(cat "$dir/run/slurmctld.pid")"; then
        SLURM_CONF="$dir/slurm.conf" timeout 10 scancel --full --quiet -u "$(id -un)" 2>/dev/null || true
    fi
    stop_pidfile "$dir/run/slurmd-n1.pid"
    stop_pidfile "$dir/run/slurmd-n2.pid"
    stop_pidfile "$dir/run/slurmctld.pid"
    stop_pidfile "$dir/run/munged.pid"
    [ "${1:-}" = quiet ] || echo "slurm-local: stopped ($dir)"
}

status() {
    local f
    for f in "$dir"/run/*.pid; do
        [ -e "$f" ] || continue
        if alive "$(cat "$f")"; then echo "$(basename "$f" .pid) running ($(cat "$f"))"
        else echo "$(basename "$f" .pid) dead"; fi
    done
}

case "$cmd" in
    start) start ;;
    stop) stop_all ;;
    status) status ;;
    *) die "usage: $0 start|stop|status [DIR]" ;;
esac
