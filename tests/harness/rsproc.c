#include "rsproc.h"

#include <sys/wait.h>

struct rs_params rs_p;

/* ---- the machines ---------------------------------------------------- */

int rs_config(struct np_child *np, struct farm_config *cfg)
{
	int st = np_config_zk(np, "16M", rs_p.zk_connect, rs_p.zk_root,
	                      rs_p.session_ms, rs_p.lease_us, cfg);
	cfg->replicas = 3;
	if (rs_p.configure)
		rs_p.configure(cfg);
	return st;
}

void rs_fill(void *d, uint32_t size, farm_fatptr p, void *arg)
{
	(void)arg;
	memset(d, (int)(p.addr & 0x7f) | 1, size);
}

static void count_rec(void *ctx, uint32_t coord, int type, uint64_t txid)
{
	(void)coord;
	(void)txid;
	if (type != FARM_TXN_TESTING_TRUNCATE)
		(*(uint64_t *)ctx)++;
}

/* Once every machine sent its TRUNCATE records ('F'): the records of
 * transactions left in this machine's logs, once none is or after
 * rs_p.step_ms. */
static uint64_t records_left(struct tx_child *c)
{
	static const volatile int never = 0;
	uint64_t dl = np_now_ns() + (uint64_t)rs_p.step_ms * 1000000ull, n;
	for (;;) {
		n = 0;
		(void)farm_txm_testing_records(c->txm, count_rec, &n);
		if (!n || np_now_ns() > dl)
			return n;
		/* The loop serves the peers meanwhile: their TRUNCATE
		 * records are what empties these logs. */
		(void)farm_loop_wait(c->np.loop, &never, 1000000ull);
	}
}

/* One of rs_serve's own commands: 0 served, RS_UNKNOWN, or the exit
 * status of a failure. */
static int serve_own(struct tx_child *c, int cmd)
{
	if (cmd == 'g') {
		struct held_report *h = calloc(1, sizeof(*h));
		if (!h)
			return 30;
		rp_held(c, h);
		int rc = np_say(&c->np, 'G', h, sizeof(*h));
		free(h);
		return rc ? 31 : 0;
	}
	if (cmd == 'F') {
		(void)farm_txm_testing_truncate(c->txm, c->np.loop);
		return np_say(&c->np, 'f', NULL, 0) ? 32 : 0;
	}
	if (cmd == 'h') {
		uint64_t left = records_left(c);
		return np_say(&c->np, 'H', &left, sizeof(left)) ? 33 : 0;
	}
	return RS_UNKNOWN;
}

int rs_serve(struct tx_child *c)
{
	for (;;) {
		int cmd = np_wait_cmd(&c->np);
		if (cmd == 'Q')
			return 0;
		int st = serve_own(c, cmd);
		if (st == RS_UNKNOWN)
			st = rs_p.cmd ? rs_p.cmd(c, cmd) : RS_UNKNOWN;
		if (st == RS_UNKNOWN)
			return 34; /* the parent gone (-1), or a stray byte */
		if (st)
			return st;
	}
}

/* Either incarnation: configured, armed, joined, then @role. */
static int machine(struct np_child *np, bool restarted, unsigned members,
                   int (*role)(struct tx_child *c))
{
	struct tx_child c = {.np = *np};
	struct farm_config cfg;
	int st = rs_config(np, &cfg);
	if (st)
		return st;
	if (rs_p.arm && rs_p.arm(restarted))
		return 9;
	return tx_child_run_n(&c, &cfg, rs_p.join_ms, members, role);
}

int rs_first_machine(struct np_child *np, void *arg)
{
	(void)arg;
	return machine(np, false, np_nm, rs_p.first_role);
}

int rs_restarted_machine(struct np_child *np, void *arg)
{
	(void)arg;
	return machine(np, true, np_nm - 1, rs_p.restart_role);
}

/* ---- the parent ------------------------------------------------------ */

struct held_report *rs_ask_held(struct np_cluster *cl, unsigned i)
{
	struct held_report *h = malloc(sizeof(*h));
	assert_non_null(h);
	np_send(cl, i, 'g');
	np_expect(cl, i, 'G', 10000);
	np_recv(cl, i, h, sizeof(*h), 1000);
	return h;
}

uint64_t rs_truncate(struct np_cluster *cl, uint64_t in)
{
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1) {
			np_send(cl, i, 'F');
			np_expect(cl, i, 'f', 10000);
		}
	uint64_t left = 0;
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1) {
			uint64_t n;
			np_send(cl, i, 'h');
			np_expect(cl, i, 'H', rs_p.step_ms + 10000);
			np_recv(cl, i, &n, sizeof(n), 1000);
			left += n;
		}
	return left;
}

uint64_t rs_power_loss(struct np_cluster *cl, uint64_t in)
{
	/* Every machine stopped before any is killed: none sees another
	 * die and acts on it (a recovery round) before the power loss. */
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1)
			assert_int_equal(kill(cl->pid[i], SIGSTOP), 0);
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1)
			assert_int_equal(kill(cl->pid[i], SIGKILL), 0);
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1)
			np_reap_killed(cl, i);
	uint64_t t_kill = np_now_ns();
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1)
			np_spawn_one(cl, i, rs_restarted_machine, NULL);
	for (unsigned i = 0; i < np_nm; i++)
		if ((in >> i) & 1)
			np_expect(cl, i, 'R', rs_p.join_ms + 30000);
	return np_now_ns() - t_kill;
}

int rs_await_replicated(struct np_cluster *cl, uint64_t in, unsigned ms,
                        char *why, size_t len, unsigned *nregions,
                        struct held_report **last)
{
	uint64_t dl = np_now_ns() + (uint64_t)ms * 1000000ull;
	for (;;) {
		struct held_report *r[NP_MAX] = {0};
		for (unsigned i = 0; i < np_nm; i++)
			if ((in >> i) & 1)
				r[i] = rs_ask_held(cl, i);
		bool ok = rp_replicated(r, in, 3, 0, why, len, nregions);
		bool done = ok || np_now_ns() > dl;
		for (unsigned i = 0; i < np_nm; i++) {
			if (done && last)
				last[i] = r[i];
			else
				free(r[i]);
		}
		if (done)
			return ok ? 0 : -1;
		np_pause_ms(20);
	}
}
