/*
 * The shared-memory ring baselines (baseline.h): a plain single-producer
 * single-consumer ring between this process and a forked helper, streamed
 * one way or used for request/response.
 */
#define _GNU_SOURCE 1 /* sched_setaffinity */
#include "baseline_int.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

/* Apart by two cache lines: the adjacent-line prefetcher pairs them. */
#define SEP        128u
#define SLOT_WORDS 7u
#define RING_STOP  UINT64_MAX /* consumed count / request word: stop */

#if defined(__x86_64__) || defined(__i386__)
#define cpu_relax() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define cpu_relax() __asm__ __volatile__("yield" ::: "memory")
#else
#define cpu_relax() ((void)0)
#endif

struct slot {
	_Atomic uint64_t seq; /* message number, from 1 */
	uint64_t w[SLOT_WORDS];
};
_Static_assert(sizeof(struct slot) == 64, "a slot is one cache line");
/* Shared between processes: only lock-free (address-free) atomics work. */
_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "64-bit atomics must be lock-free");

/* Shared: the consumer's count, alone in its SEP bytes, then the slots. */
struct ring_hdr {
	alignas(SEP) _Atomic uint64_t consumed;
};
_Static_assert(sizeof(struct ring_hdr) == SEP, "header is SEP bytes");

struct ring {
	struct ring_hdr *hdr;
	struct slot *slot;
	uint32_t nslots;
};

struct producer {
	uint64_t n;      /* next message number */
	uint64_t cached; /* consumer's count, as last read */
	uint32_t pos;
};

struct consumer {
	uint64_t n; /* next message number expected */
	uint32_t pos;
};

static size_t ring_bytes(unsigned slots)
{
	size_t b =
	        sizeof(struct ring_hdr) + (size_t)slots * sizeof(struct slot);
	return (b + SEP - 1) / SEP * SEP;
}

/* Lays a ring out at base (SEP-aligned, zeroed). */
static struct ring ring_at(void *base, unsigned slots)
{
	struct ring_hdr *hdr = base;
	struct ring r = {
	        .hdr = hdr, .slot = (struct slot *)(hdr + 1), .nslots = slots};
	return r;
}

/*
 * Producer: the slot for the next message, or NULL when the consumer said
 * stop. Reads the consumer's count only when the cached one says the ring
 * is full. The caller writes the payload, then calls ring_commit().
 */
static inline struct slot *ring_reserve(struct ring r, struct producer *p)
{
	if (p->n - 1 - p->cached >= r.nslots) {
		for (;;) {
			/* Pairs with ring_release's release store (the
			 * slots read are free to overwrite) and with the
			 * stop in ring_consume_stream. */
			uint64_t c = atomic_load_explicit(&r.hdr->consumed,
			                                  memory_order_acquire);
			if (c == RING_STOP)
				return NULL;
			p->cached = c;
			if (p->n - 1 - c < r.nslots)
				break;
			cpu_relax();
		}
	}
	/* r is a copy, but r.slot points into the shared mapping. */
	// cppcheck-suppress returnDanglingLifetime
	return &r.slot[p->pos];
}

/* Producer: publishes the message written in s (release). */
static inline void ring_commit(struct ring r, struct producer *p,
                               struct slot *s)
{
	/* Pairs with ring_peek's acquire load: the payload is seen first. */
	atomic_store_explicit(&s->seq, p->n, memory_order_release);
	p->n++;
	if (++p->pos == r.nslots)
		p->pos = 0;
}

/* Consumer: the next message's slot once it is there (acquire), or NULL. */
static inline const struct slot *ring_peek(struct ring r,
                                           const struct consumer *c)
{
	const struct slot *s = &r.slot[c->pos];
	/* Pairs with ring_commit's release store. */
	if (atomic_load_explicit(&s->seq, memory_order_acquire) != c->n)
		return NULL;
	/* In the shared mapping, as above. */
	// cppcheck-suppress returnDanglingLifetime
	return s;
}

/* Consumer: done reading that message; hands its slot back (release). */
static inline void ring_release(struct ring r, struct consumer *c)
{
	/* Pairs with ring_reserve's acquire load: the payload was read
	 * before the producer may overwrite the slot. */
	atomic_store_explicit(&r.hdr->consumed, c->n, memory_order_release);
	c->n++;
	if (++c->pos == r.nslots)
		c->pos = 0;
}

/* Every payload word of message n is n: 7 of them, so their xor is n. */
static inline void slot_fill(struct slot *s, uint64_t v)
{
	for (unsigned i = 0; i < SLOT_WORDS; i++)
		s->w[i] = v;
}

static inline bool slot_ok(const struct slot *s, uint64_t v)
{
	uint64_t x = 0;
	for (unsigned i = 0; i < SLOT_WORDS; i++)
		x ^= s->w[i];
	return x == v && s->w[0] == v;
}

struct ring_cfg {
	struct ring a, b; /* a: to the parent (stream) or to the child (rr) */
	int child_cpu;    /* the forked side's CPU; -1: not pinned */
};

static int ready(int wfd)
{
	char one = 1;
	int err = bu_write_full(wfd, &one, 1);
	close(wfd);
	return -err;
}

static int stream_producer(void *arg, int wfd)
{
	const struct ring r = ((const struct ring_cfg *)arg)->a;
	struct producer p = {.n = 1};
	int err = ready(wfd);
	if (err)
		return err;
	for (;;) {
		struct slot *s = ring_reserve(r, &p);
		if (!s)
			return 0;
		slot_fill(s, p.n);
		ring_commit(r, &p, s);
	}
}

/* Echoes each request as its reply until the stop request. */
static int rr_server(void *arg, int wfd)
{
	const struct ring a = ((const struct ring_cfg *)arg)->a;
	const struct ring b = ((const struct ring_cfg *)arg)->b;
	struct producer p = {.n = 1};
	struct consumer q = {.n = 1};
	int cpu = ((const struct ring_cfg *)arg)->child_cpu;
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET(cpu, &set);
		if (sched_setaffinity(0, sizeof(set), &set) != 0) {
			int e = errno;
			fprintf(stderr,
			        BL_PFX "ring: cannot pin to CPU %d: %s\n", cpu,
			        strerror(e));
			close(wfd);
			return e;
		}
	}
	int err = ready(wfd);
	if (err)
		return err;
	for (;;) {
		const struct slot *rq;
		while (!(rq = ring_peek(a, &q)))
			cpu_relax();
		if (rq->w[0] == RING_STOP) {
			ring_release(a, &q);
			return 0;
		}
		struct slot *rp = ring_reserve(b, &p);
		if (!rp)
			return EPROTO;
		memcpy(rp->w, rq->w, sizeof(rp->w));
		ring_commit(b, &p, rp);
		ring_release(a, &q);
	}
}

/* Called every so often while spinning: 0, or the run failed. */
static int spin_check(pid_t pid, uint64_t last)
{
	if (bl_now_ns() - last > BL_STALL_NS) {
		fprintf(stderr, BL_PFX "ring: no progress for 5 s\n");
		return -ETIMEDOUT;
	}
	siginfo_t si;
	si.si_pid = 0;
	if (waitid(P_PID, (id_t)pid, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
	    si.si_pid == pid) {
		fprintf(stderr,
		        BL_PFX "ring: the helper process ended early\n");
		return -ECHILD;
	}
	return 0;
}

enum ring_kind { STREAM, RR };

static int ring_consume_stream(const struct ring_cfg *c, pid_t pid,
                               double seconds, struct bl_result *out)
{
	const struct ring r = c->a;
	struct consumer q = {.n = 1};
	uint64_t warm, dur, first = 0;
	bl_durations(seconds, &warm, &dur);
	uint64_t t0 = bl_now_ns(), tstart = 0, last = t0;
	enum bl_phase ph = BL_WARMUP;
	unsigned spins = 0;
	for (;;) {
		const struct slot *s = ring_peek(r, &q);
		if (!s) {
			cpu_relax();
			if (++spins % 65536 == 0) {
				int err = spin_check(pid, last);
				if (err)
					return err;
			}
			continue;
		}
		uint64_t got = q.n;
		if (!slot_ok(s, got)) {
			fprintf(stderr, BL_PFX "ring: message %llu is wrong\n",
			        (unsigned long long)got);
			return -EPROTO;
		}
		ring_release(r, &q);
		if (got % 4096)
			continue;
		uint64_t t = bl_now_ns();
		last = t;
		if (ph == BL_WARMUP && t - t0 >= warm) {
			first = got;
			tstart = t;
			ph = BL_MEASURE;
		} else if (ph == BL_MEASURE && t - tstart >= dur) {
			out->rate = (double)(got - first) *
			            (double)BU_NS_PER_S / (double)(t - tstart);
			break;
		}
	}
	/* Pairs with ring_reserve's acquire load, which returns NULL. */
	atomic_store_explicit(&r.hdr->consumed, RING_STOP,
	                      memory_order_release);
	return 0;
}

static int ring_client_rr(const struct ring_cfg *c, pid_t pid, double seconds,
                          struct bl_sampler *smp, struct bl_result *out)
{
	const struct ring a = c->a, b = c->b;
	struct producer p = {.n = 1};
	struct consumer q = {.n = 1};
	uint64_t warm, dur, first = 0;
	bl_durations(seconds, &warm, &dur);
	uint64_t t0 = bl_now_ns(), tstart = 0;
	enum bl_phase ph = BL_WARMUP;
	struct slot *rq;
	for (uint64_t i = 1;; i++) {
		uint64_t ts = bl_now_ns();
		if (!(rq = ring_reserve(a, &p)))
			return -EPROTO; /* cannot happen: no one says stop */
		slot_fill(rq, i);
		ring_commit(a, &p, rq);
		const struct slot *rp;
		unsigned spins = 0;
		while (!(rp = ring_peek(b, &q))) {
			cpu_relax();
			if (++spins % 65536 == 0) {
				int err = spin_check(pid, ts);
				if (err)
					return err;
			}
		}
		uint64_t t = bl_now_ns();
		if (!slot_ok(rp, i)) {
			fprintf(stderr, BL_PFX "ring: reply %llu is wrong\n",
			        (unsigned long long)i);
			return -EPROTO;
		}
		ring_release(b, &q);
		if (ph == BL_MEASURE) {
			bl_sampler_add(smp, t - ts);
			if (t - tstart >= dur) {
				out->rate = (double)(i - first) *
				            (double)BU_NS_PER_S /
				            (double)(t - tstart);
				break;
			}
		} else if (t - t0 >= warm) {
			first = i;
			tstart = t;
			ph = BL_MEASURE;
		}
	}
	if (!(rq = ring_reserve(a, &p)))
		return -EPROTO;
	slot_fill(rq, RING_STOP);
	ring_commit(a, &p, rq);
	return 0;
}

static int ring_run(enum ring_kind kind, unsigned slots, double seconds,
                    int child_cpu, struct bl_result *out)
{
	const char *fn = kind == STREAM ? "bl_ring_stream" : "bl_ring_rr";
	if (slots < 2 || slots > BL_RING_MAX_SLOTS ||
	    bl_check_seconds(seconds) || !out) {
		fprintf(stderr, BL_PFX "%s: invalid arguments\n", fn);
		return -EINVAL;
	}
	size_t rb = ring_bytes(slots);
	size_t len = kind == STREAM ? rb : 2 * rb;
	void *base = mmap(NULL, len, PROT_READ | PROT_WRITE,
	                  MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	if (base == MAP_FAILED) {
		int err = -errno;
		fprintf(stderr, BL_PFX "%s: mmap: %s\n", fn, strerror(errno));
		return err;
	}
	struct ring_cfg c = {.a = ring_at(base, slots), .child_cpu = child_cpu};
	if (kind == RR)
		c.b = ring_at((char *)base + rb, slots);
	/* Fault the pages in before fork: both sides then map them. */
	memset(base, 0, len);

	struct bl_sampler smp = {0};
	struct bl_result r = {0};
	int err = kind == RR ? bl_sampler_init(&smp) : 0;
	if (err) {
		fprintf(stderr, BL_PFX "out of memory\n");
		goto out_unmap;
	}
	int rfd = -1;
	pid_t pid = bl_spawn(kind == STREAM ? stream_producer : rr_server, &c,
	                     &rfd);
	if (pid < 0) {
		err = (int)pid;
		goto out_unmap;
	}
	char one;
	err = bl_await_child(pid, rfd, &one, 1);
	if (err)
		goto out_unmap;
	if (kind == STREAM)
		err = ring_consume_stream(&c, pid, seconds, &r);
	else
		err = ring_client_rr(&c, pid, seconds, &smp, &r);
	err = bl_end(pid, err);
	if (err)
		goto out_unmap;
	if (kind == RR)
		bl_sampler_finish(&smp, &r);
	*out = r;
out_unmap:
	free(smp.v);
	munmap(base, len);
	return err;
}

int bl_ring_stream(unsigned slots, double seconds, struct bl_result *out)
{
	return ring_run(STREAM, slots, seconds, -1, out);
}

int bl_ring_rr(unsigned slots, double seconds, struct bl_result *out)
{
	return ring_run(RR, slots, seconds, -1, out);
}

int bl_ring_rr_pinned(unsigned slots, double seconds, int server_cpu,
                      struct bl_result *out)
{
	return ring_run(RR, slots, seconds, server_cpu, out);
}
