#!/bin/bash
# fault_campaign.sh: libfarm's fault campaign.
#
#   fault_campaign.sh [--continuous | --per-scenario] [--build DIR]
#                     [--cycles N] [--seed S] [--faults F,F,...] [--out DIR]
#                     [--grow | --no-grow] [--full-every N] [--timeout SEC]
#                     [--list] [--help]
#
# --full-every N (--continuous): sercheck and lincheck over the whole
# history, and the allocators rebuilt by a walk of every region, after
# every Nth cycle and the last only (0: the last only; default 1: every
# cycle); the other checks run every cycle.
#
# --timeout: the whole run's limit (--continuous; default 300 s + 60 s a
# cycle), or each cycle's (--per-scenario; default 300 s).
#
# Two modes; --continuous is the default (make faults).
#
# --continuous: ONE cluster takes N faults in a row (default 50):
# tests/test_campaign (5 machines in 3 failure domains, 3 replicas, a
# 3-server ZooKeeper ensemble) runs the bank AND the KV workload together
# on every machine all the time, and applies, one after another, faults
# drawn from the seed (shuffled rounds: every fault once before any
# repeats; --faults picks some):
#
#   kill_member   kill -9 of a random machine, not the CM
#   kill_cm       kill -9 of the configuration manager
#   sigstop       SIGSTOP of a machine until the others run without it,
#                 then SIGCONT (it must learn it was removed, and stop)
#   domain        kill -9 of both machines of a failure domain
#   copy_kill     kill -9 of a machine, then of another while a region is
#                 being copied to a new backup (data recovery)
#   zk_kill       ZooKeeper servers killed and restarted, one at a time
#   restart       every machine killed at once, then restarted on its data
#                 directory
#   restart_copy  kill -9 of a machine, then, while a region is being
#                 copied to a new backup, every machine at once, restarted
#
# A machine that left is replaced by a NEW machine (a new id, an empty
# data directory, the same failure domain) that joins the running cluster
# late. With growth (config grow = 1, the default; --no-grow turns it
# off), the first late machine grows into an ordinary member once its
# copies are complete (primary of part of its share, the old primaries
# demoted), and each cycle also waits for that. After each fault the cluster is whole again and fully replicated
# (every region at 3 complete replicas); then, with the workloads paused:
# full replication; no account locked, the bank total conserved; every
# transaction reported committed present; sercheck clean over the whole
# history of every machine since the start; lincheck clean over the whole
# KV history; every machine's allocator state, rebuilt by scan, equal to
# the live one. The first failed cycle stops the run; the cluster's
# directory (histories hist-<machine>, lin-<machine>) is kept and named.
#
# --per-scenario: the earlier campaign. Each cycle runs one recovery test
# on a cluster of its own (4-5 machines, a private ZooKeeper) and all of
# that scenario's checks:
#
#   kill_member   kill -9 of a random machine, not the CM (bank)
#   kill_cm       kill -9 of the configuration manager (bank)
#   crash_commit  a machine (member or CM) kills itself at a random step of
#                 a commit, as coordinator or participant (bank)
#   sigstop       SIGSTOP of a machine well past its lease, then SIGCONT
#                 (bank; the zombie must not write into the new config)
#   two_kills     two kill -9 in sequence, the second after the first
#                 reconfiguration (bank)
#   domain        kill -9 of both machines of one failure domain (bank)
#   restart       every machine killed at once, then restarted on its
#                 data directory; then a clean shutdown and restart (bank)
#   copy_kill     a machine killed, then another during data recovery
#                 (bank; every region back to 3 complete, equal replicas)
#   kv_kill       kill -9 under the KV workload (linearizability checker,
#                 every acknowledged put present, the allocator's state
#                 rebuilt by scan equal to the live one)
#   zk_kill       ZooKeeper ensemble members killed and restarted, one at
#                 a time, and a machine killed meanwhile (bank; only when
#                 the build has test_rec_zkens)
#
# The bank checks after each cycle: the total is conserved, no object is
# left locked, every transfer reported committed is present, and the whole
# history of every machine is strictly serializable (sercheck). Each cycle
# draws its parameters (victim, the moment of the fault, crash point) from
# the seed: FARM_FAULT_SEED=<seed*1000+cycle> reproduces one. The faults
# are taken in a random order (seeded) that runs through every one before
# any repeats, so --cycles 5 applies 5 different faults.
#
# Both modes print a progress line per cycle, then a table of faults
# applied and checks passed, the transactions and KV operations the
# checkers went over, and last one JSON line (goal campaign_cycles_pass:
# every cycle passed; the continuous mode adds lost_commits and
# checker_anomalies). Exit status: 0 every cycle passed (per scenario:
# skipped ones allowed); 77 nothing could run (java or ZooKeeper missing,
# fault injection not built: ctest reports the test skipped, not passed);
# 1 a cycle failed (its log and its histories are kept and named); 2
# usage.
set -u

prog=fault_campaign.sh
mode=continuous
faults_opt=
grow=0
full_every=
build=
cycles=50
seed=
out=
timeout_s=
list=0

usage() {
	sed -n '2,/^set -u/{/^set -u/d;s/^# \{0,1\}//p}' "$0"
}

while [ $# -gt 0 ]; do
	case $1 in
	--build) build=${2:?}; shift 2 ;;
	--cycles) cycles=${2:?}; shift 2 ;;
	--seed) seed=${2:?}; shift 2 ;;
	--out) out=${2:?}; shift 2 ;;
	--timeout) timeout_s=${2:?}; shift 2 ;;
	--list) list=1; shift ;;
	--continuous) mode=continuous; shift ;;
	--per-scenario) mode=per-scenario; shift ;;
	--faults) faults_opt=${2:?}; shift 2 ;;
	--grow) grow=1; shift ;;
	--full-every) full_every=${2:?}; shift 2 ;;
	--no-grow) grow=no; shift ;;
	--help | -h) usage; exit 0 ;;
	*) echo "$prog: unknown argument '$1' (see --help)" >&2; exit 2 ;;
	esac
done
case $cycles in '' | *[!0-9]*) echo "$prog: --cycles needs a number" >&2; exit 2 ;; esac
# --timeout: per cycle (--per-scenario), or for the whole run.
[ -n "$timeout_s" ] || { [ $mode = continuous ] && timeout_s=$((300 + 60 * cycles)) || timeout_s=300; }
case $timeout_s in '' | *[!0-9]*) echo "$prog: --timeout needs seconds" >&2; exit 2 ;; esac
[ $mode = per-scenario ] && [ -n "$faults_opt" ] && { echo "$prog: --faults is for --continuous" >&2; exit 2; }
[ $mode = per-scenario ] && [ "$grow" = 1 ] && { echo "$prog: --grow is for --continuous" >&2; exit 2; }
[ $mode = per-scenario ] && [ -n "$full_every" ] && { echo "$prog: --full-every is for --continuous" >&2; exit 2; }
[ -n "$seed" ] || seed=$(( $(date +%s) % 100000 ))
case $seed in *[!0-9]*) echo "$prog: --seed needs a number" >&2; exit 2 ;; esac
if [ -z "$build" ]; then
	here=$(cd "$(dirname "$0")/.." && pwd)
	build=$here/build
fi
tests=$build/tests
[ -d "$tests" ] || { echo "$prog: no test binaries in $tests (build first, or --build DIR)" >&2; exit 2; }

if [ $mode = continuous ]; then
	bin=$tests/test_campaign
	[ -x "$bin" ] || { echo "$prog: no $bin (build first, or --build DIR)" >&2; exit 2; }
	if [ $list = 1 ]; then
		exec "$bin" --list
	fi
	if [ -z "$out" ]; then
		out=$(mktemp -d "${TMPDIR:-/tmp}/farm-faults-XXXXXX") || exit 1
	fi
	mkdir -p "$out" || exit 1
	log=$out/continuous.log
	echo "fault campaign (one continuous cluster): $cycles cycles, seed $seed, log in $log"
	args=(--cycles "$cycles" --seed "$seed")
	[ -n "$faults_opt" ] && args+=(--faults "$faults_opt")
	[ "$grow" = 1 ] && args+=(--grow)
	[ "$grow" = no ] && args+=(--no-grow)
	[ -n "$full_every" ] && args+=(--full-every "$full_every")
	# A machine that stops answering the campaign (nodeproc.c's bound)
	# has its threads' stacks printed into the log, when gdb is here: a
	# stall is rare and load-dependent, so the one run that shows it must
	# say where the machine waited.
	command -v gdb >/dev/null 2>&1 &&
		export FARM_TEST_STALL_STACKS=${FARM_TEST_STALL_STACKS-1}
	# The cycle lines as they come; the whole output in the log.
	timeout -k 10 "$timeout_s" "$bin" "${args[@]}" 2>&1 | tee "$log" |
		grep --line-buffered -E '^\[[0-9]+/[0-9]+\] '
	rc=${PIPESTATUS[0]}
	# The table and the summary, what failed, then the JSON line last.
	sed -n '/^cycle  fault/,/^campaign: [0-9]* of/p' "$log"
	grep -E '^campaign: (cycle|histories)|^  - ' "$log"
	grep -E '^skipped' "$log"
	case $rc in
	0 | 77) ;;
	124 | 137) echo "$prog: FAILED: the campaign ran past --timeout $timeout_s s; log: $log" >&2 ;;
	*) echo "$prog: FAILED (exit $rc); log: $log" >&2 ;;
	esac
	[ "$rc" = 0 ] || [ "$rc" = 77 ] ||
		grep -h "histories kept in" "$log" | sed 's/^/  /' >&2
	grep -E '^\{"bench"' "$log" | tail -1
	case $rc in
	0) rm -f "$log"; rmdir "$out" 2>/dev/null; exit 0 ;;
	77) echo "$prog: skipped (see $log)" >&2; exit 77 ;;
	esac
	exit 1
fi

faults=(kill_member kill_cm crash_commit sigstop two_kills domain restart copy_kill kv_kill)
[ -x "$tests/test_rec_zkens" ] && faults+=(zk_kill)
if [ $list = 1 ]; then
	printf '%s\n' "${faults[@]}"
	exit 0
fi

if [ -z "$out" ]; then
	out=$(mktemp -d "${TMPDIR:-/tmp}/farm-faults-XXXXXX") || exit 1
fi
mkdir -p "$out" || exit 1

RANDOM=$seed
pick() { # pick WORD...: one of the words, drawn from the seed
	local a=("$@")
	echo "${a[RANDOM % ${#a[@]}]}"
}

# The order: a seeded shuffle of the faults, again for every round.
order=()
while [ ${#order[@]} -lt "$cycles" ]; do
	round=("${faults[@]}")
	for ((i = ${#round[@]} - 1; i > 0; i--)); do
		j=$((RANDOM % (i + 1)))
		t=${round[i]}; round[i]=${round[j]}; round[j]=$t
	done
	order+=("${round[@]}")
done

# scenario FAULT: sets bin, args, only, what (FARM_TEST_ONLY filters the
# test binary's cmocka tests).
scenario() {
	args=() only='' what=''
	case $1 in
	kill_member) bin=test_rec_bank only=test_kill_member what="kill -9 member" ;;
	kill_cm) bin=test_rec_bank only=test_kill_cm what="kill -9 CM" ;;
	crash_commit)
		local v p
		v=$(pick member cm)
		p=$(pick lock_sent lock_replied backup_some primary_first on_lock on_primary on_backup)
		bin=test_rec_crash args=(--victim "$v" --points "$p") what="$v dies at $p" ;;
	sigstop) bin=test_rec_zombie what="SIGSTOP past lease, SIGCONT" ;;
	two_kills)
		only=$(pick test_seq_members test_seq_cm)
		bin=test_rec_seq what="two kills (${only#test_seq_})" ;;
	domain)
		only=$(pick test_kill_zone_a test_kill_zone_b)
		bin=test_rec_domains what="kill -9 ${only#test_kill_}" ;;
	restart) bin=test_restart what="kill all, restart all" ;;
	copy_kill) bin=test_datarec only=test_copy_kill what="kill during data recovery" ;;
	kv_kill)
		only=$(pick test_kill_mid_write test_kill_quiet_shard)
		bin=test_rec_kv what="KV: ${only#test_}" ;;
	zk_kill) bin=test_rec_zkens what="ZooKeeper members killed" ;;
	*) echo "$prog: no fault '$1'" >&2; exit 2 ;;
	esac
}

echo "fault campaign: $cycles cycles, seed $seed, logs in $out"
declare -A n_run n_pass n_fail n_skip
for f in "${faults[@]}"; do n_run[$f]=0 n_pass[$f]=0 n_fail[$f]=0 n_skip[$f]=0; done
rows=()
failed=0 passed=0 skipped=0 tx_checked=0 kv_checked=0 verdicts=0
t_start=$(date +%s)
for ((c = 1; c <= cycles; c++)); do
	f=${order[c - 1]}
	scenario "$f"
	log=$(printf '%s/cycle-%02d-%s.log' "$out" "$c" "$f")
	cseed=$((seed * 1000 + c))
	t0=$(date +%s.%N)
	FARM_FAULT_SEED=$cseed FARM_TEST_ONLY=$only \
		timeout -k 10 "$timeout_s" "$tests/$bin" "${args[@]}" >"$log" 2>&1
	rc=$?
	t1=$(date +%s.%N)
	secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
	n_run[$f]=$((n_run[$f] + 1))
	# A test filtered away entirely would pass without having run.
	if [ $rc = 0 ] && ! grep -q -E '^\[==========\] [1-9][0-9]* test\(s\) run' "$log"; then
		rc=3
		echo "$prog: no test of $bin matched '$only'" >>"$log"
	fi
	case $rc in
	0) res=passed; passed=$((passed + 1)); n_pass[$f]=$((n_pass[$f] + 1)) ;;
	77) res=skipped; skipped=$((skipped + 1)); n_skip[$f]=$((n_skip[$f] + 1)) ;;
	124 | 137) res="FAILED (timeout)"; failed=$((failed + 1)); n_fail[$f]=$((n_fail[$f] + 1)) ;;
	*) res="FAILED (exit $rc)"; failed=$((failed + 1)); n_fail[$f]=$((n_fail[$f] + 1)) ;;
	esac
	# What the checkers went over in this cycle.
	ntx=$(sed -n 's/^sercheck: [0-9]* txns (\([0-9]*\) committed.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	nkv=$(sed -n 's/^lincheck: \([0-9]*\) ops on.*/\1/p' "$log" | awk '{ s += $1 } END { print s + 0 }')
	nverd=$(grep -c -E '^sercheck: strictly serializable \(0 anomalies\)|^lincheck: linearizable \(0 violations\)' "$log")
	if [ "${res#FAILED}" = "$res" ]; then
		tx_checked=$((tx_checked + ntx)) kv_checked=$((kv_checked + nkv))
		verdicts=$((verdicts + nverd))
	fi
	printf '[%d/%d] %-12s %-34s %6ss  %s\n' "$c" "$cycles" "$f" "$what" "$secs" "$res"
	rows+=("$(printf '%5d  %-12s %-34s %6s  %s' "$c" "$f" "$what" "$secs" "$res")")
	if [ "${res#FAILED}" != "$res" ]; then
		echo "  log: $log (reproduce: FARM_FAULT_SEED=$cseed FARM_TEST_ONLY=$only $tests/$bin ${args[*]})"
		grep -h "histories kept in" "$log" | sed 's/^/  /'
		grep -h -E 'check\(s\) failed|^\[  (ERROR|FAILED)|^ERROR' "$log" | head -8 | sed 's/^/  | /'
	else
		rm -f "$log"
	fi
done
t_all=$(( $(date +%s) - t_start ))

echo
echo "cycle  fault        what                               seconds  result"
printf '%s\n' "${rows[@]}"
echo
echo "fault          cycles  passed  failed  skipped"
for f in "${faults[@]}"; do
	[ "${n_run[$f]}" -gt 0 ] || continue
	printf '%-14s %6d  %6d  %6d  %7d\n' "$f" "${n_run[$f]}" "${n_pass[$f]}" "${n_fail[$f]}" "${n_skip[$f]}"
done
echo
echo "fault campaign: $cycles cycles in ${t_all} s: $passed passed, $failed failed, $skipped skipped (seed $seed)"
echo "checked in the passed cycles: $tx_checked committed bank transactions (sercheck), $kv_checked KV operations (lincheck), $verdicts clean checker verdicts"
met=false
[ $passed = "$cycles" ] && met=true
printf '{"bench": "fault_campaign", "seed": %d, "cycles": %d, "passed": %d, "failed": %d, "skipped": %d, "seconds": %d, "committed_checked": %d, "kv_ops_checked": %d, "goals": {"campaign_cycles_pass": {"value": %d, "target": %d, "met": %s}}}\n' \
	"$seed" "$cycles" "$passed" "$failed" "$skipped" "$t_all" "$tx_checked" "$kv_checked" "$passed" "$cycles" "$met"
if [ $failed -gt 0 ]; then
	echo "fault campaign: FAILED; logs of the failed cycles are in $out" >&2
	exit 1
fi
rmdir "$out" 2>/dev/null
if [ $passed = 0 ] && [ $skipped -gt 0 ]; then
	echo "fault campaign: every cycle skipped" >&2
	exit 77
fi
exit 0
