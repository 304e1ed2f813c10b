/*
 * A machine's control socket (ctl.h): the socket, its thread, the answers
 * (stats, regions) and the client (farm_ctl_request).
 *
 * The socket's path is <data_dir>/ctl.sock, or, when that does not fit a
 * sockaddr_un (108 bytes), the same file reached through
 * /proc/self/fd/<the directory's fd>/ctl.sock, on both sides.
 */
#include "node/ctl.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fabric/shm_testing.h"
#ifdef FARM_HAVE_OFI
#include "fabric/ofi_testing.h"
#endif
#include "node/node.h"
#include "recovery/recovery.h"
#include "util/common.h"
#include "util/fault.h"
#include "util/log.h"

#define REQ_MAX   128u        /* request line, without its newline */
#define IO_MS     1000        /* to send the request; to take the answer */
#define REPLY_MAX (16u << 20) /* the client takes no more */

struct farm_ctl {
	farm_node *node;
	int dirfd;  /* the data directory (O_PATH) */
	int lfd;    /* listening */
	int stopfd; /* eventfd: stop the thread */
	pthread_t th;
	/* Held while answering: the sources, and what farm_ctl_lock keeps
	 * still. */
	pthread_mutex_t lock;
	struct farm_ctl_source *sources;
	struct {
		uint64_t requests, bad_requests; /* under lock */
	} st;
};

static _Atomic bool unlocked_remove; /* testing: the bug test_ctl catches */

int farm_ctl_testing_unlocked_remove(bool on)
{
	if (!farm_fault_built())
		return -ENOTSUP;
	atomic_store(&unlocked_remove, on);
	return 0;
}

struct farm_ctl_out {
	char *buf;
	size_t len, cap;
	bool prom;
	bool nomem;
	uint32_t machine;
};

/* ---- answers ------------------------------------------------------------- */

static void out_printf(struct farm_ctl_out *o, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

static void out_printf(struct farm_ctl_out *o, const char *fmt, ...)
{
	if (o->nomem)
		return;
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = o->cap - o->len;
		int n = vsnprintf(o->buf ? o->buf + o->len : NULL, room, fmt,
		                  ap);
		va_end(ap);
		if (n < 0) {
			o->nomem = true;
			return;
		}
		if ((size_t)n < room) {
			o->len += (size_t)n;
			return;
		}
		size_t cap = FARM_MAX(o->cap * 2, o->len + (size_t)n + 4096);
		char *b = realloc(o->buf, cap);
		if (!b) {
			o->nomem = true;
			return;
		}
		o->buf = b;
		o->cap = cap;
	}
}

/* @s with Prometheus' escapes for HELP text (@label: for a label value,
 * which also escapes '"'). */
static void out_escaped(struct farm_ctl_out *o, const char *s, bool label)
{
	for (; *s; s++) {
		if (*s == '\\')
			out_printf(o, "\\\\");
		else if (*s == '\n')
			out_printf(o, "\\n");
		else if (*s == '"' && label)
			out_printf(o, "\\\"");
		else
			out_printf(o, "%c", *s);
	}
}

void farm_ctl_put(struct farm_ctl_out *o, const char *section,
                  const struct farm_ctl_field *f, unsigned n, const void *st)
{
	if (!o || !section || !f || !st)
		return;
	for (unsigned i = 0; i < n; i++) {
		uint64_t v;
		memcpy(&v, (const char *)st + f[i].off, sizeof(v));
		if (!o->prom) {
			out_printf(o, "%s.%s %" PRIu64 "\n", section, f[i].name,
			           v);
			continue;
		}
		const char *sfx = f[i].gauge ? "" : "_total";
		out_printf(o, "# HELP farm_%s_%s%s ", section, f[i].name, sfx);
		out_escaped(o, f[i].help, false);
		out_printf(o,
		           "\n# TYPE farm_%s_%s%s %s\n"
		           "farm_%s_%s%s{machine=\"%" PRIu32 "\"} %" PRIu64
		           "\n",
		           section, f[i].name, sfx,
		           f[i].gauge ? "gauge" : "counter", section, f[i].name,
		           sfx, o->machine, v);
	}
}

#define N(a) ((unsigned)(sizeof(a) / sizeof((a)[0])))

static const struct farm_ctl_field as_fields[] = {
        FARM_CTL_GAUGE(struct farm_as_stats, regions_primary,
                       "regions this machine holds as primary"),
        FARM_CTL_GAUGE(struct farm_as_stats, regions_backup,
                       "regions this machine holds as backup"),
        FARM_CTL_COUNTER(struct farm_as_stats, lookups_sent,
                         "region descriptor lookups sent (cache misses)"),
        FARM_CTL_COUNTER(struct farm_as_stats, lookups_cached,
                         "region descriptors found in the cache"),
        FARM_CTL_COUNTER(struct farm_as_stats, reads_local,
                         "reads of the address space served locally"),
        FARM_CTL_COUNTER(struct farm_as_stats, reads_remote,
                         "reads of the address space sent to a peer"),
        FARM_CTL_COUNTER(struct farm_as_stats, writes_local,
                         "writes of the address space done locally"),
        FARM_CTL_COUNTER(struct farm_as_stats, writes_remote,
                         "writes of the address space sent to a peer"),
        FARM_CTL_COUNTER(struct farm_as_stats, bad_requests,
                         "malformed address space requests refused"),
};

static const struct farm_ctl_field msg_fields[] = {
        FARM_CTL_COUNTER(farm_msg_stats, sent,
                         "messages accepted by farm_msg_send or call"),
        FARM_CTL_COUNTER(farm_msg_stats, received,
                         "messages delivered to handlers"),
        FARM_CTL_COUNTER(farm_msg_stats, frames_sent,
                         "frames written to peers' rings"),
        FARM_CTL_COUNTER(farm_msg_stats, frames_recv,
                         "frames read from this machine's rings"),
        FARM_CTL_COUNTER(farm_msg_stats, queued,
                         "sends that waited for ring space"),
        FARM_CTL_COUNTER(farm_msg_stats, nobufs,
                         "sends refused for want of ring space"),
        FARM_CTL_COUNTER(farm_msg_stats, malformed,
                         "channels broken by bad data"),
        FARM_CTL_COUNTER(farm_msg_stats, stale_replies,
                         "replies to calls that had given up"),
        FARM_CTL_COUNTER(farm_msg_stats, refused_config,
                         "frames refused: sender removed from the "
                         "configuration"),
        FARM_CTL_COUNTER(farm_msg_stats, timeouts, "calls that timed out"),
        FARM_CTL_COUNTER(farm_msg_stats, peer_deaths,
                         "calls failed because the peer died"),
        FARM_CTL_COUNTER(farm_msg_stats, parks, "times a loop parked"),
        FARM_CTL_COUNTER(farm_msg_stats, doorbells,
                         "wake-up doorbells posted to parked receivers"),
};

static const struct farm_ctl_field txn_fields[] = {
        FARM_CTL_COUNTER(farm_txm_stats, commits, "transactions committed"),
        FARM_CTL_COUNTER(farm_txm_stats, commits_single,
                         "single-machine commits"),
        FARM_CTL_COUNTER(farm_txm_stats, aborts_conflict,
                         "aborts: an object was locked or changed"),
        FARM_CTL_COUNTER(farm_txm_stats, aborts_validation,
                         "aborts: a read changed before commit"),
        FARM_CTL_COUNTER(farm_txm_stats, aborts_failure,
                         "aborts: a participant failed"),
        FARM_CTL_COUNTER(farm_txm_stats, aborts_nospace,
                         "aborts: no memory or log space"),
        FARM_CTL_COUNTER(farm_txm_stats, aborts_freed,
                         "aborts: an object was freed"),
        FARM_CTL_COUNTER(farm_txm_stats, lf_reads, "lock-free reads"),
        FARM_CTL_COUNTER(farm_txm_stats, lf_retries, "lock-free reads retried"),
        FARM_CTL_COUNTER(farm_txm_stats, tx_reads, "reads inside transactions"),
        FARM_CTL_COUNTER(farm_txm_stats, commit_writes,
                         "one-sided WRITEs of log records in commits"),
        FARM_CTL_COUNTER(farm_txm_stats, commit_reads,
                         "one-sided READs validating commits"),
        FARM_CTL_COUNTER(farm_txm_stats, commit_msgs,
                         "lock replies received in commits"),
        FARM_CTL_COUNTER(farm_txm_stats, log_full,
                         "log reservations that waited for space"),
        FARM_CTL_COUNTER(farm_txm_stats, truncates,
                         "explicit TRUNCATE records"),
        FARM_CTL_COUNTER(farm_txm_stats, locks_granted,
                         "locks granted here as primary"),
        FARM_CTL_COUNTER(farm_txm_stats, locks_refused,
                         "locks refused here as primary"),
        FARM_CTL_COUNTER(farm_txm_stats, installs,
                         "objects installed here as primary"),
        FARM_CTL_COUNTER(farm_txm_stats, backup_applies,
                         "records applied here as backup"),
        FARM_CTL_COUNTER(farm_txm_stats, bad_records,
                         "malformed log records skipped"),
        FARM_CTL_GAUGE(farm_txm_stats, datarec_copying,
                       "region copies data recovery is making here"),
        FARM_CTL_GAUGE(farm_txm_stats, datarec_done,
                       "region copies data recovery completed here"),
        FARM_CTL_GAUGE(farm_txm_stats, datarec_lost,
                       "region copies data recovery stopped"),
        FARM_CTL_COUNTER(farm_txm_stats, datarec_stalled,
                         "region copies stalled: the primary's block table "
                         "stayed bad (read again once a second)"),
        FARM_CTL_COUNTER(farm_txm_stats, datarec_stuck_reads,
                         "data recovery re-reads of an object locked or "
                         "torn at its source (paced)"),
        FARM_CTL_COUNTER(farm_txm_stats, datarec_bytes,
                         "bytes data recovery READ from primaries"),
        FARM_CTL_COUNTER(farm_txm_stats, epochs, "distributed epochs run"),
        FARM_CTL_COUNTER(farm_txm_stats, epochs_failed,
                         "distributed epochs that failed"),
        FARM_CTL_COUNTER(farm_txm_stats, epoch_blocks_reclaimed,
                         "1 MiB blocks epochs made reusable"),
        FARM_CTL_COUNTER(farm_txm_stats, stale_refused,
                         "LOCK records of an older configuration refused"),
        FARM_CTL_COUNTER(farm_txm_stats, backup_skipped,
                         "COMMIT-BACKUPs skipped: their transaction aborted"),
        FARM_CTL_COUNTER(farm_txm_stats, backup_nocopy,
                         "COMMIT-BACKUPs for regions this machine holds no "
                         "copy of"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_committed,
                         "transactions recovery decided here as committed"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_aborted,
                         "transactions recovery decided here as aborted"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_locks,
                         "locks recovered at promoted primaries"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_promoted,
                         "regions promoted to primary here"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_refused,
                         "recovery messages refused"),
        FARM_CTL_COUNTER(farm_txm_stats, trunc_unfinished,
                         "COMMIT-BACKUPs truncated above the low-water mark "
                         "(invariant: 0)"),
        FARM_CTL_COUNTER(farm_txm_stats, lock_waits_ended,
                         "commits whose LOCK wait on a removed machine "
                         "a new configuration ended"),
        FARM_CTL_COUNTER(farm_txm_stats, rec_decided_unlocked,
                         "recovery decisions that found their LOCK no longer "
                         "held here (settled before: nothing installed)"),
};

#define REC(field, name, help)                                                 \
	{                                                                      \
		name, help, offsetof(struct farm_recovery_stats, field), false \
	}
static const struct farm_ctl_field rec_fields[] = {
        REC(lease.sent, "lease_sent", "lease messages sent"),
        REC(lease.received, "lease_received", "lease messages received"),
        REC(lease.renewals, "lease_renewals", "lease renewals"),
        REC(lease.late, "lease_late", "renewals after half a lease"),
        REC(lease.expiries, "lease_expiries", "leases that lapsed"),
        REC(lease.lost, "lease_lost", "times this machine's lease lapsed"),
        REC(lease.refused, "lease_refused",
            "bad, stale or foreign lease messages dropped"),
        REC(suspicions, "suspicions", "machines suspected"),
        REC(probes, "probes", "probe rounds"),
        REC(requests, "requests", "removals asked of the membership"),
        REC(no_majority, "no_majority", "probes without a majority"),
        REC(withdrawn, "withdrawn", "suspects that answered the probe"),
        REC(removed, "removed", "times this machine found itself removed"),
};

struct node_st {
	uint64_t config_id, members, threads;
};
static const struct farm_ctl_field node_fields[] = {
        FARM_CTL_GAUGE(struct node_st, config_id,
                       "the configuration this machine applied"),
        FARM_CTL_GAUGE(struct node_st, members,
                       "machines in that configuration"),
        FARM_CTL_GAUGE(struct node_st, threads, "event loops"),
};

struct fab_st {
	uint64_t shm_line_giveups;
};
static const struct farm_ctl_field shm_fields[] = {
        FARM_CTL_COUNTER(struct fab_st, shm_line_giveups,
                         "shm: line-atomic copies that gave up retrying "
                         "(process-wide)"),
};

#ifdef FARM_HAVE_OFI
static const struct farm_ctl_field ofi_fields[] = {
        FARM_CTL_COUNTER(struct farm_ofi_stats, ops,
                         "ofi: requests handed to libfabric"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, errors,
                         "ofi: error completions"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, read_retries,
                         "ofi: READs read again (copies differed)"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, timeouts,
                         "ofi: requests failed by the death bound"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, stale,
                         "ofi: completions of destroyed endpoints"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, notifies_in,
                         "ofi: doorbells received"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, malformed,
                         "ofi: control messages refused"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, progress_sleeps,
                         "ofi: times the progress thread slept"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, table_fetches,
                         "ofi: peers' registration tables copied"),
        FARM_CTL_COUNTER(struct farm_ofi_stats, heartbeats,
                         "ofi: liveness READs sent"),
};
#endif

static const struct farm_ctl_field ctl_fields[] = {
        {"requests", "control socket connections served",
         offsetof(struct farm_ctl, st.requests), false},
        {"bad_requests", "control socket requests refused",
         offsetof(struct farm_ctl, st.bad_requests), false},
};

/* Under c->lock. */
static void answer_stats(struct farm_ctl *c, struct farm_ctl_out *o)
{
	farm_node *n = c->node;
	farm_fabric *fab = farm_node_fabric(n);
	const char *prov = farm_fabric_provider(fab);
	struct farm_view *v = malloc(sizeof(*v));
	struct node_st ns = {.threads = farm_node_nthreads(n)};
	if (v && !farm_node_view(n, v)) {
		ns.config_id = v->config_id;
		ns.members = v->n;
	}
	free(v);
	if (o->prom) {
		out_printf(o,
		           "# HELP farm_machine_info the machine and its "
		           "fabric provider (always 1)\n"
		           "# TYPE farm_machine_info gauge\n"
		           "farm_machine_info{machine=\"%" PRIu32
		           "\",fabric=\"",
		           o->machine);
		out_escaped(o, prov ? prov : "?", true);
		out_printf(o, "\"} 1\n");
	} else {
		out_printf(o,
		           "# machine %" PRIu32 ", configuration %" PRIu64
		           ", fabric %s\n",
		           o->machine, ns.config_id, prov ? prov : "?");
	}
	farm_ctl_put(o, "node", node_fields, N(node_fields), &ns);
	if (prov && !strcmp(prov, "shm")) {
		struct fab_st fs = {farm_shm_testing_line_giveups()};
		farm_ctl_put(o, "fabric", shm_fields, N(shm_fields), &fs);
	}
#ifdef FARM_HAVE_OFI
	struct farm_ofi_stats os;
	if (!farm_ofi_stats(fab, &os))
		farm_ctl_put(o, "fabric", ofi_fields, N(ofi_fields), &os);
#endif
	struct farm_as_stats as;
	farm_as_stats_get(farm_node_as(n), &as);
	farm_ctl_put(o, "addrspace", as_fields, N(as_fields), &as);
	farm_msg_stats ms;
	farm_msg_stats_get(farm_node_msg(n), NULL, &ms);
	farm_ctl_put(o, "msg", msg_fields, N(msg_fields), &ms);
	farm_txm_stats ts;
	farm_txm_stats_get(farm_node_txm(n), &ts);
	farm_ctl_put(o, "txn", txn_fields, N(txn_fields), &ts);
	farm_recovery *rec = farm_node_recovery(n);
	if (rec) {
		struct farm_recovery_stats rs;
		farm_recovery_stats(rec, &rs);
		farm_ctl_put(o, "recovery", rec_fields, N(rec_fields), &rs);
	}
	for (struct farm_ctl_source *s = c->sources; s; s = s->next) {
		FARM_FAULT_POINT(FARM_FP_CTL_SOURCE);
		s->fn(s->ctx, o);
	}
	farm_ctl_put(o, "ctl", ctl_fields, N(ctl_fields), c);
}

static void answer_regions(struct farm_ctl *c, struct farm_ctl_out *o)
{
	farm_as *as = farm_node_as(c->node);
	unsigned n = farm_as_held(as, NULL, 0);
	struct farm_as_held *h = malloc((n + 1) * sizeof(*h));
	if (!h) {
		o->nomem = true;
		return;
	}
	n = FARM_MIN(n, farm_as_held(as, h, n));
	out_printf(o,
	           "machine %" PRIu32 "\nconfiguration %" PRIu64 "\n"
	           "regions %u\n",
	           o->machine, farm_as_config_id(as), n);
	for (unsigned i = 0; i < n; i++) {
		uint32_t rep[16];
		unsigned k = farm_as_replicas(as, h[i].region, rep);
		/* filling: a new backup data recovery is still copying
		 * (src/txn/copy.c), not yet a replica that counts. */
		out_printf(o, "region %" PRIu32 " %s", h[i].region,
		           h[i].role == FARM_AS_PRIMARY ? "primary"
		           : farm_as_backup_filling(as, h[i].region)
		                   ? "filling"
		                   : "backup");
		for (unsigned j = 0; j < k && j < 16; j++)
			out_printf(o, " %" PRIu32, rep[j]);
		out_printf(o, "\n");
	}
	free(h);
}

static const char help_text[] =
        "stats             counters as text\n"
        "stats prometheus  counters in Prometheus' text format\n"
        "regions           the regions this machine holds and their "
        "replicas\n"
        "leave [MS]        leave the cluster gracefully (farm_node_leave;\n"
        "                  default 300000 ms): answers \"left\" once the\n"
        "                  configuration without this machine is applied\n"
        "help              this text\n";

/* ---- the thread ---------------------------------------------------------- */

static int remaining_ms(uint64_t deadline)
{
	uint64_t now = farm_now_ns();
	return now >= deadline ? 0 : (int)((deadline - now + 999999) / 1000000);
}

/* Wait for @fd to be ready for @ev, or the stop signal, until @deadline:
 * 1 ready, 0 timed out or stopping. */
static int wait_fd(struct farm_ctl *c, int fd, short ev, uint64_t deadline)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = fd, .events = ev},
		                      {.fd = c->stopfd, .events = POLLIN}};
		int r = poll(p, 2, remaining_ms(deadline));
		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0 || p[1].revents)
			return 0;
		return 1;
	}
}

/* Read one request line into @req: NULL, or what is wrong with it. */
static const char *read_request(struct farm_ctl *c, int fd, char *req)
{
	uint64_t deadline = farm_now_ns() + IO_MS * 1000000ull;
	size_t n = 0;
	for (;;) {
		if (!wait_fd(c, fd, POLLIN, deadline))
			return "no request within 1 s";
		ssize_t r = recv(fd, req + n, REQ_MAX + 1 - n, 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r < 0)
			return "cannot read the request";
		char *nl = memchr(req + n, '\n', (size_t)r);
		n += (size_t)r;
		if (nl) {
			if (nl != req + n - 1)
				return "more than one line";
			n--;
			break;
		}
		if (r == 0)
			break; /* the line ends with the connection */
		if (n > REQ_MAX)
			return "request longer than 128 bytes";
	}
	if (n && req[n - 1] == '\r')
		n--;
	req[n] = 0;
	for (size_t i = 0; i < n; i++)
		if (req[i] < 0x20 || req[i] > 0x7e)
			return "the request is not printable text";
	return n ? NULL : "empty request";
}

enum ctl_req {
	CTL_UNKNOWN,
	CTL_STATS,
	CTL_PROM,
	CTL_REGIONS,
	CTL_HELP,
	CTL_LEAVE
};

/* What a request line (read_request's, checked) asks for. */
static enum ctl_req request_kind(const char *req)
{
	if (!strcmp(req, "stats") || !strcmp(req, "stats text"))
		return CTL_STATS;
	if (!strcmp(req, "stats prometheus"))
		return CTL_PROM;
	if (!strcmp(req, "regions"))
		return CTL_REGIONS;
	if (!strcmp(req, "help"))
		return CTL_HELP;
	if (!strcmp(req, "leave") || !strncmp(req, "leave ", 6))
		return CTL_LEAVE;
	return CTL_UNKNOWN;
}

static void send_all(struct farm_ctl *c, int fd, const char *p, size_t len)
{
	uint64_t deadline = farm_now_ns() + IO_MS * 1000000ull;
	while (len) {
		ssize_t w = send(fd, p, len, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno == EAGAIN) {
			if (!wait_fd(c, fd, POLLOUT, deadline))
				return; /* the client does not read: drop it */
			continue;
		}
		if (w <= 0)
			return;
		p += w;
		len -= (size_t)w;
	}
}

/* Closing with unread input would reset the connection and could lose
 * the answer (an "error" line for a request too long): end the answer,
 * then read what the client still sends, up to 64 KiB and 1 s, until it
 * closes. */
static void drain(struct farm_ctl *c, int fd)
{
	char buf[4096];
	size_t total = 0;
	uint64_t deadline = farm_now_ns() + IO_MS * 1000000ull;
	shutdown(fd, SHUT_WR);
	while (total < (64u << 10) && wait_fd(c, fd, POLLIN, deadline)) {
		ssize_t r = recv(fd, buf, sizeof(buf), 0);
		if (r < 0 && (errno == EINTR || errno == EAGAIN))
			continue;
		if (r <= 0)
			return;
		total += (size_t)r;
	}
}

#define LEAVE_DEFAULT_MS 300000

/* "leave [MS]": the graceful leave, on this thread and outside c->lock
 * (it takes as long as the handoff; other requests wait meanwhile). The
 * answer: "left", or NULL with *@why set. */
static void answer_leave(struct farm_ctl *c, const char *req,
                         struct farm_ctl_out *o, const char **why)
{
	long ms = LEAVE_DEFAULT_MS;
	if (req[5]) {
		char *end;
		ms = strtol(req + 6, &end, 10);
		if (*end || ms <= 0 || ms > INT32_MAX) {
			*why = "leave: the timeout is not a number of ms";
			return;
		}
	}
	int rc = farm_node_leave(c->node, (int)ms);
	if (rc == -EBUSY)
		*why = "leave: too few machines would stay for the replicas";
	else if (rc == -EPERM)
		*why = "leave: this machine is the configuration manager";
	else if (rc == -ENOTSUP)
		*why = "leave: static membership (no ZooKeeper)";
	else if (rc == -EALREADY)
		*why = "leave: a graceful leave already runs on this machine "
		       "(another caller's; it goes on)";
	else if (rc)
		*why = farm_strerror(rc);
	else
		out_printf(o, "left\n");
}

static void serve(struct farm_ctl *c, int fd)
{
	struct farm_ctl_out o = {.machine = farm_node_id(c->node)};
	char req[REQ_MAX + 2] = "";
	const char *bad = NULL;
	struct ucred cr;
	socklen_t cl = sizeof(cr);
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) ||
	    (cr.uid != 0 && cr.uid != geteuid()))
		bad = "permission denied";
	else
		bad = read_request(c, fd, req);
	bool leave = !bad && request_kind(req) == CTL_LEAVE;
	if (leave)
		answer_leave(c, req, &o, &bad);
	pthread_mutex_lock(&c->lock);
	c->st.requests++;
	if (!bad && !leave) {
		switch (request_kind(req)) {
		case CTL_STATS: answer_stats(c, &o); break;
		case CTL_PROM:
			o.prom = true;
			answer_stats(c, &o);
			break;
		case CTL_REGIONS: answer_regions(c, &o); break;
		case CTL_HELP: out_printf(&o, "%s", help_text); break;
		default: bad = "unknown request (try help)"; break;
		}
	}
	if (bad)
		c->st.bad_requests++;
	pthread_mutex_unlock(&c->lock);
	if (o.nomem && !bad)
		bad = "out of memory";
	if (bad) {
		o.len = 0;
		o.nomem = false;
		out_printf(&o, "error %s\n", bad);
		farm_info("ctl: machine %" PRIu32 ": refused a request: %s",
		          o.machine, bad);
	}
	if (!o.nomem)
		send_all(c, fd, o.buf, o.len);
	free(o.buf);
	drain(c, fd);
}

static void *ctl_main(void *arg)
{
	struct farm_ctl *c = arg;
	for (;;) {
		/* Sleeps here while nobody asks. */
		struct pollfd p[2] = {{.fd = c->lfd, .events = POLLIN},
		                      {.fd = c->stopfd, .events = POLLIN}};
		int r = poll(p, 2, -1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0 || p[1].revents)
			break;
		int fd = accept4(c->lfd, NULL, NULL,
		                 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			continue; /* gone meanwhile (EAGAIN), or out of fds */
		serve(c, fd);
		close(fd);
	}
	return NULL;
}

/* ---- the socket ---------------------------------------------------------- */

/* The socket's address for data directory @dir (open as @dirfd). */
static int ctl_addr(const char *dir, int dirfd, struct sockaddr_un *a)
{
	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	int n = snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s", dir,
	                 FARM_CTL_SOCKET);
	if (n > 0 && (size_t)n < sizeof(a->sun_path))
		return 0;
	n = snprintf(a->sun_path, sizeof(a->sun_path), "/proc/self/fd/%d/%s",
	             dirfd, FARM_CTL_SOCKET);
	return n > 0 && (size_t)n < sizeof(a->sun_path) ? 0 : -ENAMETOOLONG;
}

/* Is a machine answering on @a? */
static bool ctl_alive(const struct sockaddr_un *a)
{
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return false;
	bool alive = connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0;
	close(fd);
	return alive;
}

static int ctl_bind(struct farm_ctl *c, const char *dir)
{
	struct sockaddr_un a;
	int rc = ctl_addr(dir, c->dirfd, &a);
	if (rc)
		return rc;
	c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (c->lfd < 0)
		return -errno;
	if (bind(c->lfd, (const struct sockaddr *)&a, sizeof(a))) {
		if (errno != EADDRINUSE)
			return -errno;
		/* A socket file: a live machine's, or a dead one's. */
		if (ctl_alive(&a))
			return -EADDRINUSE;
		if (unlinkat(c->dirfd, FARM_CTL_SOCKET, 0) ||
		    bind(c->lfd, (const struct sockaddr *)&a, sizeof(a)))
			return -errno;
	}
	if (fchmodat(c->dirfd, FARM_CTL_SOCKET, 0600, 0) ||
	    listen(c->lfd, 16)) {
		rc = -errno;
		unlinkat(c->dirfd, FARM_CTL_SOCKET, 0);
		return rc;
	}
	return 0;
}

static void ctl_free(struct farm_ctl *c, bool bound)
{
	if (bound)
		unlinkat(c->dirfd, FARM_CTL_SOCKET, 0);
	if (c->lfd >= 0)
		close(c->lfd);
	if (c->stopfd >= 0)
		close(c->stopfd);
	if (c->dirfd >= 0)
		close(c->dirfd);
	pthread_mutex_destroy(&c->lock);
	free(c);
}

struct farm_ctl *farm_ctl_open(farm_node *n, const char *data_dir)
{
	if (!n || !data_dir || !data_dir[0])
		return NULL;
	struct farm_ctl *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	c->node = n;
	c->lfd = c->stopfd = -1;
	pthread_mutex_init(&c->lock, NULL);
	c->dirfd = open(data_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	int rc = c->dirfd < 0 ? -errno : 0;
	if (!rc && (c->stopfd = eventfd(0, EFD_CLOEXEC)) < 0)
		rc = -errno;
	bool bound = false;
	if (!rc)
		bound = !(rc = ctl_bind(c, data_dir));
	if (!rc)
		rc = -pthread_create(&c->th, NULL, ctl_main, c);
	if (rc) {
		farm_warn(
		        "node %" PRIu32 ": no control socket in %s (farm "
		        "stats and farm status cannot reach this machine): %s",
		        farm_node_id(n), data_dir, farm_strerror(rc));
		ctl_free(c, bound);
		return NULL;
	}
	return c;
}

void farm_ctl_close(struct farm_ctl *c)
{
	if (!c)
		return;
	uint64_t one = 1;
	if (write(c->stopfd, &one, sizeof(one)) != sizeof(one))
		farm_warn("ctl: cannot stop the control thread: %s",
		          strerror(errno));
	pthread_join(c->th, NULL);
	pthread_mutex_lock(&c->lock);
	for (struct farm_ctl_source *s = c->sources; s; s = s->next)
		s->ctl = NULL;
	c->sources = NULL;
	pthread_mutex_unlock(&c->lock);
	ctl_free(c, true);
}

void farm_ctl_lock(struct farm_ctl *c)
{
	if (c)
		pthread_mutex_lock(&c->lock);
}

void farm_ctl_unlock(struct farm_ctl *c)
{
	if (c)
		pthread_mutex_unlock(&c->lock);
}

void farm_ctl_add(struct farm_ctl *c, struct farm_ctl_source *s)
{
	if (!c || !s || !s->fn || s->ctl)
		return;
	pthread_mutex_lock(&c->lock);
	s->ctl = c;
	s->next = c->sources;
	c->sources = s;
	pthread_mutex_unlock(&c->lock);
}

void farm_ctl_remove(struct farm_ctl_source *s)
{
	struct farm_ctl *c = s ? s->ctl : NULL;
	if (!c)
		return;
	/* Under the lock: an answer calling @s finishes first. */
	bool lock = !atomic_load(&unlocked_remove);
	if (lock)
		pthread_mutex_lock(&c->lock);
	for (struct farm_ctl_source **p = &c->sources; *p; p = &(*p)->next)
		if (*p == s) {
			*p = s->next;
			break;
		}
	s->ctl = NULL;
	if (lock)
		pthread_mutex_unlock(&c->lock);
}

/* ---- the client ---------------------------------------------------------- */

static void set_timeout(int fd, int opt, uint64_t deadline)
{
	int ms = remaining_ms(deadline);
	struct timeval tv = {.tv_sec = ms / 1000,
	                     .tv_usec = (ms % 1000) * 1000 + (ms ? 0 : 1)};
	(void)setsockopt(fd, SOL_SOCKET, opt, &tv, sizeof(tv));
}

/* Connect to the control socket of @data_dir (open as @dirfd) into
 * *@fd, giving up at @deadline. On failure *@fd may still hold a socket
 * for the caller to close. */
static int ctl_connect(const char *data_dir, int dirfd, uint64_t deadline,
                       int *fd)
{
	struct sockaddr_un a;
	int rc = ctl_addr(data_dir, dirfd, &a);
	*fd = rc ? -1 : socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (rc)
		return rc;
	if (*fd < 0)
		return -errno;
	set_timeout(*fd, SO_SNDTIMEO, deadline);
	if (connect(*fd, (const struct sockaddr *)&a, sizeof(a)))
		return errno == EAGAIN || errno == EINPROGRESS ? -ETIMEDOUT
		                                               : -errno;
	return 0;
}

/* Send @request as one line, then close our side: the server answers
 * once it sees the end of the request. */
static int ctl_send_line(int fd, const char *request)
{
	size_t rl = strlen(request);
	char *line = malloc(rl + 2);
	if (!line)
		return -ENOMEM;
	memcpy(line, request, rl);
	line[rl] = '\n';
	line[rl + 1] = 0;
	int rc = 0;
	ssize_t w = send(fd, line, rl + 1, MSG_NOSIGNAL);
	if (w != (ssize_t)(rl + 1))
		rc = w < 0 && errno != EAGAIN ? -errno : -ETIMEDOUT;
	shutdown(fd, SHUT_WR);
	free(line);
	return rc;
}

/* Read the reply into @o until the server closes, at most REPLY_MAX
 * bytes (one left for the terminating zero), giving up at @deadline. */
static int ctl_recv_all(int fd, uint64_t deadline, struct farm_ctl_out *o)
{
	for (;;) {
		if (o->cap - o->len < 4096) {
			size_t cap = FARM_MAX(o->cap * 2, (size_t)16384);
			if (cap > REPLY_MAX + 1)
				return -EMSGSIZE;
			char *b = realloc(o->buf, cap);
			if (!b)
				return -ENOMEM;
			o->buf = b;
			o->cap = cap;
		}
		set_timeout(fd, SO_RCVTIMEO, deadline);
		ssize_t r = recv(fd, o->buf + o->len, o->cap - o->len - 1, 0);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return errno == EAGAIN ? -ETIMEDOUT : -errno;
		if (r == 0)
			return 0;
		o->len += (size_t)r;
	}
}

int farm_ctl_request(const char *data_dir, const char *request, char **reply,
                     size_t *len, int timeout_ms)
{
	if (!data_dir || !request || !reply || strchr(request, '\n'))
		return -EINVAL;
	*reply = NULL;
	uint64_t deadline =
	        farm_now_ns() +
	        (uint64_t)(timeout_ms > 0 ? timeout_ms : 0) * 1000000ull;
	int dirfd = open(data_dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (dirfd < 0)
		return -errno;
	int fd;
	struct farm_ctl_out o = {0};
	int rc = ctl_connect(data_dir, dirfd, deadline, &fd);
	if (!rc)
		rc = ctl_send_line(fd, request);
	if (!rc)
		rc = ctl_recv_all(fd, deadline, &o);
	if (fd >= 0)
		close(fd);
	close(dirfd);
	if (rc) {
		free(o.buf);
		return rc;
	}
	/* Every answer is whole lines: nothing, or an unfinished last line,
	 * means the machine closed the connection before it had answered
	 * (it exited or crashed meanwhile, or gave up sending). */
	if (!o.len || o.buf[o.len - 1] != '\n') {
		free(o.buf);
		return -ECONNRESET;
	}
	o.buf[o.len] = 0;
	*reply = o.buf;
	if (len)
		*len = o.len;
	return o.len >= 6 && !memcmp(o.buf, "error ", 6) ? -EPROTO : 0;
}
