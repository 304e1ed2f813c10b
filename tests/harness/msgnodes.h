/*
 * Test fixture: messaging machines in one process (tests/test_msg.c,
 * tests/test_msg_rdma.c), each its own fabric, farm_msg and loop, every
 * one a peer of the others; one test thread drives their loops in turn
 * (mn_pump), so every step is deterministic. Each machine serves four
 * message types whose handlers record what they saw in its struct
 * mn_node. Defined in msgnodes.c.
 */
#ifndef FARM_TESTS_MSGNODES_H
#define FARM_TESTS_MSGNODES_H

#include "testutil.h"

/* The types every machine serves: T_ECHO replies with the request, T_COUNT
 * counts (and checks the sequence numbers of) one-way messages, T_DEFER
 * keeps the request's token for the test to answer, T_FAIL answers
 * -EPERM. */
#define T_ECHO  1
#define T_COUNT 2
#define T_DEFER 3
#define T_FAIL  4

struct mn_node {
	char dir[256];
	farm_fabric *fab;
	farm_msg *msg;
	farm_loop *loop;
	/* what the handlers saw */
	uint64_t count, bytes, next_seq, bad_seq;
	struct farm_msg_token deferred;
	int has_deferred;
};

/* The T_ECHO and T_COUNT handlers (@arg: the machine's struct mn_node),
 * for tests that set up their own messaging. */
void mn_h_echo(farm_loop *loop, const farm_msg_in *in, void *arg);
void mn_h_count(farm_loop *loop, const farm_msg_in *in, void *arg);

/* @n machines 0..n-1, each a peer of every other, with @a. */
void mn_open(struct mn_node *nodes, unsigned n, const farm_msg_attr *a);
void mn_close(struct mn_node *nodes, unsigned n);

/* 64 KiB of @nd's memory registered for one-sided access: *@mem, *@mr,
 * and the descriptor a peer's WRITE, READ or CAS names (*@d). */
void mn_remote_mem(struct mn_node *nd, farm_mem **mem, farm_mr **mr,
                   farm_mr_desc *d);

/* @rounds passes of every loop, machine 0 first. */
void mn_pump(struct mn_node *nodes, unsigned n, unsigned rounds);

#endif
