/*
 * sercheck: a strict-serializability checker over recorded histories of
 * read/write registers with a KNOWN version order.
 *
 * Build: tests/harness/CMakeLists.txt builds the static library `farm_sercheck`
 * (sercheck.c, libc only; its include directory is public). A test links it
 * with  target_link_libraries(test_x PRIVATE farm_sercheck)  and includes
 * "sercheck.h". Recording is not thread-safe: give each thread its own
 * history and sc_merge() them before sc_check().
 *
 * History model
 *   A transaction has an invocation time and a completion time (uint64, any
 *   unit, one clock: CLOCK_MONOTONIC ns on one host, or logical), an outcome
 *   and a list of operations in program order:
 *     read(key, version)   it observed that version of the key;
 *     write(key, version)  it installed that version (committed) or tried to.
 *   Every committed write of a key installs a new version, strictly greater
 *   than the one before; version order is numeric order (gaps are fine).
 *   Version 0 is the initial value of every key: writing version 0 is
 *   malformed. A read-only transaction or a lock-free read is a transaction
 *   with reads only.
 *
 *   Writes of the same key twice in one transaction: only the last write (in
 *   program order) is installed; the earlier ones are intermediate. A read of
 *   a key after the transaction wrote it is internal: it must return the
 *   transaction's own latest write and adds no dependency edge.
 *
 * Outcomes
 *   SC_COMMITTED  checked in full.
 *   SC_ABORTED    its writes never exist; its reads are not checked.
 *   SC_UNKNOWN    indeterminate (the client died or timed out). It is treated
 *                 as committed if and only if some committed transaction
 *                 (or, transitively, an unknown one so treated) read a
 *                 version it wrote; otherwise as aborted. That is the most
 *                 permissive explanation: an unobserved write constrains
 *                 nobody. When several unknown transactions claim the
 *                 version read (and no committed one does), one that
 *                 installs no version a committed transaction installs
 *                 too is preferred: the other cannot have committed
 *                 without a duplicate version (a machine killed while it
 *                 committed a transaction that aborted, whose versions a
 *                 later transaction installed); then one that another
 *                 read needs anyway. An unknown transaction
 *                 treated as committed may
 *                 have finished at any time after its invocation, so its
 *                 completion time is ignored (it orders nothing after it in
 *                 real time); its invocation time still counts.
 *
 * Real time
 *   T1 precedes T2 when T1.t_done < T2.t_inv, strictly: equal timestamps
 *   mean concurrent. Only committed (and observed unknown) transactions take
 *   part.
 *
 * What sc_check() finds (enum sc_kind): reads of aborted or never-written
 * versions, intermediate reads, internal inconsistency, duplicate versions,
 * and cycles in the graph over committed transactions with edges ww (writer
 * of a version -> writer of the next installed version of that key), wr
 * (writer -> reader of the version), rw (reader of v -> writer of the next
 * installed version after v) and real-time. Each strongly connected
 * component with a cycle counts as one anomaly, classified by the cycle
 * found with the fewest kinds of edge: ww only (G0), ww/wr (G1c), one rw
 * (G-single: lost update, read skew), two or more rw (G2: write skew), or,
 * when every cycle needs a real-time edge, a real-time violation (stale
 * read). Graph algorithms are iterative (no recursion); real-time edges use
 * a chain of time-event nodes, so the graph has O(transactions + operations)
 * edges.
 *
 * Cost: 1M transactions / 5M operations check in about 2 s (RelWithDebInfo,
 * one core) with a peak RSS of about 450 MB, the history included (24 bytes
 * per operation, 32 per transaction); the transient part is about 60 bytes
 * per operation and 150 per transaction.
 *
 * Limits: the version order is trusted (the checker cannot find a wrong
 * order that is consistent). When several unknown transactions claim the
 * same (key, version), no committed one does and the preferences above do
 * not decide, a read of it is attributed to the first recorded: no search
 * for the set of unknowns that explains the history best.
 * Duplicate writers: edges use the first one. Each
 * cyclic SCC counts once, however many cycles it holds; its example is one
 * short cycle with the fewest kinds of edge, not every cycle. The count
 * returned by sc_check saturates at INT_MAX (r->total does not).
 */
#ifndef FARM_TESTS_SERCHECK_H
#define FARM_TESTS_SERCHECK_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

enum sc_outcome {
	SC_COMMITTED = 1,
	SC_ABORTED = 2,
	SC_UNKNOWN = 3,
};

enum sc_kind {
	SC_ABORTED_READ,      /* G1a: read a version only aborted txns wrote */
	SC_PHANTOM_VERSION,   /* read a version (not 0) nobody wrote */
	SC_INTERMEDIATE_READ, /* G1b: read a version later overwritten by
	                         its own writer in the same txn */
	SC_INTERNAL,          /* read after own write did not see that write */
	SC_DUPLICATE_VERSION, /* two committed txns installed (key, version) */
	SC_G0,                /* cycle of ww edges */
	SC_G1C,               /* cycle of ww/wr edges */
	SC_GSINGLE,           /* cycle with exactly one rw edge (lost update) */
	SC_G2,                /* cycle with two or more rw edges (write skew) */
	SC_REALTIME,          /* every cycle needs a real-time edge (stale
	                         read): serializable, not strictly */
	SC_NKINDS
};

#define SC_EXAMPLES_PER_KIND 4
#define SC_EXAMPLE_LEN       640

struct sc_example {
	enum sc_kind kind;
	char text[SC_EXAMPLE_LEN];
};

typedef struct sc_report {
	uint64_t total;            /* anomalies of every kind */
	uint64_t count[SC_NKINDS]; /* anomalies by kind */
	size_t nexamples;          /* first few of each kind, in order found */
	struct sc_example examples[SC_NKINDS * SC_EXAMPLES_PER_KIND];
	/* What was checked. */
	uint64_t ntxns, ncommitted, nunknown_included, nunknown_dropped;
	uint64_t naborted, nops, nnodes, nedges, nsccs_cyclic;
	double elapsed_ms;
} sc_report;

typedef struct sc_history sc_history;

/* An empty history, or NULL without memory. */
sc_history *sc_new(void);
void sc_free(sc_history *h);

/* Start a transaction invoked at @t_inv. Returns its index (0, 1, ... in
 * this history), or -ENOMEM / -EINVAL. */
int sc_txn_begin(sc_history *h, uint64_t t_inv);
/* Optional label (e.g. the transaction layer's id), printed in reports. */
int sc_txn_tag(sc_history *h, int txn, uint64_t tag);
/* Record operations, in program order, while the transaction is open. */
int sc_read(sc_history *h, int txn, uint64_t key, uint64_t version);
int sc_write(sc_history *h, int txn, uint64_t key, uint64_t version);
/* Finish it: @t_done >= t_inv. */
int sc_txn_end(sc_history *h, int txn, uint64_t t_done,
               enum sc_outcome outcome);

/*
 * Append every transaction of @src to @dst (src is unchanged). Returns the
 * index in @dst of src's transaction 0 (add it to src's indices), or
 * -ENOMEM / -EINVAL.
 */
int sc_merge(sc_history *dst, const sc_history *src);
size_t sc_ntxns(const sc_history *h);

/*
 * Check @h. Returns 0 when it is strictly serializable with respect to the
 * recorded version order, the number of anomalies (> 0) otherwise, with
 * details in *r; -EINVAL on malformed input (a recording call failed
 * earlier, or a transaction was never ended), -ENOMEM.
 * Every recording error is sticky: it is reported here as well.
 */
int sc_check(const sc_history *h, sc_report *r);

void sc_report_print(FILE *f, const sc_report *r);
const char *sc_kind_name(enum sc_kind k);

#endif
