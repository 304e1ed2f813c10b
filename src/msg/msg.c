/*
 * Messaging: rings written with one-sided WRITEs, event loops, RPC.
 * See include/farm/msg.h for the contract, src/msg/README.md for the
 * design and wire.h for the format.
 *
 * Files (msg_int.h has the layout and the state): this one is the
 * machine-wide object (create, destroy, peers, handlers, counters);
 * msg_ring.c the ring channels; msg_rpc.c calls and replies; msg_loop.c
 * the event loop.
 */
#define _LGPL_SOURCE 1 /* liburcu's wait-free queue, inlined */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "msg/msg_int.h"
#include "msg/msg_testing.h"
#include "util/log.h"
#include "util/mem.h"
#include "util/tsan.h"
#include "util/stat.h"

static void layout_init(struct layout *l, unsigned T, unsigned M, uint32_t R)
{
	l->T = T;
	l->M = M;
	l->R = R;
	l->park_off = MSG_HDR_BYTES;
	l->head_off = l->park_off + (uint64_t)T * FARM_CL;
	uint64_t end = l->head_off + (uint64_t)T * M * T * FARM_CL;
	l->ring_off = (end + 4095) & ~4095ull;
	l->total = l->ring_off + (uint64_t)T * M * T * R;
}

/* ---- creation ------------------------------------------------------------ */

/* @attr with its zero fields set to the defaults, into *@a; -EINVAL for
 * values out of range, or a fabric machine id past max_machines. */
static int msg_attr_resolve(farm_fabric *fab, const farm_msg_attr *attr,
                            farm_msg_attr *a)
{
	*a = attr ? *attr : (farm_msg_attr){0};
	if (!a->nthreads)
		a->nthreads = 1;
	if (!a->max_machines)
		a->max_machines = 16;
	if (!a->ring_size)
		a->ring_size = DEFAULT_RING;
	if (!a->sendq_max)
		a->sendq_max = 4096;
	if (!a->max_calls)
		a->max_calls = 4096;
	if (!a->park_after_ns)
		a->park_after_ns = 200000;
	if (a->nthreads > 64 || a->max_machines > 1024 ||
	    !farm_is_pow2(a->ring_size) || a->ring_size < MIN_RING ||
	    a->ring_size > MAX_RING || a->max_calls > (1u << 24))
		return -EINVAL;
	if (farm_fabric_machine_id(fab) >= a->max_machines)
		return -EINVAL;
	/* verbs has no doorbell (shm and ofi have FARM_WR_NOTIFY). */
	bool verbs = strcmp(farm_fabric_provider(fab), "verbs") == 0;
	if (verbs && !a->busy_poll) {
		farm_info("msg: the %s provider has no doorbell for parked "
		          "threads: loops poll continuously",
		          farm_fabric_provider(fab));
		a->busy_poll = true;
	}
	return 0;
}

/* The per-type, per-peer and per-thread tables of @msg. */
static int msg_alloc_tables(farm_msg *msg)
{
	const farm_msg_attr *a = &msg->attr;
	msg->handlers = calloc(FARM_MSG_TYPES, sizeof(*msg->handlers));
	msg->peers = calloc(a->max_machines, sizeof(*msg->peers));
	msg->inboxes = calloc(a->nthreads, sizeof(*msg->inboxes));
	msg->loops = calloc(a->nthreads, sizeof(*msg->loops));
	msg->min_cfg = calloc(a->max_machines, sizeof(*msg->min_cfg));
	if (!msg->handlers || !msg->peers || !msg->inboxes || !msg->loops ||
	    !msg->min_cfg)
		return -ENOMEM;
	for (unsigned i = 0; i < a->nthreads; i++)
		cds_wfcq_init(&msg->inboxes[i].head, &msg->inboxes[i].tail);
	return 0;
}

/* Back the first page of each ring machine @id's threads write into here
 * (one per sender thread, at each of our threads): the page our loops
 * poll for a frame before any arrives (a read of a hole in a file takes
 * a page too, and a SIGBUS when the file system is full). The rest of a
 * ring is backed by its sender when it makes the channel (chan_get,
 * farm_ep_back), so a peer costs a page per ring until it talks to us. */
static int back_in_doors(farm_msg *msg, uint32_t id)
{
	const struct layout *l = &msg->lay;
	size_t door = FARM_MIN((size_t)l->R, (size_t)sysconf(_SC_PAGESIZE));
	for (unsigned r = 0; r < l->T; r++) {
		for (unsigned t = 0; t < l->T; t++) {
			int rc = farm_mem_back(msg->base + ring_at(l, r, id, t),
			                       door);
			if (rc) {
				farm_err("msg: cannot back machine %" PRIu32
				         "'s rings: %s",
				         id, farm_strerror(rc));
				return rc;
			}
		}
	}
	return 0;
}

/* The message region: allocated, registered for remote WRITEs and READs,
 * its headers and our own rings backed, and its header written. */
static int msg_map_region(farm_msg *msg)
{
	const farm_msg_attr *a = &msg->attr;
	/* Sparse: laid out for every id, backed only where peers write
	 * (README.md, "Memory"). */
	int rc = farm_mem_alloc(msg->fab, msg->lay.total, FARM_MEM_SPARSE,
	                        &msg->mem);
	if (rc)
		return rc;
	msg->base = farm_mem_addr(msg->mem);
	rc = farm_mr_reg(msg->fab, msg->base, msg->lay.total,
	                 FARM_ACCESS_LOCAL | FARM_ACCESS_REMOTE_WRITE |
	                         FARM_ACCESS_REMOTE_READ,
	                 &msg->mr);
	if (rc)
		return rc;
	msg->desc = farm_mr_describe(msg->mr);
	if ((rc = farm_mem_back(msg->base, msg->lay.ring_off)) ||
	    (rc = back_in_doors(msg, msg->me)))
		return rc;
	struct region_hdr h = {MSG_MAGIC, a->nthreads, a->max_machines,
	                       a->ring_size, msg->me};
	memcpy(msg->base, &h, sizeof(h));
	return 0;
}

int farm_msg_create(farm_fabric *fab, const farm_msg_attr *attr, farm_msg **out)
{
	if (!fab || !out)
		return -EINVAL;
	farm_msg_attr a;
	int rc = msg_attr_resolve(fab, attr, &a);
	if (rc)
		return rc;
	farm_msg *msg = calloc(1, sizeof(*msg));
	if (!msg)
		return -ENOMEM;
	msg->fab = fab;
	msg->me = farm_fabric_machine_id(fab);
	msg->attr = a;
	msg->notify = !a.busy_poll;
	/* On udp the READs of one post travel as records of one datagram
	 * (src/fabric/README.md, "udp": coalescing), so a pass's READs to a
	 * machine are gathered into one post. FARM_MSG_BATCH_READS=0: one
	 * post each (to measure what it saves). */
	const char *br = getenv("FARM_MSG_BATCH_READS");
	msg->batch_reads = strcmp(farm_fabric_provider(fab), "udp") == 0 &&
	                   !(br && strcmp(br, "0") == 0);
	layout_init(&msg->lay, a.nthreads, a.max_machines, a.ring_size);
	msg->max_frame = a.ring_size / 8;
	pthread_mutex_init(&msg->lock, NULL);
	pthread_mutex_init(&msg->probe_mu, NULL);
	if ((rc = msg_alloc_tables(msg)) || (rc = msg_map_region(msg)))
		goto fail;
	*out = msg;
	return 0;
fail:
	if (msg->mr)
		farm_mr_dereg(msg->mr);
	if (msg->mem)
		farm_mem_free(msg->mem);
	free(msg->handlers);
	free(msg->peers);
	free(msg->inboxes);
	free(msg->loops);
	free((void *)msg->min_cfg);
	pthread_mutex_destroy(&msg->probe_mu);
	pthread_mutex_destroy(&msg->lock);
	free(msg);
	return rc;
}

int farm_msg_destroy(farm_msg *msg)
{
	if (!msg)
		return -EINVAL;
	pthread_mutex_lock(&msg->lock);
	for (unsigned i = 0; i < msg->attr.nthreads; i++) {
		if (msg->loops[i]) {
			pthread_mutex_unlock(&msg->lock);
			return -EBUSY;
		}
	}
	pthread_mutex_unlock(&msg->lock);
	for (unsigned i = 0; i < msg->attr.nthreads; i++) {
		struct cds_wfcq_node *n;
		while ((n = __cds_wfcq_dequeue_blocking(
		                &msg->inboxes[i].head,
		                &msg->inboxes[i].tail))) {
			struct inbox_item *it =
			        caa_container_of(n, struct inbox_item, node);
			FARM_TSAN_ACQUIRE(
			        it); /* pairs with farm_msg_inbox_push's */
			free(it);
		}
	}
	farm_msg_probe_free(msg);
	farm_mr_dereg(msg->mr);
	farm_mem_free(msg->mem);
	free(msg->handlers);
	free(msg->peers);
	free(msg->inboxes);
	free(msg->loops);
	free((void *)msg->min_cfg);
	pthread_mutex_destroy(&msg->probe_mu);
	pthread_mutex_destroy(&msg->lock);
	free(msg);
	return 0;
}

farm_mr_desc farm_msg_desc(const farm_msg *msg)
{
	return msg->desc;
}
uint32_t farm_msg_machine_id(const farm_msg *msg)
{
	return msg->me;
}
unsigned farm_msg_max_machines(const farm_msg *msg)
{
	return msg ? msg->attr.max_machines : 0;
}

unsigned farm_msg_nthreads(const farm_msg *msg)
{
	return msg->attr.nthreads;
}

uint32_t farm_msg_max_payload(const farm_msg *msg)
{
	return msg->max_frame - WIRE_FRAME_OVERHEAD - WIRE_MSG_HDR;
}

/* The bytes of one loop's tables, as farm_loop_open sizes them. */
static uint64_t loop_table_bytes(const farm_msg_attr *a)
{
	uint64_t M = a->max_machines, T = a->nthreads;
	return sizeof(struct farm_loop) + M * sizeof(struct out_peer) +
	       M * T * sizeof(struct in_chan) + M * 2 * sizeof(uint32_t) +
	       M * T * sizeof(struct out_chan *) +
	       (uint64_t)a->max_calls * sizeof(struct call);
}

static void msg_memory_fill(farm_msg *msg, farm_msg_mem *out)
{
	const farm_msg_attr *a = &msg->attr;
	out->region = msg->lay.total;
	out->region_resident = farm_mem_resident(msg->mem);
	out->tables = (uint64_t)a->max_machines *
	              (sizeof(*msg->peers) + sizeof(*msg->min_cfg));
	/* Under lock: loops open and close under it (farm_loop_open). */
	pthread_mutex_lock(&msg->lock);
	for (unsigned i = 0; i < a->nthreads; i++) {
		farm_loop *l = msg->loops[i];
		if (!l)
			continue;
		out->tables += loop_table_bytes(a);
		/* Relaxed: a count, read while the loop may add a channel. */
		out->mirrors += atomic_load_explicit(&l->mirror_bytes,
		                                     memory_order_relaxed);
		/* The area stays mapped while the loop is listed (under
		 * lock); its pages come and go with the loop's channels. */
		out->mirrors_resident += farm_mem_resident_range(
		        l->mirror_area, l->mirror_area_len);
	}
	pthread_mutex_unlock(&msg->lock);
}

int farm_msg_memory(farm_msg *msg, farm_msg_mem *out)
{
	if (!msg || !out || out->size < offsetof(farm_msg_mem, mirrors))
		return -EINVAL;
	farm_msg_mem s = {.size = sizeof(s), .version = FARM_MSG_MEM_VERSION};
	msg_memory_fill(msg, &s);
	size_t n = out->size < sizeof(s) ? out->size : sizeof(s);
	s.size = (uint32_t)n;
	memcpy(out, &s, n);
	return 0;
}

int farm_msg_set_config(farm_msg *msg, uint32_t cfg)
{
	if (!msg)
		return -EINVAL;
	/* Relaxed: a frame closed just before carries the old id, which
	 * every receiver that still accepts this machine accepts. */
	atomic_store_explicit(&msg->cfg, cfg, memory_order_relaxed);
	return 0;
}

int farm_msg_peer_min_config(farm_msg *msg, uint32_t id, uint32_t cfg)
{
	if (!msg || id == msg->me || id >= msg->attr.max_machines)
		return -EINVAL;
	/* Pairs with the acquire load in poll_ring: a frame read after this
	 * store is judged by the new threshold. */
	atomic_store_explicit(&msg->min_cfg[id], cfg, memory_order_release);
	return 0;
}

int farm_msg_add_peer(farm_msg *msg, uint32_t id, const char *addr,
                      const farm_mr_desc *desc)
{
	if (!msg || !addr || !desc || id == msg->me ||
	    id >= msg->attr.max_machines || strlen(addr) >= 256)
		return -EINVAL;
	if (desc->len != msg->lay.total || desc->machine != id) {
		farm_err("msg: machine %" PRIu32
		         "'s message region has %" PRIu64
		         " bytes, ours %" PRIu64 ": the machines run different "
		         "nthreads, max_machines or ring_size",
		         id, desc->len, msg->lay.total);
		return -EINVAL;
	}
	struct peer_info *p = &msg->peers[id];
	pthread_mutex_lock(&msg->lock);
	int rc = 0;
	if (atomic_load(&p->ready)) {
		rc = memcmp(&p->desc, desc, sizeof(*desc)) ? -EEXIST : 0;
	} else if (!(rc = back_in_doors(msg, id))) {
		snprintf(p->addr, sizeof(p->addr), "%s", addr);
		p->desc = *desc;
		/* Pairs with the acquires of ready in farm_msg_refresh_peers,
		 * farm_msg_peer_ep and the probe; the generation after it with
		 * the acquire of peer_gen in farm_msg_refresh_peers. */
		atomic_store_explicit(&p->ready, 1, memory_order_release);
		atomic_fetch_add(&msg->peer_gen, 1);
	}
	pthread_mutex_unlock(&msg->lock);
	return rc;
}

int farm_msg_replace_peer(farm_msg *msg, uint32_t id, const char *addr,
                          const farm_mr_desc *desc)
{
	if (!msg || !addr || !desc || id == msg->me ||
	    id >= msg->attr.max_machines || strlen(addr) >= 256 ||
	    desc->len != msg->lay.total || desc->machine != id)
		return -EINVAL;
	struct peer_info *p = &msg->peers[id];
	pthread_mutex_lock(&msg->lock);
	/* Loops read addr and desc on their own threads (farm_msg_peer_ep,
	 * chan_get, chan_post); a loop that reads them while they change
	 * here is one that has not forgotten the peer yet, whose writes
	 * go to the old holder's endpoint, which fails them
	 * (farm_loop_forget_peer makes it reconnect). */
	snprintf(p->addr, sizeof(p->addr), "%s", addr);
	p->desc = *desc;
	/* Pairs with the acquires of ready in farm_msg_refresh_peers,
	 * farm_msg_peer_ep and the probe, as in farm_msg_add_peer. */
	atomic_store_explicit(&p->ready, 1, memory_order_release);
	atomic_fetch_add(&msg->peer_gen, 1);
	pthread_mutex_unlock(&msg->lock);
	return 0;
}

int farm_msg_handle(farm_msg *msg, uint16_t type, farm_msg_handler_fn fn,
                    void *arg)
{
	if (!msg || !fn)
		return -EINVAL;
	pthread_mutex_lock(&msg->lock);
	int rc = 0;
	if (msg->handlers[type].fn) {
		rc = -EEXIST;
	} else {
		msg->handlers[type] = (struct handler){fn, arg};
		/* Release: the handler before its bit. The partner is the
		 * bitmap's read in wire_type_known (wire.h, from msg_ring.c),
		 * a plain load: an acquire there would order the handler's
		 * read after the bit on every architecture. */
		__atomic_or_fetch(&msg->types[type >> 6], 1ull << (type & 63),
		                  __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&msg->lock);
	return rc;
}

void farm_msg_stats_read(const farm_msg *msg, const farm_loop *loop,
                         farm_msg_stats *out, size_t size)
{
	uint64_t v[S_REFUSED_CONFIG + 1] = {0};
	if (loop) {
		for (int i = 0; i <= S_REFUSED_CONFIG; i++)
			v[i] = atomic_load_explicit(&loop->stats.v[i],
			                            memory_order_relaxed);
	} else if (msg) {
		farm_msg *mm = (farm_msg *)msg;
		pthread_mutex_lock(&mm->lock);
		for (unsigned l = 0; l < mm->attr.nthreads; l++) {
			if (!mm->loops[l])
				continue;
			for (int i = 0; i <= S_REFUSED_CONFIG; i++)
				v[i] += atomic_load_explicit(
				        &mm->loops[l]->stats.v[i],
				        memory_order_relaxed);
		}
		pthread_mutex_unlock(&mm->lock);
	}
	_Static_assert(sizeof(v) == sizeof(farm_msg_stats),
	               "a counter for each field, in order");
	farm_stats_copy(out, size, v, sizeof(v));
}

uint8_t *farm_msg_testing_ring(farm_msg *msg, unsigned r, uint32_t m,
                               unsigned t, uint32_t *size, uint64_t *head)
{
	*size = msg->lay.R;
	*head = 0;
	pthread_mutex_lock(&msg->lock);
	farm_loop *loop = msg->loops[r];
	if (loop)
		*head = loop->in[m * msg->attr.nthreads + t].head;
	pthread_mutex_unlock(&msg->lock);
	return msg->base + ring_at(&msg->lay, r, m, t);
}

uint64_t farm_msg_testing_park_offset(const farm_msg *msg, unsigned r)
{
	return park_at(&msg->lay, r);
}
