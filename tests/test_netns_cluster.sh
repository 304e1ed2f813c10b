#!/bin/sh
# scripts/netns-cluster itself: start leaves 3 machines (farm machine
# --config) each in its own namespace, listening on its own address, all
# in the ZooKeeper view (each said ready only then), ZooKeeper in a fourth;
# exec runs in a namespace, link cuts and restores a link; stop leaves no
# process, namespace or file; run returns its command's status and cleans
# up after a failing command and after a start that fails; bad usage exits
# 2. Skipped (77) when the script skips (not root, no namespaces, no java).
# Usage: test_netns_cluster.sh path/to/farm path/to/scripts
set -u
FARM=$1
NC=$2/netns-cluster
base=/dev/shm; [ -w "$base" ] || base=${TMPDIR:-/tmp}
dir=$base/fnx-test-$$
fail() {
    echo "FAIL: $*" >&2
    [ -f "$dir/cluster.state" ] && "$NC" stop --dir "$dir" >/dev/null 2>&1
    exit 1
}

"$NC" --help >/dev/null || fail "--help"
"$NC" bogus >/dev/null 2>&1; [ $? -eq 2 ] || fail "unknown command: not 2"
"$NC" start >/dev/null 2>&1; [ $? -eq 2 ] || fail "start without --dir: not 2"
"$NC" run --machines 0 -- true >/dev/null 2>&1; [ $? -eq 2 ] || fail "--machines 0: not 2"

env=$("$NC" start --dir "$dir" --machines 3 --farm "$FARM" --region-size 16M 2>"$dir.err")
rc=$?
if [ $rc -eq 77 ]; then
    cat "$dir.err"; rm -f "$dir.err"
    echo "SKIPPED: netns-cluster skipped (reason above)"
    exit 77
fi
[ $rc -eq 0 ] || { cat "$dir.err" >&2; rm -f "$dir.err"; fail "start: exit $rc"; }
rm -f "$dir.err"
eval "$env"
pfx=$(sed -n 's/^id=/fnx/p' "$dir/cluster.state")
[ "$(ip netns list | grep -c "^$pfx-")" -eq 6 ] || fail "expected 6 namespaces: $(ip netns list)"
i=0
for ns in $FARM_NETNS_MACHINES; do
    pid=$(awk -v m=$i '$1 == m {print $2}' "$dir/machines.pids")
    kill -0 "$pid" 2>/dev/null || fail "machine $i not running"
    [ "$(ip netns identify "$pid")" = "$ns" ] || fail "machine $i is not in $ns"
    ip=$(echo "$FARM_NETNS_ADDRS" | cut -d' ' -f$((i + 1)))
    ip netns exec "$ns" ss -Hltn "sport = :7000" | grep -q "$ip:7000" ||
        fail "machine $i does not listen on $ip:7000"
    [ -s "$dir/m$i/ready" ] || fail "machine $i never said ready"
    grep -q "^fabric = ofi" "$dir/m$i/machine.conf" || fail "machine $i: not ofi"
    i=$((i + 1))
done
[ $i -eq 3 ] || fail "3 machine namespaces expected, got $i"
# exec: in the clients' namespace, only its own link and loopback.
out=$("$NC" exec --dir "$dir" cl -- ip -o -4 addr show) || fail "exec"
echo "$out" | grep -q "$FARM_NETNS_CLIENT_ADDR" || fail "exec: not in cl: $out"
# link: down and up again.
"$NC" link --dir "$dir" m1 down || fail "link down"
ip -n "$pfx-m1" link show eth0 | grep -q "state DOWN" || fail "m1's link not down"
"$NC" link --dir "$dir" m1 up || fail "link up"
pids=$(awk '{print $2}' "$dir/machines.pids")
"$NC" stop --dir "$dir" 2>/dev/null || fail "stop"
[ -z "$(ip netns list | grep "^$pfx-")" ] || fail "namespaces left: $(ip netns list)"
[ -e "$dir" ] && fail "files left: $(find "$dir")"
for p in $pids; do
    # Stopped machines are children of init now: a zombie for an
    # instant at most, never running.
    if [ -d /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null; then
        fail "machine $p still running"
    fi
done

# run: the command's status, everything gone after a failing command.
before=$(ip netns list | wc -l)
"$NC" run --net-only --machines 2 -- sh -c 'test -n "$FARM_NETNS_ZK" && exit 5' 2>/dev/null
[ $? -eq 5 ] || fail "run: the command's status was not returned"
[ "$(ip netns list | wc -l)" -eq "$before" ] || fail "run left namespaces"
# a start that fails (machines that exit at once) cleans up too
"$NC" run --farm /bin/false --machines 2 -- true 2>/dev/null
[ $? -eq 1 ] || fail "run with a failing start: not 1"
[ "$(ip netns list | wc -l)" -eq "$before" ] || fail "a failed start left namespaces"
echo "test_netns_cluster: ok"
