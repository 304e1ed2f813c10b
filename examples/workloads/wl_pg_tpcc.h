/*
 * workload_bench's PostgreSQL peer, TPC-C's part (wl_pg_tpcc.c): its
 * schema and load, its statements, and the parameters of one transaction
 * as text, for the clients of wl_pg.c.
 */
#ifndef FWL_WL_PG_TPCC_H
#define FWL_WL_PG_TPCC_H

#include <stddef.h>
#include <stdint.h>

#include "wl.h"

/* Room for one parameter as text (NewOrder's arrays of 15 ids). */
#define WL_PG_PARAM  160
#define WL_PG_NPARAM 7

/* The SQL that makes and loads @o's tables into @buf: 0, or -1 when it
 * does not fit. */
int wl_pg_tpcc_schema(const struct wl_opts *o, char *buf, size_t len);
/* The statement of type @t and its parameter count. */
const char *wl_pg_tpcc_stmt(enum wl_txn t, int *nparams);
void wl_pg_tpcc_params(uint64_t *rng, const struct wl_opts *o, enum wl_txn t,
                       char p[][WL_PG_PARAM]);

#endif
