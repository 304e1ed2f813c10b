#include "txproc.h"

#include <sys/stat.h>
#include <unistd.h>

int tx_child_run(struct tx_child *c, const struct farm_config *cfg, int join_ms,
                 int (*role)(struct tx_child *c))
{
	return tx_child_run_n(c, cfg, join_ms, np_nm, role);
}

int tx_child_run_n(struct tx_child *c, const struct farm_config *cfg,
                   int join_ms, unsigned members,
                   int (*role)(struct tx_child *c))
{
	if (farm_node_open(cfg, &c->np.node))
		return 4;
	farm_node_set_app_loops(c->np.node, true);
	int st = 5;
	if (farm_node_start(c->np.node, join_ms) ||
	    farm_node_loop_open(c->np.node, 0, &c->np.loop))
		goto out;
	st = 6;
	if (farm_node_wait_members(c->np.node, members, join_ms))
		goto out;
	c->txm = farm_node_txm(c->np.node);
	st = np_ready(&c->np) ? 7 : role(c);
out:
	if (c->np.loop)
		farm_node_loop_close(c->np.node, c->np.loop);
	farm_node_close(c->np.node);
	free(c->h);
	if (c->hfd > 0)
		close(c->hfd);
	return st;
}

uint64_t tx_rnd(struct tx_child *c)
{
	return farm_rand64(&c->np.rng);
}

void hput(struct tx_child *c, uint64_t tag, uint64_t x, uint64_t y)
{
	if (c->hn + 3 > c->hcap) {
		size_t nc = c->hcap ? c->hcap * 2 : 3u << 16;
		uint64_t *nh = realloc(c->h, nc * sizeof(*nh));
		if (!nh) {
			c->herr = 1;
			return;
		}
		c->h = nh;
		c->hcap = nc;
	}
	c->h[c->hn++] = tag;
	c->h[c->hn++] = x;
	c->h[c->hn++] = y;
	if (tag == H_END)
		c->last = (enum sc_outcome)y;
}

enum sc_outcome sc_of(int outcome)
{
	return outcome == 0 ? SC_COMMITTED : SC_ABORTED;
}

void tx_hist_path(const struct np_cluster *cl, unsigned i, char *path,
                  size_t len)
{
	snprintf(path, len, "%s/hist-%u", cl->root, i);
}

void tx_hist_flush(struct tx_child *c)
{
	if (c->hfd <= 0 || c->hout == c->hn)
		return;
	if (tu_send(c->hfd, c->h + c->hout, (c->hn - c->hout) * 8))
		c->herr = 1;
	c->hout = c->hn;
}

int tx_hist_stream(struct tx_child *c)
{
	char path[512];
	tx_hist_path(c->np.cl, c->np.me, path, sizeof(path));
	c->hfd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND, 0600);
	return c->hfd > 0 ? 0 : -1;
}

int tx_hist_resume(struct tx_child *c)
{
	char path[512];
	tx_hist_path(c->np.cl, c->np.me, path, sizeof(path));
	c->hfd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
	return c->hfd > 0 ? 0 : -1;
}

int tx_hist_seal(const struct np_cluster *cl, unsigned i)
{
	char path[512];
	size_t len;
	tx_hist_path(cl, i, path, sizeof(path));
	uint64_t *v = np_read_file(path, &len);
	size_t n = len / sizeof(*v);
	n -= n % 3;
	if (truncate(path, (off_t)(n * sizeof(*v)))) {
		free(v);
		return -1;
	}
	bool open_txn = false;
	uint64_t t_inv = 0;
	for (size_t k = 0; k < n; k += 3)
		if (v[k] == H_BEGIN) {
			open_txn = true;
			t_inv = v[k + 1];
		} else if (v[k] == H_END) {
			open_txn = false;
		}
	free(v);
	if (!open_txn)
		return 0;
	uint64_t end[3] = {H_END, t_inv, SC_UNKNOWN};
	int fd = open(path, O_WRONLY | O_APPEND);
	int rc = fd >= 0 && !tu_send(fd, end, sizeof(end)) ? 1 : -1;
	if (fd >= 0 && close(fd))
		rc = -1;
	return rc;
}

int tx_hist_save(struct tx_child *c)
{
	if (c->hfd > 0) {
		tx_hist_flush(c);
		if (close(c->hfd))
			c->herr = 1;
		c->hfd = 0;
		return c->herr ? -1 : 0;
	}
	char path[512];
	tx_hist_path(c->np.cl, c->np.me, path, sizeof(path));
	return c->herr || np_write_file(path, c->h, c->hn * sizeof(uint64_t))
	               ? -1
	               : 0;
}

int create_objs(struct tx_child *c, const char *tag, unsigned n, uint32_t size,
                void (*fill)(void *data, uint32_t size, farm_fatptr p,
                             void *arg),
                void *arg, farm_fatptr *out)
{
	for (unsigned done = 0; done < n;) {
		unsigned k = FARM_MIN(16u, n - done);
		uint64_t t0 = np_now_ns();
		farm_tx *tx;
		if (farm_tx_begin(c->txm, c->np.loop, &tx))
			return -1;
		for (unsigned j = 0; j < k; j++) {
			void *d;
			if (farm_tx_alloc_sync(tx, size, FARM_GADDR_NULL,
			                       &out[done + j], &d))
				return -2;
			fill(d, size, out[done + j], arg);
		}
		hput(c, H_BEGIN, t0, 0);
		for (unsigned j = 0; j < k; j++)
			hput(c, H_WRITE, out[done + j].addr,
			     farm_tx_testing_version(tx, out[done + j].addr) +
			             TX_VSTEP);
		tx_hist_flush(c);
		int rc = farm_tx_commit_sync(tx);
		hput(c, H_END, np_now_ns(), sc_of(rc));
		tx_hist_flush(c);
		farm_tx_free(tx);
		if (rc == 0)
			done += k;
		else if (!farm_tx_retryable(rc))
			return -3;
	}
	char path[512];
	snprintf(path, sizeof(path), "%s/%s-%u", c->np.cl->root, tag, c->np.me);
	return np_write_file(path, out, n * sizeof(*out));
}

farm_fatptr *load_objs(struct tx_child *c, const char *tag, unsigned *n)
{
	farm_fatptr *all = NULL;
	unsigned total = 0;
	for (uint32_t i = 0; i < np_nm; i++) {
		char path[512];
		size_t len;
		snprintf(path, sizeof(path), "%s/%s-%u", c->np.cl->root, tag,
		         i);
		farm_fatptr *p = np_read_file(path, &len);
		if (!p)
			continue;
		unsigned k = (unsigned)(len / sizeof(*p));
		farm_fatptr *na = realloc(all, (total + k + 1) * sizeof(*na));
		if (!na) {
			free(p);
			free(all);
			return NULL;
		}
		all = na;
		memcpy(all + total, p, k * sizeof(*p));
		total += k;
		free(p);
	}
	*n = total;
	return all;
}

farm_fatptr *
share_objs(struct tx_child *c, const char *tag, unsigned n, uint32_t size,
           void (*fill)(void *data, uint32_t size, farm_fatptr p, void *arg),
           void *arg, farm_fatptr *mine)
{
	if (create_objs(c, tag, n, size, fill, arg, mine) ||
	    np_say(&c->np, 'C', NULL, 0) || np_wait_cmd(&c->np) != 'G')
		return NULL;
	unsigned all;
	farm_fatptr *p = load_objs(c, tag, &all);
	if (p && all != np_nm * n) {
		free(p);
		p = NULL;
	}
	return p;
}

void p_setup(struct np_cluster *cl)
{
	for (unsigned i = 0; i < np_nm; i++)
		np_expect(cl, i, 'R', 60000);
	for (unsigned i = 0; i < np_nm; i++)
		np_expect(cl, i, 'C', 60000);
	for (unsigned i = 0; i < np_nm; i++)
		np_send(cl, i, 'G');
}

int tx_check_history(struct np_cluster *cl, uint64_t killed, sc_report *rep,
                     uint64_t *cut, tx_write_fn on_write, void *ctx)
{
	sc_history *h = sc_new();
	assert_non_null(h);
	if (cut)
		*cut = 0;
	/* Which machine's each T<index> of the report is, and the unknowns:
	 * printed only with anomalies. */
	char who[96 * NP_MAX] = "";
	size_t wl = 0;
	for (unsigned i = 0; i < np_nm; i++) {
		size_t t0 = sc_ntxns(h);
		char path[512];
		size_t len;
		tx_hist_path(cl, i, path, sizeof(path));
		uint64_t *v = np_read_file(path, &len);
		size_t n = len / sizeof(*v);
		if (!((killed >> i) & 1)) {
			if (!v)
				fail_msg("machine %u: no history in %s: %s", i,
				         path, strerror(errno));
			assert_int_equal(n % 3, 0);
		}
		n -= n % 3;
		int t = -1;
		uint64_t t_inv = 0;
		size_t first = 0; /* the open transaction's first record */
		for (size_t k = 0; k < n; k += 3) {
			switch (v[k]) {
			case H_BEGIN:
				if (t >= 0) /* only a killed machine's */
					fail_msg("machine %u: BEGIN inside a "
					         "transaction",
					         i);
				t = sc_txn_begin(h, v[k + 1]);
				t_inv = v[k + 1];
				first = k;
				break;
			case H_READ: sc_read(h, t, v[k + 1], v[k + 2]); break;
			case H_WRITE: sc_write(h, t, v[k + 1], v[k + 2]); break;
			case H_END:
				sc_txn_end(h, t, v[k + 1],
				           (enum sc_outcome)v[k + 2]);
				for (size_t j = first; on_write && j < k;
				     j += 3)
					if (v[j] == H_WRITE &&
					    v[k + 2] == SC_COMMITTED)
						on_write(ctx, v[j + 1],
						         v[j + 2]);
				t = -1;
				continue;
			default: fail_msg("bad history record %" PRIu64, v[k]);
			}
			assert_true(t >= 0);
		}
		if (t >= 0) {
			if (!((killed >> i) & 1))
				fail_msg("machine %u: its history ends inside "
				         "a transaction",
				         i);
			sc_txn_end(h, t, t_inv, SC_UNKNOWN);
			if (cut)
				(*cut)++;
		}
		free(v);
		if (wl < sizeof(who) && sc_ntxns(h) > t0)
			wl += (size_t)snprintf(
			        who + wl, sizeof(who) - wl,
			        "%s machine %u: T%zu-T%zu%s", wl ? "," : "", i,
			        t0, sc_ntxns(h) - 1,
			        t >= 0 ? " (the last unknown)" : "");
	}
	int rc = sc_check(h, rep);
	sc_free(h);
	assert_true(rc >= 0);
	if (rc)
		printf("sercheck: transactions by machine:%s\n", who);
	return rc;
}

/* The records of machine @i's history from byte @off on, in *@n records
 * (NULL with *@n 0 when none; -1 in *@n on error). */
static uint64_t *hist_tail(const struct np_cluster *cl, unsigned i,
                           uint64_t off, size_t *n)
{
	char path[512];
	tx_hist_path(cl, i, path, sizeof(path));
	*n = 0;
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return NULL;
	struct stat st;
	uint64_t *v = NULL;
	if (fstat(fd, &st) || (uint64_t)st.st_size < off) {
		*n = (size_t)-1;
	} else if ((uint64_t)st.st_size > off) {
		size_t len = (size_t)((uint64_t)st.st_size - off);
		v = malloc(len);
		if (!v || pread(fd, v, len, (off_t)off) != (ssize_t)len) {
			free(v);
			v = NULL;
			*n = (size_t)-1;
		} else {
			*n = len / sizeof(*v);
		}
	}
	close(fd);
	return v;
}

long tx_hist_committed_since(const struct np_cluster *cl, unsigned i,
                             uint64_t *off, tx_write_fn on_write, void *ctx)
{
	size_t n;
	uint64_t *v = hist_tail(cl, i, *off, &n);
	if (n == (size_t)-1)
		return -1;
	n -= n % 3; /* a record being written: next time */
	long ended = 0;
	size_t first = 0, done = 0;
	bool open_txn = false;
	for (size_t k = 0; k < n; k += 3) {
		if (v[k] == H_BEGIN) {
			if (open_txn) { /* a killed machine's, not sealed */
				free(v);
				return -1;
			}
			open_txn = true;
			first = k;
		} else if (v[k] == H_END && open_txn) {
			for (size_t j = first; j < k; j += 3)
				if (v[j] == H_WRITE && v[k + 2] == SC_COMMITTED)
					on_write(ctx, v[j + 1], v[j + 2]);
			open_txn = false;
			done = k + 3;
			ended++;
		} else if (v[k] < H_BEGIN || v[k] > H_END || !open_txn) {
			free(v);
			return -1;
		}
	}
	free(v);
	*off += done * sizeof(uint64_t);
	return ended;
}

void bank_counts_add(struct bank_counts *t, const struct bank_counts *s)
{
	t->transfers += s->transfers;
	t->single += s->single;
	t->declined += s->declined;
	t->attempts += s->attempts;
	t->aborts += s->aborts;
	t->timeouts += s->timeouts;
	t->peerdead += s->peerdead;
	t->failed += s->failed;
	t->lf_reads += s->lf_reads;
	t->lf_bad += s->lf_bad;
	t->ro_txns += s->ro_txns;
	t->ro_aborts += s->ro_aborts;
	t->ro_failed += s->ro_failed;
	t->negative += s->negative;
}

void bank_error(struct tx_child *c, struct bank_counts *k, const char *what,
                int rc)
{
	if (tu_errs_add(&k->errs, rc) <= 5)
		fprintf(stderr, "m%u: %s: %s\n", c->np.me, what,
		        farm_strerror(rc));
}

void fill_account(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)size;
	(void)p;
	(void)arg;
	int64_t b = INIT_BALANCE;
	memcpy(d, &b, 8);
}

int64_t bal(const void *d)
{
	int64_t b;
	memcpy(&b, d, 8);
	return b;
}

int tx_begin(struct tx_child *c, farm_tx **tx)
{
	uint64_t t0 = np_now_ns();
	int rc = farm_tx_begin(c->txm, c->np.loop, tx);
	if (!rc)
		hput(c, H_BEGIN, t0, 0);
	return rc;
}

int tx_end(struct tx_child *c, farm_tx *tx, int rc, bool committing)
{
	hput(c, H_END, np_now_ns(), committing ? sc_of(rc) : SC_ABORTED);
	tx_hist_flush(c);
	farm_tx_free(tx);
	return rc;
}

int transfer(struct tx_child *c, struct bank_counts *k, farm_gaddr a,
             farm_gaddr b, int64_t amt, bool *declined)
{
	farm_tx *tx;
	int rc = tx_begin(c, &tx);
	if (rc)
		return rc;
	const void *da, *db;
	rc = farm_tx_read_sync(tx, a, 64, &da);
	if (!rc) {
		hput(c, H_READ, a, farm_tx_testing_version(tx, a));
		rc = farm_tx_read_sync(tx, b, 64, &db);
	}
	if (!rc)
		hput(c, H_READ, b, farm_tx_testing_version(tx, b));
	if (!rc && (bal(da) < 0 || bal(db) < 0))
		k->negative++;
	*declined = !rc && bal(da) < amt;
	if (!rc && !*declined) {
		void *wa, *wb;
		if (farm_tx_write(tx, a, &wa) || farm_tx_write(tx, b, &wb)) {
			rc = -EPROTO;
		} else {
			int64_t na = bal(wa) - amt, nb = bal(wb) + amt;
			memcpy(wa, &na, 8);
			memcpy(wb, &nb, 8);
			hput(c, H_WRITE, a,
			     farm_tx_testing_version(tx, a) + TX_VSTEP);
			hput(c, H_WRITE, b,
			     farm_tx_testing_version(tx, b) + TX_VSTEP);
		}
	}
	if (rc)
		return tx_end(c, tx, rc, false);
	tx_hist_flush(c); /* what it may commit, before it does */
	return tx_end(c, tx, farm_tx_commit_sync(tx), true);
}

int ro_sum(struct tx_child *c, struct bank_counts *k, const farm_fatptr *acc,
           unsigned nacc, unsigned n, int64_t *sum, int64_t *minb)
{
	farm_tx *tx;
	int rc = tx_begin(c, &tx);
	if (rc)
		return rc;
	*sum = 0;
	*minb = INT64_MAX;
	for (unsigned j = 0; j < n; j++) {
		farm_gaddr a = acc[n == nacc ? j : tx_rnd(c) % nacc].addr;
		const void *d;
		rc = farm_tx_read_sync(tx, a, 64, &d);
		if (rc)
			return tx_end(c, tx, rc, false);
		hput(c, H_READ, a, farm_tx_testing_version(tx, a));
		*sum += bal(d);
		*minb = FARM_MIN(*minb, bal(d));
		if (bal(d) < 0)
			k->negative++;
	}
	return tx_end(c, tx, farm_tx_commit_sync(tx), true);
}

int lf_account(struct tx_child *c, farm_gaddr a, int64_t *b, uint64_t *version)
{
	uint8_t buf[64];
	uint64_t t1 = np_now_ns();
	int rc = farm_lf_testing_read_sync(c->txm, c->np.loop, a, 64,
	                                   UINT64_MAX, buf, version);
	if (rc)
		return rc;
	hput(c, H_BEGIN, t1, 0);
	hput(c, H_READ, a, *version);
	hput(c, H_END, np_now_ns(), SC_COMMITTED);
	tx_hist_flush(c);
	*b = bal(buf);
	return 0;
}

void bank_step(struct tx_child *c, struct bank_counts *k,
               const farm_fatptr *mine, unsigned nmine, const farm_fatptr *acc,
               unsigned nacc, uint64_t give_up_ns)
{
	unsigned dice = (unsigned)(tx_rnd(c) % 100);
	if (dice < 70) {
		const farm_fatptr *set = dice < 14 ? mine : acc;
		unsigned nset = dice < 14 ? nmine : nacc;
		farm_gaddr a = set[tx_rnd(c) % nset].addr, b;
		do
			b = set[tx_rnd(c) % nset].addr;
		while (b == a);
		int64_t amt = 1 + (int64_t)(tx_rnd(c) % (INIT_BALANCE / 5));
		uint64_t give_up = np_now_ns() + give_up_ns;
		for (unsigned tries = 0;; tries++) {
			bool declined;
			k->attempts++;
			if (tries) {
				/* Back off (serving the loop) so a transfer
				 * is not starved by a lock a descheduled
				 * machine holds. */
				static const volatile int never = 0;
				uint64_t bo = 1000ull << FARM_MIN(tries, 10u);
				(void)farm_loop_wait(c->np.loop, &never, bo);
			}
			int rc = transfer(c, k, a, b, amt, &declined);
			if (rc == 0) {
				if (declined) {
					k->declined++;
				} else {
					k->transfers++;
					k->single += dice < 14;
				}
				return;
			}
			k->aborts++;
			/* Counted, and retried like any retryable outcome. */
			if (rc == -ETIMEDOUT)
				k->timeouts++;
			else if (rc == FARM_EPEERDEAD)
				k->peerdead++;
			if (!farm_tx_retryable(rc) || np_now_ns() > give_up) {
				k->failed++;
				bank_error(c, k, "transfer", rc);
				return;
			}
		}
	} else if (dice < 90) {
		int64_t b;
		uint64_t v;
		int rc = lf_account(c, acc[tx_rnd(c) % nacc].addr, &b, &v);
		k->lf_reads++;
		if (rc) {
			k->lf_bad++;
			bank_error(c, k, "lock-free read", rc);
		} else if (b < 0) {
			k->negative++;
		}
	} else {
		int64_t sum, minb;
		int rc = ro_sum(c, k, acc, nacc, 5, &sum, &minb);
		k->ro_txns++;
		if (rc) {
			k->ro_aborts++;
			if (!farm_tx_retryable(rc)) {
				k->ro_failed++;
				bank_error(c, k, "read-only", rc);
			}
		}
	}
}
