# Functions shared by scripts/slurm-local.sh and scripts/slurm-cluster.sh (sourced, not run).
# The caller sets `me` (its name in messages) before sourcing.
# Facts they rely on (Debian 12, Slurm 22.05): ../shared/PLATFORM.md "Slurm (real, on loopback)".

die() { echo "$me: $*" >&2; exit 1; }

install_if_missing() {
    local need=()
    command -v slurmctld >/dev/null || need+=(slurmctld)
    command -v slurmd >/dev/null || need+=(slurmd)
    command -v sbatch >/dev/null || need+=(slurm-client)
    command -v munged >/dev/null || need+=(munge)
    [ -e /usr/include/pmix.h ] || [ -n "$(ls /usr/lib/x86_64-linux-gnu/libpmix.so* 2>/dev/null)" ] ||
        need+=(libpmix-dev)
    if [ ${#need[@]} -gt 0 ]; then
        [ "$(id -u)" = 0 ] || die "missing ${need[*]}; run as root to install them from Debian"
        echo "$me: installing ${need[*]}" >&2
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${need[@]}" >&2
    fi
}

# A pid is alive unless /proc says it is gone or a zombie (kill -0 succeeds on zombies).
alive() {
    local pid=$1 state
    [ -r "/proc/$pid/stat" ] || return 1
    state=$(sed -E 's/^[0-9]+ \(.*\) ([A-Za-z]).*/\1/' "/proc/$pid/stat" 2>/dev/null) || return 1
    [ "$state" != Z ] && [ "$state" != X ]
}

# TERM, wait up to 5 s, then KILL, wait up to 3 s; checked in /proc.
stop_pid() {
    local pid=$1 what=$2 i
    alive "$pid" || return 0
    kill -TERM "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do alive "$pid" || return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
    for i in $(seq 1 30); do alive "$pid" || return 0; sleep 0.1; done
    echo "$me: pid $pid ($what) still alive after KILL" >&2
}

stop_pidfile() {
    local file=$1 pid
    [ -s "$file" ] || return 0
    pid=$(cat "$file")
    [[ "$pid" =~ ^[0-9]+$ ]] && stop_pid "$pid" "$file"
    rm -f "$file"
}

# The munge key of a cluster directory, made once.
munge_key() {
    local dir=$1
    mkdir -p "$dir/munge"
    chmod 700 "$dir/munge"
    [ -s "$dir/munge/munge.key" ] || { dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 2>/dev/null;
                                       chmod 400 "$dir/munge/munge.key"; }
}

start_munged() {
    local dir=$1
    munged --socket="$dir/munge/munge.sock" --key-file="$dir/munge/munge.key" \
           --pid-file="$dir/run/munged.pid" --log-file="$dir/log/munged.log" \
           --seed-file="$dir/munge/munge.seed" --force
}

# Wait until `want` nodes of the config are idle (or allocated); prints the states and logs if not.
wait_nodes_up() {
    local conf=$1 want=$2 tries=${3:-60} i out
    for i in $(seq 1 "$tries"); do
        out=$(SLURM_CONF="$conf" sinfo -h -N -o '%N %t' 2>/dev/null || true)
        if [ "$(grep -cE ' (idle|mix|alloc)$' <<<"$out")" -ge "$want" ]; then return 0; fi
        sleep 0.5
    done
    echo "$out" >&2
    return 1
}

# The slurm.conf lines both clusters share (munge, per-node spool, pid, log and PMIx tmp folders
# under DIR, no accounting, cons_tres over CPUs): the facts of ../shared/PLATFORM.md.
common_conf() {
    local dir=$1
    cat <<CONF
SlurmUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/run/slurmctld.pid
SlurmdPidFile=$dir/run/slurmd-%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd-%n.log
TmpFS=$dir/tmp/%n
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MinJobAge=600
SchedulerType=sched/backfill
SlurmctldTimeout=30
InactiveLimit=0
KillWait=5
CONF
}
