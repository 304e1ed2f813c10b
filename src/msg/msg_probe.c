/*
 * The reconfiguration probe (farm_msg_probe, msg.h): a one-sided READ of
 * each machine's message-region header, as FaRM's CM probes the members
 * with an RDMA read (SOSP'15 5.2). An answer proves that the machine's
 * memory is reachable over this fabric (its NIC on verbs, its process on
 * shm), which a lease on its own channel does not.
 *
 * The probe has its own completion queue and one endpoint per peer,
 * connected on first use and kept, so a probe never queues behind the
 * loops' messages and needs no loop. One probe runs at a time (probe_mu);
 * nothing else touches this state. A READ still outstanding when a probe
 * gives up has its endpoint destroyed, and every request carries the
 * probe's sequence number, so a late or flushed completion is ignored.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "msg/msg_int.h"
#include "util/log.h"

enum { PROBE_LEN = sizeof(struct region_hdr), PROBE_SLOT = 64 };

struct msg_probe {
	farm_cq *cq;
	uint8_t *buf; /* PROBE_SLOT bytes per machine */
	farm_mr *mr;
	farm_ep **eps; /* max_machines, by machine id */
	bool *posted;  /* max_machines, by index in the probe's list */
	uint32_t seq;
};

static void probe_ep_drop(struct msg_probe *p, uint32_t id)
{
	if (p->eps[id]) {
		farm_ep_destroy(p->eps[id]);
		p->eps[id] = NULL;
	}
}

void farm_msg_probe_free(farm_msg *msg)
{
	struct msg_probe *p = msg->probe;
	if (!p)
		return;
	for (uint32_t i = 0; i < msg->attr.max_machines; i++)
		probe_ep_drop(p, i);
	if (p->cq && farm_cq_destroy(p->cq))
		farm_warn("msg: the probe's completion queue stays: endpoints "
		          "are left on it");
	farm_mr_dereg(p->mr);
	free(p->buf);
	free(p->eps);
	free(p->posted);
	free(p);
	msg->probe = NULL;
}

static int probe_init(farm_msg *msg)
{
	if (msg->probe)
		return 0;
	struct msg_probe *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	msg->probe = p;
	size_t len = (size_t)msg->attr.max_machines * PROBE_SLOT;
	p->eps = calloc(msg->attr.max_machines, sizeof(*p->eps));
	p->posted = calloc(msg->attr.max_machines, sizeof(*p->posted));
	p->buf = aligned_alloc(PROBE_SLOT, len);
	int rc = -ENOMEM;
	if (!p->eps || !p->posted || !p->buf)
		goto fail;
	if ((rc = farm_mr_reg(msg->fab, p->buf, len, FARM_ACCESS_LOCAL,
	                      &p->mr)) ||
	    (rc = farm_cq_create(msg->fab, 2 * msg->attr.max_machines, 0,
	                         &p->cq)))
		goto fail;
	return 0;
fail:
	farm_msg_probe_free(msg);
	return rc;
}

/* Post the READ of machine @id's header into its slot (wr_id: the
 * probe's sequence number above, the index in the caller's list below). */
static int probe_post(farm_msg *msg, uint32_t id, unsigned idx)
{
	struct msg_probe *p = msg->probe;
	struct peer_info *pi = &msg->peers[id];
	/* Pairs with the release of ready in farm_msg_add_peer. */
	if (!atomic_load_explicit(&pi->ready, memory_order_acquire))
		return -ENOENT;
	if (p->eps[id] && !farm_ep_usable(p->eps[id]))
		probe_ep_drop(p, id);
	if (!p->eps[id]) {
		farm_ep_attr ea = {.sq_depth = 4};
		int rc = farm_ep_connect(msg->fab, p->cq, id, pi->addr, &ea,
		                         &p->eps[id]);
		if (rc) {
			p->eps[id] = NULL;
			return rc;
		}
	}
	uint8_t *slot = p->buf + (size_t)id * PROBE_SLOT;
	memset(slot, 0, PROBE_LEN);
	farm_wr wr = farm_wr_read((uint64_t)p->seq << 32 | idx, slot, p->mr,
	                          PROBE_LEN, &pi->desc, 0);
	int rc = farm_ep_post(p->eps[id], &wr, NULL);
	if (rc)
		probe_ep_drop(p, id);
	return rc;
}

/* Whether machine @id's slot holds its own message-region header. */
static bool probe_header_ok(const farm_msg *msg, uint32_t id)
{
	struct region_hdr h;
	memcpy(&h, msg->probe->buf + (size_t)id * PROBE_SLOT, sizeof(h));
	return h.magic == MSG_MAGIC && h.machine == id &&
	       h.nthreads == msg->attr.nthreads &&
	       h.max_machines == msg->attr.max_machines &&
	       h.ring_size == msg->attr.ring_size;
}

/* Post a READ of each machine of @ids but this one (which answers at
 * once: ok[i] true) and mark it in msg->probe->posted. Returns how many are
 * pending; *@got counts the answers so far. */
static unsigned probe_post_all(farm_msg *msg, const uint32_t *ids, unsigned n,
                               bool *ok, unsigned *got)
{
	unsigned pending = 0;
	for (unsigned i = 0; i < n; i++) {
		ok[i] = ids[i] == msg->me;
		*got += ok[i];
		if (ok[i])
			continue;
		int rc = probe_post(msg, ids[i], i);
		if (rc) {
			farm_info("msg: probe of machine %" PRIu32
			          " not sent: %s",
			          ids[i], farm_strerror(rc));
			continue;
		}
		msg->probe->posted[i] = true;
		pending++;
	}
	return pending;
}

/* The completions @wc[0..k) of this probe's READs: ok[i] when the READ
 * succeeded and found machine i's message region. Returns how many
 * answered; *@pending drops by how many completed. */
static unsigned probe_reap(farm_msg *msg, const uint32_t *ids, unsigned n,
                           bool *ok, const farm_wc *wc, int k,
                           unsigned *pending)
{
	struct msg_probe *p = msg->probe;
	unsigned got = 0;
	for (int j = 0; j < k; j++) {
		unsigned i = (unsigned)(wc[j].wr_id & 0xffffffffu);
		if ((uint32_t)(wc[j].wr_id >> 32) != p->seq || i >= n ||
		    !p->posted[i])
			continue; /* an earlier probe's, or flushed */
		p->posted[i] = false;
		(*pending)--;
		ok[i] = wc[j].status == 0 && probe_header_ok(msg, ids[i]);
		got += ok[i];
		if (!ok[i])
			farm_info("msg: machine %" PRIu32
			          " did not answer the probe: %s",
			          ids[i],
			          wc[j].status ? farm_strerror(wc[j].status)
			                       : "not its message region");
	}
	return got;
}

/* Wait up to @timeout_ns for the @pending READs; returns how many
 * answered. The ones still posted at the end stay marked. */
static unsigned probe_wait(farm_msg *msg, const uint32_t *ids, unsigned n,
                           bool *ok, uint64_t timeout_ns, unsigned *pending)
{
	uint64_t start = farm_now_ns();
	long nap_ns = 10000;
	unsigned got = 0;
	while (*pending) {
		farm_wc wc[16];
		int k = farm_cq_poll(msg->probe->cq, 16, wc);
		got += probe_reap(msg, ids, n, ok, wc, k, pending);
		if (!*pending || k > 0)
			continue;
		if (farm_now_ns() - start >= timeout_ns)
			break;
		/* Park between polls: READs complete in microseconds, and a
		 * probe that waits is waiting for a machine that is gone. */
		struct timespec nap = {0, nap_ns};
		nanosleep(&nap, NULL);
		if (nap_ns < 1000000)
			nap_ns *= 2;
	}
	return got;
}

int farm_msg_probe(farm_msg *msg, const uint32_t *ids, unsigned n,
                   uint64_t timeout_ns, bool *ok)
{
	if (!msg || (n && (!ids || !ok)) || n > msg->attr.max_machines)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (ids[i] >= msg->attr.max_machines)
			return -EINVAL;
	pthread_mutex_lock(&msg->probe_mu);
	int rc = probe_init(msg);
	if (rc) {
		pthread_mutex_unlock(&msg->probe_mu);
		return rc;
	}
	struct msg_probe *p = msg->probe;
	p->seq++;
	memset(p->posted, 0, msg->attr.max_machines * sizeof(*p->posted));
	unsigned got = 0;
	unsigned pending = probe_post_all(msg, ids, n, ok, &got);
	got += probe_wait(msg, ids, n, ok, timeout_ns, &pending);
	for (unsigned i = 0; i < n && pending; i++)
		if (p->posted[i]) {
			farm_info("msg: machine %" PRIu32 " did not answer the "
			          "probe within %" PRIu64 " us",
			          ids[i], timeout_ns / 1000);
			probe_ep_drop(p, ids[i]);
			pending--;
		}
	pthread_mutex_unlock(&msg->probe_mu);
	return (int)got;
}
