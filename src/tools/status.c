/*
 * `farm status`: a cluster's state from ZooKeeper (the configuration id,
 * the CM, the members and their fabric addresses, registrations and
 * removed incarnations: farm_zk_peek) and from its machines on this host
 * (the regions each holds and their replicas in its view: the "regions"
 * request of the control socket, src/node/ctl.h). The replication state of
 * a region compares the replicas the configuration assigns (primary
 * first) with the copies the machines report:
 *   ok        every assigned machine answered and holds its copy in its
 *             role;
 *   degraded  an assigned machine answered without its copy (or in the
 *             wrong role, or with a copy data recovery is still filling),
 *             or is not registered in ZooKeeper;
 *   unknown   an assigned machine did not answer (its control socket is
 *             not on this host, or it died).
 * Machines are found on this host through --dir, the --config file's
 * data_dir, and (shm) their fabric address, which is their data directory.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "coord/membership.h"
#include "node/ctl.h"
#include "node/node.h"
#include "tools/tools.h"
#include "util/common.h"
#include "util/config.h"

#define MAX_DIRS 64
#define MAX_REP  16
#define CTL_MS   3000

/* A machine that answered on its control socket. */
struct mach {
	uint32_t id;
	uint64_t config_id;
	char dir[FARM_CONFIG_STR];
};

/* One copy a machine reported: region, its role, the replicas it sees. */
struct copy {
	uint32_t region, machine;
	bool primary, filling; /* filling: data recovery is copying it */
	unsigned nrep;
	uint32_t rep[MAX_REP];
};

struct state {
	struct farm_zk_peek *zk;
	struct mach mach[FARM_VIEW_MAX];
	unsigned nmach;
	struct copy *copies;
	size_t ncopies, capcopies;
	bool unhealthy;
	bool dir_failed; /* a machine named by --dir or data_dir did not answer
	                  */
	bool quiet;      /* no per-machine warnings */
};

static const struct mach *answered(const struct state *s, uint32_t id)
{
	for (unsigned i = 0; i < s->nmach; i++)
		if (s->mach[i].id == id)
			return &s->mach[i];
	return NULL;
}

static bool is_member(const struct farm_view *v, uint32_t id)
{
	return farm_view_find(v, id) != NULL;
}

static const struct farm_member *registration(const struct farm_zk_peek *z,
                                              uint32_t id, int64_t *inc)
{
	for (unsigned i = 0; i < z->nlive; i++)
		if (z->live[i].id == id) {
			if (inc)
				*inc = z->live_incarnation[i];
			return &z->live[i];
		}
	return NULL;
}

/* The fabric address in a card (the card itself when it has no
 * descriptors: static membership). */
static void card_addr(const char *card, char *out, size_t len)
{
	farm_mr_desc d, l;
	if (farm_node_card_parse(card, out, len, &d, &l))
		snprintf(out, len, "%s", card);
}

static int add_copy(struct state *s, const struct copy *c)
{
	if (s->ncopies == s->capcopies) {
		size_t cap = s->capcopies ? s->capcopies * 2 : 64;
		struct copy *n = realloc(s->copies, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		s->copies = n;
		s->capcopies = cap;
	}
	s->copies[s->ncopies++] = *c;
	return 0;
}

static int parse_lines(struct state *s, const char *dir, char *text);

/* Parse a "regions" answer (ctl.h); FARM_ECORRUPT when malformed. */
static int parse_regions(struct state *s, const char *dir, char *text)
{
	size_t first = s->ncopies;
	int rc = parse_lines(s, dir, text);
	if (rc)
		s->ncopies = first; /* nothing of a bad answer */
	return rc;
}

static int parse_lines(struct state *s, const char *dir, char *text)
{
	struct mach m = {0};
	unsigned want = 0, got = 0, line = 0;
	size_t first = s->ncopies;
	snprintf(m.dir, sizeof(m.dir), "%s", dir);
	for (char *save, *l = strtok_r(text, "\n", &save); l;
	     l = strtok_r(NULL, "\n", &save), line++) {
		char role[16];
		int pos = 0;
		struct copy c = {0};
		if (line == 0) {
			if (sscanf(l, "machine %" SCNu32 "%n", &m.id, &pos) !=
			            1 ||
			    l[pos])
				return FARM_ECORRUPT;
		} else if (line == 1) {
			if (sscanf(l, "configuration %" SCNu64 "%n",
			           &m.config_id, &pos) != 1 ||
			    l[pos])
				return FARM_ECORRUPT;
		} else if (line == 2) {
			if (sscanf(l, "regions %u%n", &want, &pos) != 1 ||
			    l[pos])
				return FARM_ECORRUPT;
		} else {
			if (sscanf(l, "region %" SCNu32 " %15s%n", &c.region,
			           role, &pos) != 2)
				return FARM_ECORRUPT;
			c.machine = m.id;
			c.primary = !strcmp(role, "primary");
			c.filling = !strcmp(role, "filling");
			if (!c.primary && !c.filling && strcmp(role, "backup"))
				return FARM_ECORRUPT;
			char *p = l + pos;
			while (*p) {
				char *e;
				unsigned long r = strtoul(p, &e, 10);
				if (e == p || *p != ' ' || c.nrep == MAX_REP ||
				    r > UINT32_MAX)
					return FARM_ECORRUPT;
				c.rep[c.nrep++] = (uint32_t)r;
				p = e;
			}
			if (add_copy(s, &c))
				return -ENOMEM;
			got++;
		}
	}
	if (line < 3 || got != want)
		return FARM_ECORRUPT;
	if (answered(s, m.id)) { /* the same machine through another path */
		s->ncopies = first;
		return 0;
	}
	if (s->nmach < FARM_VIEW_MAX)
		s->mach[s->nmach++] = m;
	return 0;
}

/* Ask the machine in @dir for its regions. @must: a directory the user
 * named (its failure is reported). */
static void ask(struct state *s, const char *dir, bool must)
{
	char *reply = NULL;
	int rc = must ? farm_tool_ctl("status", dir, "regions", CTL_MS, &reply)
	              : farm_ctl_request(dir, "regions", &reply, NULL, CTL_MS);
	if (rc) {
		if (!must)
			free(reply);
		if (must)
			s->unhealthy = true;
		return;
	}
	rc = parse_regions(s, dir, reply);
	if (rc) {
		fprintf(stderr,
		        "farm status: %s: the machine's answer does not parse: "
		        "%s\n",
		        dir, farm_strerror(rc));
		s->unhealthy = true;
	}
	free(reply);
}

static bool is_dir(const char *p)
{
	struct stat st;
	return p[0] == '/' && stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int cmp_copy(const void *a, const void *b)
{
	const struct copy *x = a, *y = b;
	if (x->region != y->region)
		return x->region < y->region ? -1 : 1;
	if (x->primary != y->primary)
		return x->primary ? -1 : 1;
	return x->machine < y->machine ? -1 : x->machine > y->machine;
}

static void print_members(struct state *s)
{
	const struct farm_view *v = &s->zk->config;
	char addr[FARM_ENDPOINT_MAX];
	printf("members %u\n", v->n);
	printf("  %-7s %-10s %-8s %-13s %s\n", "machine", "registered",
	       "answered", "regions p/b", "fabric address");
	for (unsigned i = 0; i < v->n; i++) {
		const struct farm_member *m = &v->members[i];
		const struct mach *a = answered(s, m->id);
		bool reg = registration(s->zk, m->id, NULL) != NULL;
		unsigned p = 0, b = 0;
		for (size_t k = 0; a && k < s->ncopies; k++)
			if (s->copies[k].machine == m->id)
				*(s->copies[k].primary ? &p : &b) += 1;
		char regions[32] = "?";
		if (a)
			snprintf(regions, sizeof(regions), "%u/%u", p, b);
		card_addr(m->endpoint, addr, sizeof(addr));
		printf("  %-7" PRIu32 " %-10s %-8s %-13s %s%s\n", m->id,
		       reg ? "yes" : "NO", a ? "yes" : "no", regions, addr,
		       v->has_cm && v->cm == m->id ? "  (cm)" : "");
		if (a && a->config_id != v->config_id)
			printf("          its view is configuration %" PRIu64
			       "\n",
			       a->config_id);
		if (!reg || !a)
			s->unhealthy = true;
	}
	for (unsigned i = 0; i < s->zk->nlive; i++) {
		const struct farm_member *m = &s->zk->live[i];
		if (is_member(v, m->id))
			continue;
		card_addr(m->endpoint, addr, sizeof(addr));
		printf("registered, not a member: machine %" PRIu32
		       " (incarnation %#" PRIx64 ") %s\n",
		       m->id, (uint64_t)s->zk->live_incarnation[i], addr);
		s->unhealthy = true;
	}
	for (unsigned i = 0; i < v->nremoved; i++)
		printf("removed: machine %" PRIu32 " incarnation %#" PRIx64
		       "\n",
		       v->removed[i].id, (uint64_t)v->removed[i].incarnation);
	/* Rejoin and restart (membership.h): machines that joined late,
	 * that left the formed cluster, that a restart gave up. */
	if (v->formed)
		printf("formed\n");
	if (v->restart)
		printf("restarting (a whole-cluster restart of configuration "
		       "%" PRIu64 ")\n",
		       v->restart);
	static const char *const what[] = {
	        "late (joined with empty memory; a backup where replicas "
	        "are short)",
	        "gone (left; a new machine_id rejoins)",
	        "lost (given up at a restart; never admitted again)"};
	const uint32_t *lists[] = {v->late, v->gone, v->lost};
	const unsigned ns[] = {v->nlate, v->ngone, v->nlost};
	for (unsigned k = 0; k < 3; k++) {
		if (!ns[k])
			continue;
		printf("%s:", what[k]);
		for (unsigned i = 0; i < ns[k] && i < FARM_VIEW_MAX; i++)
			printf(" %" PRIu32, lists[k][i]);
		printf("\n");
	}
}

/* The copies of one region, @c[0 .. @n): print its line; its state. */
static int region_line(struct state *s, const struct copy *c, size_t n)
{
	enum { OK, DEGRADED, UNKNOWN };
	/* The replicas as the primary sees them, else as a backup does. */
	const struct copy *ref = &c[0];
	char held[256] = "", note[256] = "";
	size_t hl = 0, nl = 0;
	for (size_t i = 0; i < n; i++)
		hl += (size_t)snprintf(
		        held + FARM_MIN(hl, sizeof(held)),
		        sizeof(held) - FARM_MIN(hl, sizeof(held)),
		        "%s%" PRIu32 ":%s", i ? " " : "", c[i].machine,
		        c[i].primary   ? "primary"
		        : c[i].filling ? "filling"
		                       : "backup");
	int st = OK;
	for (unsigned j = 0; j < ref->nrep; j++) {
		uint32_t m = ref->rep[j];
		const struct copy *has = NULL;
		for (size_t i = 0; i < n; i++)
			if (c[i].machine == m)
				has = &c[i];
		const char *why = NULL;
		int w = OK;
		if (!registration(s->zk, m, NULL) && !answered(s, m)) {
			why = "is not registered";
			w = DEGRADED;
		} else if (!answered(s, m)) {
			why = "did not answer";
			w = UNKNOWN;
		} else if (!has) {
			why = "holds no copy";
			w = DEGRADED;
		} else if (has->primary != (j == 0)) {
			why = j == 0 ? "holds a backup, not the primary"
			             : "holds the primary, not a backup";
			w = DEGRADED;
		} else if (has->filling) {
			why = "is still copying it (data recovery)";
			w = DEGRADED;
		}
		if (why)
			nl += (size_t)snprintf(
			        note + FARM_MIN(nl, sizeof(note)),
			        sizeof(note) - FARM_MIN(nl, sizeof(note)),
			        "; %" PRIu32 " %s", m, why);
		if (w == DEGRADED || (w == UNKNOWN && st == OK))
			st = w;
	}
	char reps[MAX_REP * 11 + 1] = "";
	size_t rl = 0;
	for (unsigned j = 0; j < ref->nrep; j++)
		rl += (size_t)snprintf(reps + rl, sizeof(reps) - rl,
		                       "%s%" PRIu32, j ? " " : "", ref->rep[j]);
	static const char *const names[] = {"ok", "degraded", "unknown"};
	printf("  %-10" PRIu32 " %-12s %-28s %s%s\n", c[0].region,
	       ref->nrep ? reps : "-", held, names[st], note);
	return st;
}

static void print_regions(struct state *s)
{
	qsort(s->copies, s->ncopies, sizeof(*s->copies), cmp_copy);
	size_t nreg = 0;
	for (size_t i = 0; i < s->ncopies; i++)
		nreg += i == 0 ||
		        s->copies[i].region != s->copies[i - 1].region;
	printf("regions %zu (held by the machines that answered)\n", nreg);
	if (!nreg)
		return;
	printf("  %-10s %-12s %-28s %s\n", "region", "replicas", "held",
	       "replication");
	unsigned count[3] = {0};
	for (size_t i = 0; i < s->ncopies;) {
		size_t j = i + 1;
		while (j < s->ncopies &&
		       s->copies[j].region == s->copies[i].region)
			j++;
		count[region_line(s, &s->copies[i], j - i)]++;
		i = j;
	}
	printf("replication: %u ok, %u degraded, %u unknown\n", count[0],
	       count[1], count[2]);
	if (count[1] || count[2])
		s->unhealthy = true;
}

static void usage(FILE *out)
{
	fprintf(out,
	        "usage: farm status (--zk HOSTS [--root PATH] | --config "
	        "FILE)\n"
	        "                   [--dir DATA_DIR]... [--check] "
	        "[--timeout MS]\n"
	        "\n"
	        "Print a cluster's state: from ZooKeeper its configuration id, "
	        "CM, members\n"
	        "and their fabric addresses; from its machines on this host "
	        "(their control\n"
	        "sockets) the regions each holds, and per region whether every "
	        "replica the\n"
	        "configuration assigns holds its copy (ok, degraded, "
	        "unknown).\n"
	        "  --zk HOSTS     ZooKeeper connect string (host:port,...)\n"
	        "  --root PATH    the cluster's root znode (default "
	        "/libfarm/default)\n"
	        "  --config FILE  a machine's configuration: zk, zk_root and "
	        "its data_dir\n"
	        "  --dir DIR      the data directory of a machine on this host "
	        "(repeatable;\n"
	        "                 shm machines are found without it)\n"
	        "  --check        exit 3 unless every member is registered and "
	        "answered and\n"
	        "                 every region is fully replicated\n"
	        "  --timeout MS   how long to wait for ZooKeeper (default "
	        "5000)\n"
	        "  -h, --help     this text\n"
	        "Exit status: 0 printed; 1 ZooKeeper could not be read (or a "
	        "--dir machine\n"
	        "did not answer); 2 usage; 3 --check found the cluster "
	        "unhealthy.\n");
}

struct args {
	const char *zk, *root, *config;
	const char *dirs[MAX_DIRS];
	unsigned ndirs, timeout_ms;
	bool check;
};

/* -1 to go on, else the exit code (0 after --help, 2 on a usage error). */
static int parse_timeout(struct args *a, const char *arg)
{
	char *end;
	long t = strtol(arg, &end, 10);
	if (*end || t <= 0 || t > 600000) {
		fprintf(stderr, "farm status: bad --timeout '%s'\n", arg);
		return 2;
	}
	a->timeout_ms = (unsigned)t;
	return -1;
}

/* The command line into @a. -1 to go on, else the exit code (0 after
 * --help, 2 on a usage error). */
static int parse_args(int argc, char **argv, struct args *a)
{
	static const struct option opts[] = {
	        {"zk", required_argument, NULL, 'z'},
	        {"root", required_argument, NULL, 'r'},
	        {"config", required_argument, NULL, 'c'},
	        {"dir", required_argument, NULL, 'd'},
	        {"check", no_argument, NULL, 'k'},
	        {"timeout", required_argument, NULL, 't'},
	        {"help", no_argument, NULL, 'h'},
	        {NULL, 0, NULL, 0},
	};
	int c, rc = -1;
	while (rc < 0 && (c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'z': a->zk = optarg; break;
		case 'r': a->root = optarg; break;
		case 'c': a->config = optarg; break;
		case 'd':
			if (a->ndirs == MAX_DIRS) {
				fprintf(stderr,
				        "farm status: more than %d --dir\n",
				        MAX_DIRS);
				return 2;
			}
			a->dirs[a->ndirs++] = optarg;
			break;
		case 'k': a->check = true; break;
		case 't': rc = parse_timeout(a, optarg); break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (rc >= 0)
		return rc;
	if (optind != argc || !a->zk == !a->config || (a->root && a->config)) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* --config: its ZooKeeper and root replace --zk and --root. 0, or -1
 * after saying why. */
static int use_config(struct args *a, struct farm_config **cfgp)
{
	struct farm_config *cfg = malloc(sizeof(*cfg));
	*cfgp = cfg;
	if (!cfg || farm_tool_config("status", a->config, cfg))
		return -1;
	if (!cfg->zk[0]) {
		fprintf(stderr,
		        "farm status: %s names no ZooKeeper (zk); a "
		        "static cluster has no status to read\n",
		        a->config);
		return -1;
	}
	a->zk = cfg->zk;
	a->root = cfg->zk_root[0] ? cfg->zk_root : NULL;
	return 0;
}

/* Why farm_zk_peek failed with @rc, in words an operator can act on. */
static const char *peek_why(int rc)
{
	return rc == FARM_EUNAVAILABLE ? "no ZooKeeper server answered"
	       : rc == -ENOENT         ? "no cluster under this root"
	       : rc == -EINVAL         ? "bad connect string or root path"
	       : rc == FARM_ECORRUPT ? "the configuration znode does not parse"
	                             : farm_strerror(rc);
}

/* Ask the machines on this host: those named by --dir and the
 * configuration's data_dir (their failure makes the exit status 1), then
 * any member whose address is a directory here and has not answered. */
static void ask_machines(struct state *s, const struct args *a,
                         const struct farm_config *cfg)
{
	for (unsigned i = 0; i < a->ndirs; i++)
		ask(s, a->dirs[i], true);
	if (cfg && cfg->data_dir[0])
		ask(s, cfg->data_dir, true);
	bool dir_failed = s->unhealthy;
	char addr[FARM_ENDPOINT_MAX];
	for (unsigned i = 0; i < s->zk->config.n + s->zk->nlive; i++) {
		const struct farm_member *m =
		        i < s->zk->config.n ? &s->zk->config.members[i]
		                            : &s->zk->live[i - s->zk->config.n];
		card_addr(m->endpoint, addr, sizeof(addr));
		if (!answered(s, m->id) && is_dir(addr))
			ask(s, addr, false);
	}
	s->dir_failed = dir_failed;
}

static void print_report(struct state *s, const struct args *a)
{
	const struct farm_view *v = &s->zk->config;
	printf("cluster %s%s\n", a->zk, a->root ? a->root : "/libfarm/default");
	if (!v->config_id)
		printf("configuration none yet\n");
	else
		printf("configuration %" PRIu64 "\n", v->config_id);
	if (v->has_cm)
		printf("cm %" PRIu32 "\n", v->cm);
	else
		printf("cm none named\n");
	print_members(s);
	print_regions(s);
}

int farm_cmd_status(int argc, char **argv)
{
	struct args a = {.timeout_ms = 5000};
	int ret = parse_args(argc, argv, &a);
	if (ret >= 0)
		return ret;
	struct state s = {0};
	struct farm_config *cfg = NULL;
	ret = 1;
	if (a.config && use_config(&a, &cfg))
		goto out;
	if (!(s.zk = malloc(sizeof(*s.zk)))) {
		fprintf(stderr, "farm status: out of memory\n");
		goto out;
	}
	int rc = farm_zk_peek(a.zk, a.root, a.timeout_ms, s.zk);
	if (rc) {
		fprintf(stderr, "farm status: %s%s: %s\n", a.zk,
		        a.root ? a.root : "/libfarm/default", peek_why(rc));
		goto out;
	}
	ask_machines(&s, &a, cfg);
	print_report(&s, &a);
	if (fflush(stdout))
		goto out;
	ret = s.dir_failed ? 1 : a.check && s.unhealthy ? 3 : 0;
out:
	free(s.copies);
	free(s.zk);
	free(cfg);
	return ret;
}
