/*
 * verbs provider: the fabric on RDMA hardware through rdma-core
 * (libibverbs for the data path, librdmacm for connection setup).
 * InfiniBand, RoCE, and the software devices rxe and siw.
 *
 * What a fabric owns (ARCHITECTURE.md 2.1):
 *   - one device context, the one librdmacm opened for the device the
 *     listen address is on (or attr->device / the first device when the
 *     listen address is a wildcard), and one protection domain on it: every
 *     registration and queue pair of the fabric lives in that PD;
 *   - a listening rdma_cm_id bound to attr->listen_addr, on an event
 *     channel served by one listener thread. For every peer that connects,
 *     the thread creates a passive RC queue pair (on a small internal CQ:
 *     nothing is ever posted to it) and accepts. The peer's private data
 *     must carry {magic, its machine id, our machine id}; a request naming
 *     another machine id is rejected with a reason the initiator turns into
 *     -EINVAL. The passive QP is the responder of the peer's one-sided
 *     requests: the CM grants it remote WRITE, and READ and ATOMIC as soon
 *     as the peer asked for responder resources (kernel ib_cm rule), which
 *     ep_connect always does;
 *   - endpoints: one active RC QP each, created on a private event channel
 *     (resolve, connect and wait are synchronous and bounded), then
 *     migrated to the listener's channel so that the thread sees the peer
 *     disconnect;
 *   - completion queues: one ibv_cq each, shared by every endpoint attached
 *     to it, grown (ibv_resize_cq) so that it can hold every completion its
 *     endpoints could have outstanding at once: no CQ overrun, ever.
 *
 * Requests. farm_ep_post() turns its list into ibv_send_wr's and rings one
 * doorbell (one ibv_post_send) per VB_BATCH requests. Each request takes a
 * slot of the endpoint's send ring, whose sequence number is the low half
 * of the wr_id given to the NIC (the high half is the endpoint's
 * incarnation, so a late completion of a destroyed endpoint whose QP
 * number was reused is recognised and dropped). A completion for slot s
 * retires every slot up to s: RC reports completions of one send queue in
 * order, so slots before s that were unsignaled have completed, with
 * success unless the QP had already failed. Unsignaled requests thus hold
 * their slot until a later signaled one completes, as the NIC holds their
 * send-queue entries: the provider signals one request in every sq_depth/2
 * by itself (its success is not reported) so that the ring always drains.
 * Requests the provider can fail without the NIC (endpoint closed or in
 * error, peer known gone, local buffer outside its registration, CAS not
 * 8-byte aligned, a key that is no verbs key) never reach the QP: they
 * complete with their status through a per-endpoint software queue that
 * farm_cq_poll() drains first.
 *
 * Ordering guarantees, all given by the hardware:
 *   - an RC QP executes its requests in post order, and completions of one
 *     QP arrive in that order;
 *   - a WRITE's bytes are placed in increasing address order on the NICs
 *     FaRM targets (the paper relies on it for its ring buffers: the last 8
 *     bytes land last); the verbs spec does not promise it, so a device
 *     that does not keep it breaks the msg layer, not this file;
 *   - a READ is served by PCIe DMA reads, which are cache-coherent and
 *     atomic per 64-byte cache line on x86: this is the line atomicity the
 *     object layout relies on, with nothing to emulate here;
 *   - a CAS is atomic with respect to other NIC atomics on the same 8
 *     bytes (IBV_ATOMIC_HCA); atomicity with CPU stores needs
 *     IBV_ATOMIC_GLOB, which libfarm does not require.
 * Differences from shm the code above must accept: a request naming a
 * deregistered key fails with FARM_EREMOTE_ACCESS (the NIC reports key and
 * range errors alike); a software completion (see above) may be reported
 * before the hardware completions of requests posted earlier on the same
 * endpoint (those complete as the NIC reports them; nothing posted after a
 * failure ever succeeds); fault injection is not supported (-ENOTSUP from
 * the generic layer).
 *
 * What may race: the listener thread sets ep->peer_gone (atomic) while
 * posters read it; ep->state is atomic because farm_ep_usable() may be
 * called from any thread. Posting to a FARM_EP_SHARED endpoint is
 * serialised by its mutex (this is how q threads share one QP, the
 * "queue pair shared by q threads" of the paper), and the poller takes the
 * same mutex to retire its slots. A FARM_CQ_SHARED CQ is polled under its
 * mutex. A non-shared CQ and its non-shared endpoints belong to one thread
 * (the contract of fabric.h): connecting or destroying one of its
 * endpoints while another thread polls it is not supported.
 *
 * Files (verbs_int.h has the objects): this one opens and closes the
 * fabric (device, protection domain, listening id) and does memory and
 * registration; verbs_listen.c is the listener thread (accepting peers,
 * noticing their disconnect and the device's removal); verbs_ep.c sets up
 * and tears down endpoints (addresses, private data, the RC QP);
 * verbs_data.c has the completion queues and the data path.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>

#include <arpa/inet.h>

#include "fabric/verbs_int.h"
#include "util/log.h"

/* ---- open / close -------------------------------------------------------- */

static void vb_mr_dereg(farm_mr *m);
static void vb_mem_free(farm_mem *m);

/*
 * Is there a device, and which one is meant? Runs first, and alone, on a
 * machine without RDMA: it takes nothing it does not give back.
 */
static int probe_device(const char *want, char *name, size_t len)
{
	int n = 0;
	errno = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list) {
		int e = errno;
		if (e == ENOSYS)
			farm_info(
			        "verbs: no RDMA device: the kernel has no RDMA "
			        "support (no ib_uverbs)");
		else
			farm_info("verbs: no RDMA device: ibv_get_device_list: "
			          "%s",
			          e ? strerror(e) : "failed");
		return FARM_ENODEVICE;
	}
	int rc = FARM_ENODEVICE;
	if (n <= 0 || !list[0]) {
		farm_info("verbs: no RDMA device found (is a driver loaded: "
		          "mlx5_ib, rdma_rxe, siw?)");
		goto out;
	}
	for (int i = 0; i < n && list[i]; i++) {
		const char *dn = ibv_get_device_name(list[i]);
		if (!dn || (want && strcmp(dn, want) != 0))
			continue;
		snprintf(name, len, "%s", dn);
		rc = 0;
		break;
	}
	if (rc) {
		char have[256] = "";
		size_t used = 0;
		for (int i = 0; i < n && list[i] && used < sizeof(have); i++) {
			int w = snprintf(have + used, sizeof(have) - used,
			                 "%s%s", i ? ", " : "",
			                 ibv_get_device_name(list[i]));
			if (w < 0)
				break;
			used += (size_t)w;
		}
		farm_err("verbs: no RDMA device named '%s' (have: %s)", want,
		         have);
	}
out:
	ibv_free_device_list(list);
	return rc;
}

/* The context librdmacm opened for device @name (wildcard listens). */
static int find_cm_context(struct vb_fabric *fab, const char *name)
{
	int n = 0;
	fab->devs = rdma_get_devices(&n);
	if (!fab->devs) {
		farm_err("verbs: rdma_get_devices: %s", strerror(errno));
		return FARM_ENODEVICE;
	}
	for (int i = 0; i < n && fab->devs[i]; i++) {
		if (strcmp(ibv_get_device_name(fab->devs[i]->device), name) ==
		    0) {
			fab->ctx = fab->devs[i];
			return 0;
		}
	}
	farm_err("verbs: librdmacm does not see device %s", name);
	return FARM_ENODEVICE;
}

static void vb_close_fabric(farm_fabric *f)
{
	struct vb_fabric *fab = to_fab(f);
	if (fab->thread_running) {
		uint64_t one = 1;
		ssize_t w = write(fab->stop_fd, &one, sizeof(one));
		(void)w;
		pthread_join(fab->thread, NULL);
		fab->thread_running = false;
	}
	/* Whatever the caller left, in dependency order: QPs before CQs,
	 * registrations before memory and the PD. Each is taken off its
	 * list here; the destroy functions then find nothing to unlink. */
	if (fab->eps)
		farm_warn(
		        "verbs: closing with endpoints left; destroying them");
	while (fab->eps) {
		struct vb_ep *ep = fab->eps;
		fab->eps = ep->next;
		farm_vb_ep_destroy(&ep->base);
	}
	if (fab->cqs)
		farm_warn("verbs: closing with completion queues left");
	while (fab->cqs) {
		struct vb_cq *cq = fab->cqs;
		fab->cqs = cq->next;
		if (farm_vb_cq_destroy(&cq->base)) {
			/* The device CQ is leaked (the kernel reclaims it
			 * with the process); ours goes. */
			pthread_mutex_destroy(&cq->lock);
			free(cq->eps);
			free(cq->tab);
			free(cq);
		}
	}
	if (fab->mrs)
		farm_warn("verbs: closing with registrations left");
	while (fab->mrs) {
		struct vb_mr *mr = fab->mrs;
		fab->mrs = mr->next;
		vb_mr_dereg(&mr->base);
	}
	if (fab->mems)
		farm_warn("verbs: closing with memory still allocated; freeing "
		          "it");
	while (fab->mems) {
		struct vb_mem *m = fab->mems;
		fab->mems = m->next;
		vb_mem_free(&m->base);
	}
	farm_vb_close_conns(fab);
	if (rdma_destroy_id(fab->listen_id))
		farm_warn("verbs: rdma_destroy_id (listener): %s",
		          strerror(errno));
	int rc = ibv_destroy_cq(fab->pcq);
	if (rc)
		farm_warn("verbs: ibv_destroy_cq: %s", strerror(rc));
	rc = ibv_dealloc_pd(fab->pd);
	if (rc)
		farm_warn("verbs: ibv_dealloc_pd: %s", strerror(rc));
	rdma_destroy_event_channel(fab->ch);
	if (fab->devs)
		rdma_free_devices(fab->devs);
	close(fab->stop_fd);
	pthread_mutex_destroy(&fab->lock);
	free(fab);
}

static struct vb_fabric *fab_new(const farm_fabric_attr *attr)
{
	struct vb_fabric *fab = calloc(1, sizeof(*fab));
	if (!fab)
		return NULL;
	fab->base.ops = &farm_verbs_ops;
	fab->base.machine_id = attr->machine_id;
	fab->base.wire = farm_fabric_wire_own();
	fab->lctx.kind = VB_CTX_LISTEN;
	fab->stop_fd = -1;
	atomic_init(&fab->next_incarnation, 1);
	pthread_mutex_init(&fab->lock, NULL);
	return fab;
}

static int open_cm_channel(struct vb_fabric *fab)
{
	fab->ch = rdma_create_event_channel();
	if (fab->ch)
		return 0;
	int rc = errno == ENODEV || errno == ENOENT ? FARM_ENODEVICE
	                                            : neg_errno(ENOMEM);
	farm_err("verbs: cannot open the rdma_cm event channel: %s%s",
	         strerror(errno),
	         rc == FARM_ENODEVICE ? " (is rdma_ucm loaded?)" : "");
	return rc;
}

/* Bind the listener; a specific address also becomes the source of our
 * outgoing connections (with any port), so they leave by the same device. */
static int bind_listener(struct vb_fabric *fab, const farm_fabric_attr *attr,
                         struct sockaddr_storage *la)
{
	if (rdma_bind_addr(fab->listen_id, (struct sockaddr *)la)) {
		int rc = neg_errno(EADDRNOTAVAIL);
		if (rc == -ENODEV) {
			farm_err(
			        "verbs: %s is not an address of an RDMA device",
			        attr->listen_addr);
			return FARM_ENODEVICE;
		}
		farm_err("verbs: cannot bind %s: %s", attr->listen_addr,
		         strerror(-rc));
		return rc;
	}
	fab->src_specific = !farm_vb_addr_is_wildcard(la);
	if (fab->src_specific) {
		fab->src = *la;
		if (la->ss_family == AF_INET)
			((struct sockaddr_in *)&fab->src)->sin_port = 0;
		else
			((struct sockaddr_in6 *)&fab->src)->sin6_port = 0;
	}
	return 0;
}

/* Settle the device context: the bound address's device, which must be
 * @want when one was asked for, or the probed device @name for a
 * wildcard bind. */
static int pick_device(struct vb_fabric *fab, const farm_fabric_attr *attr,
                       const char *want, const char *name)
{
	if (!fab->listen_id->verbs) {
		int rc = find_cm_context(fab, name);
		if (rc)
			return rc;
		snprintf(fab->dev_name, sizeof(fab->dev_name), "%s", name);
		return 0;
	}
	/* Bound to an address: the device is the address's. */
	const char *dn = ibv_get_device_name(fab->listen_id->verbs->device);
	if (want && (!dn || strcmp(dn, want) != 0)) {
		farm_err("verbs: %s is on device %s, not %s", attr->listen_addr,
		         dn ? dn : "?", want);
		return -EINVAL;
	}
	fab->ctx = fab->listen_id->verbs;
	snprintf(fab->dev_name, sizeof(fab->dev_name), "%s", dn ? dn : name);
	return 0;
}

/* Query the device's limits, then allocate the PD and the passive CQ
 * (the listener's). On failure, undoes its own steps. */
static int open_device_resources(struct vb_fabric *fab)
{
	int rc = ibv_query_device(fab->ctx, &fab->dattr);
	if (rc) {
		farm_err("verbs: ibv_query_device(%s): %s", fab->dev_name,
		         strerror(rc));
		return -rc;
	}
	fab->max_rd_atom = clamp_u8(fab->dattr.max_qp_rd_atom);
	fab->max_init_rd_atom = clamp_u8(fab->dattr.max_qp_init_rd_atom);
	fab->iwarp = fab->ctx->device->transport_type == IBV_TRANSPORT_IWARP;
	errno = 0; /* ibv_alloc_pd(3) documents NULL only */
	fab->pd = ibv_alloc_pd(fab->ctx);
	if (!fab->pd) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_alloc_pd: %s", strerror(-rc));
		return rc;
	}
	errno = 0;
	fab->pcq = ibv_create_cq(fab->ctx, VB_PASSIVE_CQ_DEPTH, NULL, NULL, 0);
	if (!fab->pcq) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_create_cq: %s", strerror(-rc));
		(void)ibv_dealloc_pd(fab->pd);
		return rc;
	}
	return 0;
}

/* Listen, and record the address peers are to be given. */
static int start_listening(struct vb_fabric *fab, const farm_fabric_attr *attr)
{
	if (rdma_listen(fab->listen_id, VB_LISTEN_BACKLOG)) {
		int rc = neg_errno(EIO);
		farm_err("verbs: rdma_listen on %s: %s", attr->listen_addr,
		         strerror(-rc));
		return rc;
	}
	int rc = farm_vb_format_addr(rdma_get_local_addr(fab->listen_id),
	                             ntohs(rdma_get_src_port(fab->listen_id)),
	                             fab->addr, sizeof(fab->addr));
	if (rc)
		return rc;
	if (!fab->src_specific)
		farm_warn(
		        "verbs: listening on the wildcard %s: peers need a "
		        "concrete address, which farm_fabric_address() cannot "
		        "give; listen on the device's IP",
		        fab->addr);
	return 0;
}

/* The listener thread parks in poll() on the channel and the stop
 * eventfd. On failure, undoes its own steps. */
static int start_listener_thread(struct vb_fabric *fab)
{
	fab->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (fab->stop_fd < 0)
		return neg_errno(EMFILE);
	int rc = farm_vb_set_nonblock(fab->ch->fd);
	if (!rc) {
		rc = -pthread_create(&fab->thread, NULL, farm_vb_listener_main,
		                     fab);
	}
	if (rc) {
		close(fab->stop_fd);
		return rc;
	}
	fab->thread_running = true;
	return 0;
}

static int vb_open_fabric(const farm_fabric_attr *attr, farm_fabric **out)
{
	char name[IBV_SYSFS_NAME_MAX];
	const char *want = attr->device && *attr->device ? attr->device : NULL;
	/* The device first: "no device here" is what a machine without RDMA
	 * answers whatever else the attributes say (tests skip on it). */
	int rc = probe_device(want, name, sizeof(name));
	if (rc)
		return rc;
	if (!attr->listen_addr || !*attr->listen_addr) {
		farm_err("verbs: listen_addr (\"ip:port\", port 0 for any) is "
		         "required");
		return -EINVAL;
	}
	struct sockaddr_storage la;
	if (farm_vb_parse_addr(attr->listen_addr, &la)) {
		farm_err("verbs: bad listen address '%s' (want ip:port or "
		         "[ipv6]:port)",
		         attr->listen_addr);
		return -EINVAL;
	}
	struct vb_fabric *fab = fab_new(attr);
	if (!fab)
		return -ENOMEM;
	rc = open_cm_channel(fab);
	if (rc)
		goto fail_fab;
	if (rdma_create_id(fab->ch, &fab->listen_id, &fab->lctx, RDMA_PS_TCP)) {
		rc = neg_errno(ENOMEM);
		farm_err("verbs: rdma_create_id: %s", strerror(-rc));
		goto fail_ch;
	}
	rc = bind_listener(fab, attr, &la);
	if (rc)
		goto fail_id;
	rc = pick_device(fab, attr, want, name);
	if (!rc)
		rc = open_device_resources(fab);
	if (rc)
		goto fail_devs;
	rc = start_listening(fab, attr);
	if (!rc)
		rc = start_listener_thread(fab);
	if (rc)
		goto fail_pcq;
	farm_info("verbs: machine %u on %s, listening on %s", attr->machine_id,
	          fab->dev_name, fab->addr);
	*out = &fab->base;
	return 0;

	/* Unwinding: a failure to release is not actionable here, and the
	 * first error is the one returned. */
fail_pcq:
	(void)ibv_destroy_cq(fab->pcq);
	(void)ibv_dealloc_pd(fab->pd);
fail_devs:
	if (fab->devs)
		rdma_free_devices(fab->devs);
fail_id:
	(void)rdma_destroy_id(fab->listen_id);
fail_ch:
	rdma_destroy_event_channel(fab->ch);
fail_fab:
	pthread_mutex_destroy(&fab->lock);
	free(fab);
	return rc;
}

static int vb_address(const farm_fabric *f, char *buf, size_t len)
{
	const struct vb_fabric *fab = (const struct vb_fabric *)f;
	size_t n = strlen(fab->addr);
	if (n + 1 > len)
		return -ENOSPC;
	memcpy(buf, fab->addr, n + 1);
	return (int)n;
}

/* ---- memory -------------------------------------------------------------- */

static long read_long(const char *path)
{
	FILE *f = fopen(path, "re");
	if (!f)
		return -1;
	long v = -1;
	if (fscanf(f, "%ld", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static bool thp_available(void)
{
	char buf[128];
	FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "re");
	if (!f)
		return false;
	size_t n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	/* The selected mode is in brackets: "always [madvise] never". */
	return strstr(buf, "[always]") || strstr(buf, "[madvise]");
}

static size_t hugepage_size(void)
{
	size_t sz = 2u << 20;
	FILE *f = fopen("/proc/meminfo", "re");
	if (!f)
		return sz;
	char line[128];
	while (fgets(line, sizeof(line), f)) {
		unsigned long kb;
		if (sscanf(line, "Hugepagesize: %lu kB", &kb) == 1) {
			if (kb && farm_is_pow2(kb))
				sz = (size_t)kb << 10;
			break;
		}
	}
	fclose(f);
	return sz;
}

/*
 * Map @len bytes (a multiple of the page size in use) at an address aligned
 * to @align, with @extra mmap flags (MAP_HUGETLB). Returns the address or
 * MAP_FAILED with errno set.
 */
static void *map_aligned(size_t len, size_t align, int extra)
{
	const int prot = PROT_READ | PROT_WRITE;
	const int fl = MAP_PRIVATE | MAP_ANONYMOUS | extra;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	if (align <= page)
		return mmap(NULL, len, prot, fl, -1, 0);
	if (len + align < len) {
		errno = ENOMEM;
		return MAP_FAILED;
	}
	/* Reserve len + align of address space, place the mapping at the
	 * aligned address inside it, give back the rest. */
	size_t span = len + align;
	uint8_t *res = mmap(NULL, span, PROT_NONE,
	                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (res == MAP_FAILED)
		return MAP_FAILED;
	uint8_t *al = (uint8_t *)(((uintptr_t)res + align - 1) &
	                          ~(uintptr_t)(align - 1));
	void *p = mmap(al, len, prot, fl | MAP_FIXED, -1, 0);
	if (p == MAP_FAILED) {
		int e = errno;
		munmap(res, span);
		errno = e;
		return MAP_FAILED;
	}
	if (al > res)
		munmap(res, (size_t)(al - res));
	if (res + span > al + len)
		munmap(al + len, (size_t)(res + span - (al + len)));
	return p;
}

/* Fault every page in now, so a shortage is an error here, not a fault
 * later (ibv_reg_mr would pin them anyway). */
static int populate(void *addr, size_t len, size_t page)
{
#ifdef MADV_POPULATE_WRITE
	if (madvise(addr, len, MADV_POPULATE_WRITE) == 0)
		return 0;
	if (errno != EINVAL) /* ENOMEM, EFAULT, EHWPOISON: no memory */
		return -ENOMEM;
#endif
	/* Older kernels: touch each page (already zero: the store keeps it). */
	for (size_t off = 0; off < len; off += page)
		((volatile uint8_t *)addr)[off] = 0;
	return 0;
}

static int vb_mem_alloc(farm_fabric *f, size_t size, unsigned flags,
                        farm_mem **out)
{
	struct vb_fabric *fab = to_fab(f);
	static atomic_int logged;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	size_t hp = hugepage_size();
	bool align_size = flags & FARM_MEM_ALIGN_SIZE;
	struct vb_mem *m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	void *addr = MAP_FAILED;
	size_t len = 0;
	bool huge = false;
	const char *why = NULL;

	/* hugetlb pages when the pool has some: reserved at mmap, so a
	 * shortage shows here (and we fall back) rather than as SIGBUS. */
	if (read_long("/proc/sys/vm/nr_hugepages") <= 0) {
		why = "vm.nr_hugepages is 0";
	} else if (size > SIZE_MAX - hp) {
		why = "size too large";
	} else {
		len = (size + hp - 1) & ~(hp - 1);
		addr = map_aligned(len, align_size ? FARM_MAX(size, hp) : hp,
		                   MAP_HUGETLB);
		if (addr != MAP_FAILED)
			huge = true;
		else
			why = "the hugetlb pool is too small";
	}
	if (addr == MAP_FAILED) {
		bool thp = thp_available();
		if ((flags & FARM_MEM_REQUIRE_HUGE) && !thp) {
			farm_err("verbs: huge pages required but none can be "
			         "had "
			         "(%s, and transparent huge pages are off)",
			         why);
			free(m);
			return -ENOTSUP;
		}
		if (size > SIZE_MAX - hp) {
			free(m);
			return -ENOMEM;
		}
		/* THP backs whole aligned 2 MiB ranges only: a region that
		 * must be huge is rounded up to one. */
		size_t gran =
		        thp && (flags & FARM_MEM_REQUIRE_HUGE) ? hp : page;
		len = (size + gran - 1) & ~(gran - 1);
		/* 2 MiB-aligned so that THP can back the whole range. */
		size_t al = thp && len >= hp ? hp : page;
		if (align_size)
			al = FARM_MAX(al, size);
		addr = map_aligned(len, al, 0);
		if (addr == MAP_FAILED) {
			int rc = neg_errno(ENOMEM);
			free(m);
			return rc;
		}
		/* Best effort, as THP is: the kernel backs the range with
		 * huge pages when it can find them. */
		if (thp && len >= hp && madvise(addr, len, MADV_HUGEPAGE) == 0)
			huge = true;
		if (!atomic_exchange(&logged, 1))
			farm_info("verbs: no hugetlb pages (%s): using %s", why,
			          huge ? "transparent huge pages"
			               : "4 KiB pages (transparent huge pages "
			                 "are off)");
		if ((flags & FARM_MEM_REQUIRE_HUGE) && !huge) {
			munmap(addr, len);
			free(m);
			return -ENOTSUP;
		}
	}
	int rc = populate(addr, len, page);
	if (rc) {
		farm_err("verbs: cannot back %zu bytes of memory", size);
		munmap(addr, len);
		free(m);
		return rc;
	}
	m->base.fab = f;
	m->base.addr = addr;
	m->base.size = size;
	m->base.huge = huge;
	m->base.pmem = false;
	m->map_addr = addr;
	m->map_len = len;
	pthread_mutex_lock(&fab->lock);
	m->next = fab->mems;
	fab->mems = m;
	pthread_mutex_unlock(&fab->lock);
	*out = &m->base;
	return 0;
}

static void vb_mem_free(farm_mem *mm)
{
	struct vb_mem *m = (struct vb_mem *)mm;
	struct vb_fabric *fab = to_fab(mm->fab);
	pthread_mutex_lock(&fab->lock);
	for (struct vb_mem **pp = &fab->mems; *pp; pp = &(*pp)->next) {
		if (*pp == m) {
			*pp = m->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	/* A registration still covering it keeps the pages pinned until
	 * it is deregistered; the mapping goes now. */
	if (munmap(m->map_addr, m->map_len))
		farm_warn("verbs: munmap: %s", strerror(errno));
	free(m);
}

/* Memory is DRAM: durability is the model's battery-backed DRAM, so a
 * store fence (our stores ordered before whatever follows) is all there is
 * to do. A NIC's writes into this memory are not covered (FaRM flushes
 * them with a READ, above this layer). */
static int vb_mem_persist(const farm_mem *mem, const void *addr, size_t len)
{
	(void)mem;
	(void)addr;
	(void)len;
	farm_store_fence();
	return 0;
}

/* ---- registration -------------------------------------------------------- */

static int vb_mr_reg(farm_fabric *f, void *addr, size_t len, unsigned access,
                     farm_mr **out)
{
	struct vb_fabric *fab = to_fab(f);
	int acc = 0;
	if (access & FARM_ACCESS_LOCAL) {
		acc |= IBV_ACCESS_LOCAL_WRITE; /* READ and CAS results land here
		                                */
		/* iWARP places READ responses as tagged writes: the sink
		 * needs remote write access. */
		if (fab->iwarp)
			acc |= IBV_ACCESS_REMOTE_WRITE;
	}
	if (access & FARM_ACCESS_REMOTE_READ)
		acc |= IBV_ACCESS_REMOTE_READ;
	/* ibv_reg_mr(3): remote write or atomic needs local write too. */
	if (access & FARM_ACCESS_REMOTE_WRITE)
		acc |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
	if (access & FARM_ACCESS_REMOTE_ATOMIC) {
		if (fab->dattr.atomic_cap == IBV_ATOMIC_NONE) {
			farm_err("verbs: device %s has no atomics",
			         fab->dev_name);
			return -ENOTSUP;
		}
		acc |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
	}
	struct vb_mr *mr = calloc(1, sizeof(*mr));
	if (!mr)
		return -ENOMEM;
	errno = 0;
	mr->mr = ibv_reg_mr(fab->pd, addr, len, acc);
	if (!mr->mr) {
		int rc = neg_errno(ENOMEM);
		farm_err("verbs: ibv_reg_mr(%zu bytes): %s%s", len,
		         strerror(-rc),
		         rc == -ENOMEM || rc == -EPERM
		                 ? " (pinned memory is limited by ulimit -l)"
		                 : "");
		free(mr);
		return rc;
	}
	mr->lkey = mr->mr->lkey;
	mr->base.fab = f;
	mr->base.addr = addr;
	mr->base.len = len;
	mr->base.access = access;
	mr->base.desc = (farm_mr_desc){.key = mr->mr->rkey,
	                               .addr = (uint64_t)(uintptr_t)addr,
	                               .len = len,
	                               .machine = f->machine_id,
	                               .access = access};
	pthread_mutex_lock(&fab->lock);
	mr->next = fab->mrs;
	fab->mrs = mr;
	pthread_mutex_unlock(&fab->lock);
	*out = &mr->base;
	return 0;
}

static void vb_mr_dereg(farm_mr *m)
{
	struct vb_mr *mr = (struct vb_mr *)m;
	struct vb_fabric *fab = to_fab(m->fab);
	pthread_mutex_lock(&fab->lock);
	for (struct vb_mr **pp = &fab->mrs; *pp; pp = &(*pp)->next) {
		if (*pp == mr) {
			*pp = mr->next;
			break;
		}
	}
	pthread_mutex_unlock(&fab->lock);
	int rc = ibv_dereg_mr(mr->mr);
	if (rc)
		farm_err("verbs: ibv_dereg_mr: %s (registration leaked)",
		         strerror(rc));
	free(mr);
}

const struct farm_fabric_ops farm_verbs_ops = {
        .name = "verbs",
        .open = vb_open_fabric,
        .close = vb_close_fabric,
        .address = vb_address,
        .mem_alloc = vb_mem_alloc,
        .mem_free = vb_mem_free,
        .mem_persist = vb_mem_persist,
        .mr_reg = vb_mr_reg,
        .mr_dereg = vb_mr_dereg,
        .cq_create = farm_vb_cq_create,
        .cq_destroy = farm_vb_cq_destroy,
        .cq_poll = farm_vb_cq_poll,
        .ep_connect = farm_vb_ep_connect,
        .ep_disconnect = farm_vb_ep_disconnect,
        .ep_destroy = farm_vb_ep_destroy,
        .ep_usable = farm_vb_ep_usable,
        .ep_post = farm_vb_ep_post,
        /* Fault injection needs a NIC that can be told to fail or stall:
         * unsupported (the generic layer answers -ENOTSUP). */
        .ep_fault = NULL,
        .fault_peer = NULL,
};
