#!/usr/bin/env python3
"""udp_trace.py DIR [SECONDS]: where one request's round trip goes, hop by
hop, on the udp fabric (src/fabric/udp_trace.c; test builds only).

Run a benchmark with FARM_UDP_TRACE=DIR (every process of it writes
DIR/udp-trace.<pid> when its last udp fabric closes; each keeps its last
2^20 events). This takes the last SECONDS (default 0.4) before the last
post, calls the process that posted most the initiator A, the other B,
and each thread that woke in the dispatch thread's poll(2) a dispatch
thread (.disp; the others .loop). With one request in flight (kv_bench's
unloaded lookups), each post of A's loop starts a chain; it prints the
median time from the post to the first (#2: second) event of each kind
in the chain, and how often each kind occurs per chain. All processes
read the same CLOCK_MONOTONIC (network namespaces included).

  FARM_UDP_TRACE=/tmp/tr scripts/netns-cluster run --net-only \\
      --machines 2 -- build/bench/kv_bench --fabric udp --netns \\
      --quick --no-small --no-peers
  bench/udp_trace.py /tmp/tr
"""
import collections
import glob
import os
import statistics
import sys


def load(d):
    evs = []
    for fn in glob.glob(os.path.join(d, 'udp-trace.*')):
        pid = fn.rsplit('.', 1)[1]
        with open(fn) as f:
            for line in f:
                ns, tid, ev, arg = line.split()
                evs.append((int(ns), pid, int(tid), ev, int(arg)))
    evs.sort()
    return evs


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    win = float(sys.argv[2]) if len(sys.argv) > 2 else 0.4
    evs = load(sys.argv[1])
    if not evs:
        sys.exit('no trace in ' + sys.argv[1])
    end = max(r[0] for r in evs if r[3] == 'post')
    evs = [r for r in evs if end - win * 1e9 <= r[0] <= end + 1e6]
    posts = collections.Counter(r[1] for r in evs if r[3] == 'post')
    a = posts.most_common(1)[0][0]
    disp = set(r[2] for r in evs if r[3] == 'dispatch_woke')

    def who(r):
        return ('A' if r[1] == a else 'B') + \
            ('.disp' if r[2] in disp else '.loop')

    chains, cur = [], None
    for r in evs:
        if r[1] == a and r[3] == 'post' and r[2] not in disp:
            if cur:
                chains.append(cur)
            cur = [r]
        elif cur is not None:
            cur.append(r)
    if cur:
        chains.append(cur)
    steps = collections.defaultdict(list)
    per = collections.Counter()
    for ch in chains:
        seen = {}
        for r in ch[1:]:
            per[who(r) + ':' + r[3]] += 1
            k = who(r) + ':' + r[3]
            if r[3] in ('recv', 'send'):
                k += '(%d)' % r[4]
            if k in seen:
                k += '#2'
                if k in seen:
                    continue
            seen[k] = r[0] - ch[0][0]
        for k, v in seen.items():
            steps[k].append(v)
    print('%d chains (posts of A\'s loop) in the last %.2f s' %
          (len(chains), win))
    print('median us after the post, event, share of chains:')
    rows = sorted((statistics.median(v), k, len(v))
                  for k, v in steps.items() if len(v) >= 0.2 * len(chains))
    for m, k, n in rows:
        print('%9.1f  %-34s %4.0f%%' % (m / 1e3, k, 100.0 * n / len(chains)))
    print('events per chain:')
    for k, v in sorted(per.items()):
        print('  %-32s %.2f' % (k, v / len(chains)))


if __name__ == '__main__':
    main()
