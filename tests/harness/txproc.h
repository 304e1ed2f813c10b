/*
 * Test fixture on top of nodeproc.h: transactions on machine processes
 * with a recorded history for the strict-serializability checker
 * (sercheck.h), and the bank workload (tests/test_txn_multi.c,
 * tests/test_rec_bank.c). Defined in txproc.c.
 *
 * History: every transaction a machine runs is recorded as (tag, x, y)
 * triples: BEGIN (invocation time), READ and WRITE (key, version), END
 * (completion time, sc_outcome). A machine that streams its history
 * (tx_hist_stream) writes a transaction's records to <root>/hist-<me>
 * before it commits and again once it has ended, so the history of a
 * machine killed with SIGKILL holds every transaction it had begun to
 * commit; tx_check_history takes what it had not ended as unknown.
 */
#ifndef FARM_TESTS_TXPROC_H
#define FARM_TESTS_TXPROC_H

#include "nodeproc.h"

#include <fcntl.h>
#include <inttypes.h>

#include "sercheck.h"
#include "txn/txm.h"
#include "txn/txn_testing.h"
#include "util/fault.h"

#define TX_VSTEP 4u /* object versions step by 4 (txn/object.h) */

/* A machine process running transactions (child side). */
struct tx_child {
	struct np_child np; /* me, pipes, node, loop (nodeproc.h) */
	farm_txm *txm;
	/* History: (tag, x, y) triples, the first hout of them written to
	 * hfd (> 0 when streaming). */
	uint64_t *h;
	size_t hn, hcap, hout;
	int herr, hfd;
	enum sc_outcome last; /* the outcome of the last transaction ended */
};

enum { H_BEGIN = 1, H_READ, H_WRITE, H_END };

/* A machine's life with configuration @cfg: open it, run its loop on this
 * thread, wait (at most @join_ms) until the cluster has its NP_NM machines,
 * say 'R' and run @role; then close. Its exit status: @role's, or 4 (open
 * failed), 5 (start), 6 (join), 7 (the parent went away). */
int tx_child_run(struct tx_child *c, const struct farm_config *cfg, int join_ms,
                 int (*role)(struct tx_child *c));

/* tx_child_run, waiting for @members machines instead of NP_NM (a
 * cluster restarted without the machines it lost). */
int tx_child_run_n(struct tx_child *c, const struct farm_config *cfg,
                   int join_ms, unsigned members,
                   int (*role)(struct tx_child *c));

uint64_t tx_rnd(struct tx_child *c);

void hput(struct tx_child *c, uint64_t tag, uint64_t x, uint64_t y);

/* What a commit's outcome means to the checker: 0 committed, any error
 * not committed (FARM_EPEERDEAD and -ETIMEDOUT included: a commit reports
 * them only after its ABORT records landed; recovery keeps that). */
enum sc_outcome sc_of(int outcome);

void tx_hist_path(const struct np_cluster *cl, unsigned i, char *path,
                  size_t len);

/* Write the records not yet written (streaming only). */
void tx_hist_flush(struct tx_child *c);

/* From now on, stream the history to its file. */
int tx_hist_stream(struct tx_child *c);

/* From now on, stream the history to its file after what an earlier
 * incarnation of this machine left there (a machine restarted on its
 * data directory; the parent sealed the file first: tx_hist_seal). */
int tx_hist_resume(struct tx_child *c);

/*
 * Parent: the history of machine @i, killed with SIGKILL, made whole for
 * a new incarnation that appends to it (tx_hist_resume): a torn last
 * record dropped, and a transaction it had not ended ended as unknown, at
 * its invocation time, as tx_check_history takes a killed machine's.
 * Returns 1 when it ended one, 0 when none was open, -1 (I/O).
 */
int tx_hist_seal(const struct np_cluster *cl, unsigned i);

/* The whole history in its file (at the end of a machine's run). */
int tx_hist_save(struct tx_child *c);

/* Fat pointers of @n new objects of @size bytes on this machine, each
 * filled by @fill, in transactions of up to 16 (recorded); written to
 * <root>/<tag>-<me>. */
int create_objs(struct tx_child *c, const char *tag, unsigned n, uint32_t size,
                void (*fill)(void *data, uint32_t size, farm_fatptr p,
                             void *arg),
                void *arg, farm_fatptr *out);

/* Every machine's objects of @tag (after the parent's 'G'). */
farm_fatptr *load_objs(struct tx_child *c, const char *tag, unsigned *n);

/* Every machine makes @n objects (create_objs, into @mine), says 'C' and
 * waits for the parent's 'G' (p_setup): every machine's objects, NP_NM * @n
 * of them (NULL when a step failed). */
farm_fatptr *
share_objs(struct tx_child *c, const char *tag, unsigned n, uint32_t size,
           void (*fill)(void *data, uint32_t size, farm_fatptr p, void *arg),
           void *arg, farm_fatptr *mine);

/* The parent side of setup: every machine joined, created, then 'G'. */
void p_setup(struct np_cluster *cl);

/* Called for every write of a committed transaction while replaying. */
typedef void (*tx_write_fn)(void *ctx, uint64_t key, uint64_t version);

/*
 * Replay the machines' recorded histories into one and check it. The
 * machines of @killed (bit i: machine i; 0: none) may stop anywhere: a
 * transaction one had not ended is unknown, and *@cut counts them. Every
 * write of a committed transaction goes to @on_write (may be NULL).
 * Returns sc_check's count.
 */
int tx_check_history(struct np_cluster *cl, uint64_t killed, sc_report *rep,
                     uint64_t *cut, tx_write_fn on_write, void *ctx);

/*
 * Machine @i's history from byte *@off on (a transaction's first record,
 * 0 at first): every write of each transaction that ended committed goes
 * to @on_write, and *@off moves past the last transaction that ended; one
 * still open (a machine killed in it, its file not sealed yet) waits for
 * the next call. A history only grows (streamed, resumed, sealed: appends
 * and a torn record's cut, never before an END), so calls over successive
 * pauses see each committed write once, at a cost of what is new. Returns
 * the transactions read, 0 when the file does not exist yet, or -1 (I/O,
 * a file shorter than *@off, a bad record).
 */
long tx_hist_committed_since(const struct np_cluster *cl, unsigned i,
                             uint64_t *off, tx_write_fn on_write, void *ctx);

/* ---- the bank -------------------------------------------------------- */

#define INIT_BALANCE 100

/* What a machine's bank workload did. */
struct bank_counts {
	uint64_t transfers, single, declined, attempts, aborts;
	uint64_t timeouts, peerdead; /* commits that ended so (then retried) */
	uint64_t failed; /* transfers given up: another error, or time */
	uint64_t lf_reads, lf_bad, ro_txns, ro_aborts, ro_failed, negative;
	struct tu_errs errs; /* the errors that were not retryable */
};

void bank_counts_add(struct bank_counts *t, const struct bank_counts *s);

/* Count error @rc (and say the first 5 of a machine on stderr). */
void bank_error(struct tx_child *c, struct bank_counts *k, const char *what,
                int rc);

void fill_account(void *d, uint32_t size, farm_fatptr p, void *arg);

int64_t bal(const void *d);

/* Begin a recorded transaction. */
int tx_begin(struct tx_child *c, farm_tx **tx);

/* End a recorded transaction: @rc, and whether it came from the commit. */
int tx_end(struct tx_child *c, farm_tx *tx, int rc, bool committing);

/* One attempt at a transfer of @amt from @a to @b (*@declined: @a has too
 * little). */
int transfer(struct tx_child *c, struct bank_counts *k, farm_gaddr a,
             farm_gaddr b, int64_t amt, bool *declined);

/* A read-only transaction over @n accounts: the first @n of @acc when @n
 * is @nacc, else random ones. */
int ro_sum(struct tx_child *c, struct bank_counts *k, const farm_fatptr *acc,
           unsigned nacc, unsigned n, int64_t *sum, int64_t *minb);

/* A lock-free read of the account at @a, recorded when it succeeds (its
 * version in *@version). */
int lf_account(struct tx_child *c, farm_gaddr a, int64_t *b, uint64_t *version);

/*
 * One step of the bank workload on machine @c: a transfer (70%; a fifth of
 * them between two of its own @mine), retried while the outcome is
 * retryable (with a growing backoff) until @give_up_ns after its start; a
 * lock-free read (20%); or a read-only sum of 5 accounts (10%).
 */
void bank_step(struct tx_child *c, struct bank_counts *k,
               const farm_fatptr *mine, unsigned nmine, const farm_fatptr *acc,
               unsigned nacc, uint64_t give_up_ns);

#endif
