/*
 * msg_bench's parts (msg_bench.c: options, output and main; msg_machine.c:
 * a machine and the server process; msg_client.c: the client process and
 * its measured runs, then the baselines). What msg_bench measures:
 * msg_bench.c's head.
 */
#ifndef FARM_BENCH_MSG_BENCH_H
#define FARM_BENCH_MSG_BENCH_H

#include "benchnet.h"
#include "benchutil.h"
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <farm/farm.h>

#include "baseline.h"

#define BU_UNLIKELY(x) __builtin_expect(!!(x), 0)

#define PROG        "msg_bench"
#define MAX_SIZES   16
#define MAX_DEPTH   4096u
#define MAX_SAMPLES (1u << 20)
#define CLIENT_ID   0u
#define SERVER_ID   1u
#define NS_PER_S    1000000000ull
/* No progress for this long is a hang, not a slow run: a loaded 2-core
 * host (the smoke test in make check) has starved the server past 5 s. */
#define STALL_NS        (20 * NS_PER_S)
#define CALL_TIMEOUT_NS (5 * NS_PER_S)
#define GOAL_RR_VS_TCP  10.0
#define GOAL_RTT_US     1.0
#define GOAL_ONEWAY     0.2
/* One call in flight, 64 B: its rate against TCP's with one in flight, and
 * the plain ring's round trip p50 over its own. */
#define GOAL_RR1_VS_TCP1 20.0
#define GOAL_RTT_VS_RING 0.7
#define RUN_RR1          1u
#define RUN_RRN          2u
#define RUN_ONEWAY       4u

/* Message types (both machines register the same handlers). */
#define T_ECHO 1 /* request: the reply is the payload */
#define T_SINK 2 /* one-way: counted */
#define T_CTL  3 /* request: a struct ctl_req */

enum ctl_cmd {
	CTL_SYNC = 1,   /* reply: everything sent before has arrived */
	CTL_IDLE = 2,   /* reply, then stop polling: back to the pipe */
	CTL_ONEWAY = 3, /* reply, then count T_SINK messages in a window */
};

struct ctl_req {
	uint32_t cmd, pad;
	uint64_t warm_ns, dur_ns;
};

struct opts {
	uint32_t sizes[MAX_SIZES];
	unsigned nsizes;
	double seconds;
	unsigned depth;
	uint32_t ring_size;
	unsigned send_batch;
	int flush_every; /* -1: depth / 4 */
	bool baseline;
	bool quick;
	bool pin;
	int cpu[2];    /* client, server (pin); -1: none */
	unsigned runs; /* RUN_* */
	struct bnet net;
};

/* A machine's introduction, and its status (one write, < PIPE_BUF). */
struct hello {
	int32_t status; /* 0, or the negative code it failed with */
	uint32_t pad;
	farm_mr_desc desc;
	char addr[512];
};

/* What the server counted in a one-way window (one write). */
struct oneway_res {
	uint64_t count, ns;
};

struct sampler {
	uint64_t *v;
	size_t n;
	uint64_t stride, skip;
	uint64_t max; /* of all, kept or not */
};

struct rr_res {
	double rate, p50_ns, p99_ns, max_ns, msgs_per_frame;
};

struct size_res {
	uint32_t size;
	struct rr_res rr1, rrn;
	double oneway_rate, oneway_msgs_per_frame;
	uint64_t oneway_queued, oneway_nobufs; /* sender's counters */
};

struct base_res {
	int tcp_rc, stream_rc, rr_rc;
	struct bl_result tcp, tcp1, stream, rr;
	char tcp_which[64];
	unsigned slots;
};

struct machine {
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
};

/* Set by SIGINT, SIGTERM and SIGHUP (msg_bench.c): stop early. */
extern volatile sig_atomic_t interrupted;

/* Latency samples (msg_machine.c). */
void sampler_reset(struct sampler *s);
void sampler_pcts(struct sampler *s, double *p50, double *p99);

/* Inline: it runs once per message measured. Returns true when it took
 * long (it compacted the samples). */
static inline bool sampler_add(struct sampler *s, uint64_t x)
{
	bool slow = false;
	if (x > s->max)
		s->max = x;
	if (s->skip) {
		s->skip--;
		return false;
	}
	if (s->n == MAX_SAMPLES) {
		for (size_t i = 0; i < s->n / 2; i++)
			s->v[i] = s->v[2 * i];
		s->n /= 2;
		s->stride *= 2;
		slow = true;
	}
	s->v[s->n++] = x;
	s->skip = s->stride - 1;
	return slow;
}

/* Pin the calling process to @cpu (-1: leave it); @who names it. */
void pin_to(int cpu, const char *who);

/* A machine: open, connect to its peer, close (msg_machine.c). */
int machine_open(const struct opts *o, uint32_t id, const char *dir,
                 struct machine *m, struct hello *h);
int machine_connect(struct machine *m, uint32_t peer, struct hello *ph);
void machine_close(struct machine *m);

/* The two processes (msg_machine.c, msg_client.c). */
int server_main(const struct opts *o, const char *base, const char *dir,
                int down, int up, pid_t parent);
int client_main(const struct opts *o, const char *dir, int down, int up,
                bool *serving);

/* The output (msg_bench.c). */
void print_results(const struct opts *o, const struct size_res *res,
                   const struct base_res *br);

#endif
