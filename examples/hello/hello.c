/*
 * hello: a first libfarm program, on the public API only. Every process
 * is a machine: run one copy per machine, each with its own configuration
 * file (docs/config.md); `run-local` beside this file starts three here.
 *
 * Each machine opens itself from its file, joins the KV store, puts and
 * gets a key, and adds one to a shared counter in a transaction that
 * reads two objects and writes one, retried by farm_tx_run. Barriers
 * (one-way messages) order the steps: machine 0 makes the counter before
 * anyone adds, and nobody leaves while another still uses its memory.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <farm/farm.h>

#define HELLO_BARRIER 1 /* a message type of ours: "I reached barrier N" */

static unsigned arrived[4]; /* per barrier; our loop's thread counts them */

static void on_barrier(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop, (void)arg;
	uint32_t phase;
	if (in->len == sizeof(phase) &&
	    (memcpy(&phase, in->payload, 4), phase < 4))
		arrived[phase]++;
}

static int barrier(farm_loop *loop, unsigned n, uint32_t me, uint32_t phase)
{
	int rc;
	for (uint32_t m = 0; m < n; m++)
		if (m != me && (rc = farm_msg_send(loop, m, 0, HELLO_BARRIER,
		                                   &phase, sizeof(phase))))
			return rc;
	farm_loop_flush(loop);
	for (int i = 0; i < 30000 && arrived[phase] < n - 1; i++)
		(void)farm_loop_wait(loop, &(volatile int){0}, 1000000);
	return arrived[phase] == n - 1 ? 0 : -ETIMEDOUT;
}

struct counter {
	farm_fatptr total, step; /* two 8-byte objects: total += step */
};

static int make_counter(farm_tx *tx, void *arg)
{
	struct counter *c = arg;
	void *t, *s;
	int rc = farm_tx_alloc_sync(tx, 8, FARM_GADDR_NULL, &c->total, &t);
	if (!rc)
		rc = farm_tx_alloc_sync(tx, 8, FARM_GADDR_NULL, &c->step, &s);
	if (rc)
		return rc;
	memcpy(t, &(uint64_t){0}, 8);
	memcpy(s, &(uint64_t){1}, 8);
	return 0;
}

static int add_step(farm_tx *tx, void *arg)
{
	struct counter *c = arg;
	const void *t, *s;
	void *w;
	int rc = farm_tx_read_sync(tx, c->total.addr, 8, &t);
	if (!rc)
		rc = farm_tx_read_sync(tx, c->step.addr, 8, &s);
	if (!rc)
		rc = farm_tx_write(tx, c->total.addr, &w);
	if (rc)
		return rc; /* a retryable error is tried again by farm_tx_run */
	uint64_t total, step;
	memcpy(&total, t, 8), memcpy(&step, s, 8);
	total += step;
	memcpy(w, &total, 8);
	return 0;
}

/* Machine 0 makes the counter and names it in the KV store's directory. */
static int share_counter(farm_node *node, farm_kv *kv, farm_loop *loop,
                         struct counter *c)
{
	int rc = farm_tx_run(farm_node_txm(node), loop, make_counter, c, 0);
	if (!rc)
		rc = farm_kv_name_sync(kv, loop, "hello.total", c->total);
	if (!rc)
		rc = farm_kv_name_sync(kv, loop, "hello.step", c->step);
	return rc;
}

static int lookup_counter(farm_kv *kv, farm_loop *loop, struct counter *c)
{
	int rc = farm_kv_lookup_sync(kv, loop, "hello.total", &c->total);
	return rc ? rc : farm_kv_lookup_sync(kv, loop, "hello.step", &c->step);
}

static int greet(farm_kv *kv, farm_loop *loop, uint32_t me)
{
	char key[32], val[64], got[64];
	uint32_t len;
	snprintf(key, sizeof(key), "hello/%u", me);
	snprintf(val, sizeof(val), "world, from machine %u", me);
	int rc = farm_kv_put_sync(kv, loop, key, (uint32_t)strlen(key), val,
	                          (uint32_t)strlen(val) + 1);
	if (!rc)
		rc = farm_kv_get_sync(kv, loop, key, (uint32_t)strlen(key), got,
		                      sizeof(got), &len);
	if (!rc)
		printf("machine %u: get %s -> \"%s\"\n", me, key, got);
	return rc;
}

/* The steps once the machine has joined the cluster and the store. */
static int work(farm_node *node, farm_kv *kv, farm_loop *loop, unsigned n)
{
	uint32_t me = farm_node_id(node);
	struct counter c;
	uint64_t total = 0;
	/* Every shard is up before anyone uses the store. */
	int rc = barrier(loop, n, me, 0);
	if (!rc)
		rc = greet(kv, loop, me);
	if (!rc && me == 0)
		rc = share_counter(node, kv, loop, &c);
	if (!rc && !(rc = barrier(loop, n, me, 1)) && me != 0)
		rc = lookup_counter(kv, loop, &c);
	if (!rc)
		rc = farm_tx_run(farm_node_txm(node), loop, add_step, &c, 0);
	if (!rc && !(rc = barrier(loop, n, me, 2)))
		rc = farm_lf_read_sync(farm_node_txm(node), loop, c.total.addr,
		                       8, c.total.incarnation, &total);
	if (!rc)
		printf("machine %u: counter = %llu (one add per machine: %s)\n",
		       me, (unsigned long long)total,
		       total == n ? "yes" : "NO");
	int brc = barrier(loop, n, me, 3); /* nobody leaves before the rest */
	return rc ? rc : brc ? brc : total == n ? 0 : -EPROTO;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: %s CONFIG_FILE\n", argv[0]);
		return 2;
	}
	farm_node *node;
	farm_kv *kv = NULL;
	farm_loop *loop = NULL;
	int rc = farm_node_open_file(argv[1], &node);
	if (rc) {
		fprintf(stderr, "hello: %s: %s\n", argv[1], farm_strerror(rc));
		return 1;
	}
	unsigned n = farm_node_expected_machines(node);
	farm_node_set_app_loops(node, true); /* this thread drives loop 0 */
	if (!(rc = farm_msg_handle(farm_node_msg(node), HELLO_BARRIER,
	                           on_barrier, NULL)) &&
	    !(rc = farm_kv_create(node, NULL, 1024, &kv)) &&
	    !(rc = farm_node_start(node, 30000)) &&
	    !(rc = farm_node_loop_open(node, 0, &loop)) &&
	    !(rc = farm_kv_attach(kv, loop)) &&
	    !(rc = farm_node_wait_members(node, n, 30000)) &&
	    !(rc = farm_kv_join_sync(kv, loop, n, 30000)))
		rc = work(node, kv, loop, n);
	if (rc)
		fprintf(stderr, "hello: %s\n", farm_strerror(rc));
	if (loop) {
		farm_kv_detach(kv, loop);
		farm_node_loop_close(node, loop);
	}
	farm_kv_destroy(kv);
	farm_node_close(node);
	return rc ? 1 : 0;
}
