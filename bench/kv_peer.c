/*
 * kv_bench: the peers, memcached and Redis (kv_bench.h), started on
 * loopback free ports (with --netns: in machine 0's namespace, on its
 * address) and stopped by pid, loaded with the same keys, then driven
 * with the same workloads from one client thread per machine thread:
 * pipelined batches and single requests; the server's and the clients'
 * CPU time per run, and an unloaded GET (one connection, one in flight).
 */
#include "kv_bench.h"

const char *const pname[NPEER] = {"memcached", "redis"};
const char *const mname[NMODE] = {"pipelined", "single"};

struct peer {
	pid_t pid;
	int port;
	char dir[256];
};

/* Where the peers listen: loopback; with --netns machine 0's address
 * (the server runs in its namespace, the clients in the clients'). */
static struct in_addr peer_ip = {.s_addr = 0};
static char peer_ip_s[64] = "127.0.0.1";

int kb_peer_netns(void)
{
	if (bnet_addr(0, peer_ip_s, sizeof(peer_ip_s)) ||
	    inet_pton(AF_INET, peer_ip_s, &peer_ip) != 1) {
		fprintf(stderr, PROG ": --netns: no address for machine 0\n");
		return -EINVAL;
	}
	return 0;
}

static int free_port(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t al = sizeof(a);
	int port = -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &al) == 0)
		port = ntohs(a.sin_port);
	close(fd);
	return port > 0 ? port : -EADDRNOTAVAIL;
}

static int tcp_connect(int port)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	struct sockaddr_in a = {.sin_family = AF_INET,
	                        .sin_port = htons((uint16_t)port),
	                        .sin_addr = peer_ip};
	if (!a.sin_addr.s_addr)
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
		int e = -errno;
		close(fd);
		return e;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void peer_stop(struct peer *p)
{
	if (p->pid > 0) {
		kill(p->pid, SIGTERM);
		kill(p->pid, SIGCONT); /* when held (kb_peer_hold) */
		uint64_t t0 = bu_now_ns();
		for (;;) {
			pid_t r = waitpid(p->pid, NULL, WNOHANG);
			if (r == p->pid || (r < 0 && errno != EINTR))
				break;
			if (bu_now_ns() - t0 > 3 * NS) {
				kill(p->pid, SIGKILL);
				while (waitpid(p->pid, NULL, 0) < 0 &&
				       errno == EINTR)
					;
				break;
			}
			kb_nap_ms(2);
		}
		p->pid = 0;
	}
	if (p->dir[0])
		bu_rm_tree(AT_FDCWD, p->dir, 1);
	p->dir[0] = 0;
}

static int peer_start(struct peer *p, int which, const char *tmp)
{
	memset(p, 0, sizeof(*p));
	/* A fresh namespace has every port free. */
	int port =
	        g_opt.net.netns ? (which == P_MC ? 11211 : 6379) : free_port();
	if (port < 0)
		return port;
	p->port = port;
	snprintf(p->dir, sizeof(p->dir), "%s/kv_bench_peer.XXXXXX", tmp);
	if (!mkdtemp(p->dir)) {
		p->dir[0] = 0;
		return -errno;
	}
	char ps[16], mem[32];
	snprintf(ps, sizeof(ps), "%d", port);
	uint64_t mb = (g_opt.keys * 200) >> 20;
	snprintf(mem, sizeof(mem), "%" PRIu64, BU_MAX(mb, 256u));
	/* memcached's hash table sized for the keys up front, as its
	 * documentation advises when the count is known: it would grow
	 * three times while loading 10M keys, each a table's worth of moves
	 * by its maintenance thread on the cores the load uses. */
	char hp[32];
	unsigned pow = 16;
	while (pow < 32 && (1ull << pow) < g_opt.keys)
		pow++;
	snprintf(hp, sizeof(hp), "hashpower=%u", pow);
	fflush(NULL);
	pid_t parent = getpid();
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent)
			_exit(127);
		int nul = open("/dev/null", O_WRONLY);
		if (nul >= 0) {
			dup2(nul, 1);
			close(nul);
		}
		if (bnet_enter(&g_opt.net, 0))
			_exit(127);
		const char *ip = peer_ip_s;
		if (which == P_MC && geteuid() == 0)
			execlp("memcached", "memcached", "-u", "root", "-l", ip,
			       "-p", ps, "-U", "0", "-t", "1", "-m", mem, "-o",
			       hp, "-c", "1024", (char *)NULL);
		else if (which == P_MC)
			execlp("memcached", "memcached", "-l", ip, "-p", ps,
			       "-U", "0", "-t", "1", "-m", mem, "-o", hp, "-c",
			       "1024", (char *)NULL);
		else
			execlp("redis-server", "redis-server", "--port", ps,
			       "--bind", ip, "--save", "", "--appendonly", "no",
			       "--protected-mode", "no", "--dir", p->dir,
			       "--daemonize", "no", "--io-threads", "1",
			       "--loglevel", "warning", (char *)NULL);
		_exit(127);
	}
	p->pid = pid;
	uint64_t t0 = bu_now_ns();
	for (;;) {
		int fd = tcp_connect(port);
		if (fd >= 0) {
			close(fd);
			return 0;
		}
		int st;
		if (waitpid(pid, &st, WNOHANG) == pid) {
			p->pid = 0;
			fprintf(stderr,
			        PROG ": %s exited at start (status %#x)\n",
			        pname[which], (unsigned)st);
			return -ECHILD;
		}
		if (bu_now_ns() - t0 > 10 * NS) {
			fprintf(stderr,
			        PROG ": %s does not accept connections\n",
			        pname[which]);
			return -ETIMEDOUT;
		}
		kb_nap_ms(5);
	}
}

/* A connection with an input buffer and response parsing. */
struct conn {
	int fd;
	int which;
	char *in;
	size_t ilen, ipos, icap;
	char *out;
	size_t olen, ocap;
	uint64_t err;
};

static int out_room(struct conn *c, size_t n)
{
	if (c->olen + n <= c->ocap)
		return 0;
	size_t cap = BU_MAX(c->ocap * 2, c->olen + n + 4096);
	char *p = realloc(c->out, cap);
	if (!p)
		return -ENOMEM;
	c->out = p;
	c->ocap = cap;
	return 0;
}

/* The start of a request on key @k at @o: memcached's "<mc> <key>",
 * Redis' array of @nargs holding @redis and the key. Returns its bytes. */
static size_t req_head(const struct conn *c, char *o, const char *mc,
                       const char *redis, unsigned nargs, uint64_t k)
{
	size_t n = c->which == P_MC
	                   ? (size_t)sprintf(o, "%s ", mc)
	                   : (size_t)sprintf(o, "*%u\r\n$%zu\r\n%s\r\n$%u\r\n",
	                                     nargs, strlen(redis), redis,
	                                     g_opt.ksize);
	make_key(k, (uint8_t *)o + n);
	return n + g_opt.ksize;
}

static int req_get(struct conn *c, uint64_t k)
{
	if (out_room(c, 64 + g_opt.ksize))
		return -ENOMEM;
	char *o = c->out + c->olen;
	size_t n = req_head(c, o, "mg", "GET", 2, k);
	n += (size_t)sprintf(o + n, c->which == P_MC ? " v\r\n" : "\r\n");
	c->olen += n;
	return 0;
}

static int req_set(struct conn *c, uint64_t k, uint32_t gen)
{
	if (out_room(c, 96 + g_opt.ksize + g_opt.vsize))
		return -ENOMEM;
	char *o = c->out + c->olen;
	size_t n = req_head(c, o, "ms", "SET", 3, k);
	n += (size_t)sprintf(o + n,
	                     c->which == P_MC ? " %u\r\n" : "\r\n$%u\r\n",
	                     g_opt.vsize);
	/* Values go over the wire as text: the key number in hex, then
	 * the value's pattern (8 + vsize - 8 bytes). */
	make_val(k, gen, (uint8_t *)o + n);
	char hex[9];
	snprintf(hex, sizeof(hex), "%08" PRIx32, (uint32_t)k);
	memcpy(o + n, hex, 8);
	memcpy(o + n + g_opt.vsize, "\r\n", 2);
	c->olen += n + g_opt.vsize + 2;
	return 0;
}

static int req_mget(struct conn *c, const uint32_t *ks)
{
	if (c->which == P_MC) {
		for (unsigned i = 0; i < MGET_N; i++)
			if (req_get(c, ks[i]))
				return -ENOMEM;
		return 0;
	}
	if (out_room(c, 32 + MGET_N * (16 + g_opt.ksize)))
		return -ENOMEM;
	char *o = c->out + c->olen;
	size_t n = (size_t)sprintf(o, "*%u\r\n$4\r\nMGET\r\n", MGET_N + 1);
	for (unsigned i = 0; i < MGET_N; i++) {
		n += (size_t)sprintf(o + n, "$%u\r\n", g_opt.ksize);
		make_key(ks[i], (uint8_t *)o + n);
		memcpy(o + n + g_opt.ksize, "\r\n", 2);
		n += g_opt.ksize + 2;
	}
	c->olen += n;
	return 0;
}

static int conn_flush(struct conn *c)
{
	size_t off = 0;
	while (off < c->olen) {
		ssize_t n =
		        send(c->fd, c->out + off, c->olen - off, MSG_NOSIGNAL);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		off += (size_t)n;
	}
	c->olen = 0;
	return 0;
}

/* The end of the line starting at @p, or NULL. */
static const char *eol(const char *p, const char *end)
{
	const char *q = memchr(p, '\n', (size_t)(end - p));
	return q;
}

/* Parse one response at c->in + c->ipos: bytes used, 0 incomplete, -1 bad.
 * *@vals: values (bulk strings) it carried; *@miss: misses. */
static long parse_one(struct conn *c, unsigned *vals, unsigned *miss)
{
	const char *p = c->in + c->ipos, *end = c->in + c->ilen;
	const char *e = eol(p, end);
	if (!e)
		return 0;
	if (c->which == P_MC) {
		if (!strncmp(p, "HD", 2))
			return e - p + 1;
		if (!strncmp(p, "EN", 2)) {
			++*miss;
			return e - p + 1;
		}
		if (!strncmp(p, "VA ", 3)) {
			long n = strtol(p + 3, NULL, 10);
			if (end - (e + 1) < n + 2)
				return 0;
			++*vals;
			return (e + 1 - p) + n + 2;
		}
		return -1;
	}
	if (*p == '+')
		return e - p + 1;
	if (*p == '$') {
		long n = strtol(p + 1, NULL, 10);
		if (n < 0) {
			++*miss;
			return e - p + 1;
		}
		if (end - (e + 1) < n + 2)
			return 0;
		++*vals;
		return (e + 1 - p) + n + 2;
	}
	if (*p == '*') {
		long cnt = strtol(p + 1, NULL, 10);
		size_t save = c->ipos;
		c->ipos += (size_t)(e - p + 1);
		unsigned v = 0, m = 0;
		for (long i = 0; i < cnt; i++) {
			long u = parse_one(c, &v, &m);
			if (u <= 0) {
				c->ipos = save;
				return u;
			}
			c->ipos += (size_t)u;
		}
		long used = (long)(c->ipos - save);
		c->ipos = save;
		*vals += v;
		*miss += m;
		return used;
	}
	return -1;
}

/* Read until @want responses are parsed. */
static int conn_recv(struct conn *c, unsigned want, unsigned *vals,
                     unsigned *miss)
{
	unsigned got = 0;
	while (got < want) {
		long u = c->ipos < c->ilen ? parse_one(c, vals, miss) : 0;
		if (u < 0) {
			fprintf(stderr, PROG ": %s: bad response\n",
			        pname[c->which]);
			return -EPROTO;
		}
		if (u > 0) {
			c->ipos += (size_t)u;
			got++;
			continue;
		}
		if (c->ipos) {
			memmove(c->in, c->in + c->ipos, c->ilen - c->ipos);
			c->ilen -= c->ipos;
			c->ipos = 0;
		}
		if (c->icap - c->ilen < 65536) {
			size_t cap = c->icap * 2 + 131072;
			char *p = realloc(c->in, cap);
			if (!p)
				return -ENOMEM;
			c->in = p;
			c->icap = cap;
		}
		ssize_t n = recv(c->fd, c->in + c->ilen, c->icap - c->ilen, 0);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EPIPE;
		c->ilen += (size_t)n;
	}
	return 0;
}

struct pjob {
	int which, mode, wl;
	unsigned tid, nthreads;
	int port;
	uint64_t nkeys;
	double zetan;
	uint64_t go_ns, dur_ns, warm_ns;
	/* results */
	int rc;
	uint64_t ops, keys, gets, puts, ns, notfound, inserts, rmws;
	uint32_t nsamp;
	uint64_t *samp;
};

static void *peer_load_thread(void *arg)
{
	struct pjob *j = arg;
	struct conn c = {.which = j->which};
	c.fd = tcp_connect(j->port);
	if (c.fd < 0) {
		j->rc = c.fd;
		return NULL;
	}
	int rc = 0;
	uint64_t i = j->tid;
	while (i < j->nkeys && !rc) {
		unsigned n = 0;
		for (; n < 256 && i < j->nkeys; n++, i += j->nthreads)
			if ((rc = req_set(&c, i, 0)))
				break;
		unsigned v = 0, m = 0;
		if (!rc)
			rc = conn_flush(&c);
		if (!rc)
			rc = conn_recv(&c, n, &v, &m);
		if (interrupted)
			rc = -EINTR;
	}
	j->rc = rc;
	close(c.fd);
	free(c.in);
	free(c.out);
	return NULL;
}

/* YCSB D's inserts on each peer, numbered from the loaded keys on,
 * shared by its client threads (kb_peer_open resets them). */
static struct inserts peer_ins[NPEER];

/* One batch's requests and what they were: responses expected, gets,
 * puts, inserts (their numbers in @ins), read-modify-writes (their keys
 * in @rmw, written back in a second round). */
struct pbatch {
	unsigned resp, nget, nput, nins, nrmw;
	uint64_t *ins, *rmw;
};

/* One stream entry @e as a request (not a multi-get). */
static int peer_one(struct pjob *j, struct conn *c, struct pbatch *b,
                    uint32_t e, uint64_t gen)
{
	uint64_t k = key_of(e), n;
	int rc;
	switch (op_of(e)) {
	case OP_UPDATE:
		rc = req_set(c, k, (uint32_t)gen);
		b->nput++;
		break;
	case OP_INSERT:
		n = atomic_fetch_add(&peer_ins[j->which].next, 1);
		if (j->nkeys + n < KEY_LIMIT) {
			rc = req_set(c, j->nkeys + n, (uint32_t)gen);
			b->ins[b->nins++] = n;
			b->nput++;
			break;
		}
		rc = req_get(c, k); /* numbers used up */
		b->nget++;
		break;
	case OP_RMW:
		/* YCSB F: the write follows the reply. */
		rc = req_get(c, k);
		b->rmw[b->nrmw++] = k;
		b->nget++;
		break;
	default:
		if (g_wdesc[j->wl].dist == D_LATEST)
			k = latest_key(j->nkeys,
			               atomic_load(&peer_ins[j->which].limit),
			               k);
		rc = req_get(c, k);
		b->nget++;
	}
	b->resp++;
	return rc;
}

/* Queue @per operations of stream @s from *@gen on. */
static int peer_queue(struct pjob *j, struct conn *c, struct pbatch *b,
                      const uint32_t *s, uint64_t *gen, unsigned per)
{
	int rc = 0;
	for (unsigned n = 0; n < per && !rc; n++) {
		if (j->wl != W_MGET) {
			uint32_t e = s[(*gen)++ % STREAM_LEN];
			rc = peer_one(j, c, b, e, *gen);
			continue;
		}
		uint32_t ks[MGET_N];
		for (unsigned i = 0; i < MGET_N; i++)
			ks[i] = key_of(s[(*gen)++ % STREAM_LEN]);
		rc = req_mget(c, ks);
		b->resp += j->which == P_MC ? MGET_N : 1;
		b->nget += MGET_N;
	}
	return rc;
}

/* Send the batch, read its replies (*@m: not found), acknowledge its
 * inserts, then the read-modify-writes' second round. */
static int peer_finish(struct conn *c, struct pbatch *b, uint64_t gen,
                       unsigned *m)
{
	unsigned v = 0;
	int rc = conn_flush(c);
	if (!rc)
		rc = conn_recv(c, b->resp, &v, m);
	for (unsigned i = 0; i < b->nins && !rc; i++)
		rc = kb_ins_ack(&peer_ins[c->which], b->ins[i]);
	for (unsigned i = 0; i < b->nrmw && !rc; i++)
		rc = req_set(c, b->rmw[i], (uint32_t)gen + i);
	if (!rc && b->nrmw)
		rc = conn_flush(c);
	if (!rc && b->nrmw)
		rc = conn_recv(c, b->nrmw, &v, m);
	return rc;
}

/* A counted batch into the job's results. */
static void peer_count(struct pjob *j, const struct pbatch *b, unsigned per,
                       unsigned m)
{
	j->ops += j->wl == W_MGET ? per : b->resp;
	j->keys += j->wl == W_MGET ? b->nget : b->resp;
	j->gets += b->nget;
	j->puts += b->nput + b->nrmw;
	j->inserts += b->nins;
	j->rmws += b->nrmw;
	j->notfound += m;
}

/* The batches of one run, from the job's start to its end. */
static int peer_batches(struct pjob *j, struct conn *c, const uint32_t *s,
                        struct pbatch *b)
{
	/* ops per batch: depth ops pipelined, or 1 */
	unsigned per = j->mode == M_PIPE ? g_opt.depth : 1;
	if (j->wl == W_MGET)
		per = j->mode == M_PIPE ? (g_opt.depth + MGET_N - 1) / MGET_N
		                        : 1;
	uint64_t gen = 0, batches = 0, t0 = 0, now;
	uint64_t start = j->go_ns - j->warm_ns, end = j->go_ns + j->dur_ns;
	while ((now = bu_now_ns()) < start)
		kb_nap_ms(1);
	bool counting = false;
	int rc = 0;
	for (;;) {
		now = bu_now_ns();
		if (!counting && now >= j->go_ns) {
			counting = true;
			t0 = now;
		}
		if (now >= end || interrupted)
			break;
		b->resp = b->nget = b->nput = b->nins = b->nrmw = 0;
		rc = peer_queue(j, c, b, s, &gen, per);
		bool timed = (batches++ % g_opt.sample_every) == 0 ||
		             j->mode == M_PIPE;
		uint64_t tb = timed ? bu_now_ns() : 0;
		unsigned m = 0;
		if (!rc)
			rc = peer_finish(c, b, gen, &m);
		if (rc)
			break;
		if (counting) {
			peer_count(j, b, per, m);
			if (timed && j->nsamp < SAMP_MAX)
				j->samp[j->nsamp++] = bu_now_ns() - tb;
		}
	}
	j->ns = now - t0;
	return rc;
}

static void *peer_run_thread(void *arg)
{
	struct pjob *j = arg;
	struct conn c = {.which = j->which};
	uint32_t *s = malloc(STREAM_LEN * sizeof(uint32_t));
	struct pbatch b = {.rmw = malloc((g_opt.depth + 1) * sizeof(uint64_t)),
	                   .ins = malloc((g_opt.depth + 1) * sizeof(uint64_t))};
	c.fd = tcp_connect(j->port);
	int rc = s && b.rmw && b.ins ? (c.fd < 0 ? c.fd : 0) : -ENOMEM;
	if (!rc) {
		kb_gen_stream(s, STREAM_LEN, j->wl, j->nkeys, j->zetan,
		              0x9876543ull * (j->tid + 1) +
		                      (uint64_t)j->wl * 7919,
		              NULL, 0);
		rc = peer_batches(j, &c, s, &b);
	}
	j->rc = rc;
	if (c.fd >= 0)
		close(c.fd);
	free(c.in);
	free(c.out);
	free(s);
	free(b.rmw);
	free(b.ins);
	return NULL;
}

static int peer_threads(struct pjob *jobs, unsigned n, void *(*fn)(void *))
{
	pthread_t th[MAXM];
	unsigned started = 0;
	int rc = 0;
	for (unsigned i = 0; i < n; i++) {
		if (pthread_create(&th[i], NULL, fn, &jobs[i]) != 0) {
			rc = -EAGAIN;
			break;
		}
		started++;
	}
	for (unsigned i = 0; i < started; i++)
		pthread_join(th[i], NULL);
	for (unsigned i = 0; i < n && !rc; i++)
		rc = jobs[i].rc;
	return rc;
}

/* Unloaded: one connection, one GET at a time, every GET timed, into
 * g_res.peer_lat1[@which]. @j: a job whose sample buffer it uses. */
static int peer_unloaded(int which, int port, struct pjob *j)
{
	uint64_t dur = (uint64_t)(BU_MIN(g_opt.seconds, 1.0) * 1e9);
	uint64_t *smp = j->samp;
	*j = (struct pjob){.which = which,
	                   .mode = M_SINGLE,
	                   .wl = W_C,
	                   .nthreads = 1,
	                   .port = port,
	                   .nkeys = g_opt.keys,
	                   .zetan = g_sh->zeta_n,
	                   .go_ns = bu_now_ns() + 20000000ull + dur / 10,
	                   .dur_ns = dur,
	                   .warm_ns = dur / 10,
	                   .samp = smp};
	unsigned se = g_opt.sample_every;
	g_opt.sample_every = 1;
	int rc = smp ? peer_threads(j, 1, peer_run_thread) : -ENOMEM;
	g_opt.sample_every = se;
	struct fig *f = &g_res.peer_lat1[which];
	memset(f, 0, sizeof(*f));
	if (rc) {
		fprintf(stderr, PROG ": %s unloaded GET: %s\n", pname[which],
		        strerror(-rc));
		return rc;
	}
	if (j->ns) {
		f->ops = (double)j->ops / ((double)j->ns / 1e9);
		f->keys = f->gets = f->ops;
		kb_pcts(j->samp, j->nsamp, &f->p50_ns, &f->p99_ns);
		f->have = true;
		printf("  %-9s unloaded GET (1 connection, 1 in flight): "
		       "%.3f M/s, p50 %.1f us, p99 %.1f us\n",
		       pname[which], f->ops / 1e6, f->p50_ns / 1e3,
		       f->p99_ns / 1e3);
	}
	return 0;
}

/* A started and loaded peer: kb_peer_open to kb_peer_close. */
struct peer_run {
	struct peer p;
	struct pjob jobs[MAXM]; /* one a client thread: --machines */
};
static struct peer_run peers[NPEER];

/* Stop @which and free its jobs' sample buffers. */
static void peer_drop(int which)
{
	struct peer_run *r = &peers[which];
	for (unsigned i = 0; i < MAXM; i++) {
		free(r->jobs[i].samp);
		r->jobs[i].samp = NULL;
	}
	peer_stop(&r->p);
}

int kb_peer_open(int which, const char *tmp)
{
	struct peer_run *r = &peers[which];
	memset(r, 0, sizeof(*r));
	g_res.peer_ok[which] = false;
	int rc = peer_start(&r->p, which, tmp);
	if (rc) {
		fprintf(stderr, PROG ": cannot start %s: %s\n", pname[which],
		        strerror(-rc));
		peer_stop(&r->p);
		return rc;
	}
	for (unsigned i = 0; i < g_opt.machines && !rc; i++) {
		r->jobs[i] = (struct pjob){.which = which,
		                           .tid = i,
		                           .nthreads = g_opt.machines,
		                           .port = r->p.port,
		                           .nkeys = g_opt.keys,
		                           .samp = malloc(SAMP_MAX * 8)};
		if (!r->jobs[i].samp)
			rc = -ENOMEM;
	}
	uint64_t t0 = bu_now_ns();
	if (!rc)
		rc = peer_threads(r->jobs, g_opt.machines, peer_load_thread);
	double ls = (double)(bu_now_ns() - t0) / 1e9;
	g_res.peer_load_s[which] = ls;
	if (rc) {
		fprintf(stderr, PROG ": loading %s: %s\n", pname[which],
		        strerror(-rc));
		peer_drop(which);
		return rc;
	}
	printf("%s (pid %d, port %d): loaded %" PRIu64 " keys in %.1f s\n",
	       pname[which], (int)r->p.pid, r->p.port, g_opt.keys, ls);
	fflush(stdout);
	memset(&peer_ins[which], 0, sizeof(peer_ins[which]));
	return 0;
}

bool kb_peer_wants(int mode, int w)
{
	/* The demo: the best configuration, B. */
	if (g_opt.demo)
		return mode == M_PIPE && w == W_B;
	return kb_runs(w, true);
}

/* The figures of a run of @r's jobs over @wall ns, into @f. */
static void peer_sum(const struct peer_run *r, double wall, uint64_t s0,
                     uint64_t k0, struct fig *f)
{
	memset(f, 0, sizeof(*f));
	f->cores = (double)(bu_proc_cpu_ns(r->p.pid) - s0) / wall;
	f->client_cores = (double)(bu_self_cpu_ns() - k0) / wall;
	size_t ns = 0;
	for (unsigned i = 0; i < g_opt.machines; i++) {
		const struct pjob *j = &r->jobs[i];
		double s = (double)j->ns / 1e9;
		if (s <= 0)
			continue;
		f->ops += (double)j->ops / s;
		f->keys += (double)j->keys / s;
		f->gets += (double)j->gets / s;
		f->puts += (double)j->puts / s;
		f->inserts += (double)j->inserts / s;
		f->rmws += (double)j->rmws / s;
		f->notfound += j->notfound;
		memcpy(g_samp + ns, j->samp, j->nsamp * 8);
		ns += j->nsamp;
	}
	kb_pcts(g_samp, ns, &f->p50_ns, &f->p99_ns);
	f->have = true;
}

/* One run of @w in @mode on @which for @secs, into @f. */
static int peer_run_for(int which, int mode, int w, double secs, struct fig *f)
{
	struct peer_run *r = &peers[which];
	uint64_t dur = (uint64_t)(secs * 1e9);
	uint64_t go = bu_now_ns() + 20000000ull + dur / 10;
	for (unsigned i = 0; i < g_opt.machines; i++)
		r->jobs[i] = (struct pjob){.which = which,
		                           .mode = mode,
		                           .wl = w,
		                           .tid = i,
		                           .nthreads = g_opt.machines,
		                           .port = r->p.port,
		                           .nkeys = g_opt.keys,
		                           .zetan = g_sh->zeta_n,
		                           .go_ns = go,
		                           .dur_ns = dur,
		                           .warm_ns = dur / 10,
		                           .samp = r->jobs[i].samp};
	uint64_t s0 = bu_proc_cpu_ns(r->p.pid), k0 = bu_self_cpu_ns(),
	         t0 = bu_now_ns();
	int rc = peer_threads(r->jobs, g_opt.machines, peer_run_thread);
	if (rc) {
		fprintf(stderr, PROG ": %s %s %s: %s\n", pname[which],
		        mname[mode], g_wdesc[w].key, strerror(-rc));
		return rc;
	}
	peer_sum(r, (double)(bu_now_ns() - t0), s0, k0, f);
	return 0;
}

int kb_peer_run(int which, int mode, int w, double secs, struct fig *f)
{
	int rc = peer_run_for(which, mode, w, secs, f);
	if (rc)
		return rc;
	printf("  %-9s %-9s %-20s %8.3f M ops/s, %.3f M keys/s, p50 %.1f us, "
	       "p99 %.1f us%s\n",
	       pname[which], mname[mode], g_wdesc[w].name, f->ops / 1e6,
	       f->keys / 1e6, f->p50_ns / 1e3, f->p99_ns / 1e3,
	       mode == M_PIPE ? " (per batch)" : "");
	fflush(stdout);
	return 0;
}

int kb_peer_settle(int which)
{
	/* Just after its load a peer serves a fraction of its steady rate:
	 * on this host memcached 0.10 M GETs/s in its first second, 0.29 M
	 * after six; Redis 0.25 M in its first, 0.39 M from its second;
	 * and Redis held (SIGSTOP) through the cluster's load 0.19 M in its
	 * first turn after. Runs of uniform C until one is no more
	 * than 5% faster than the best before it: the rate has stopped
	 * climbing. */
	double secs = BU_MIN(g_opt.seconds, 0.5), best = 0;
	uint64_t t0 = bu_now_ns();
	unsigned n = 0;
	for (;;) {
		struct fig f;
		int rc = peer_run_for(which, M_PIPE, W_C, secs, &f);
		if (rc || interrupted)
			return rc ? rc : -EINTR;
		n++;
		bool climbing = f.keys > 1.05 * best;
		best = BU_MAX(best, f.keys);
		if ((n >= 2 && !climbing) || bu_now_ns() - t0 > 30 * NS)
			break;
	}
	printf("%s: settled after %u warm-up runs of %.2f s (%.1f s): "
	       "%.3f M GETs/s\n",
	       pname[which], n, secs, (double)(bu_now_ns() - t0) / 1e9,
	       best / 1e6);
	fflush(stdout);
	return 0;
}

void kb_peer_hold(int which, bool hold)
{
	if (peers[which].p.pid > 0)
		kill(peers[which].p.pid, hold ? SIGSTOP : SIGCONT);
}

int kb_peer_close(int which, int rc)
{
	if (!rc && !g_opt.demo && !g_opt.any_mix)
		rc = peer_unloaded(which, peers[which].p.port,
		                   &peers[which].jobs[0]);
	if (!rc)
		g_res.peer_ok[which] = true;
	peer_drop(which);
	return rc;
}

int kb_run_peer(int which, const char *tmp)
{
	int rc = kb_peer_open(which, tmp);
	if (rc)
		return rc;
	rc = kb_peer_settle(which);
	for (int mode = 0; mode < NMODE && !rc; mode++)
		for (int w = 0; w < NW && !rc; w++)
			if (kb_peer_wants(mode, w))
				rc = kb_peer_run(which, mode, w, g_opt.seconds,
				                 &g_res.peer[which][mode][w]);
	return kb_peer_close(which, rc);
}
