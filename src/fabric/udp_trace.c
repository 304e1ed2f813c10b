/*
 * The udp provider's time-stamped event trace (test builds only): where a
 * round trip's microseconds go, hop by hop, across processes (every
 * process reads the same CLOCK_MONOTONIC, network namespaces included).
 * Switched on by FARM_UDP_TRACE=DIR at the first fabric open; each
 * process writes DIR/udp-trace.<pid> when its last fabric closes: one
 * line per event, "ns thread event arg", the last 2^20 of them.
 * bench/udp_trace.py merges them.
 */
#include "fabric/udp_int.h"

#ifdef FARM_FAULT_INJECTION

#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

enum { TRACE_N = 1u << 20 };

struct trace_ev {
	uint64_t ns;
	uint32_t tid;
	uint16_t ev;
	uint16_t pad;
	uint64_t arg;
};

bool farm_udp_tracing;
static struct trace_ev *trace_buf;
static atomic_uint_fast64_t trace_n;
static char trace_dir[200];
static pthread_once_t trace_once = PTHREAD_ONCE_INIT;
static _Thread_local uint32_t trace_tid;

static const char *const trace_names[] = {
        [UDP_EV_POST] = "post",           [UDP_EV_KICK] = "kick",
        [UDP_EV_SEND] = "send",           [UDP_EV_RECV] = "recv",
        [UDP_EV_SLEEP] = "poller_sleep",  [UDP_EV_WOKE] = "poller_woke",
        [UDP_EV_DWAKE] = "dispatch_woke", [UDP_EV_DONE] = "reply_done",
        [UDP_EV_RETIRE] = "retired",      [UDP_EV_SERVED] = "served",
};

static void trace_init(void)
{
	const char *d = getenv("FARM_UDP_TRACE");
	if (!d || !*d)
		return;
	trace_buf = calloc(TRACE_N, sizeof(*trace_buf));
	if (!trace_buf)
		return;
	snprintf(trace_dir, sizeof(trace_dir), "%s", d);
	farm_udp_tracing = true;
}

void farm_udp_trace_open(void)
{
	pthread_once(&trace_once, trace_init);
}

void farm_udp_trace(unsigned ev, uint64_t arg)
{
	/* A ring: the last TRACE_N events are kept (a benchmark's last
	 * phase). */
	uint64_t i = atomic_fetch_add(&trace_n, 1) & (TRACE_N - 1);
	if (!trace_tid)
		trace_tid = (uint32_t)syscall(SYS_gettid);
	trace_buf[i] = (struct trace_ev){.ns = farm_now_ns(),
	                                 .tid = trace_tid,
	                                 .ev = (uint16_t)ev,
	                                 .arg = arg};
}

void farm_udp_trace_dump(void)
{
	if (!farm_udp_tracing)
		return;
	char path[256];
	snprintf(path, sizeof(path), "%s/udp-trace.%d", trace_dir,
	         (int)getpid());
	FILE *fp = fopen(path, "w");
	if (!fp)
		return;
	uint64_t n = atomic_load(&trace_n);
	uint64_t from = n > TRACE_N ? n - TRACE_N : 0;
	for (uint64_t i = from; i < n; i++) {
		const struct trace_ev *e = &trace_buf[i & (TRACE_N - 1)];
		if (e->ns)
			fprintf(fp, "%llu %u %s %llu\n",
			        (unsigned long long)e->ns, e->tid,
			        trace_names[e->ev], (unsigned long long)e->arg);
	}
	fclose(fp);
	atomic_store(&trace_n, 0);
}

#endif
