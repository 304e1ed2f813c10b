#!/bin/sh
# A 128-machine cluster on this host (label scale, make scale; not make
# check): scale_bench forms it through a private ZooKeeper server
# (machines in one process, 1 thread, shm, loops parked when idle), one
# machine more joins it late, four machines commit an object each, two
# machines are lost at once, the survivors recover, and every committed
# object is read back with its value (scale_bench's exit status says
# all of it held; bench/README.md, scale_bench). The figures are printed,
# never judged here. About 4 minutes (233 s at load 14-32) and 10 GiB on
# the 2-core host.
# Usage: scale_cluster.sh path/to/scale_bench path/to/scripts [SIZES]
set -u
BENCH=$1
SCRIPTS=$2
SIZES=${3:-128}
dir=$(mktemp -d "${TMPDIR:-/tmp}/farm-scale-test.XXXXXX")
cleanup() {
    "$SCRIPTS/zk-local" stop "$dir/zk" >/dev/null 2>&1
    rm -rf "$dir"
}
trap cleanup EXIT
zk=$("$SCRIPTS/zk-local" start "$dir/zk") || {
    status=$?
    # zk-local says why; 3: no java or ZooKeeper jars, a skip.
    [ "$status" -eq 3 ] && exit 77
    echo "FAIL: ZooKeeper did not start" >&2
    exit 1
}
"$BENCH" --sizes "$SIZES" --zk "$zk" --lease-ms 2000 >"$dir/out" 2>"$dir/err"
status=$?
grep -v '^farm\[' "$dir/out"
if [ "$status" -ne 0 ]; then
    tail -n 40 "$dir/err" >&2
    echo "FAIL: scale_bench --sizes $SIZES --zk exited $status" >&2
    exit 1
fi
