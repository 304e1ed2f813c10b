#include "recproc.h"

struct kill_msg rec_kill(struct np_cluster *cl, unsigned victim)
{
	struct kill_msg km = {.victim = victim, .t_kill_ns = np_now_ns()};
	assert_int_equal(kill(cl->pid[victim], SIGKILL), 0);
	assert_int_equal(tu_reap(cl->pid[victim]), 128 + SIGKILL);
	cl->pid[victim] = 0;
	for (unsigned i = 0; i < np_nm; i++)
		if (i != victim) {
			np_send(cl, i, 'K');
			assert_int_equal(tu_send(cl->to[i], &km, sizeof(km)),
			                 0);
		}
	return km;
}

_Atomic uint64_t rec_cfg_t[16];

void rec_on_config(void *ctx, uint64_t id, unsigned members, bool member)
{
	(void)ctx;
	(void)members;
	(void)member;
	atomic_store(&rec_cfg_t[id % 16], np_now_ns());
}

uint64_t rec_cfg_applied(uint64_t id, uint64_t now)
{
	uint64_t t = atomic_load(&rec_cfg_t[id % 16]);
	return t ? t : now;
}

bool rec_config_without(farm_node *node, uint32_t victim, uint64_t *id,
                        unsigned *n)
{
	struct farm_view *v = malloc(sizeof(*v));
	bool without = v && !farm_node_view(node, v);
	for (unsigned i = 0; without && i < v->n; i++)
		without = v->members[i].id != victim;
	if (without) {
		*id = v->config_id;
		*n = v->n;
	}
	free(v);
	return without;
}

int rec_told(struct np_child *np, struct rec_seen *s)
{
	struct kill_msg km;
	if (tu_recv(np->in, &km, sizeof(km)))
		return -1;
	s->told = true;
	s->victim = km.victim;
	s->t_kill_ns = km.t_kill_ns;
	s->config_at_kill = farm_node_config_id(np->node);
	return 0;
}

bool rec_watch(struct np_child *np, struct rec_seen *s)
{
	s->removed = farm_node_removed(np->node);
	uint64_t id = farm_node_config_id(np->node);
	if (!s->told || s->new_config || id == s->last_id)
		return false;
	s->last_id = id;
	if (!rec_config_without(np->node, s->victim, &s->config_new,
	                        &s->members_new))
		return false;
	s->new_config = true;
	s->t_seen_ns = np_now_ns();
	s->t_cfg_ns = rec_cfg_applied(id, s->t_seen_ns);
	return true;
}

bool rec_check_seen(struct fails *f, unsigned i, const struct rec_seen *s,
                    int reconf_ms)
{
	if (s->new_config)
		printf("machine %u: configuration %" PRIu64 " (%u members, "
		       "without machine %u) applied %.1f ms after the kill "
		       "(seen after %.1f ms)\n",
		       i, s->config_new, s->members_new, s->victim,
		       (double)(s->t_cfg_ns - s->t_kill_ns) / 1e6,
		       (double)(s->t_seen_ns - s->t_kill_ns) / 1e6);
	if (s->removed)
		failed(f, "machine %u was removed from the configuration", i);
	else if (!s->new_config)
		failed(f,
		       "machine %u: no configuration without machine %u "
		       "within %d ms of the kill (configuration %" PRIu64 ")",
		       i, s->victim, reconf_ms, s->config_at_kill);
	return !s->removed && s->new_config;
}

void rec_verdict(const struct fails *f, const char *name, unsigned victim,
                 bool broken, const char *what)
{
	fflush(stdout); /* the report, then what failed */
	if (broken) {
		if (!f->n)
			fail_msg("%s --broken: %s, and no check noticed", name,
			         what);
		printf("%s --broken: %u check(s) failed, as they must:\n%s",
		       name, f->n, f->text);
		return;
	}
	if (f->n)
		fail_msg("%s (machine %u killed): %u check(s) failed:\n%s",
		         name, victim, f->n, f->text);
}
