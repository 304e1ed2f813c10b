/*
 * kv_bench: the options (kv_bench.h; their meaning: kv_bench.c's usage),
 * their defaults and the checks across them, into g_opt.
 */
#include "kv_bench.h"

#include "benchopts.h"

/* --mix: letters A to F (any case, commas allowed), or "all". YCSB E's
 * scan from a key's home bucket has no public form: kv_bench refuses E,
 * and "all" is A-D and F there (kv_local_bench runs E). */
static int parse_mix(const char *s)
{
	bool all = !strcasecmp(s, "all");
	bool scan = kb_inner && kb_inner->scan_from;
	for (const char *p = s; !all && *p; p++) {
		int c = *p >= 'a' && *p <= 'z' ? *p - 'a' + 'A' : *p;
		if (c == 'E' && !scan) {
			fprintf(stderr, PROG ": --mix E: YCSB E's scan (from a "
			                     "key's home bucket) has no public "
			                     "form; kv_local_bench runs it\n");
			return -EINVAL;
		}
		if (c >= 'A' && c <= 'F')
			g_opt.mix[W_YA + (c - 'A')] = true;
		else if (c == 'M') /* the default set's mget24 alone */
			g_opt.mix[W_MGET] = true;
		else if (c != ',')
			return -EINVAL;
	}
	for (int w = W_YA; all && w <= W_YF; w++)
		g_opt.mix[w] = w != W_YE || scan;
	for (int w = W_YA; w <= W_YF; w++)
		g_opt.any_mix |= g_opt.mix[w];
	g_opt.any_mix |= g_opt.mix[W_MGET];
	return g_opt.any_mix ? 0 : -EINVAL;
}

/* Which defaults the options overrode (--quick's, --demo's and the
 * network's apply only to the others). */
struct explicit_opts {
	bool keys, secs, mach, log;
};

/* --quick's and --demo's defaults (not over explicit options). */
static void mode_defaults(struct explicit_opts set)
{
	if (g_opt.quick) {
		if (!set.keys)
			g_opt.keys = 100000;
		if (!set.secs)
			g_opt.seconds = 0.5;
		g_opt.small = false;
		if (g_opt.peers &&
		    (!kb_in_path("memcached") || !kb_in_path("redis-server"))) {
			fprintf(stderr,
			        PROG ": --quick: memcached or redis-server "
			             "not installed: peers skipped\n");
			g_opt.peers = false;
		}
	}
	if (g_opt.demo) {
		if (!set.mach)
			g_opt.machines = 3;
		if (!set.keys)
			g_opt.keys = SMALL_KEYS;
		if (!set.secs)
			g_opt.seconds = 10.0;
		g_opt.small = false;
	}
}

/* The network's defaults and checks. 0 or -EINVAL (said). */
static int net_defaults(struct explicit_opts set)
{
	if (bnet_check(&g_opt.net, PROG, g_opt.machines))
		return -EINVAL;
	if (!bnet_shm(&g_opt.net)) {
		/* Software RMA over TCP loads thousands, not millions, of
		 * keys a second. */
		if (!set.keys)
			g_opt.keys = 100000;
		g_opt.small = false;
	}
	if (g_opt.net.netns) {
		/* The machines join through the cluster's ZooKeeper; the
		 * peers serve from machine 0's namespace. */
		const char *zk = getenv("FARM_NETNS_ZK");
		if (!g_opt.zk[0] && zk && *zk)
			snprintf(g_opt.zk, sizeof(g_opt.zk), "%s", zk);
		if (kb_peer_netns())
			return -EINVAL;
	}
	return 0;
}

/* After the options: --quick's, --demo's and the network's defaults, the
 * log size the values need, and the checks across options. 0 or -EINVAL
 * (said on stderr). */
static int finish_opts(struct explicit_opts set)
{
	mode_defaults(set);
	if (net_defaults(set))
		return -EINVAL;
	if (g_opt.keys <= SMALL_KEYS || g_opt.any_mix)
		g_opt.small = false;
	if (!set.log) {
		/* The owner combines up to 64 puts in one transaction, whose
		 * records must fit half a log with room to spare: big values
		 * need bigger logs (1 MiB for the default sizes). */
		uint64_t need =
		        64ull * 8 *
		        (8 + g_opt.ksize + g_opt.vsize + 4 * kb_bucket_bytes());
		while (g_opt.log_size < need && g_opt.log_size < (64u << 20))
			g_opt.log_size <<= 1;
	}
	g_opt.secs_set = set.secs;
	if (g_opt.pages && (g_opt.demo || !bnet_shm(&g_opt.net))) {
		fprintf(stderr,
		        PROG ": --pages: kv_bench's own runs on the shm "
		             "fabric only (not --demo)\n");
		return -EINVAL;
	}
	if (kb_inner && g_opt.pages == BP_BOTH) {
		fprintf(stderr, PROG ": --pages: one page size a run (4k or "
		                     "2m)\n");
		return -EINVAL;
	}
	if (g_opt.demo && g_opt.any_mix) {
		fprintf(stderr, PROG ": --demo runs YCSB-B; not with --mix\n");
		return -EINVAL;
	}
	return 0;
}

/* The long options (parse_opts). */
enum {
	O_MACH = 256,
	O_KEYS,
	O_SECS,
	O_DEPTH,
	O_LDEPTH,
	O_OCC,
	O_SAMP,
	O_NOPEERS,
	O_NOSMALL,
	O_NOPIN,
	O_SINGLE_GETS,
	O_ALT_GETS,
	O_QUICK,
	O_LOG,
	O_DEMO,
	O_ZK,
	O_KSIZE,
	O_VSIZE,
	O_ZIPF,
	O_MIX,
	O_FABRIC,
	O_LOOKUP,
	O_NETNS,
	O_PAGES
};
static const struct option lo[] = {
        {"machines", required_argument, NULL, O_MACH},
        {"keys", required_argument, NULL, O_KEYS},
        {"seconds", required_argument, NULL, O_SECS},
        {"depth", required_argument, NULL, O_DEPTH},
        {"load-depth", required_argument, NULL, O_LDEPTH},
        {"occupancy", required_argument, NULL, O_OCC},
        {"sample-every", required_argument, NULL, O_SAMP},
        {"no-peers", no_argument, NULL, O_NOPEERS},
        {"no-small", no_argument, NULL, O_NOSMALL},
        {"no-pin", no_argument, NULL, O_NOPIN},
        {"single-gets", no_argument, NULL, O_SINGLE_GETS},
        {"alt-gets", no_argument, NULL, O_ALT_GETS},
        {"quick", no_argument, NULL, O_QUICK},
        {"log-size", required_argument, NULL, O_LOG},
        {"demo", no_argument, NULL, O_DEMO},
        {"zk", required_argument, NULL, O_ZK},
        {"key-size", required_argument, NULL, O_KSIZE},
        {"value-size", required_argument, NULL, O_VSIZE},
        {"zipf", required_argument, NULL, O_ZIPF},
        {"mix", required_argument, NULL, O_MIX},
        {"fabric", required_argument, NULL, O_FABRIC},
        {"lookup", required_argument, NULL, O_LOOKUP},
        {"netns", no_argument, NULL, O_NETNS},
        {"pages", required_argument, NULL, O_PAGES},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0}};

/* The options' defaults, into g_opt. */
static void default_opts(void)
{
	g_opt = (struct opts){.machines = 2,
	                      .depth = 32,
	                      .load_depth = 64,
	                      .log_size = 1u << 20,
	                      .sample_every = 16,
	                      .keys = 10000000ull,
	                      .seconds = 2.0,
	                      .occupancy = 0.85,
	                      /* kv_local_bench runs no peer */
	                      .peers = kb_inner == NULL,
	                      .small = true,
	                      .pin = true,
	                      .ksize = 16,
	                      .vsize = 32,
	                      .theta = 0.99,
	                      .net = BNET_DEFAULT};
}

/* A number option @c's value @arg into g_opt (@set: which were given).
 * 0, -EINVAL (bad), or 1 (not a number option). */
static int opt_number(int c, const char *arg, void *ctx)
{
	struct explicit_opts *set = ctx;
	uint64_t v = 0;
	bool bad = bu_parse_size(arg, &v) != 0;
	switch (c) {
	case O_MACH:
		bad = bad || v < 2 || v > MAXM;
		g_opt.machines = (unsigned)v;
		set->mach = true;
		break;
	case O_KEYS:
		bad = bad || v < 1000 ||
		      v > KEY_LIMIT / 2; /* room for inserts */
		g_opt.keys = v;
		set->keys = true;
		break;
	case O_DEPTH:
		bad = bad || v < 1 || v > 200;
		g_opt.depth = (unsigned)v;
		break;
	case O_LDEPTH:
		bad = bad || v < 1 || v > 200;
		g_opt.load_depth = (unsigned)v;
		break;
	case O_SAMP:
		bad = bad || !bu_is_pow2(v) || v > 65536;
		g_opt.sample_every = (unsigned)v;
		break;
	case O_KSIZE:
		bad = bad || v < 8 || v > KLEN_MAX;
		g_opt.ksize = (unsigned)v;
		break;
	case O_VSIZE:
		bad = bad || v < 8 || v > VLEN_MAX;
		g_opt.vsize = (unsigned)v;
		break;
	case O_LOG:
		bad = bad || !bu_is_pow2(v) || v < (64u << 10) ||
		      v > (64u << 20);
		g_opt.log_size = v;
		set->log = true;
		break;
	default: return 1;
	}
	return bad ? -EINVAL : 0;
}

/* A real number in [@min, @max] into *@out. 0 or -EINVAL. */
static int opt_real(const char *arg, double min, double max, double *out)
{
	char *end;
	double d = strtod(arg, &end);
	if (*end || !(d >= min && d <= max))
		return -EINVAL;
	*out = d;
	return 0;
}

/* A string or switch option @c's value @arg into g_opt. 0, -EINVAL (bad),
 * or 1 (not one of them). */
static int opt_other(int c, const char *arg, void *ctx)
{
	struct explicit_opts *set = ctx;
	switch (c) {
	case O_SECS:
		set->secs = true;
		return opt_real(arg, 0.05, 600, &g_opt.seconds);
	case O_OCC: return opt_real(arg, 0.3, 0.95, &g_opt.occupancy);
	case O_ZIPF: return opt_real(arg, 0.01, 0.999, &g_opt.theta);
	case O_NOPEERS: g_opt.peers = false; return 0;
	case O_NOSMALL: g_opt.small = false; return 0;
	case O_NOPIN: g_opt.pin = false; return 0;
	case O_SINGLE_GETS: g_opt.single_gets = true; return 0;
	case O_ALT_GETS: g_opt.alt_gets = true; return 0;
	case O_QUICK: g_opt.quick = true; return 0;
	case O_DEMO: g_opt.demo = true; return 0;
	case O_NETNS: g_opt.net.netns = true; return 0;
	case O_PAGES: return bp_parse(arg, &g_opt.pages);
	case O_MIX: return parse_mix(arg) ? -EINVAL : 0;
	case O_FABRIC: return bnet_set_fabric(&g_opt.net, arg) ? -EINVAL : 0;
	case O_LOOKUP:
		if (strcmp(arg, "read") && strcmp(arg, "owner") &&
		    strcmp(arg, "auto"))
			return -EINVAL;
		snprintf(g_opt.lookup, sizeof(g_opt.lookup), "%s", arg);
		return 0;
	case O_ZK:
		if (!*arg || strlen(arg) >= sizeof(g_opt.zk))
			return -EINVAL;
		snprintf(g_opt.zk, sizeof(g_opt.zk), "%s", arg);
		return 0;
	default: return 1;
	}
}

int kb_parse_opts(int argc, char **argv, void (*usage)(FILE *))
{
	default_opts();
	struct explicit_opts set = {false, false, false, false};
	const struct bo_parser parser = {PROG, lo, usage, opt_number,
	                                 opt_other};
	if (bo_getopt(&parser, argc, argv, &set))
		return -EINVAL;
	return finish_opts(set);
}
