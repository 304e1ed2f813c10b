/* A zombie's one-sided requests (zprobe.h). */
#include "zprobe.h"

#include "testutil.h"

#include "addrspace/addrspace.h"
#include "node/node.h"

static const char *const zp_name[ZP_NOPS] = {"READ", "WRITE", "CAS"};

/* One request to target @k on an endpoint of its own; @noop: a CAS that
 * leaves the header as it was. */
static int zp_one(struct zprobe *z, struct tx_child *c, unsigned k, int op,
                  bool noop)
{
	struct zp_target *t = &z->t[k];
	uint64_t off = farm_gaddr_offset(t->a);
	uint8_t *line = z->buf + 64u * k;
	uint64_t *cas =
	        (uint64_t *)(void *)(z->buf + 64u * ZP_TARGETS + 8u * k);
	farm_wr wr;
	if (op == ZP_READ) {
		wr = farm_wr_read(1, line, z->lmr, 64, &t->d, off);
	} else if (op == ZP_WRITE) {
		int64_t poison = 1000000;
		memcpy(line + 16, &poison, 8); /* the balance */
		wr = farm_wr_write(1, line, z->lmr, 64, &t->d, off);
	} else {
		wr = farm_wr_cas(1, cas, z->lmr, &t->d, off, t->hdr,
		                 noop ? t->hdr : t->hdr | 2 /* locked */);
	}
	farm_ep_attr ea = {.sq_depth = 4};
	farm_ep *ep;
	int st = farm_ep_connect(farm_node_fabric(c->np.node), z->cq,
	                         t->machine, t->addr, &ea, &ep);
	if (st)
		return st;
	st = tu_do(ep, z->cq, wr);
	farm_ep_destroy(ep);
	if (!st && op == ZP_READ)
		memcpy(&t->hdr, line, 8);
	return st;
}

static void zp_count(struct zp_counts *pc, int op, int st)
{
	if (st == 0)
		pc->executed[op]++;
	else if (st == FARM_EFENCED)
		pc->fenced[op]++;
	else if (!pc->other[op]++)
		pc->other_err = st;
}

/* Target @t for account @a at its primary @m (card in view @v): 0, or
 * -1 when it cannot be reached by one-sided requests from here. */
static int zp_target(struct tx_child *c, const struct farm_view *v, uint32_t m,
                     farm_gaddr a, struct zp_target *t)
{
	const struct farm_member *mb = farm_view_find(v, m);
	farm_mr_desc d0, d1;
	if (!mb || farm_node_card_parse(mb->endpoint, t->addr, sizeof(t->addr),
	                                &d0, &d1))
		return -1;
	farm_as *as = farm_node_as(c->np.node);
	t->machine = m;
	t->a = a;
	uint8_t *local = NULL;
	int rc = farm_as_resolve(as, a, 64, &local, &t->d);
	if (rc == -EAGAIN) { /* look it up with a read first */
		int64_t b;
		uint64_t ver;
		(void)lf_account(c, a, &b, &ver);
		rc = farm_as_resolve(as, a, 64, &local, &t->d);
	}
	return rc || local ? -1 : 0;
}

int zp_prepare(struct zprobe *z, struct tx_child *c, const farm_fatptr *acc,
               unsigned nacc, struct zp_counts *control)
{
	memset(z, 0, sizeof(*z));
	farm_as *as = farm_node_as(c->np.node);
	struct farm_view *v = malloc(sizeof(*v));
	if (!v || farm_node_view(c->np.node, v)) {
		free(v);
		return -1;
	}
	unsigned n = 0;
	for (unsigned i = 0; i < nacc && n < ZP_TARGETS; i++) {
		uint32_t rep[FARM_RING_MAX_REPLICAS];
		if (!farm_as_replicas(as, farm_gaddr_region(acc[i].addr),
		                      rep) ||
		    rep[0] == c->np.me)
			continue;
		bool dup = false;
		for (unsigned k = 0; k < n; k++)
			dup |= z->t[k].machine == rep[0];
		if (!dup && !zp_target(c, v, rep[0], acc[i].addr, &z->t[n]))
			n++;
	}
	free(v);
	if (n != ZP_TARGETS)
		return -1;
	size_t blen = 64u * ZP_TARGETS + 8u * ZP_TARGETS;
	z->buf = aligned_alloc(64, (blen + 63) & ~(size_t)63);
	if (!z->buf ||
	    farm_mr_reg(farm_node_fabric(c->np.node), z->buf, blen,
	                FARM_ACCESS_LOCAL, &z->lmr) ||
	    farm_cq_create(farm_node_fabric(c->np.node), 16, 0, &z->cq))
		return -1;
	for (unsigned k = 0; k < ZP_TARGETS; k++) {
		zp_count(control, ZP_READ, zp_one(z, c, k, ZP_READ, true));
		zp_count(control, ZP_CAS, zp_one(z, c, k, ZP_CAS, true));
	}
	return 0;
}

void zp_run(struct zprobe *z, struct tx_child *c, struct zp_counts *pc)
{
	for (unsigned k = 0; k < ZP_TARGETS; k++)
		for (int op = 0; op < ZP_NOPS; op++)
			zp_count(pc, op, zp_one(z, c, k, op, false));
}

void zp_print(const char *when, const struct zp_counts *p)
{
	printf("zombie's requests %s:", when);
	for (int op = 0; op < ZP_NOPS; op++)
		printf(" %s %u executed, %u fenced, %u other;", zp_name[op],
		       p->executed[op], p->fenced[op], p->other[op]);
	printf(" first other error: %s\n",
	       p->other_err ? farm_strerror(p->other_err) : "none");
}

const char *zp_op_name(int op)
{
	return op >= 0 && op < ZP_NOPS ? zp_name[op] : "?";
}

void zp_free(struct zprobe *z)
{
	if (z->cq && farm_cq_destroy(z->cq))
		fprintf(stderr, "zprobe: the completion queue not destroyed\n");
	if (z->lmr)
		farm_mr_dereg(z->lmr);
	free(z->buf);
	memset(z, 0, sizeof(*z));
}
