#!/bin/sh
# test_workload: farm-workload on 3 machines: TATP's row counts (both
# modes, and with shipped updates in flight), SmallBank's total (also
# with transactions in flight on each client) and per-client ledgers, the serializability
# checker over a SmallBank history, bad input refused before anything
# starts, and a broken build the checks must catch.
# usage: test_workload.sh FARM_WORKLOAD WL_HISTCHECK FARM_WORKLOAD_BROKEN
set -u
tool=$1 hc=$2 broken=$3
dir=$(mktemp -d /tmp/fwl-test-XXXXXX) || exit 1
trap 'rm -rf "$dir"' EXIT
fail() { echo "test_workload: FAIL: $*"; exit 1; }

# Bad input: a clear error (exit 2) and no machine started.
expect_bad() { # WANT-TEXT ARGS...
	want=$1; shift
	"$tool" "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ $rc -eq 2 ] || fail "$* exited $rc, not 2"
	grep -q "$want" "$dir/err" || fail "$*: no '$want' in: $(cat "$dir/err")"
	grep -q "machine" "$dir/out" && fail "$*: something ran"
	echo "ok: refused $*: $(head -1 "$dir/err")"
}
expect_bad "unknown mix" tatp --mix bogus
expect_bad "unknown mix" smallbank --mix 10,20,30
expect_bad "needs about" smallbank --scale 1000000000000
expect_bad "needs about" tatp --scale 100000000000
expect_bad "machines must be" tatp --machines 0
expect_bad "name a workload" --scale 10
expect_bad "unknown fabric" tatp --fabric carrier-pigeon
expect_bad "needs recovery" smallbank --audit --kill 1@1
expect_bad "needs --audit" smallbank --kill 1@1
expect_bad "before the end" tatp --zk 127.0.0.1:1 --duration 2 --kill 1@1.5
expect_bad "at least 2 per machine" smallbank --scale 5 --partitioned
expect_bad "are SmallBank's" tatp --audit
expect_bad "are SmallBank's" tatp --history "$dir/th"
expect_bad "ship window must be" tatp --ship-window 0
expect_bad "bank window must be" smallbank --bank-window 0
expect_bad "is SmallBank's" tatp --bank-window 4
expect_bad "takes neither" smallbank --bank-window 4 --audit
expect_bad "TATP and SmallBank only" tpcc --vs-limit

run() { # NAME ARGS...
	name=$1; shift
	"$tool" "$@" >"$dir/$name.out" 2>"$dir/$name.err"
	rc=$?
	cat "$dir/$name.out"
	[ $rc -eq 0 ] || { cat "$dir/$name.err"; fail "$name exited $rc"; }
	grep -q "invariants hold" "$dir/$name.out" || fail "$name"
	n=$(sed -n 's/.*: \([0-9][0-9]*\) committed,.*/\1/p' "$dir/$name.out")
	[ "${n:-0}" -ge 200 ] || fail "$name committed ${n:-0}, under 200"
}
run tatp tatp --scale 400 --duration 1 --quiet --vs-limit
# The in-memory limit of the same options, per CPU-second of its thread.
grep -Eq "^in-memory limit: [0-9]+ txn/s, [1-9][0-9]* txn per CPU-second; this run per CPU-second: [0-9.]+ of it$" \
	"$dir/tatp.out" || fail "tatp --vs-limit: no limit line"
run tatp_part tatp --scale 400 --duration 1 --partitioned --mix write-heavy \
	--threads 2 --quiet
# Updates queued and in flight while the client goes on: every one a
# client was told changed a row is in its ledger at the owner, once.
run tatp_window tatp --scale 400 --duration 1 --mix write-heavy \
	--ship-window 4 --quiet
# The test build also ships malformed TATP updates, which the owners must
# refuse (-EINVAL) with the rows intact.
t=$tool; tool=$broken
run tatp_bad tatp --scale 400 --duration 1 --mix write-heavy --quiet
tool=$t
run bank smallbank --scale 300 --duration 1.5 --audit --history "$dir/h" \
	--quiet
"$hc" "$dir/h" --min 200 >"$dir/h.out" 2>&1 || {
	cat "$dir/h.out"; fail "SmallBank history"; }
tail -1 "$dir/h.out"
# Several transactions in flight on each client's loop: the total
# matches what the acknowledged ones added.
run bank_window smallbank --scale 300 --duration 1 --threads 2 \
	--bank-window 8 --quiet
# On 10 accounts most of a client's 8 transactions share a row with
# another of its own in flight, and wait for it (held, then started):
# every one still ends, and the total holds.
run bank_window_held smallbank --scale 10 --duration 1 --threads 2 \
	--bank-window 8 --quiet

# The broken build computes from reads outside its transactions: the
# total, the ledgers or the checker must say so.
"$broken" smallbank --scale 10 --hotspot 100,0 --threads 2 --duration 2 --audit \
	--history "$dir/hb" --quiet >"$dir/b.out" 2>&1
brc=$?
"$hc" "$dir/hb" >"$dir/hb.out" 2>&1
hrc=$?
tail -1 "$dir/hb.out"
# Caught means the checks said so: the tool ran to its verdict (0 or 1;
# not a build that failed to start) and either its invariants failed or
# the checker found anomalies (not merely too few commits).
[ $brc -eq 0 ] || [ $brc -eq 1 ] || {
	cat "$dir/b.out"; fail "the broken build did not run (tool $brc)"; }
tool_caught=no hist_caught=no
[ $brc -eq 1 ] && grep -q "INVARIANT FAILED" "$dir/b.out" && tool_caught=yes
n=$(sed -n 's/.* \([0-9][0-9]*\) anomalies$/\1/p' "$dir/hb.out" | tail -1)
[ "${n:-0}" -gt 0 ] && hist_caught=yes
[ $tool_caught = yes ] || [ $hist_caught = yes ] ||
	fail "the broken build passed (tool $brc, checker $hrc: $(tail -1 "$dir/hb.out"))"
echo "ok: the broken build was caught (invariants: $tool_caught, anomalies: ${n:-0})"
# The same break in the client with transactions in flight: its total
# must not hold.
"$broken" smallbank --scale 10 --hotspot 100,0 --threads 2 --duration 1 \
	--bank-window 4 --quiet >"$dir/bw.out" 2>&1
brc=$?
[ $brc -eq 1 ] && grep -q "INVARIANT FAILED" "$dir/bw.out" || {
	cat "$dir/bw.out"; fail "the broken build with --bank-window passed (tool $brc)"; }
echo "ok: the broken build with transactions in flight was caught"
echo "test_workload: passed"
