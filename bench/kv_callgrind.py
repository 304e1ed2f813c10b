#!/usr/bin/env python3
"""Instructions a KV get, counted (callgrind), not timed.

Runs `kv_bench --mix C` (YCSB C, Zipf) under valgrind's callgrind with
collection on only inside kb_pass (a run's passes: issue, then one loop
pass) and kb_idle_pass (the passes before the run starts, with nothing to
do), every machine process traced, then prints for each machine:
instructions a get (kb_pass's, over the gets completed, get_cb's calls),
gets a pass, the same less the pass overhead (an idle pass's count times
passes a get: how many passes a get shares depends on the timing of the
two processes, the rest does not), an idle pass, and the functions'
instructions a get (self, inclusive). Two builds compare by running it on
each: the counts are deterministic but for the passes a get shares.

valgrind 3.19 lacks pidfd_open (the shm fabric's peer watchdog): a
preloaded shim answers it with an eventfd that never becomes readable (no
peer is ever seen dead), built here with cc.

usage: bench/kv_callgrind.py KV_BENCH [--keys 20k] [--seconds 2] [--top 30]
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


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("kv_bench")
    ap.add_argument("--keys", default="20k")
    ap.add_argument("--seconds", default="2")
    ap.add_argument("--top", type=int, default=30)
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
           "--mix", "C", "--no-peers", "--seconds", o.seconds,
           "--pages", "4k"]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout[-2000:] + r.stderr[-2000:])
        sys.exit("kv_callgrind: kv_bench failed under valgrind")
    for path in sorted(glob.glob(os.path.join(d, "cg.*"))):
        s, i, c, ec = parse(path)
        gets, passes = c["get_cb"], c["kb_pass"]
        if not gets or not passes or not i["kb_pass"]:
            continue
        idle_n = sum(n for (a, b), n in ec.items()
                     if a == "kb_idle_pass" and b == "farm_loop_poll")
        idle = i["kb_idle_pass"] / idle_n if idle_n else 0.0
        per = i["kb_pass"] / gets
        print(f"machine process {path.rsplit('.', 1)[1]}: {gets} gets, "
              f"{gets / passes:.2f} a pass; {per:.1f} instructions a get, "
              f"{per - idle * passes / gets:.1f} less the pass overhead; "
              f"an idle pass {idle:.1f} ({idle_n} passes)")
        print(f"  {'self/get':>9} {'incl/get':>9}  function")
        for fn, v in s.most_common(o.top):
            print(f"  {v / gets:9.1f} {i[fn] / gets:9.1f}  {fn}")
    print(f"(callgrind files in {d})")


if __name__ == "__main__":
    main()
