#!/bin/sh
# test_tpcc: TPC-C on 3 machines (farm-workload tpcc, README.md).
#   run     bad input refused before anything starts; a run with two
#           clients a machine (they contend on their warehouse's rows):
#           consistency conditions 1-5 and every acknowledged new order
#           present, none that was not
#   kill    machine 2 of 3 killed mid-run (ZooKeeper from scripts/zk-local;
#           exit 77 without it): the same after recovery, and the
#           survivors commit again
#   broken  the test-only build whose Delivery leaves the NEW-ORDER row in
#           place: the checker must fail (condition 5)
# usage: test_tpcc.sh run|kill|broken FARM_WORKLOAD [SCRIPTS]
set -u
mode=$1 tool=$2 scripts=${3:-}
dir=$(mktemp -d /tmp/fwl-tpcc-XXXXXX) || exit 1
trap '[ -n "$scripts" ] && "$scripts/zk-local" stop "$dir/zk" >/dev/null 2>&1; rm -rf "$dir"' EXIT
fail() { echo "test_tpcc $mode: FAIL: $*"; exit 1; }

expect_bad() { # WANT-TEXT ARGS...
	want=$1; shift
	"$tool" "$@" >"$dir/out" 2>"$dir/err"
	rc=$?
	[ $rc -eq 2 ] || fail "$* exited $rc, not 2"
	grep -q "$want" "$dir/err" || fail "$*: no '$want' in: $(cat "$dir/err")"
	grep -q "machine" "$dir/out" && fail "$*: something ran"
	echo "ok: refused $*: $(head -1 "$dir/err")"
}

# NAME MIN-NEW-ORDERS ARGS...: the run passes its checks and committed
# at least MIN new orders.
run() {
	name=$1 min=$2; shift 2
	"$tool" tpcc "$@" --quiet >"$dir/$name.out" 2>"$dir/$name.err"
	rc=$?
	cat "$dir/$name.out"
	[ $rc -eq 0 ] || { tail -20 "$dir/$name.err"; fail "$name exited $rc"; }
	grep -q "invariants hold" "$dir/$name.out" || fail "$name"
	n=$(sed -n 's/^TPC-C new orders: \([0-9][0-9]*\) committed.*/\1/p' \
		"$dir/$name.out")
	[ "${n:-0}" -ge "$min" ] || fail "$name: ${n:-0} new orders, under $min"
	a=$(sed -n 's/.*surviving clients \([0-9]*\), theirs found \([0-9]*\);.*/\1 \2/p' \
		"$dir/$name.out")
	echo "ok: $name: $n new orders; acknowledged and found: $a"
}

case $mode in
run)
	expect_bad "unknown mix" tpcc --mix 45,43,4,4
	expect_bad "unknown mix" --workload tpcc --mix bogus
	expect_bad "unknown workload" --workload tpc-d
	expect_bad "needs about" tpcc --full-scale --scale 5000
	expect_bad "a warehouse on every machine" tpcc --scale 2
	expect_bad "items must be" tpcc --items 200000
	expect_bad "are SmallBank's" tpcc --audit
	run tpcc 50 --threads 2 --duration 1.5
	;;
kill)
	zk=$("$scripts/zk-local" start "$dir/zk" 2>/dev/null) || {
		echo "test_tpcc kill: skipped (no ZooKeeper: java or zk-local)"
		exit 77
	}
	run tpcc_kill 50 --duration 3 --zk "$zk" --kill 2@0.8
	;;
broken)
	"$tool" tpcc --duration 1.5 --quiet >"$dir/b.out" 2>&1
	rc=$?
	cat "$dir/b.out"
	[ $rc -eq 1 ] || fail "the broken build exited $rc, not 1"
	grep -q "INVARIANT FAILED: condition 5" "$dir/b.out" ||
		fail "the broken build was not caught by condition 5"
	echo "ok: the broken Delivery was caught"
	;;
*) fail "unknown mode" ;;
esac
echo "test_tpcc $mode: passed"
