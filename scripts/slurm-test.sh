#!/usr/bin/env bash
# Runs a CI spec through a real SLURM scheduler on this machine and checks what `mcgp slurm`
# promises (CI runs it from .ci/run; a failure fails CI):
#   1. a one-node cluster on localhost (munged, slurmctld, slurmd from the distribution's
#      packages, installed here if missing; root is needed to install them and to run slurmd);
#   2. the spec as a 4-task job array plus the collection job gives the tables of a plain local
#      run (bit-identical apart from timings);
#   3. one task cancelled mid-run (scancel) leaves complete cells only, and resubmitting the
#      array computes exactly the missing cells (no cell lost, none computed twice).
# Every daemon it starts is stopped on exit (trap), whatever the outcome; the whole test is
# bounded by `timeout` (SLURM_TEST_TIMEOUT seconds, default 420) and prints its own wall time.
# Usage: scripts/slurm-test.sh [SPEC]   (MCGP=path/to/mcgp to test another binary)
#        SLURM_TEST_TIMEOUT=1800 scripts/slurm-test.sh --committed experiments/PAPER-SPEC.yaml [SHARDS]
#   runs a full paper spec on the test cluster in SHARDS (default 2) tasks into a scratch folder
#   and compares its summary.csv with the committed results/<exp>/summary.csv (apart from
#   time_* rows); by hand, not in CI (it takes the spec's full time).
set -euo pipefail
LIMIT=${SLURM_TEST_TIMEOUT:-420}
if [ -z "${MCGP_SLURM_TEST_BOUNDED:-}" ]; then
    # Re-run under timeout: on expiry the inner script gets SIGTERM and its trap cleans up.
    export MCGP_SLURM_TEST_BOUNDED=1
    exec timeout --kill-after=30 "$LIMIT" "$0" "$@"
fi
START=$(date +%s)
cd "$(dirname "$0")/.."
ROOT=$PWD
COMMITTED=
if [ "${1:-}" = --committed ]; then
    COMMITTED=1
    shift
    [ -n "${1:-}" ] || { echo "usage: $0 --committed SPEC [SHARDS]" >&2; exit 2; }
fi
SPEC=$ROOT/${1:-experiments/ci/chai2012-table3.yaml}
SHARDS=${2:-4}
[ -n "$COMMITTED" ] && SHARDS=${2:-2}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-/work/.cache/mcgp-target}"
MCGP=${MCGP:-$CARGO_TARGET_DIR/release/mcgp}

say() { echo "slurm-test [$(($(date +%s) - START)) s]: $*"; }
fail() {
    say "FAILED: $*"
    exit 1
}

if [ ! -x "$MCGP" ]; then
    say "building mcgp"
    cargo build --release
fi

# 1. SLURM and MUNGE from the distribution's packages.
have_slurm() { command -v slurmctld && command -v slurmd && command -v munged && command -v sbatch; } >/dev/null 2>&1
if ! have_slurm; then
    [ "$(id -u)" = 0 ] || fail "SLURM (slurmctld, slurmd, munge, slurm-client) is not installed and this is not root: cannot install it"
    command -v apt-get >/dev/null || fail "SLURM is not installed and there is no apt-get to install it"
    say "installing slurmctld slurmd munge slurm-client"
    export DEBIAN_FRONTEND=noninteractive
    { apt-get update -qq && apt-get install -y -qq slurmctld slurmd munge slurm-client >/dev/null; } ||
        fail "could not install the SLURM packages (slurmctld slurmd munge slurm-client)"
    have_slurm || fail "the SLURM packages installed but slurmctld/slurmd/munged/sbatch are not on PATH"
fi
[ "$(id -u)" = 0 ] || fail "slurmd must run as root for this one-node test cluster"
say "$(slurmctld -V)"

T=$(mktemp -d /tmp/mcgp-slurm-test.XXXXXX)
chmod 755 "$T"
PIDS=()
cleanup() {
    set +e
    if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
        scancel --quiet --user="$(id -un)" 2>/dev/null
        # Give cancelled tasks a moment to end before their slurmd goes.
        for _ in $(seq 20); do [ -z "$(squeue -h 2>/dev/null)" ] && break; sleep 0.5; done
    fi
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null; done
    [ -f "$T/munge/munged.pid" ] && kill "$(cat "$T/munge/munged.pid")" 2>/dev/null
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.5; done
        kill -9 "$pid" 2>/dev/null
    done
    say "daemons stopped; wall time $(($(date +%s) - START)) s"
    if [ "${KEEP:-}" = 1 ]; then say "kept $T"; else rm -rf "$T"; fi
}
trap cleanup EXIT
trap 'fail "interrupted (time limit ${LIMIT} s?)"' INT TERM

# MUNGE, as the munge user, with a generated key and its socket in the temp folder.
# The socket's folder must be searchable by all (clients run as any user), the key's private.
mkdir -p "$T/munge" "$T/munge-key"
mungekey --create --keyfile="$T/munge-key/munge.key" >/dev/null 2>&1 ||
    dd if=/dev/urandom of="$T/munge-key/munge.key" bs=1024 count=1 status=none
chown -R munge:munge "$T/munge" "$T/munge-key"
chmod 755 "$T/munge"
chmod 700 "$T/munge-key"
chmod 400 "$T/munge-key/munge.key"
SOCKET=$T/munge/munge.socket.2
runuser -u munge -- munged --socket="$SOCKET" --key-file="$T/munge-key/munge.key" --pid-file="$T/munge/munged.pid" \
    --log-file="$T/munge-key/munged.log" --seed-file="$T/munge-key/munged.seed" ||
    fail "munged did not start: $(cat "$T/munge-key/munged.log" 2>/dev/null)"

# A one-node cluster on localhost: the node named by the short hostname, 2 CPUs.
NODE=$(hostname -s)
mkdir -p "$T/state" "$T/spool" "$T/log"
port=$((20000 + RANDOM % 20000))
export SLURM_CONF=$T/slurm.conf
cat >"$SLURM_CONF" <<EOF
ClusterName=mcgptest
SlurmctldHost=$NODE(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
# Bind to the addresses above (localhost), not to every interface.
CommunicationParameters=NoInAddrAny
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$SOCKET
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$T/state
SlurmdSpoolDir=$T/spool
SlurmctldPidFile=$T/slurmctld.pid
SlurmdPidFile=$T/slurmd.pid
SlurmctldLogFile=$T/log/slurmctld.log
SlurmdLogFile=$T/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
MinJobAge=600
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=2 State=UNKNOWN
PartitionName=test Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
slurmctld -D -c -f "$SLURM_CONF" >"$T/log/slurmctld.out" 2>&1 &
PIDS+=($!)
slurmd -D -N "$NODE" -f "$SLURM_CONF" >"$T/log/slurmd.out" 2>&1 &
PIDS+=($!)
for i in $(seq 60); do
    state=$(sinfo -h -N -o %T 2>/dev/null | head -1 || true)
    [ "$state" = idle ] && break
    [ "$i" = 60 ] && fail "the node never became idle (state: ${state:-none}); $(tail -5 "$T/log/slurmctld.log" "$T/log/slurmd.log" 2>/dev/null)"
    sleep 0.5
done
say "cluster up: node $NODE idle, slurmctld on 127.0.0.1:$port"

# Wait (bounded) until none of the given jobs is pending or running.
wait_jobs() {
    local deadline=$(($(date +%s) + ${2:-180}))
    while [ -n "$(squeue -h -j "$1" 2>/dev/null)" ]; do
        [ "$(date +%s)" -lt "$deadline" ] || fail "jobs $1 still queued or running after ${2:-180} s: $(squeue)"
        sleep 0.5
    done
}
# Job state(s) of a job (array: one line per task) as the controller remembers them.
job_states() { scontrol show job "$1" 2>/dev/null | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# The tables without timing rows or columns.
tables() {
    local dir=$1/results/$(basename "$2")
    grep -v ',time_' "$dir/summary.csv"
    grep -v ',time_' "$dir/results.csv"
    cut -d, -f1-7,9 "$dir/traces.csv"
}
submit() { # results folder, extra env; prints "ARRAY COLLECT"
    local out
    out=$("$MCGP" slurm "$SPEC" --shards "$SHARDS" --cpus-per-task 1 --time "$((LIMIT / 60 + 1))" --results "$1/results" --reports "$1/reports" --submit) ||
        fail "mcgp slurm --submit failed: $out"
    echo "$out" >&2
    echo "$out" | sed -n 's/^submitted array job \([0-9]*\) .* collection job \([0-9]*\) .*/\1 \2/p'
}
EXP=$(sed -n 's/^name: *//p' "$SPEC" | head -1)

if [ -n "$COMMITTED" ]; then
    committed=$ROOT/results/$EXP/summary.csv
    [ -f "$committed" ] || fail "no committed $committed"
    read -r ARRAY COLLECT < <(submit "$T/full")
    [ -n "${COLLECT:-}" ] || fail "no job ids from mcgp slurm --submit"
    say "submitted array $ARRAY ($SHARDS tasks) and collection $COLLECT"
    wait_jobs "$ARRAY,$COLLECT" "$LIMIT"
    [ "$(job_states "$ARRAY" | grep -c COMPLETED)" = "$SHARDS" ] || fail "array tasks: $(job_states "$ARRAY" | tr '\n' ' ')"
    [ "$(job_states "$COLLECT")" = COMPLETED ] || fail "collection job: $(job_states "$COLLECT")"
    grep -h "^shard " "$T/full/results/$EXP/slurm/logs/"shard-*-job-"$ARRAY".out
    rows=$(grep -vc ',time_' "$committed")
    diff <(grep -v ',time_' "$committed") <(grep -v ',time_' "$T/full/results/$EXP/summary.csv") >"$T/diff" ||
        fail "$EXP: the cluster run's summary differs from the committed one: $(head -20 "$T/diff")"
    say "$EXP in $SHARDS array tasks: summary.csv equal to the committed one apart from time_* rows ($rows rows compared)"
    say "PASSED"
    exit 0
fi

# 2. A plain local run, then the same spec on the cluster.
"$MCGP" run "$SPEC" --results "$T/plain/results" --reports "$T/plain/reports" 2>"$T/plain.log" || fail "plain run: $(cat "$T/plain.log")"
say "plain run done: $(grep ' cells: ' "$T/plain.log")"
TOTAL=$(ls "$T/plain/results/$EXP/cells" | wc -l)
read -r ARRAY COLLECT < <(submit "$T/cluster")
[ -n "${COLLECT:-}" ] || fail "no job ids from mcgp slurm --submit"
say "submitted array $ARRAY and collection $COLLECT"
wait_jobs "$ARRAY,$COLLECT" 240
states=$(job_states "$ARRAY" | sort | uniq -c | tr -s ' ')
[ "$(job_states "$ARRAY" | grep -c COMPLETED)" = "$SHARDS" ] || fail "array tasks: $states; $(cat "$T/cluster/results/$EXP/slurm/logs/"*)"
[ "$(job_states "$COLLECT")" = COMPLETED ] || fail "collection job: $(job_states "$COLLECT"); $(cat "$T/cluster/results/$EXP/slurm/logs/collect-"*)"
say "array: $SHARDS tasks COMPLETED; collection COMPLETED"
grep -h "^shard " "$T/cluster/results/$EXP/slurm/logs/shard-"*"-job-$ARRAY.out" | cut -d';' -f1
[ -f "$T/cluster/reports/$EXP/index.html" ] || fail "no report from the collection job"
diff <(tables "$T/plain" "$EXP") <(tables "$T/cluster" "$EXP") >"$T/diff" || fail "the cluster's tables differ from the plain run's: $(head -20 "$T/diff")"
say "the cluster run's summary, results and traces equal the plain run's (apart from timings): $TOTAL cells"

# 3. Cancel one task mid-run, resubmit, check nothing is lost or computed twice. Cells are made
# slow (a pause after each) and every stored cell logs a progress line.
C=$T/cancel
LOGS=$C/results/$EXP/slurm/logs
read -r ARRAY COLLECT < <(MCGP_TEST_PAUSE_AFTER_CELL_SECONDS=2 MCGP_PROGRESS_SECONDS=0 submit "$C")
[ -n "${COLLECT:-}" ] || fail "no job ids from mcgp slurm --submit"
# Two tasks storing cells at the same time also shows that shards do not serialise on the
# experiment's lock (2 CPUs, 1 per task: two tasks run at once).
victim=
deadline=$(($(date +%s) + 120))
while [ -z "$victim" ]; do
    [ "$(date +%s)" -lt "$deadline" ] || fail "never saw two tasks under way with part of their cells stored"
    busy=()
    for f in "$LOGS"/shard-*-job-"$ARRAY".out; do
        [ -f "$f" ] || continue
        # "n/N cells computed" with n < N and no final line: under way, some cells stored.
        if grep -q "^1/[0-9]* cells computed" "$f" && ! grep -q "^shard " "$f" && ! grep -q "^\([0-9]*\)/\1 cells computed" "$f"; then
            busy+=("$(basename "$f" | cut -d- -f2)")
        fi
    done
    [ "${#busy[@]}" -ge 2 ] && victim=${busy[0]}
    sleep 0.2
done
say "tasks ${busy[*]} of array $ARRAY are storing cells side by side"
scancel "${ARRAY}_$victim"
say "cancelled task $victim of array $ARRAY once its log showed $(grep -c "cells computed" "$LOGS/shard-$victim-job-$ARRAY.out") stored cell(s)"
wait_jobs "$ARRAY,$COLLECT" 240
job_states "$ARRAY" | grep -q CANCELLED || fail "task $victim was not cancelled: $(job_states "$ARRAY" | tr '\n' ' ')"
BEFORE=$(ls "$C/results/$EXP/cells" | wc -l)
[ "$BEFORE" -lt "$TOTAL" ] || fail "the cancelled task had already stored all its cells"
# Complete records only: every stored cell parses (mcgp status reads each) and no temporary
# file is left where the collection ran (it holds the experiment alone).
"$MCGP" status "$SPEC" --results "$C/results" >"$T/status1" || fail "mcgp status: $(cat "$T/status1")"
grep -q "$TOTAL cells: $BEFORE stored, $((TOTAL - BEFORE)) missing" "$T/status1" || fail "status after the cancel: $(cat "$T/status1")"
cat "$T/status1"
stat -c '%n %i %Y' "$C/results/$EXP/cells/"*.json | sort >"$T/cells-before"
# Resubmit the same array (same plan) and collection job, as a user would.
out=$(bash "$C/results/$EXP/slurm/submit.sh") || fail "resubmitting: $out"
say "resubmitted: $out"
ARRAY2=$(echo "$out" | sed -n 's/^array job \([0-9]*\) .*/\1/p')
COLLECT2=$(echo "$out" | sed -n 's/.*collection job \([0-9]*\)$/\1/p')
wait_jobs "$ARRAY2,$COLLECT2" 240
[ "$(job_states "$ARRAY2" | grep -c COMPLETED)" = "$SHARDS" ] || fail "resubmitted array: $(job_states "$ARRAY2" | tr '\n' ' ')"
[ "$(job_states "$COLLECT2")" = COMPLETED ] || fail "second collection job: $(job_states "$COLLECT2")"
AFTER=$(ls "$C/results/$EXP/cells" | wc -l)
[ "$AFTER" = "$TOTAL" ] || fail "$AFTER cells stored after resubmitting, of $TOTAL"
# Nothing computed twice: the cells stored before are the same files (inode, mtime) ...
join <(sort "$T/cells-before") <(stat -c '%n %i %Y' "$C/results/$EXP/cells/"*.json | sort) | awk '$2 != $4 || $3 != $5 { print; bad = 1 } END { exit bad }' ||
    fail "cells stored before the resubmission were written again"
# ... and the resubmitted tasks computed exactly the missing ones.
computed=$(grep -h "^shard " "$LOGS"/shard-*-job-"$ARRAY2".out | sed 's/.* cells: \([0-9]*\) computed.*/\1/' | awk '{ n += $1 } END { print n + 0 }')
[ "$computed" = "$((TOTAL - BEFORE))" ] || fail "the resubmitted array computed $computed cells, $((TOTAL - BEFORE)) were missing"
ls -A "$C/results/$EXP/cells" | grep -q '^\.tmp' && fail "temporary files left in the cells folder"
"$MCGP" status "$SPEC" --results "$C/results" >"$T/status2" || fail "mcgp status: $(cat "$T/status2")"
grep -q "$TOTAL cells: $TOTAL stored, 0 missing" "$T/status2" || fail "status after the resubmission: $(cat "$T/status2")"
diff <(tables "$T/plain" "$EXP") <(tables "$C" "$EXP") >"$T/diff" || fail "after cancel and resubmit the tables differ from the plain run's: $(head -20 "$T/diff")"
say "after the cancel: $BEFORE of $TOTAL cells stored; the resubmitted array computed the $computed missing ones, rewrote none, and the tables equal the plain run's"
say "PASSED"
