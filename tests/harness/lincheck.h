/*
 * lincheck: a linearizability checker for histories of a key-value store
 *, Porcupine-style (Wing & Gong / Lowe's search with
 * memoization), partitioned per key.
 *
 * Build: tests/harness/CMakeLists.txt builds the static library `farm_lincheck`
 * (lincheck.c, libc only; its include directory is public). A test links it
 * with  target_link_libraries(test_x PRIVATE farm_lincheck)  and includes
 * "lincheck.h". Recording is not thread-safe: give each thread (or machine
 * process) its own history and lc_merge() them before lc_check().
 *
 * Model
 *   Every key is an independent register that is absent or holds a value.
 *   Values are uint64 ids (tests write unique ids, so that a read names the
 *   write it saw; duplicates are allowed, they only make the search wider).
 *   Every key starts absent: record a preload as ordinary puts.
 *     get(key) -> value | absent   reads, changes nothing;
 *     put(key, value)              insert or update;
 *     del(key) -> existed?         LC_DEL: result recorded in `found`;
 *     del(key)                     LC_DEL_ANY: no result known or returned.
 *   Multi-get (lc_mget) is recorded as n independent gets with the batch's
 *   invocation and response times: this checks that each key's read is
 *   linearizable, NOT that the batch is one atomic snapshot (FaRM's
 *   multi-get does not promise that either).
 *
 * Time
 *   Each operation has an invocation time and a response time (uint64, one
 *   clock: CLOCK_MONOTONIC ns on one host, or logical). Operation a precedes
 *   b in real time when a.t_resp < b.t_inv, strictly: equal timestamps mean
 *   concurrent. The client id is a label for reports; operations of one
 *   client may overlap (e.g. after a timeout).
 *
 * No response (crash, timeout): t_resp = LC_NO_RESPONSE (or an operation
 *   begun with lc_begin and never ended). As in Porcupine its response is
 *   at infinity: it may have taken effect at any time after its
 *   invocation, or never. A put or delete without response may or may not
 *   have happened; a delete's result is then unknown (LC_DEL_ANY); a get
 *   without response constrains nothing and is dropped.
 *
 * Algorithm (per key; operations on different keys commute, so a history
 *   is linearizable iff each key's sub-history is: P-compositionality)
 *   Call and return entries sorted by time (calls first on ties) in a
 *   doubly linked list; an iterative depth-first search linearizes a call
 *   entry that lies before the first remaining return entry (lifting its
 *   call and return out of the list), backtracks at a return entry whose
 *   call is not yet linearized, and memoizes (set of linearized ops, model
 *   state) to prune. The set is stored canonically as (M, U): M = 1 + the
 *   highest linearized op (ops numbered in invocation order), U = the
 *   unlinearized ops below M; |U| is bounded by the number of ops pending
 *   at once (clients + ops without response), so each memo entry is O(1)
 *   in the number of ops of the key, unlike Porcupine's bitset. No
 *   recursion: 100k ops on one key use heap, not stack. Puts and deletes
 *   without response need not be linearized at all (equivalent to placing
 *   them at the end). A get, or a delete that found nothing, changes no
 *   state wherever it is valid, so when it can be linearized it is, with
 *   no alternative tried (a sound pruning Porcupine does not do; checked
 *   against a brute-force search in test_lincheck).
 *
 * Cost (RelWithDebInfo, one core): linear in practice when the history is
 *   linearizable and few operations overlap on a key: 200k ops over 1000
 *   keys and 4 clients in about 0.1 s; 500k ops over 3000 keys in 0.2 s;
 *   200k ops on ONE key in 0.4 s (4 clients), 0.8 s (6), 1.3 s (8).
 *   Exponential in the number of mutually concurrent operations on one key
 *   in the worst case (16 clients all on one key: 20k ops take 20 s and
 *   1 GB), hence the time budget. Memory: 40 bytes per operation recorded;
 *   per key being checked, about 60 bytes per search step (memo) plus the
 *   pending set, reset for the next key (buffers are reused).
 *
 * Reports: for each key without a linearization, the longest linearizable
 *   prefix the search found, the operation that could not take effect
 *   there, the value the key held and which operation set it, the last
 *   operations linearized and the pending ones tried, plus a diagnosis
 *   when a simple pattern proves the violation (value never written; stale
 *   read: the value was overwritten or deleted by an operation that
 *   completed before the read began; lost update: a delete finds nothing
 *   after a put completed with no delete that could come in between).
 *   Operations are named by their index in the history ("op 12").
 *
 * Limits: the diagnosis is a heuristic on the blocked operation; the
 *   verdict is exact. A violation only says that some key has no
 *   linearization; the operation where the search got stuck is usually,
 *   not always, the culprit. The time budget covers the whole check; keys
 *   not searched when it runs out are counted in nunchecked.
 */
#ifndef FARM_TESTS_LINCHECK_H
#define FARM_TESTS_LINCHECK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The response time of an operation that never returned. */
#define LC_NO_RESPONSE UINT64_MAX

enum lc_kind {
	LC_GET = 1,     /* value and found: what it returned */
	LC_PUT = 2,     /* value: what it wrote; found is ignored */
	LC_DEL = 3,     /* found: whether the key existed */
	LC_DEL_ANY = 4, /* delete with no result recorded */
};

#define LC_MAX_EXAMPLES 8
#define LC_EXAMPLE_LEN  1536

struct lc_example {
	uint64_t key;
	char text[LC_EXAMPLE_LEN];
};

typedef struct lc_report {
	uint64_t nviolations; /* keys with no linearization */
	uint64_t ntimedout;   /* keys whose search ran out of budget */
	uint64_t nunchecked;  /* keys never searched: budget spent */
	size_t nexamples;     /* one per violating key, the first few */
	struct lc_example examples[LC_MAX_EXAMPLES];
	size_t ntimedout_keys; /* the first few keys that ran out */
	uint64_t timedout_keys[LC_MAX_EXAMPLES];
	/* What was checked. */
	uint64_t nops, nkeys, nno_response, ndropped_gets, nmget_gets;
	uint64_t max_key_ops; /* ops of the busiest key */
	uint64_t nsteps;      /* search steps (linearize or backtrack) */
	uint64_t nmemo;       /* memo entries, summed over keys */
	double elapsed_ms;
} lc_report;

typedef struct lc_history lc_history;

/* An empty history, or NULL without memory. */
lc_history *lc_new(void);
void lc_free(lc_history *h);

/*
 * Record one complete operation. @value: what a put wrote or what a get
 * returned (when @found); ignored otherwise. @found: a get's or LC_DEL's
 * result. @t_resp >= @t_inv, or LC_NO_RESPONSE. Returns the operation's
 * index (0, 1, ... in this history), or -EINVAL / -ENOMEM.
 */
int lc_op(lc_history *h, uint32_t client, enum lc_kind kind, uint64_t key,
          uint64_t value, bool found, uint64_t t_inv, uint64_t t_resp);

/* The same in two steps: lc_begin (with a put's value) returns the index;
 * lc_end fills the result (a get's value and found, LC_DEL's found). An
 * operation never ended has no response. */
int lc_begin(lc_history *h, uint32_t client, enum lc_kind kind, uint64_t key,
             uint64_t value_in, uint64_t t_inv);
int lc_end(lc_history *h, int op, uint64_t value_out, bool found,
           uint64_t t_resp);

/* A multi-get of @n keys: @values[i] / @found[i] what it returned for
 * keys[i]. Recorded as n gets with the same times (see above). Returns the
 * index of the first. */
int lc_mget(lc_history *h, uint32_t client, size_t n, const uint64_t *keys,
            const uint64_t *values, const bool *found, uint64_t t_inv,
            uint64_t t_resp);

/* Append every operation of @src to @dst (src is unchanged). Returns the
 * index in @dst of src's operation 0, or -ENOMEM / -EINVAL. */
int lc_merge(lc_history *dst, const lc_history *src);
size_t lc_nops(const lc_history *h);

/*
 * Check @h, giving up after about @timeout_ms (0: no limit). Returns 0 when
 * it is linearizable; the number of keys without a linearization (> 0,
 * saturating at INT_MAX) with details in *r, even when the budget ran out
 * on other keys (r->ntimedout says so); -ETIMEDOUT when no violation was
 * found but the budget ran out (r->timedout_keys, r->nunchecked);
 * -EINVAL on malformed input (a recording call failed earlier: errors are
 * sticky), -ENOMEM.
 */
int lc_check(const lc_history *h, lc_report *r, uint64_t timeout_ms);

void lc_report_print(FILE *f, const lc_report *r);

#endif
