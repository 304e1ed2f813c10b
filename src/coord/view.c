/*
 * Views: finding and comparing members, placement from a view, the
 * configuration's text form (farm_view_format, farm_view_parse), and
 * publishing a view to the handle's callback. Calls nothing else of
 * src/coord: both backends (membership.c's static one, zk.c) build on it.
 */
#include "coord/membership_impl.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

/* Version 2 adds "incarnation" lines (a reused id's holder), version 3
 * "shadow" lines (a reused id's departed earlier holder); a view is
 * written in the lowest version that holds it, which older parsers read. */
#define FARM_CONFIG_MAGIC  "libfarm-config 1"
#define FARM_CONFIG_MAGIC2 "libfarm-config 2"
#define FARM_CONFIG_MAGIC3 "libfarm-config 3"
#define FARM_CONFIG_MAGIC4 "libfarm-config 4"

const struct farm_member *farm_view_find(const struct farm_view *v, uint32_t id)
{
	if (!v)
		return NULL;
	unsigned lo = 0, hi = v->n < FARM_VIEW_MAX ? v->n : FARM_VIEW_MAX;
	while (lo < hi) {
		unsigned mid = lo + (hi - lo) / 2;
		if (v->members[mid].id == id)
			return &v->members[mid];
		if (v->members[mid].id < id)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

/* The counts and flags of two views agree. */
static bool same_shape(const struct farm_view *a, const struct farm_view *b)
{
	return a->n == b->n && a->has_cm == b->has_cm &&
	       (!a->has_cm || a->cm == b->cm) && a->nremoved == b->nremoved &&
	       a->ndeparted == b->ndeparted && a->formed == b->formed &&
	       a->nlate == b->nlate && a->ngone == b->ngone &&
	       a->nlost == b->nlost && a->restart == b->restart &&
	       a->bump == b->bump && a->nleaving == b->nleaving &&
	       a->nleft == b->nleft && a->npins == b->npins;
}

/* The lost, late, gone and leaving lists of two views of the same shape
 * agree (a
 * count past FARM_VIEW_MAX is not compared: the lists are not read past
 * their arrays). */
static bool same_id_lists(const struct farm_view *a, const struct farm_view *b)
{
	return !(a->nlost <= FARM_VIEW_MAX &&
	         memcmp(a->lost, b->lost, a->nlost * sizeof(a->lost[0]))) &&
	       !(a->nlate <= FARM_VIEW_MAX &&
	         memcmp(a->late, b->late, a->nlate * sizeof(a->late[0]))) &&
	       !(a->ngone <= FARM_VIEW_MAX &&
	         memcmp(a->gone, b->gone, a->ngone * sizeof(a->gone[0]))) &&
	       !(a->nleaving <= FARM_VIEW_MAX &&
	         memcmp(a->leaving, b->leaving,
	                a->nleaving * sizeof(a->leaving[0]))) &&
	       !(a->nleft <= FARM_VIEW_MAX &&
	         memcmp(a->left, b->left, a->nleft * sizeof(a->left[0]))) &&
	       !(a->npins <= FARM_VIEW_MAX_PINS &&
	         memcmp(a->pins, b->pins, a->npins * sizeof(a->pins[0])));
}

/* The members, departed and removed machines of two views of the same
 * shape agree, entry by entry. */
static bool same_machines(const struct farm_view *a, const struct farm_view *b)
{
	for (unsigned i = 0; i < a->n; i++)
		if (a->members[i].id != b->members[i].id ||
		    a->members[i].incarnation != b->members[i].incarnation ||
		    strcmp(a->members[i].endpoint, b->members[i].endpoint) ||
		    strcmp(a->members[i].domain, b->members[i].domain))
			return false;
	for (unsigned i = 0; i < a->ndeparted; i++)
		if (a->departed[i].id != b->departed[i].id ||
		    a->departed[i].shadow != b->departed[i].shadow ||
		    strcmp(a->departed[i].domain, b->departed[i].domain))
			return false;
	for (unsigned i = 0; i < a->nremoved; i++)
		if (a->removed[i].id != b->removed[i].id ||
		    a->removed[i].incarnation != b->removed[i].incarnation)
			return false;
	return true;
}

bool farm_view_same_members(const struct farm_view *a,
                            const struct farm_view *b)
{
	return same_shape(a, b) && same_id_lists(a, b) && same_machines(a, b);
}

bool farm_view_equal(const struct farm_view *a, const struct farm_view *b)
{
	return a->config_id == b->config_id && farm_view_same_members(a, b);
}

bool farm_ids_have(const uint32_t *ids, unsigned n, uint32_t id)
{
	for (unsigned i = 0; i < n && i < FARM_VIEW_MAX; i++)
		if (ids[i] == id)
			return true;
	return false;
}

int farm_view_may_leave(const struct farm_view *v, uint32_t id,
                        unsigned replicas)
{
	if (!v)
		return -EINVAL;
	if (!farm_view_find(v, id))
		return -ENOENT;
	if (farm_ids_have(v->leaving, v->nleaving, id))
		return 0;
	unsigned stay = v->n > v->nleaving ? v->n - v->nleaving : 0;
	return stay >= 1u + replicas ? 0 : -EBUSY;
}

bool farm_view_removed(const struct farm_view *v, uint32_t id)
{
	for (unsigned i = 0; v && i < v->nremoved; i++)
		if (v->removed[i].id == id)
			return true;
	return false;
}

bool farm_endpoint_valid(const char *e)
{
	size_t n = strnlen(e, FARM_ENDPOINT_MAX);
	if (n == 0 || n == FARM_ENDPOINT_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)e[i] < 0x20 || e[i] == 0x7f)
			return false; /* newlines would break the text form */
	return true;
}

bool farm_domain_valid(const char *s)
{
	size_t n = s ? strnlen(s, FARM_DOMAIN_MAX) : 0;
	if (n == 0 || n == FARM_DOMAIN_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._:-", s[i]))
			return false;
	return true;
}

static int cmp_name(const void *a, const void *b)
{
	return strcmp(*(const char *const *)a, *(const char *const *)b);
}

/* 1 + the rank of @d among the sorted distinct @names; 0 for "". */
static uint32_t domain_number(const char *const *names, unsigned n,
                              const char *d)
{
	if (!d[0])
		return 0;
	uint32_t rank = 0;
	for (unsigned i = 0; i < n; i++)
		if (i == 0 || strcmp(names[i], names[i - 1]))
			if (strcmp(names[i], d) < 0)
				rank++;
	return rank + 1;
}

/* Machine @id's rank among the late machines of @v (1 first), or 0. */
static uint32_t late_rank(const struct farm_view *v, uint32_t id)
{
	for (unsigned q = 0; q < v->nlate && q < FARM_VIEW_MAX; q++)
		if (v->late[q] == id)
			return q + 1;
	return 0;
}

/* @v's shadow of id @id (farm_departed.shadow), or NULL. */
static const struct farm_departed *shadow_of(const struct farm_view *v,
                                             uint32_t id)
{
	for (unsigned i = 0; i < v->ndeparted && i < FARM_VIEW_MAX; i++)
		if (v->departed[i].id == id && v->departed[i].shadow)
			return &v->departed[i];
	return NULL;
}

static bool ids_in(const uint32_t *ids, unsigned n, uint32_t id)
{
	for (unsigned i = 0; i < n; i++)
		if (ids[i] == id)
			return true;
	return false;
}

unsigned farm_view_placement(const struct farm_view *v, const uint32_t *ids,
                             unsigned n, struct farm_ring_machine *out)
{
	/* The names, sorted: the numbers depend on the view alone. */
	const char *names[2 * FARM_VIEW_MAX];
	unsigned nn = 0;
	for (unsigned i = 0; i < v->n && i < FARM_VIEW_MAX; i++)
		if (v->members[i].domain[0])
			names[nn++] = v->members[i].domain;
	for (unsigned i = 0; i < v->ndeparted && i < FARM_VIEW_MAX; i++)
		names[nn++] = v->departed[i].domain;
	qsort(names, nn, sizeof(names[0]), cmp_name);
	unsigned k = 0;
	for (unsigned i = 0; i < n; i++) {
		const struct farm_member *m = farm_view_find(v, ids[i]);
		const struct farm_departed *sh = shadow_of(v, ids[i]);
		uint32_t late = late_rank(v, ids[i]);
		out[k++] = (struct farm_ring_machine){
		        .id = ids[i],
		        .domain = m ? domain_number(names, nn, m->domain) : 0,
		        .late = late,
		        .shadow = sh && late
		                          ? domain_number(names, nn, sh->domain)
		                          : 0,
		        .leaving =
		                farm_ids_have(v->leaving, v->nleaving, ids[i])};
	}
	/* A late machine that left keeps its rank (the late list keeps
	 * ids that left): it stays out of the domain walk, so the
	 * survivors keep their order. Placed as an ordinary departed
	 * machine, it took the place of a member of its domain in the walk
	 * and moved primaries between live machines (the fault
	 * campaign: two primaries of one region). A shadow is walked
	 * whatever its id's rank: its holder left while walked. */
	for (unsigned i = 0; i < v->ndeparted && i < FARM_VIEW_MAX; i++) {
		const struct farm_departed *d = &v->departed[i];
		if (ids_in(ids, n, d->id) ||
		    (!d->shadow && farm_view_find(v, d->id)))
			continue;
		out[k++] = (struct farm_ring_machine){
		        .id = d->id,
		        .domain = domain_number(names, nn, d->domain),
		        .departed = true,
		        .late = d->shadow ? 0 : late_rank(v, d->id)};
	}
	return k;
}

/* Whether @c's departed entry @e stays in @x, the configuration after
 * @c, and as a shadow (e->shadow set on return). A departed machine that
 * was walked in @c (a shadow, or not late) and whose id is late in @x
 * is a shadow: a reused id's new holder joined late (or has left again),
 * and the walk must meet the same points in the same domain as before.
 * Once its id is a member that is not late (grown, or back with its
 * memory), that member takes its place: the entry goes; so does one
 * that was not walked (its holder left while late) when its id is a
 * member again. */
static bool carry_departed(const struct farm_view *c, const struct farm_view *x,
                           struct farm_departed *e)
{
	bool walked = e->shadow || !late_rank(c, e->id);
	bool late = late_rank(x, e->id) != 0;
	e->shadow = walked && late;
	return !farm_view_find(x, e->id) || e->shadow;
}

/* Append @e to @x's departed machines; when they are full, the lowest
 * id goes (counted in *@over). */
static void departed_add(struct farm_view *x, const struct farm_departed *e,
                         unsigned *over)
{
	if (x->ndeparted == FARM_VIEW_MAX) {
		memmove(&x->departed[0], &x->departed[1],
		        (FARM_VIEW_MAX - 1) * sizeof(x->departed[0]));
		x->ndeparted--;
		(*over)++;
	}
	x->departed[x->ndeparted++] = *e;
}

/* The departed machines of @x, the configuration after @c: @c's departed
 * ones (carry_departed) and its members with a domain that are not
 * members of @x (a member's own domain is its registration's; one whose
 * id has a shadow adds nothing: the shadow stands for the id). Kept for
 * good, one per id (placement must not reorder the survivors, ring.h);
 * when more than fit, the lowest ids go (logged), which may move
 * replicas as a join does. */
void farm_view_next_departed(const struct farm_view *c, struct farm_view *x)
{
	x->ndeparted = 0;
	unsigned over = 0;
	for (unsigned i = 0, j = 0; i < c->n || j < c->ndeparted;) {
		/* A departed entry before the member of its id, if any. */
		bool mem = j == c->ndeparted ||
		           (i < c->n && c->members[i].id < c->departed[j].id);
		struct farm_departed e = {0};
		if (!mem) {
			e = c->departed[j++];
			if (carry_departed(c, x, &e))
				departed_add(x, &e, &over);
			continue;
		}
		const struct farm_member *mb = &c->members[i++];
		if (!mb->domain[0] || farm_view_find(x, mb->id) ||
		    (j && c->departed[j - 1].id == mb->id))
			continue;
		e.id = mb->id;
		snprintf(e.domain, sizeof(e.domain), "%s", mb->domain);
		departed_add(x, &e, &over);
	}
	if (over)
		farm_warn("membership: %u departed machine(s) forgotten: more "
		          "than %u; placement may move replicas",
		          over, FARM_VIEW_MAX);
}

/* One "<tag> <id>" line per id of @ids[0..n) at @buf + *@off. 0, or -1
 * when @len is too small. */
static int format_ids(char *buf, size_t len, size_t *off, const char *tag,
                      const uint32_t *ids, unsigned n)
{
	for (unsigned i = 0; i < n && i < FARM_VIEW_MAX; i++) {
		int k = snprintf(buf + *off, len - *off, "%s %" PRIu32 "\n",
		                 tag, ids[i]);
		if (k < 0 || (size_t)k >= len - *off)
			return -1;
		*off += (size_t)k;
	}
	return 0;
}

/* Append one formatted line to @buf at *@off. 0, or -1 when @len is too
 * small: snprintf alone would truncate silently. */
static int emit(char *buf, size_t len, size_t *off, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));
static int emit(char *buf, size_t len, size_t *off, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int k = vsnprintf(buf + *off, len - *off, fmt, ap);
	va_end(ap);
	if (k < 0 || (size_t)k >= len - *off)
		return -1;
	*off += (size_t)k;
	return 0;
}

/* Domains by id: the members' and the departed machines' merged, so that
 * the text lists them in one order whoever wrote it; then the shadows
 * (their ids may be members'), by id. */
static int format_domains(const struct farm_view *v, char *buf, size_t len,
                          size_t *off)
{
	for (unsigned i = 0, j = 0; i < v->n || j < v->ndeparted;) {
		if (j < v->ndeparted && v->departed[j].shadow) {
			j++;
			continue;
		}
		bool mem = j == v->ndeparted ||
		           (i < v->n && v->members[i].id < v->departed[j].id);
		uint32_t id = mem ? v->members[i].id : v->departed[j].id;
		const char *d =
		        mem ? v->members[i++].domain : v->departed[j++].domain;
		if (d[0] &&
		    emit(buf, len, off, "domain %" PRIu32 " %s\n", id, d))
			return -1;
	}
	for (unsigned j = 0; j < v->ndeparted; j++)
		if (v->departed[j].shadow &&
		    emit(buf, len, off, "shadow %" PRIu32 " %s\n",
		         v->departed[j].id, v->departed[j].domain))
			return -1;
	return 0;
}

/* The members, their domains and the removed machines' incarnations. */
static int format_machines(const struct farm_view *v, char *buf, size_t len,
                           size_t *off)
{
	for (unsigned i = 0; i < v->n; i++)
		if (emit(buf, len, off, "member %" PRIu32 " %s\n",
		         v->members[i].id, v->members[i].endpoint))
			return -1;
	if (format_domains(v, buf, len, off))
		return -1;
	for (unsigned i = 0; i < v->n; i++)
		if (v->members[i].incarnation &&
		    emit(buf, len, off, "incarnation %" PRIu32 " %" PRIu32 "\n",
		         v->members[i].id, v->members[i].incarnation))
			return -1;
	for (unsigned i = 0; i < v->nremoved && i < FARM_VIEW_MAX; i++)
		if (emit(buf, len, off, "removed %" PRIu32 " %" PRId64 "\n",
		         v->removed[i].id, v->removed[i].incarnation))
			return -1;
	return 0;
}

/* The view's state: formed, the late, gone, lost and leaving machines,
 * and the restart and bump counters (each line only when set). */
static int format_state(const struct farm_view *v, char *buf, size_t len,
                        size_t *off)
{
	if (v->formed && emit(buf, len, off, "formed\n"))
		return -1;
	if (format_ids(buf, len, off, "late", v->late, v->nlate) ||
	    format_ids(buf, len, off, "gone", v->gone, v->ngone) ||
	    format_ids(buf, len, off, "lost", v->lost, v->nlost) ||
	    format_ids(buf, len, off, "leaving", v->leaving, v->nleaving) ||
	    format_ids(buf, len, off, "left", v->left, v->nleft))
		return -1;
	if (v->restart &&
	    emit(buf, len, off, "restart %" PRIu64 "\n", v->restart))
		return -1;
	if (v->bump && emit(buf, len, off, "bump %" PRIu64 "\n", v->bump))
		return -1;
	for (unsigned i = 0; i < v->npins; i++)
		if (emit(buf, len, off, "pin %" PRIu32 " %" PRIu32 "\n",
		         v->pins[i].region, v->pins[i].machine))
			return -1;
	return 0;
}

int farm_view_format(const struct farm_view *v, char *buf, size_t len)
{
	if (!v || !buf || v->n > FARM_VIEW_MAX ||
	    v->ndeparted > FARM_VIEW_MAX || v->nlate > FARM_VIEW_MAX ||
	    v->ngone > FARM_VIEW_MAX || v->nlost > FARM_VIEW_MAX ||
	    v->nleaving > FARM_VIEW_MAX || v->nleft > FARM_VIEW_MAX ||
	    v->npins > FARM_VIEW_MAX_PINS)
		return -EINVAL;
	size_t off = 0;
	bool v2 = false, v3 = false, v4 = v->npins > 0;
	for (unsigned i = 0; i < v->n; i++)
		v2 |= v->members[i].incarnation != 0;
	for (unsigned i = 0; i < v->ndeparted; i++)
		v3 |= v->departed[i].shadow;
	if (emit(buf, len, &off, "%s\nconfig_id %" PRIu64 "\n",
	         v4   ? FARM_CONFIG_MAGIC4
	         : v3 ? FARM_CONFIG_MAGIC3
	         : v2 ? FARM_CONFIG_MAGIC2
	              : FARM_CONFIG_MAGIC,
	         v->config_id))
		return -ENOBUFS;
	if (v->has_cm && emit(buf, len, &off, "cm %" PRIu32 "\n", v->cm))
		return -ENOBUFS;
	if (format_machines(v, buf, len, &off) ||
	    format_state(v, buf, len, &off))
		return -ENOBUFS;
	return (int)off;
}

/* Parse a decimal without sign or leading junk, up to @max, ending at @end
 * (set to the first byte after the digits). */
static int parse_dec(const char *s, const char *lim, uint64_t max,
                     uint64_t *out, const char **end)
{
	uint64_t v = 0;
	const char *p = s;
	if (p == lim || !isdigit((unsigned char)*p))
		return -1;
	for (; p < lim && isdigit((unsigned char)*p); p++) {
		unsigned d = (unsigned)(*p - '0');
		if (v > (max - d) / 10)
			return -1;
		v = v * 10 + d;
	}
	*out = v;
	*end = p;
	return 0;
}

/* The id after a "<tag> " of @tag bytes at @p (line end @nl) appended to
 * @ids (*@n of them, distinct, at most FARM_VIEW_MAX). 0, or -1. */
static int parse_id_line(const char *p, size_t tag, const char *nl,
                         uint32_t *ids, unsigned *n)
{
	uint64_t x;
	const char *e;
	if (*n == FARM_VIEW_MAX || parse_dec(p + tag, nl, UINT32_MAX, &x, &e) ||
	    e != nl || farm_ids_have(ids, *n, (uint32_t)x))
		return -1;
	ids[(*n)++] = (uint32_t)x;
	return 0;
}

/* A configuration being parsed: the view and what the lines' order rules
 * need to remember. */
struct view_parse {
	struct farm_view *v;
	bool v2; /* version 2 or 3: incarnation lines allowed */
	bool v3; /* version 3: shadow lines allowed */
	bool v4; /* version 4: pin lines allowed */
	bool have_domain;
	uint64_t last_domain;
	bool have_shadow;
	uint64_t last_shadow;
	bool have_inc;
	uint64_t last_inc;
};

/* One line kind after the first two: @p is the line, @nl its '\n'. 0, or
 * -1 for a malformed line (FARM_ECORRUPT). */
typedef int (*view_line_fn)(struct view_parse *s, const char *p,
                            const char *nl);

static int vl_cm(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t x;
	const char *e;
	if (v->has_cm || v->n || parse_dec(p + 3, nl, UINT32_MAX, &x, &e) ||
	    e != nl)
		return -1;
	v->has_cm = true;
	v->cm = (uint32_t)x;
	return 0;
}

static int vl_formed(struct view_parse *s, const char *p, const char *nl)
{
	(void)p;
	(void)nl;
	if (s->v->formed)
		return -1;
	s->v->formed = true;
	return 0;
}

static int vl_late(struct view_parse *s, const char *p, const char *nl)
{
	return parse_id_line(p, 5, nl, s->v->late, &s->v->nlate);
}

static int vl_gone(struct view_parse *s, const char *p, const char *nl)
{
	return parse_id_line(p, 5, nl, s->v->gone, &s->v->ngone);
}

static int vl_lost(struct view_parse *s, const char *p, const char *nl)
{
	return parse_id_line(p, 5, nl, s->v->lost, &s->v->nlost);
}

/* "leaving <id>": a member's (checked once every line is read: the
 * members come first). An older parser takes it for a malformed member
 * line and refuses the configuration, as it must: it would place the
 * leaver's successors nowhere. */
static int vl_leaving(struct view_parse *s, const char *p, const char *nl)
{
	return parse_id_line(p, 8, nl, s->v->leaving, &s->v->nleaving);
}

/* "left <id>": a machine this configuration removes (checked once every
 * line is read: it is no member). */
static int vl_left(struct view_parse *s, const char *p, const char *nl)
{
	return parse_id_line(p, 5, nl, s->v->left, &s->v->nleft);
}

/* "<tag> <u64 above 0>" once: "restart " (8 bytes) and "bump " (5). */
static int parse_once(const char *arg, const char *nl, uint64_t *out)
{
	uint64_t x;
	const char *e;
	if (*out || parse_dec(arg, nl, UINT64_MAX, &x, &e) || e != nl || x == 0)
		return -1;
	*out = x;
	return 0;
}

static int vl_restart(struct view_parse *s, const char *p, const char *nl)
{
	return parse_once(p + 8, nl, &s->v->restart);
}

static int vl_bump(struct view_parse *s, const char *p, const char *nl)
{
	return parse_once(p + 5, nl, &s->v->bump);
}

static int vl_removed(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t x, inc;
	const char *e;
	if (v->nremoved == FARM_VIEW_MAX ||
	    parse_dec(p + 8, nl, UINT32_MAX, &x, &e) || e == nl || *e != ' ' ||
	    parse_dec(e + 1, nl, INT64_MAX, &inc, &e) || e != nl)
		return -1;
	v->removed[v->nremoved++] = (struct farm_removed){
	        .id = (uint32_t)x, .incarnation = (int64_t)inc};
	return 0;
}

/* "incarnation <id> <config id>" (version 2): after the members and the
 * domains, ids increasing, a member's, above 0. */
static int vl_incarnation(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t x, c;
	const char *e;
	if (!s->v2 || v->nremoved || v->formed || v->nlate || v->ngone ||
	    v->nlost || v->restart || v->nleaving || v->nleft ||
	    parse_dec(p + 12, nl, UINT32_MAX, &x, &e) || e == nl || *e != ' ' ||
	    (s->have_inc && x <= s->last_inc) ||
	    parse_dec(e + 1, nl, UINT32_MAX, &c, &e) || e != nl || c == 0)
		return -1;
	struct farm_member *mb =
	        (struct farm_member *)farm_view_find(v, (uint32_t)x);
	if (!mb)
		return -1;
	s->have_inc = true;
	s->last_inc = x;
	mb->incarnation = (uint32_t)c;
	return 0;
}

/* "<id> <name>" at @p (line end @nl) into *@id and @d (FARM_DOMAIN_MAX
 * bytes): a usable domain name. 0, or -1. */
static int parse_id_domain(const char *p, const char *nl, uint64_t *id, char *d)
{
	const char *e;
	if (parse_dec(p, nl, UINT32_MAX, id, &e) || e == nl || *e != ' ')
		return -1;
	e++;
	size_t dlen = (size_t)(nl - e);
	if (dlen == 0 || dlen >= FARM_DOMAIN_MAX)
		return -1;
	memcpy(d, e, dlen);
	d[dlen] = 0;
	return farm_domain_valid(d) ? 0 : -1;
}

/* After the members, ids increasing: a member's domain, or a departed
 * machine's. */
static int vl_domain(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t x;
	char d[FARM_DOMAIN_MAX];
	if (s->have_inc || s->have_shadow ||
	    parse_id_domain(p + 7, nl, &x, d) ||
	    (s->have_domain && x <= s->last_domain))
		return -1;
	s->have_domain = true;
	s->last_domain = x;
	struct farm_member *mb =
	        (struct farm_member *)farm_view_find(v, (uint32_t)x);
	if (mb) {
		memcpy(mb->domain, d, sizeof(d));
	} else {
		if (v->ndeparted == FARM_VIEW_MAX)
			return -1;
		struct farm_departed *dp = &v->departed[v->ndeparted++];
		dp->id = (uint32_t)x;
		memcpy(dp->domain, d, sizeof(d));
	}
	return 0;
}

/* "shadow <id> <name>" (version 3): after the domains, before the
 * incarnations, ids increasing; a departed machine of its own (not one a
 * domain line listed), kept in the departed list's id order. */
static int vl_shadow(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t x;
	char d[FARM_DOMAIN_MAX];
	if (!s->v3 || s->have_inc || v->nremoved || v->formed || v->nlate ||
	    v->ngone || v->nlost || v->restart || v->nleaving || v->nleft ||
	    parse_id_domain(p + 7, nl, &x, d) ||
	    (s->have_shadow && x <= s->last_shadow) ||
	    v->ndeparted == FARM_VIEW_MAX)
		return -1;
	s->have_shadow = true;
	s->last_shadow = x;
	unsigned k = 0;
	while (k < v->ndeparted && v->departed[k].id < x)
		k++;
	if (k < v->ndeparted && v->departed[k].id == x)
		return -1;
	memmove(&v->departed[k + 1], &v->departed[k],
	        (v->ndeparted - k) * sizeof(v->departed[0]));
	v->ndeparted++;
	v->departed[k] =
	        (struct farm_departed){.id = (uint32_t)x, .shadow = true};
	memcpy(v->departed[k].domain, d, sizeof(d));
	return 0;
}

/* "pin <region> <id>" (version 4): last, regions nonzero and increasing;
 * the machine need not be a member (a pin of a departed machine is
 * ignored by placement). */
static int vl_pin(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	uint64_t r, x;
	const char *e;
	if (!s->v4 || v->npins == FARM_VIEW_MAX_PINS ||
	    parse_dec(p + 4, nl, UINT32_MAX, &r, &e) || r == 0 || e == nl ||
	    *e != ' ' || parse_dec(e + 1, nl, UINT32_MAX, &x, &e) || e != nl ||
	    (v->npins && v->pins[v->npins - 1].region >= r))
		return -1;
	v->pins[v->npins++] = (struct farm_ring_pin){.region = (uint32_t)r,
	                                             .machine = (uint32_t)x};
	return 0;
}

/* "member <id> <endpoint>": before every line kind but "cm", ids
 * increasing. */
static int vl_member(struct view_parse *s, const char *p, const char *nl)
{
	struct farm_view *v = s->v;
	size_t n = (size_t)(nl - p);
	uint64_t x;
	const char *e;
	if (v->nremoved || s->have_domain || s->have_shadow || s->have_inc ||
	    v->formed || v->nlate || v->ngone || v->nlost || v->restart ||
	    v->nleaving || v->nleft || v->npins || n < 7 ||
	    memcmp(p, "member ", 7) ||
	    parse_dec(p + 7, nl, UINT32_MAX, &x, &e) || e == nl || *e != ' ')
		return -1;
	if (v->n == FARM_VIEW_MAX || (v->n && v->members[v->n - 1].id >= x))
		return -1;
	e++;
	size_t elen = (size_t)(nl - e);
	struct farm_member *m = &v->members[v->n];
	if (elen == 0 || elen >= sizeof(m->endpoint) || memchr(e, 0, elen))
		return -1;
	memcpy(m->endpoint, e, elen);
	m->endpoint[elen] = 0;
	if (!farm_endpoint_valid(m->endpoint))
		return -1;
	m->id = (uint32_t)x;
	v->n++;
	return 0;
}

/* The line kinds after the magic and config_id lines, by their first
 * bytes (@whole: the line is exactly the tag); anything else is a member
 * line. */
static const struct {
	const char *tag;
	size_t len;
	bool whole;
	view_line_fn fn;
} view_lines[] = {
        {"cm ", 3, false, vl_cm},
        {"formed", 6, true, vl_formed},
        {"late ", 5, false, vl_late},
        {"gone ", 5, false, vl_gone},
        {"lost ", 5, false, vl_lost},
        {"leaving ", 8, false, vl_leaving},
        {"left ", 5, false, vl_left},
        {"restart ", 8, false, vl_restart},
        {"bump ", 5, false, vl_bump},
        {"removed ", 8, false, vl_removed},
        {"domain ", 7, false, vl_domain},
        {"shadow ", 7, false, vl_shadow},
        {"incarnation ", 12, false, vl_incarnation},
        {"pin ", 4, false, vl_pin},
};

static view_line_fn view_line(const char *p, size_t n)
{
	for (size_t i = 0; i < sizeof(view_lines) / sizeof(view_lines[0]); i++)
		if ((view_lines[i].whole ? n == view_lines[i].len
		                         : n >= view_lines[i].len) &&
		    !memcmp(p, view_lines[i].tag, view_lines[i].len))
			return view_lines[i].fn;
	return vl_member;
}

/* The first line, @n bytes at @p: which version (view_parse's flags).
 * 0, or -1 for none. */
static int view_magic(struct view_parse *s, const char *p, size_t n)
{
	const char *magic[] = {FARM_CONFIG_MAGIC, FARM_CONFIG_MAGIC2,
	                       FARM_CONFIG_MAGIC3, FARM_CONFIG_MAGIC4};
	for (unsigned k = 0; k < 4; k++)
		if (n == strlen(magic[k]) && !memcmp(p, magic[k], n)) {
			s->v2 = k >= 1;
			s->v3 = k >= 2;
			s->v4 = k >= 3;
			return 0;
		}
	return -1;
}

int farm_view_parse(const char *buf, size_t len, struct farm_view *v)
{
	if (!buf || !v)
		return -EINVAL;
	memset(v, 0, sizeof(*v));
	const char *p = buf, *lim = buf + len;
	unsigned line = 0;
	bool have_id = false;
	struct view_parse s = {.v = v};
	while (p < lim) {
		const char *nl = memchr(p, '\n', (size_t)(lim - p));
		if (!nl)
			return FARM_ECORRUPT; /* every line ends with '\n' */
		size_t n = (size_t)(nl - p);
		const char *e;
		uint64_t x;
		if (line == 0) {
			if (view_magic(&s, p, n))
				return FARM_ECORRUPT;
		} else if (line == 1) {
			if (n < 11 || memcmp(p, "config_id ", 10) ||
			    parse_dec(p + 10, nl, UINT64_MAX, &x, &e) ||
			    e != nl)
				return FARM_ECORRUPT;
			v->config_id = x;
			have_id = true;
		} else if (view_line(p, n)(&s, p, nl)) {
			return FARM_ECORRUPT;
		}
		line++;
		p = nl + 1;
	}
	/* A named CM and every leaving machine must be members; a machine
	 * that left must not be. */
	bool strangers = false;
	for (unsigned i = 0; i < v->nleaving; i++)
		strangers |= !farm_view_find(v, v->leaving[i]);
	for (unsigned i = 0; i < v->nleft; i++)
		strangers |= farm_view_find(v, v->left[i]) != NULL;
	if (!have_id || (v->has_cm && !farm_view_find(v, v->cm)) || strangers) {
		memset(v, 0, sizeof(*v));
		return FARM_ECORRUPT;
	}
	return 0;
}

bool farm_membership_publish(struct farm_membership *m,
                             const struct farm_view *v, bool offered)
{
	/* The check and on_view under one lock: a view the offer thread
	 * takes and one the worker reads never run on_view out of order. */
	pthread_mutex_lock(&m->publish_lock);
	pthread_mutex_lock(&m->lock);
	bool newer = v->config_id > m->view.config_id;
	if (newer) {
		m->view = *v;
		m->st.views++;
		m->st.offered += offered;
	}
	pthread_cond_broadcast(&m->changed);
	pthread_mutex_unlock(&m->lock);
	if (newer && m->on_view)
		m->on_view(m->ctx, v);
	pthread_mutex_unlock(&m->publish_lock);
	return newer;
}
