/*
 * Messaging machines in one process (msgnodes.h).
 */
#include "msgnodes.h"

void mn_h_echo(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	assert_int_equal(farm_msg_reply(loop, &in->token, in->payload, in->len),
	                 0);
}

void mn_h_count(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	struct mn_node *n = arg;
	uint64_t seq = 0;
	if (in->len >= 8)
		memcpy(&seq, in->payload, 8);
	if (seq != n->next_seq)
		n->bad_seq++;
	n->next_seq = seq + 1;
	n->count++;
	n->bytes += in->len;
}

static void h_defer(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)loop;
	struct mn_node *n = arg;
	n->deferred = in->token;
	n->has_deferred = 1;
}

static void h_fail(farm_loop *loop, const farm_msg_in *in, void *arg)
{
	(void)arg;
	assert_int_equal(farm_msg_reply_error(loop, &in->token, -EPERM), 0);
}

void mn_open(struct mn_node *nodes, unsigned n, const farm_msg_attr *a)
{
	for (unsigned i = 0; i < n; i++) {
		struct mn_node *x = &nodes[i];
		memset(x, 0, sizeof(*x));
		tu_tmpdir(x->dir, sizeof(x->dir), "msg");
		x->fab = tu_open(i, x->dir);
		assert_non_null(x->fab);
		assert_int_equal(farm_msg_create(x->fab, a, &x->msg), 0);
		assert_int_equal(farm_msg_handle(x->msg, T_ECHO, mn_h_echo, x),
		                 0);
		assert_int_equal(
		        farm_msg_handle(x->msg, T_COUNT, mn_h_count, x), 0);
		assert_int_equal(farm_msg_handle(x->msg, T_DEFER, h_defer, x),
		                 0);
		assert_int_equal(farm_msg_handle(x->msg, T_FAIL, h_fail, x), 0);
		assert_int_equal(farm_msg_handle(x->msg, T_FAIL, h_fail, x),
		                 -EEXIST);
	}
	for (unsigned i = 0; i < n; i++) {
		for (unsigned j = 0; j < n; j++) {
			if (i == j)
				continue;
			char addr[256];
			assert_true(farm_fabric_address(nodes[j].fab, addr,
			                                sizeof(addr)) > 0);
			farm_mr_desc d = farm_msg_desc(nodes[j].msg);
			assert_int_equal(
			        farm_msg_add_peer(nodes[i].msg, j, addr, &d),
			        0);
		}
		assert_int_equal(
		        farm_loop_open(nodes[i].msg, 0, &nodes[i].loop), 0);
	}
}

void mn_close(struct mn_node *nodes, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		farm_loop_close(nodes[i].loop);
		assert_int_equal(farm_msg_destroy(nodes[i].msg), 0);
		farm_fabric_close(nodes[i].fab);
		tu_rmtree(nodes[i].dir);
	}
}

void mn_remote_mem(struct mn_node *nd, farm_mem **mem, farm_mr **mr,
                   farm_mr_desc *d)
{
	assert_int_equal(farm_mem_alloc(nd->fab, 1 << 16, 0, mem), 0);
	assert_int_equal(farm_mr_reg(nd->fab, farm_mem_addr(*mem), 1 << 16,
	                             FARM_ACCESS_ALL, mr),
	                 0);
	*d = farm_mr_describe(*mr);
}

void mn_pump(struct mn_node *nodes, unsigned n, unsigned rounds)
{
	for (unsigned r = 0; r < rounds; r++)
		for (unsigned i = 0; i < n; i++)
			(void)farm_loop_poll(nodes[i].loop);
}
