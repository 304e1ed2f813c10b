/*
 * Growth, the grower's side (grow.h).
 *
 * The thread only decides when to ask; the asking runs on a loop (the
 * messages are the address space's, farm_as_grow_check). Each question
 * holds a reference, so the state outlives farm_grow_destroy until the
 * last answer is in (an answer can take the RPC timeout when a peer dies).
 */
#include "node/grow.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "util/common.h"
#include "util/log.h"

struct farm_grow {
	farm_as *as;
	farm_loop *loop;
	farm_grow_tell_fn tell;
	void *tell_ctx;
	uint32_t me;
	pthread_t th;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	/* Under lock: */
	unsigned refs; /* the thread's (until destroy) and one per question */
	bool stop;
	uint64_t cfg; /* the configuration in which we are the grower; 0 */
	uint32_t members[FARM_VIEW_MAX];
	unsigned n;
	bool asking;      /* a question is out */
	uint64_t next_ns; /* not before (CLOCK_MONOTONIC ns) */
	uint64_t told;    /* the configuration we said we grew in */
	uint64_t checks;
};

struct grow_q {
	struct farm_grow *g;
	uint64_t cfg;
	uint32_t members[FARM_VIEW_MAX];
	unsigned n;
};

static void unref_locked(struct farm_grow *g, bool *free_it)
{
	*free_it = --g->refs == 0;
}

static void grow_free(struct farm_grow *g)
{
	pthread_cond_destroy(&g->cv);
	pthread_mutex_destroy(&g->lock);
	free(g);
}

static void answered(farm_loop *loop, void *ctx, int status)
{
	(void)loop;
	struct grow_q *q = ctx;
	struct farm_grow *g = q->g;
	pthread_mutex_lock(&g->lock);
	bool tell = !status && !g->stop && g->cfg == q->cfg && g->told < q->cfg;
	pthread_mutex_unlock(&g->lock);
	/* Outside the lock: the membership's callbacks reach farm_grow_view. */
	int trc = tell ? g->tell(g->tell_ctx, q->cfg) : 0;
	pthread_mutex_lock(&g->lock);
	g->asking = false;
	g->checks++;
	if (tell && !trc && g->told < q->cfg)
		g->told = q->cfg;
	else if (!tell || trc)
		g->next_ns = farm_now_ns() + FARM_GROW_RETRY_MS * 1000000ull;
	pthread_cond_broadcast(&g->cv);
	bool free_it;
	unref_locked(g, &free_it);
	pthread_mutex_unlock(&g->lock);
	if (tell && trc)
		farm_warn("grow: machine %" PRIu32 " cannot say it holds its "
		          "share: %s",
		          g->me, farm_strerror(trc));
	else if (tell)
		farm_info("grow: machine %" PRIu32 " holds a complete copy of "
		          "every region of its share in configuration %" PRIu64,
		          g->me, q->cfg);
	else if (status && status != -EAGAIN && status != -ESTALE)
		farm_warn("grow: machine %" PRIu32 ": share check in "
		          "configuration %" PRIu64 ": %s",
		          g->me, q->cfg, farm_strerror(status));
	free(q);
	if (free_it)
		grow_free(g);
}

static void ask(farm_loop *loop, void *ctx, int status)
{
	struct grow_q *q = ctx;
	if (status) { /* the loop is closing */
		answered(loop, q, status);
		return;
	}
	int rc = farm_as_grow_check(q->g->as, loop, q->cfg, q->members, q->n,
	                            answered, q);
	if (rc)
		answered(loop, q, rc);
}

static void *grow_main(void *arg)
{
	struct farm_grow *g = arg;
	pthread_mutex_lock(&g->lock);
	while (!g->stop) {
		bool want = g->cfg && g->told < g->cfg && !g->asking;
		uint64_t now = farm_now_ns();
		if (want && now >= g->next_ns) {
			struct grow_q *q = malloc(sizeof(*q));
			if (q) {
				q->g = g;
				q->cfg = g->cfg;
				q->n = g->n;
				memcpy(q->members, g->members,
				       g->n * sizeof(g->members[0]));
				g->asking = true;
				g->refs++;
				pthread_mutex_unlock(&g->lock);
				int rc = farm_loop_post(g->loop, ask, q);
				pthread_mutex_lock(&g->lock);
				if (rc) {
					g->asking = false;
					g->refs--;
					free(q);
					g->next_ns = now + FARM_GROW_RETRY_MS *
					                           1000000ull;
				}
				continue;
			}
			g->next_ns = now + FARM_GROW_RETRY_MS * 1000000ull;
		}
		if (want) {
			struct timespec ts;
			clock_gettime(CLOCK_MONOTONIC, &ts);
			uint64_t wait = g->next_ns > now ? g->next_ns - now : 0;
			uint64_t ns = (uint64_t)ts.tv_nsec + wait;
			ts.tv_sec += (time_t)(ns / 1000000000ull);
			ts.tv_nsec = (long)(ns % 1000000000ull);
			pthread_cond_timedwait(&g->cv, &g->lock, &ts);
		} else {
			pthread_cond_wait(&g->cv, &g->lock);
		}
	}
	bool free_it;
	unref_locked(g, &free_it);
	pthread_mutex_unlock(&g->lock);
	if (free_it)
		grow_free(g);
	return NULL;
}

struct farm_grow *farm_grow_create(farm_as *as, farm_loop *loop, uint32_t me,
                                   farm_grow_tell_fn tell, void *ctx)
{
	if (!as || !loop || !tell) {
		errno = EINVAL;
		return NULL;
	}
	struct farm_grow *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	g->as = as;
	g->loop = loop;
	g->tell = tell;
	g->tell_ctx = ctx;
	g->me = me;
	g->refs = 1;
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	int rc = pthread_mutex_init(&g->lock, NULL);
	if (!rc && (rc = pthread_cond_init(&g->cv, &ca)))
		pthread_mutex_destroy(&g->lock);
	pthread_condattr_destroy(&ca);
	if (!rc && (rc = pthread_create(&g->th, NULL, grow_main, g))) {
		pthread_cond_destroy(&g->cv);
		pthread_mutex_destroy(&g->lock);
	}
	if (rc) {
		free(g);
		errno = rc;
		return NULL;
	}
	return g;
}

void farm_grow_view(struct farm_grow *g, const struct farm_view *v)
{
	if (!g || !v)
		return;
	/* The grower: the first late machine that is still a member. */
	uint32_t grower = UINT32_MAX;
	for (unsigned q = 0; q < v->nlate && q < FARM_VIEW_MAX; q++)
		if (farm_view_find(v, v->late[q])) {
			grower = v->late[q];
			break;
		}
	pthread_mutex_lock(&g->lock);
	if (grower == g->me && v->config_id > g->cfg) {
		g->cfg = v->config_id;
		g->n = 0;
		for (unsigned i = 0; i < v->n && i < FARM_VIEW_MAX; i++)
			g->members[g->n++] = v->members[i].id;
		g->next_ns = 0;
	} else if (grower != g->me) {
		g->cfg = 0;
	}
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->lock);
}

void farm_grow_stats(struct farm_grow *g, struct farm_grow_stats *out)
{
	if (!out)
		return;
	memset(out, 0, sizeof(*out));
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	out->checks = g->checks;
	out->grown_at = g->told;
	pthread_mutex_unlock(&g->lock);
}

void farm_grow_destroy(struct farm_grow *g)
{
	if (!g)
		return;
	pthread_mutex_lock(&g->lock);
	g->stop = true;
	pthread_t th = g->th; /* g may be gone once the thread ends */
	pthread_cond_broadcast(&g->cv);
	pthread_mutex_unlock(&g->lock);
	pthread_join(th, NULL); /* drops the thread's reference */
}
