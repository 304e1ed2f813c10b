#!/usr/bin/env python3
"""Instructions a KV get (or YCSB-A operation), counted (callgrind), not timed.

Runs `kv_bench --mix C` (YCSB C, Zipf; or `--mix A`, 50/50 gets and
updates) under valgrind's callgrind with
collection on only inside kb_pass (a run's passes: issue, then one loop
pass) and kb_idle_pass (the passes before the run starts, with nothing to
do), every machine process traced, then prints for each machine:
instructions a get (kb_pass's, over the gets completed, get_cb's calls),
gets a pass, the same less the pass overhead (an idle pass's count times
passes a get: how many passes a get shares depends on the timing of the
two processes, the rest does not), an idle pass, and the functions'
instructions a get (self, inclusive). With --mix A the unit is an
operation (get_cb's and put_cb's calls together: a machine's passes also
run the owner's and the backup's side of the other machine's updates,
so per operation is what both machines' work divides by); puts a commit
(the owner's batches, ht_ship.c's batch_done, over the whole run:
callgrind counts calls outside collection too, so the load's puts are in
it) is printed beside it, and the sums over both machines last. Two
builds compare by running it on each: the counts are deterministic but
for the passes a get shares.

valgrind 3.19 lacks pidfd_open (the shm fabric's peer watchdog): a
preloaded shim answers it with an eventfd that never becomes readable (no
peer is ever seen dead), built here with cc.

usage: bench/kv_callgrind.py KV_BENCH [--keys 20k] [--seconds 2] [--top 30]
       [--mix C|A] [--depth 32]
"""
import argparse
import collections
import glob
import os
import re
import subprocess
import sys
import tempfile

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdarg.h>
#include <sys/eventfd.h>
long syscall(long n, ...)
{
	va_list ap;
	va_start(ap, n);
	long a = va_arg(ap, long), b = va_arg(ap, long), c = va_arg(ap, long),
	     d = va_arg(ap, long), e = va_arg(ap, long), f = va_arg(ap, long);
	va_end(ap);
	if (n == 434) /* pidfd_open */
		return eventfd(0, EFD_CLOEXEC);
	static long (*real)(long, ...);
	if (!real)
		real = (long (*)(long, ...))dlsym(RTLD_NEXT, "syscall");
	return real(n, a, b, c, d, e, f);
}
"""


def parse(path):
    """Self and inclusive instructions by function, calls by callee and by
    (caller, callee) edge. Call counts cover the whole run (callgrind
    counts calls while not collecting too); costs only what was
    collected."""
    names, self_ = {}, collections.Counter()
    edge_calls, edge_incl = collections.Counter(), collections.Counter()
    fn = cfn = None
    pend, npos = None, 1

    def name(s):
        m = re.match(r"\((\d+)\)(?:\s+(.*))?", s)
        if not m:
            return s
        if m.group(2):
            names[m.group(1)] = m.group(2)
        return names.get(m.group(1), m.group(1))

    with open(path) as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            if line.startswith("positions:"):
                npos = len(line.split()) - 1
            elif line.startswith("fn="):
                fn = name(line[3:])
            elif line.startswith("cfn="):
                cfn = name(line[4:])
            elif line.startswith("calls="):
                pend = int(line[6:].split()[0])
            elif line[0] in "0123456789+-*" or line.startswith("0x"):
                parts = line.split()
                c = int(parts[npos]) if len(parts) > npos else 0
                if pend is not None:
                    edge_calls[(fn, cfn)] += pend
                    edge_incl[(fn, cfn)] += c
                    pend = None
                else:
                    self_[fn] += c
    incl = collections.Counter(self_)
    calls = collections.Counter()
    for (a, b), c in edge_incl.items():
        if a != b:
            incl[a] += c
    for (a, b), n in edge_calls.items():
        calls[b] += n
    return self_, incl, calls, edge_calls


# --mix A: an update's steps by the functions whose self instructions they
# are (names as gcc -O3 leaves them; a function inlined into another
# counts with its caller). Summed over both machines, divided by the
# updates answered, they leave out the loop's pollers, whose counts carry
# the passes with nothing to do: two builds compare by them.
STEPS = [
    ("client: ship (hash, shard, allocations, the call)",
     ["farm_kv_put", "farm_ht_put", "ship.part.0", "ship", "farm_as_call",
      "farm_msg_call", "farm_ht_check_key", "farm_ht_shard_of"]),
    ("owner: receive (check, copy, hash, prefetch)",
     ["farm_ht_h_op", "op_prefetch", "op_check", "farm_ht_serves"]),
    ("owner: apply (the pair's reads, find, write)",
     ["farm_ht_apply_put", "find_key", "farm_tx_read_local",
      "farm_txn_data_get", "place.isra.0", "farm_tx_write",
      "farm_ht_pair_find_in", "__memcmp_avx2_movbe", "farm_ht_stamp_block"]),
    ("owner: commit (place, images, room, lock, validate, COMMIT-BACKUP)",
     ["farm_tx_commit", "farm_txn_tx_reserve", "farm_txn_tx_start_phases",
      "farm_txn_single_lock", "farm_txn_tx_step", "phase_backup",
      "farm_txn_log_append", "tx_append", "farm_txn_rec_bytes",
      "farm_as_replicas_at", "farm_ring_primary", "post_write", "rdma_post",
      "farm_loop_rdma", "farm_shm_ep_post", "shm_ep_usable",
      "farm_txn_cseq_take", "validate_more", "farm_txn_phase_validate"]),
    ("owner: install, answers, frees",
     ["farm_txn_single_install", "farm_txn_tx_report", "batch_done",
      "farm_txn_tx_finish", "farm_msg_reply", "farm_tx_free",
      "farm_tx_begin", "batch_start", "batch_apply", "reply_op",
      "farm_msg_send_wire", "farm_alloc_copy_note", "farm_txn_alloc_note"]),
    ("address-space look-ups",
     ["farm_as_local_ptr", "farm_as_local_region", "region_answer",
      "region_locked", "farm_as_primary_of", "pthread_rwlock_unlock@@GLIBC_2.34",
      "pthread_rwlock_rdlock@@GLIBC_2.34", "farm_region_base",
      "farm_as_region_size", "farm_region_size", "farm_as_resolve_cached",
      "resolve_miss", "farm_as_resolve", "farm_as_demoted_ptr"]),
    ("malloc, free, memset, memcpy",
     ["malloc", "free", "_int_free", "_int_malloc", "realloc",
      "_int_realloc", "__memset_avx2_unaligned_erms",
      "__memcpy_avx_unaligned_erms"]),
]


def print_steps(self_, updates):
    print(f"  an update's steps, both machines, self instructions an "
          f"update ({updates} updates):")
    tot = 0
    for what, fns in STEPS:
        v = sum(self_[f] for f in fns) / updates
        tot += v
        print(f"  {v:9.1f}  {what}")
    print(f"  {tot:9.1f}  these steps together")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kv_bench")
    ap.add_argument("--keys", default="20k")
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--mix", choices=["C", "A"], default="C")
    ap.add_argument("--depth", default="32")
    o = ap.parse_args()
    d = tempfile.mkdtemp(prefix="kv_callgrind.")
    with open(os.path.join(d, "shim.c"), "w") as f:
        f.write(SHIM)
    shim = os.path.join(d, "shim.so")
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-o", shim,
                    os.path.join(d, "shim.c"), "-ldl"], check=True)
    cmd = ["valgrind", "--tool=callgrind", "--collect-atstart=no",
           "--toggle-collect=kb_pass", "--toggle-collect=kb_idle_pass",
           "--trace-children=yes",
           "--callgrind-out-file=" + os.path.join(d, "cg.%p"),
           "env", "LD_PRELOAD=" + shim, o.kv_bench, "--keys", o.keys,
           "--mix", o.mix, "--depth", o.depth, "--no-peers",
           "--seconds", o.seconds,
           "--pages", "4k"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])
        sys.exit("kv_callgrind: kv_bench failed under valgrind")
    # With --mix A the two machines split the work unevenly (one serves
    # more of the other's writes than it answers of its own, by how
    # valgrind schedules them): the sums over both are the figure.
    tot_self, tot_ops, tot_work, tot_puts, tot_commits, tot_upd = (
        collections.Counter(), 0, 0.0, 0, 0, 0)
    runs = [(path, parse(path))
            for path in sorted(glob.glob(os.path.join(d, "cg.*")))]
    # A machine that ran no idle pass before the start (the later one to
    # get there) takes the other's idle pass as its pass overhead.
    idles = [r[1]["kb_idle_pass"] / n for _, r in runs
             for n in [sum(k for (a, b), k in r[3].items()
                           if a == "kb_idle_pass" and
                           b == "farm_loop_poll")] if n]
    idle_any = max(idles) if idles else 0.0
    for path, (s, i, c, ec) in runs:
        gets, passes = c["get_cb"], c["kb_pass"]
        puts, commits = c["put_cb"], c["batch_done"]
        what = "get"
        if o.mix == "A":
            # Operations: a get's or an update's continuation.
            gets, what = gets + puts, "op"
        if not gets or not passes or not i["kb_pass"]:
            continue
        idle_n = sum(n for (a, b), n in ec.items()
                     if a == "kb_idle_pass" and b == "farm_loop_poll")
        idle = i["kb_idle_pass"] / idle_n if idle_n else 0.0
        per = i["kb_pass"] / gets
        tot_self.update(s)
        tot_ops += gets
        tot_work += i["kb_pass"] - (idle or idle_any) * passes
        tot_puts += c["farm_ht_h_op"]
        tot_upd += puts
        tot_commits += commits
        if o.mix == "A":
            print(f"machine process {path.rsplit('.', 1)[1]}: {puts} "
                  f"updates answered, {commits} commits here "
                  f"({c['farm_ht_h_op']} shipped writes served: "
                  f"{c['farm_ht_h_op'] / max(commits, 1):.2f} a commit; "
                  f"calls are counted over the whole run, the load's "
                  f"puts included)")
        print(f"machine process {path.rsplit('.', 1)[1]}: {gets} {what}s, "
              f"{gets / passes:.2f} a pass; {per:.1f} instructions a {what}, "
              f"{per - idle * passes / gets:.1f} less the pass overhead; "
              f"an idle pass {idle:.1f} ({idle_n} passes)")
        print(f"  {'self/' + what:>9} {'incl/' + what:>9}  function")
        for fn, v in s.most_common(o.top):
            print(f"  {v / gets:9.1f} {i[fn] / gets:9.1f}  {fn}")
    if o.mix == "A" and tot_ops:
        print(f"both machines: {tot_ops} ops, {tot_work / tot_ops:.1f} "
              f"instructions an op less the pass overhead, "
              f"{tot_puts / max(tot_commits, 1):.2f} writes a commit "
              f"(the load's included); the passes with nothing to do "
              f"cost more than an idle pass before the start, so this "
              f"moves by about 10% between runs; self counts include "
              f"them")
        print_steps(tot_self, tot_upd)
        print(f"  {'self/op':>9}  function (both machines)")
        for fn, v in tot_self.most_common(o.top):
            print(f"  {v / tot_ops:9.1f}  {fn}")
    print(f"(callgrind files in {d})")


if __name__ == "__main__":
    main()
