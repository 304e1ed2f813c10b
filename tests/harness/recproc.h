/*
 * A cluster of NP_NM machine processes with one of them killed
 * (tests/test_rec_bank.c, tests/test_rec_kv.c): the parent's kill and
 * what it tells the survivors, how a survivor sees the configuration
 * without the victim, and the parent's list of the checks that failed.
 * Defined in recproc.c.
 */
#ifndef FARM_TESTS_RECPROC_H
#define FARM_TESTS_RECPROC_H

#include "nodeproc.h"

#include <inttypes.h>
#include <stdatomic.h>

#include "node/node.h"

/* What the parent tells the survivors after the kill ('K'). */
struct kill_msg {
	uint32_t victim;
	uint64_t t_kill_ns;
};

/* Kill machine @victim with SIGKILL, in the middle of whatever it is
 * doing, reap it and tell every other machine ('K', then the message). */
struct kill_msg rec_kill(struct np_cluster *cl, unsigned victim);

/* When each configuration was applied on this machine (by id % 16; 0:
 * not seen): rec_on_config fills it (farm_node_on_config). */
extern _Atomic uint64_t rec_cfg_t[16];

void rec_on_config(void *ctx, uint64_t id, unsigned members, bool member);

/* When configuration @id was applied here, or @now when that was not
 * seen. */
uint64_t rec_cfg_applied(uint64_t id, uint64_t now);

/* Does @node's configuration leave @victim out? Its id and size in *@id
 * and *@n when it does. */
bool rec_config_without(farm_node *node, uint32_t victim, uint64_t *id,
                        unsigned *n);

/* What a survivor saw of the change, from the parent's 'K' on. */
struct rec_seen {
	bool told;       /* the parent said who was killed, and when */
	bool new_config; /* a configuration without the victim came */
	bool removed;    /* this machine was removed */
	uint32_t victim;
	uint64_t config_at_kill, config_new, last_id;
	unsigned members_new;
	/* The kill, the configuration without the victim applied here, and
	 * seen by the workload. */
	uint64_t t_kill_ns, t_cfg_ns, t_seen_ns;
};

/* Child: the parent said 'K'; read who was killed, and when. 0, or -1
 * (the parent went away). */
int rec_told(struct np_child *np, struct rec_seen *s);

/* Child, polled: whether the configuration without the victim has just
 * come (true once); notes whether this machine was removed. */
bool rec_watch(struct np_child *np, struct rec_seen *s);

/* Parent: what survivor @i saw (printed); whether it took a configuration
 * without the victim within @reconf_ms of the kill (a failed check in @f
 * when not). */
bool rec_check_seen(struct fails *f, unsigned i, const struct rec_seen *s,
                    int reconf_ms);

/* Parent, at the end of run @name (machine @victim killed): it fails
 * when a check failed, or, @broken (the protocol broken on purpose:
 * @what), when none did. */
void rec_verdict(const struct fails *f, const char *name, unsigned victim,
                 bool broken, const char *what);

#endif
