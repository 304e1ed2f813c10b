#include "asnodes.h"

uint64_t asn_lf_bound_ns;

void asn_set_views(struct asn_cluster *c, uint64_t cid)
{
	for (unsigned i = 0; i < c->n; i++)
		assert_int_equal(farm_as_set_view(c->m[i].as, cid, c->id, c->n),
		                 0);
}

void asn_open_noview(struct asn_cluster *c, unsigned n, uint64_t rsize,
                     asn_hook_fn hook)
{
	uint32_t ids[ASN_MAX];
	for (unsigned i = 0; i < n && i < ASN_MAX; i++)
		ids[i] = i + 1;
	asn_open_ids(c, n, ids, 8, rsize, hook);
}

void asn_open_ids(struct asn_cluster *c, unsigned n, const uint32_t *ids,
                  uint32_t max_machines, uint64_t rsize, asn_hook_fn hook)
{
	farm_msg_attr ma = {.max_machines = max_machines, .busy_poll = true};
	struct farm_as_attr aa = {.region_size = rsize};
	memset(c, 0, sizeof(*c));
	assert_true(n <= ASN_MAX);
	c->n = n;
	memcpy(c->id, ids, n * sizeof(*ids));
	for (unsigned i = 0; i < n; i++) {
		struct asn *x = &c->m[i];
		tu_tmpdir(x->dir, sizeof(x->dir), "asn");
		x->fab = tu_open(c->id[i], x->dir);
		assert_non_null(x->fab);
		assert_int_equal(farm_msg_create(x->fab, &ma, &x->msg), 0);
		aa.seed = i + 1;
		assert_int_equal(farm_as_create(x->fab, x->msg, &aa, &x->as),
		                 0);
		assert_int_equal(farm_galloc_create(x->as, x->msg, &x->ga), 0);
		struct farm_txm_attr ta = {.log_size = 256u << 10,
		                           .arena_size = 16u << 20,
		                           .lf_bound_ns = asn_lf_bound_ns};
		assert_int_equal(farm_txm_create(x->fab, x->msg, x->as, x->ga,
		                                 &ta, &x->txm),
		                 0);
		if (hook)
			hook(x, i);
	}
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			char addr[256];
			assert_true(farm_fabric_address(c->m[j].fab, addr,
			                                sizeof(addr)) > 0);
			farm_mr_desc d = farm_msg_desc(c->m[j].msg);
			assert_int_equal(farm_msg_add_peer(c->m[i].msg,
			                                   c->id[j], addr, &d),
			                 0);
		}
		assert_int_equal(farm_loop_open(c->m[i].msg, 0, &c->m[i].loop),
		                 0);
		assert_int_equal(farm_txm_attach(c->m[i].txm, c->m[i].loop), 0);
	}
	for (unsigned i = 0; i < n; i++)
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			farm_mr_desc d = farm_txm_log_desc(c->m[j].txm);
			assert_int_equal(
			        farm_txm_add_peer(c->m[i].txm, c->id[j], 0, &d),
			        0);
		}
}

void asn_open(struct asn_cluster *c, unsigned n, uint64_t rsize,
              asn_hook_fn hook)
{
	asn_open_noview(c, n, rsize, hook);
	asn_set_views(c, 1);
}

void asn_close(struct asn_cluster *c)
{
	for (unsigned i = 0; i < c->n; i++) {
		struct asn *x = &c->m[i];
		farm_txm_detach(x->txm, x->loop);
		farm_loop_close(x->loop);
		farm_txm_destroy(x->txm);
		farm_galloc_destroy(x->ga);
		farm_as_destroy(x->as);
		assert_int_equal(farm_msg_destroy(x->msg), 0);
		farm_fabric_close(x->fab);
		tu_rmtree(x->dir);
	}
}

void asn_pump(struct asn_cluster *c)
{
	for (unsigned i = 0; i < c->n; i++)
		(void)farm_loop_poll(c->m[i].loop);
}

void asn_wait(struct asn_cluster *c, const volatile int *flag)
{
	uint64_t t0 = farm_now_ns();
	while (!*flag && farm_now_ns() - t0 < 30000000000ull)
		asn_pump(c);
	assert_true(*flag);
}
