/*
 * fgraph: an owner operation (struct uop) and the transaction logic it runs
 * (graph_logic.c), through an accessor that either plans (scratch copies,
 * allocations counted) or applies (the transaction's copies, writes).
 */
#ifndef FGRAPH_GRAPH_LOGIC_H
#define FGRAPH_GRAPH_LOGIC_H

#include "graph_int.h"

enum { M_PLAN, M_APPLY };
/* Logic results besides >= 0 (done) and negative errors. */
#define L_NEED  (-30003) /* a remote object must be read first (op->need) */
#define L_STALE (-30001) /* a pointer led to something else: retry */

/* Steps of an update. */
enum { S_MAIN, S_KV_PUT, S_KV_DEL, S_FREE_OLD };

#define MAX_ALLOCS (2u + FG_LOAD_MAX / 4u)

struct aobj {
	farm_gaddr a;
	uint32_t size;
	uint8_t *data;
	bool scratch, freed, fresh;
};

struct alloc_req {
	uint32_t size;
	farm_gaddr hint;
	farm_fatptr p;
	void *data;
};

struct oent; /* graph_owner.c: the owner's id map */

struct uop {
	fg_graph *g;
	struct fg_owner *ow;
	farm_loop *loop;
	struct farm_msg_token tok;
	struct uop *qnext;
	/* id1's entry in the owner's id map, valid while the map's
	 * generation is still oe_gen (entries move when it grows or when one
	 * is deleted) */
	struct oent *oe;
	uint64_t oe_gen;
	/* queued: in id1's queue (every update; an assoc_get that found
	 * updates of id1 running) */
	bool is_get, queued, wants_id2, have_id2;
	int step, mode, result;
	unsigned attempts;
	/* the request */
	struct up_req rq;
	struct get_req grq;
	/* what the transaction works from */
	farm_fatptr id1ptr, id2ptr, newnode, oldnode;
	farm_tx *tx;
	farm_fatptr need;
	unsigned nobj, nal, nal_done, ual;
	unsigned nout; /* assoc_get's answer: edges in out */
	/* Kept when the record is reused (uop_new clears what is above):
	 * buffers, and arrays filled before they are read. */
	struct uop *next_free;
	uint8_t *data; /* the request's data (obj_load: and its edges) */
	uint32_t datacap;
	struct aobj *objs;
	unsigned capobj;
	struct fg_edge *out;
	uint64_t id2s[FG_GET_MAX];
	struct alloc_req al[MAX_ALLOCS];
};

/* graph_logic.c */
int fg_logic(struct uop *op);
void acc_reset(struct uop *op);
/* graph_owner.c */
void retry_or_fail(struct uop *op, int rc);

#endif
