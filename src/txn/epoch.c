/*
 * Epochs: the local half (liburcu QSBR grace periods over the threads of
 * this process, with per-thread operation counts by epoch parity) and the
 * distributed half (an end-of-epoch exchange with every peer). See
 * epoch.h for the model.
 *
 * The local protocol and why it is safe
 * -------------------------------------
 * State: the process epoch E (farm_epoch_global), changed only by the
 * epoch thread; per thread, ops[2] (open operations by the parity of the
 * E they read at begin; thread-local, read only by their thread) and
 * urcu's reader counter ctr (0 offline, else the grace-period counter G
 * the thread last announced); urcu's G, bumped by synchronize_rcu.
 *
 *   op begin (reader)   e = load-acquire E; ops[e & 1]++          (R1)
 *   quiesce  (reader)   e = load-acquire E;                       (R2)
 *                       if ops[(e - 1) & 1] == 0:
 *                           urcu_qsbr_quiescent_state():
 *                             g = load G; mb; ctr = g; mb          (R3)
 *   park     (reader)   if ops[0] == ops[1] == 0: offline (ctr = 0, mb)
 *   online   (reader)   ctr = G; mb; (then R1 re-reads E)          (R4)
 *   grace period e -> e+1 (epoch thread):
 *                       E = e + 1 (an RMW: a full barrier)          (W1)
 *                       synchronize_rcu()  -- pass A                (W2)
 *                       synchronize_rcu()  -- pass B                (W3)
 *   synchronize_rcu:    mb; G += 1; wait until every registered thread
 *                       has ctr == G or ctr == 0 (offline)
 *
 * Claim: when pass B returns, every operation counted in bucket e & 1
 * (every operation begun before W1, since those read E <= e, and those
 * that read E <= e - 1 were drained by the previous grace period) has
 * ended, and the memory retired before W1 may be reused.
 *
 * Take a thread T that was online when B looked at it. B saw T's ctr ==
 * G_B, so T stored it in some quiesce call C after B bumped G (R3 loads
 * G after B's bump). C read E at R2 before that. If C had read E <= e,
 * R2 came before W1, so T was inside C during the whole of pass A: from
 * before A bumped G to after A returned. A returns only once T's ctr ==
 * G_A or 0; T's only store to ctr in that time is C's, which came after
 * B began. Contradiction; so C read E == e + 1 (E cannot pass e + 1
 * before B returns), and so C found bucket e & 1 empty. T's later
 * operations read E >= e + 1 (R1 after R2, same thread) and count in the
 * other bucket. A thread B found offline (ctr == 0) went offline with
 * both buckets empty, and when it comes back R4's mb orders its ctr store
 * before R1's read of E, while W1 and synchronize_rcu's mb order E's
 * store before B's read of ctr (a store-buffer pair): if B read ctr == 0,
 * R1 reads E == e + 1.
 *
 * Why two passes (this was the bug; test_epoch caught it about one run in
 * four with one pass): a thread announces for whatever grace period is
 * running when R3 reads G, but checked the bucket of the epoch it read at
 * R2. With back-to-back grace periods, a thread that had already
 * announced for period e-1 -> e could read E == e at R2 and check bucket
 * (e - 1) & 1, be delayed, and announce at R3 after period e -> e+1 had
 * begun, so that period ended with an operation in bucket e & 1 still
 * open. Pass A absorbs any such stale announcement; an announcement that
 * counts for pass B was checked against E == e + 1 (above). Pass A costs
 * one more wait for every thread's next poll pass; epochs are background
 * work, so latency, not throughput, doubles.
 *
 * Pairs: W1 (release) with R1/R2 (acquire): a reader that sees e + 1
 * sees every store made before W1 (the unlinking of retired memory, which
 * happens before farm_epoch_local_* hands the waiter to this thread under
 * D.lock). R3's first mb orders the reader's loads of retired memory
 * (in operations that have ended) before its ctr store, which B reads
 * before its caller reuses the memory.
 */
#include "txn/epoch.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include <urcu/urcu-qsbr.h>

#include "util/fault.h"
#include "util/log.h"
#include "util/tsan.h"

/*
 * ThreadSanitizer does not see the order a grace period gives: urcu's
 * quiescent states are plain stores and barriers, so every reader's load
 * of memory a writer reuses after farm_epoch_local_sync() would be
 * reported. Under TSan, a thread's quiescent state (or going offline)
 * releases on gp_sync, and the end of a grace period acquires it: pairs
 * R3 (and going offline) with B, as the opening comment argues. It also
 * orders releases made after the period began, so TSan may miss a
 * reader that announced too early; test_epoch --broken catches that.
 */
static char gp_sync __attribute__((unused)); /* TSan only: what
                                               GP_RELEASE/ACQUIRE name */
#define GP_RELEASE() FARM_TSAN_RELEASE(&gp_sync)
#define GP_ACQUIRE() FARM_TSAN_ACQUIRE(&gp_sync)

_Thread_local struct farm_epoch_tls farm_epoch_t;
_Atomic uint64_t farm_epoch_global = 2;

/* A completion owed to a loop once a grace period ends. */
struct waiter {
	farm_loop *loop; /* NULL: a farm_epoch_local_sync caller */
	farm_work_fn fn;
	void *ctx;
	int done; /* sync waiters */
	struct waiter *next;
};

struct loopreg {
	farm_loop *loop;
	unsigned n; /* enters for this loop */
	struct loopreg *next;
};

static struct {
	pthread_mutex_t lock;
	pthread_cond_t cond; /* the epoch thread waits for work */
	pthread_cond_t done; /* sync waiters wait for their period */
	unsigned users;
	bool running, stop;
	pthread_t th;
	struct waiter *pending; /* for the next grace period */
	struct waiter *current; /* in the grace period now running */
	struct loopreg *loops;
	_Atomic bool gp_active;
	_Atomic bool broken;
	_Atomic bool one_pass; /* testing: the old single-pass protocol */
	_Atomic uint64_t periods;
} D = {.lock = PTHREAD_MUTEX_INITIALIZER,
       .cond = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER};

static void nop_work(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	(void)ctx;
	(void)status;
}

static void *epoch_main(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&D.lock);
	for (;;) {
		while (!D.stop && !D.pending)
			pthread_cond_wait(&D.cond, &D.lock);
		if (!D.pending && D.stop)
			break;
		D.current = D.pending;
		D.pending = NULL;
		/* New operations count in the other bucket from now on
		 * (acq_rel: pairs with the acquire loads of the epoch in
		 * farm_epoch_op_begin, register and the quiescence check). */
		atomic_fetch_add_explicit(&farm_epoch_global, 1,
		                          memory_order_acq_rel);
		atomic_store_explicit(&D.gp_active, true, memory_order_seq_cst);
		/* Wake every parked loop so it re-reads the epoch and says
		 * whether it is quiescent (loops of threads with nothing
		 * open are offline and do not delay us). */
		for (struct loopreg *r = D.loops; r; r = r->next)
			if (farm_loop_post(r->loop, nop_work, NULL))
				farm_warn("epoch: cannot wake a loop");
		pthread_mutex_unlock(&D.lock);
		/* Two passes (W2, W3): see the opening comment. */
		urcu_qsbr_synchronize_rcu();
		if (!atomic_load_explicit(&D.one_pass, memory_order_relaxed))
			urcu_qsbr_synchronize_rcu();
		GP_ACQUIRE(); /* pairs with GP_RELEASE (TSan only) */
		pthread_mutex_lock(&D.lock);
		atomic_store_explicit(&D.gp_active, false,
		                      memory_order_release);
		atomic_fetch_add_explicit(&D.periods, 1, memory_order_relaxed);
		while (D.current) {
			struct waiter *w = D.current;
			D.current = w->next;
			if (!w->loop) {
				w->done = 1;
				continue;
			}
			if (farm_loop_post(w->loop, w->fn, w->ctx)) {
				/* No memory for the work item: run the
				 * completion in the next period instead. */
				w->next = D.pending;
				D.pending = w;
				continue;
			}
			free(w);
		}
		pthread_cond_broadcast(&D.done);
	}
	pthread_mutex_unlock(&D.lock);
	return NULL;
}

int farm_epoch_domain_get(void)
{
	int rc = 0;
	pthread_mutex_lock(&D.lock);
	if (!D.users) {
		D.stop = false;
		rc = -pthread_create(&D.th, NULL, epoch_main, NULL);
		if (!rc)
			D.running = true;
	}
	if (!rc)
		D.users++;
	pthread_mutex_unlock(&D.lock);
	return rc;
}

void farm_epoch_domain_put(void)
{
	pthread_mutex_lock(&D.lock);
	bool last = D.users && --D.users == 0 && D.running;
	if (last) {
		D.stop = true;
		pthread_cond_signal(&D.cond);
	}
	pthread_mutex_unlock(&D.lock);
	if (last) {
		pthread_join(D.th, NULL);
		pthread_mutex_lock(&D.lock);
		D.running = false;
		pthread_mutex_unlock(&D.lock);
	}
}

int farm_epoch_thread_enter(farm_loop *loop)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (loop) {
		pthread_mutex_lock(&D.lock);
		struct loopreg *r;
		for (r = D.loops; r && r->loop != loop; r = r->next)
			;
		if (r) {
			r->n++;
		} else if ((r = calloc(1, sizeof(*r)))) {
			r->loop = loop;
			r->n = 1;
			r->next = D.loops;
			D.loops = r;
		}
		pthread_mutex_unlock(&D.lock);
		if (!r)
			return -ENOMEM;
	}
	if (t->regs++ == 0) {
		urcu_qsbr_register_thread();
		t->offline = false;
		/* Acquire: pairs with the bump in epoch_main. */
		t->ep = atomic_load_explicit(&farm_epoch_global,
		                             memory_order_acquire);
	}
	return 0;
}

void farm_epoch_thread_leave(farm_loop *loop)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (loop) {
		struct waiter *cancel = NULL;
		pthread_mutex_lock(&D.lock);
		for (struct loopreg **pp = &D.loops; *pp; pp = &(*pp)->next) {
			struct loopreg *r = *pp;
			if (r->loop != loop)
				continue;
			if (--r->n == 0) {
				*pp = r->next;
				free(r);
			}
			break;
		}
		/* Completions owed to this loop: not posted after it goes. */
		struct waiter **lists[2] = {&D.pending, &D.current};
		for (int l = 0; l < 2; l++)
			for (struct waiter **pp = lists[l]; *pp;) {
				struct waiter *w = *pp;
				if (w->loop == loop) {
					*pp = w->next;
					w->next = cancel;
					cancel = w;
				} else {
					pp = &w->next;
				}
			}
		pthread_mutex_unlock(&D.lock);
		while (cancel) {
			struct waiter *w = cancel;
			cancel = w->next;
			w->fn(loop, w->ctx, -ECANCELED);
			free(w);
		}
	}
	if (t->regs && --t->regs == 0) {
		if (t->ops[0] || t->ops[1])
			farm_warn("epoch: a thread leaves with %llu operations "
			          "open",
			          (unsigned long long)(t->ops[0] + t->ops[1]));
		if (t->offline)
			urcu_qsbr_thread_online();
		GP_RELEASE(); /* pairs with GP_ACQUIRE (TSan only) */
		urcu_qsbr_unregister_thread();
		t->offline = false;
	}
}

void farm_epoch_online_slow(void)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (!t->offline)
		return;
	urcu_qsbr_thread_online(); /* a full barrier: E is re-read after */
	t->offline = false;
}

void farm_epoch_quiesce(void)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (!t->regs)
		return;
	if (t->offline)
		farm_epoch_online_slow();
	if (!atomic_load_explicit(&D.gp_active, memory_order_relaxed))
		return;
	/* Acquire: pairs with the bump in epoch_main. */
	uint64_t e =
	        atomic_load_explicit(&farm_epoch_global, memory_order_acquire);
	t->ep = e;
	if (!t->ops[(e - 1) & 1] ||
	    atomic_load_explicit(&D.broken, memory_order_relaxed)) {
		FARM_FAULT_POINT(FARM_FP_EPOCH_QUIESCE_WINDOW);
		GP_RELEASE(); /* pairs with GP_ACQUIRE (TSan only) */
		urcu_qsbr_quiescent_state();
	}
}

void farm_epoch_park(void)
{
	struct farm_epoch_tls *t = &farm_epoch_t;
	if (!t->regs || t->offline)
		return;
	if ((t->ops[0] || t->ops[1]) &&
	    !atomic_load_explicit(&D.broken, memory_order_relaxed))
		return;
	GP_RELEASE(); /* pairs with GP_ACQUIRE (TSan only) */
	urcu_qsbr_thread_offline();
	t->offline = true;
}

int farm_epoch_local_async(farm_loop *loop, farm_work_fn fn, void *ctx)
{
	if (!loop || !fn)
		return -EINVAL;
	struct waiter *w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	*w = (struct waiter){.loop = loop, .fn = fn, .ctx = ctx};
	pthread_mutex_lock(&D.lock);
	int rc = D.running ? 0 : -ESRCH;
	if (!rc) {
		w->next = D.pending;
		D.pending = w;
		pthread_cond_signal(&D.cond);
	}
	pthread_mutex_unlock(&D.lock);
	if (rc)
		free(w);
	return rc;
}

int farm_epoch_local_sync(void)
{
	if (farm_epoch_t.regs)
		return -EDEADLK; /* we would wait for ourselves */
	struct waiter w = {0};
	pthread_mutex_lock(&D.lock);
	int rc = D.running ? 0 : -ESRCH;
	if (!rc) {
		w.next = D.pending;
		D.pending = &w;
		pthread_cond_signal(&D.cond);
		while (!w.done)
			pthread_cond_wait(&D.done, &D.lock);
	}
	pthread_mutex_unlock(&D.lock);
	return rc;
}

void farm_epoch_testing_break(bool on)
{
	atomic_store(&D.broken, on);
}

int farm_epoch_testing_one_pass(bool on)
{
	if (!farm_fault_built())
		return -ENOTSUP;
	atomic_store(&D.one_pass, on);
	return 0;
}

uint64_t farm_epoch_grace_periods(void)
{
	return atomic_load_explicit(&D.periods, memory_order_relaxed);
}

/* ---- the distributed half -------------------------------------------- */

#define EPOCH_MAGIC 0x45504f43u /* "EPOC" */

struct epoch_msg {
	uint32_t magic;
	uint32_t status; /* replies: 0 */
};

struct h_ctx {
	struct farm_msg_token tok;
};

static void h_epoch_done(farm_loop *loop, void *ctx, int status)
{
	struct h_ctx *h = ctx;
	struct epoch_msg r = {.magic = EPOCH_MAGIC};
	int rc = status ? farm_msg_reply_error(loop, &h->tok, status)
	                : farm_msg_reply(loop, &h->tok, &r, sizeof(r));
	if (rc)
		farm_warn("epoch: cannot answer machine %u: %s", h->tok.machine,
		          farm_strerror(rc));
	free(h);
}

static void reply_err(farm_loop *loop, const struct farm_msg_token *tok,
                      int status)
{
	int rc = farm_msg_reply_error(loop, tok, status);
	if (rc)
		farm_warn("epoch: cannot answer machine %u: %s", tok->machine,
		          farm_strerror(rc));
}

static void h_epoch(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	struct epoch_msg q;
	if (!in->token.call_id)
		return; /* a one-way EPOCH: nobody to answer */
	if (in->len != sizeof(q)) {
		reply_err(loop, &in->token, -EINVAL);
		return;
	}
	memcpy(&q, in->payload, sizeof(q));
	if (q.magic != EPOCH_MAGIC || q.status) {
		reply_err(loop, &in->token, -EINVAL);
		return;
	}
	struct h_ctx *h = malloc(sizeof(*h));
	int rc = h ? 0 : -ENOMEM;
	if (h) {
		h->tok = in->token;
		rc = farm_epoch_local_async(loop, h_epoch_done, h);
		if (rc)
			free(h);
	}
	if (rc)
		reply_err(loop, &in->token, rc);
}

int farm_epoch_handle(farm_msg *msg)
{
	return farm_msg_handle(msg, FARM_MSGT_EPOCH, h_epoch, NULL);
}

struct run {
	farm_blockalloc *ba;
	uint64_t mark;
	uint64_t *reclaimed;
	unsigned left;
	int status;
	farm_op_fn cont;
	void *ctx;
};

static void run_one(farm_loop *loop, struct run *r, int status)
{
	if (status && !r->status)
		r->status = status;
	if (--r->left)
		return;
	uint64_t n = 0;
	if (!r->status)
		n = farm_blockalloc_reclaim(r->ba, r->mark);
	if (r->reclaimed)
		*r->reclaimed = n;
	farm_op_fn cont = r->cont;
	void *ctx = r->ctx;
	int st = r->status;
	free(r);
	cont(loop, ctx, st);
}

static void run_local_done(farm_loop *loop, void *ctx, int status)
{
	run_one(loop, ctx, status);
}

static void run_peer_done(farm_loop *loop, void *ctx, int status,
                          const void *reply, uint32_t len)
{
	struct epoch_msg r;
	if (!status && (len != sizeof(r) ||
	                (memcpy(&r, reply, sizeof(r)), r.magic != EPOCH_MAGIC)))
		status = FARM_ECORRUPT;
	run_one(loop, ctx, status);
}

static void run_post_done(farm_loop *loop, void *ctx, int status)
{
	(void)status;
	run_one(loop, ctx, 0); /* the extra reference held while starting */
}

int farm_epoch_run(farm_loop *loop, const uint32_t *peers, unsigned npeers,
                   uint64_t timeout_ns, farm_blockalloc *ba,
                   uint64_t *reclaimed, farm_op_fn cont, void *ctx)
{
	if (!loop || !cont || !ba || (npeers && !peers))
		return -EINVAL;
	struct run *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	/* The mark before any grace period starts: everything retired up
	 * to here was freed before every period below began. */
	*r = (struct run){.ba = ba,
	                  .mark = farm_blockalloc_epoch_mark(ba),
	                  .reclaimed = reclaimed,
	                  .left = 1,
	                  .cont = cont,
	                  .ctx = ctx};
	int rc = farm_epoch_local_async(loop, run_local_done, r);
	if (rc) {
		free(r);
		return rc;
	}
	r->left++; /* held until every request is out */
	for (unsigned i = 0; i < npeers; i++) {
		struct epoch_msg q = {.magic = EPOCH_MAGIC};
		r->left++;
		rc = farm_msg_call(loop, peers[i], 0, FARM_MSGT_EPOCH, &q,
		                   sizeof(q), timeout_ns, run_peer_done, r);
		if (rc) {
			r->left--;
			if (!r->status)
				r->status = rc;
		}
	}
	/* Drop the starting reference from a work item, so @cont never runs
	 * before we return. */
	rc = farm_loop_post(loop, run_post_done, r);
	if (rc)
		r->left--; /* cannot happen to be last: the local period holds
		              one */
	return 0;
}
