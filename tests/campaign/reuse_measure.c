/*
 * The fault campaign (campaign.h): --reuse-measure, what a new holder
 * of a killed machine's id would have copied had it kept its old
 * holder's copies.
 */
#include "campaign.h"

#define CP_RM_SIZES  3
#define CP_RM_REGION (16u << 20) /* the campaign's region size (config) */
#define CP_RM_MAP    (CP_RM_REGION / 4096u / 8u)
static const uint32_t cp_rm_chunk[CP_RM_SIZES] = {4096u, 65536u, 1u << 20};

/* What a new holder's copies differ by from its old holder's. */
struct cp_rm {
	long same, changed, freed, added;
	uint64_t obj_bytes;          /* changed and allocated objects */
	uint64_t dirty[CP_RM_SIZES]; /* chunks that hold a difference */
	uint64_t used[CP_RM_SIZES];  /* chunks that hold an object */
	uint64_t fresh, fresh_ns;    /* the fresh copies' READs, time */
	uint64_t live_bytes;         /* objects allocated at the new copy */
	unsigned regions, copied;    /* compared; copied by the new holder */
};
static struct cp_rm cp_rm_all; /* over the run */
/* Each machine's regions at the last checks, and those of a killed one
 * kept as was-<region>-m<id> for its new holder's checks. */
static uint32_t cp_rm_last[NP_NM][RP_MAXREG], cp_rm_kept[NP_NM][RP_MAXREG];
static unsigned cp_rm_nlast[NP_NM], cp_rm_nkept[NP_NM];

static void cp_was_path(char *path, size_t len, uint32_t region, unsigned m)
{
	snprintf(path, len, "%.256s/was-%08" PRIx32 "-m%u", rb_cl.root, region,
	         m);
}

/* Killed machine @id's lists of the last checks, kept for its new
 * holder's (which writes the same names). */
void cp_rm_keep(unsigned id)
{
	cp_rm_nkept[id] = 0;
	for (unsigned k = 0; k < cp_rm_nlast[id]; k++) {
		char from[320], to[320];
		cp_copy_path(from, sizeof(from), rb_cl.root, cp_rm_last[id][k],
		             id);
		cp_was_path(to, sizeof(to), cp_rm_last[id][k], id);
		if (!rename(from, to))
			cp_rm_kept[id][cp_rm_nkept[id]++] = cp_rm_last[id][k];
	}
}

/* The chunks of every size that [@off, @off + @len) touches, marked in
 * @map; those not marked before counted in @n. */
static void cp_rm_mark(uint8_t (*map)[CP_RM_MAP], uint64_t off, uint64_t len,
                       uint64_t *n)
{
	for (unsigned z = 0; z < CP_RM_SIZES; z++) {
		uint64_t c0 = off / cp_rm_chunk[z];
		uint64_t c1 = (off + len - 1) / cp_rm_chunk[z];
		for (uint64_t c = c0; c <= c1 && c < CP_RM_MAP * 8u; c++) {
			if (map[z][c / 8] & (1u << (c % 8)))
				continue;
			map[z][c / 8] |= (uint8_t)(1u << (c % 8));
			n[z]++;
		}
	}
}

/* Region @g: the old holder's list against new holder @m's, into @r. */
static void cp_rm_region(uint32_t g, unsigned m, struct cp_rm *r)
{
	static uint8_t dirty[CP_RM_SIZES][CP_RM_MAP],
	        used[CP_RM_SIZES][CP_RM_MAP];
	char pw[320], pn[320];
	cp_was_path(pw, sizeof(pw), g, m);
	cp_copy_path(pn, sizeof(pn), rb_cl.root, g, m);
	size_t la = 0, lb = 0;
	struct cp_obj *a = np_read_file(pw, &la), *b = np_read_file(pn, &lb);
	size_t na = a ? la / sizeof(*a) : 0, nb = b ? lb / sizeof(*b) : 0;
	memset(dirty, 0, sizeof(dirty));
	memset(used, 0, sizeof(used));
	for (size_t x = 0, y = 0; x < na || y < nb;) {
		const struct cp_obj *o;
		bool diff = true, freed = false;
		if (y == nb || (x < na && a[x].off < b[y].off)) {
			o = &a[x++];
			freed = true; /* its header alone would say so */
			r->freed++;
		} else if (x == na || b[y].off < a[x].off) {
			o = &b[y++];
			r->added++;
			r->live_bytes += (uint64_t)o->lines * 64u;
		} else {
			diff = a[x].hash != b[y].hash ||
			       a[x].lines != b[y].lines;
			o = &b[y++];
			x++;
			r->live_bytes += (uint64_t)o->lines * 64u;
			r->changed += diff;
			r->same += !diff;
		}
		if (diff && !freed)
			r->obj_bytes += (uint64_t)o->lines * 64u;
		cp_rm_mark(used, o->off, (uint64_t)o->lines * 64u, r->used);
		if (diff)
			cp_rm_mark(dirty, o->off, (uint64_t)o->lines * 64u,
			           r->dirty);
	}
	free(a);
	free(b);
}

static void cp_rm_add(struct cp_rm *to, const struct cp_rm *r)
{
	to->same += r->same;
	to->changed += r->changed;
	to->freed += r->freed;
	to->added += r->added;
	to->obj_bytes += r->obj_bytes;
	for (unsigned z = 0; z < CP_RM_SIZES; z++) {
		to->dirty[z] += r->dirty[z];
		to->used[z] += r->used[z];
	}
	to->fresh += r->fresh;
	to->fresh_ns += r->fresh_ns;
	to->live_bytes += r->live_bytes;
	to->regions += r->regions;
	to->copied += r->copied;
}

static void cp_rm_say(const char *who, const struct cp_rm *r)
{
	double mb = 1e6;
	printf("reuse-measure: %s: %u regions held before and after (%u "
	       "copied afresh): the fresh copies READ %.2f MB in %.0f ms "
	       "(summed), its objects in use being %.3f MB; the old copies: "
	       "%ld objects equal, %ld changed, "
	       "%ld freed, %ld allocated since; a delta copy would READ "
	       "%.3f MB of objects, or in chunks of 4 KiB %.2f MB, 64 KiB "
	       "%.2f MB, 1 MiB %.2f MB, each with 16 B a chunk in use of "
	       "summary (%.3f MB at 4 KiB)\n",
	       who, r->regions, r->copied, (double)r->fresh / mb,
	       (double)r->fresh_ns / 1e6, (double)r->live_bytes / mb, r->same,
	       r->changed, r->freed, r->added, (double)r->obj_bytes / mb,
	       (double)r->dirty[0] * cp_rm_chunk[0] / mb,
	       (double)r->dirty[1] * cp_rm_chunk[1] / mb,
	       (double)r->dirty[2] * cp_rm_chunk[2] / mb,
	       (double)r->used[0] * 16.0 / mb);
}

/* At the checks: each new holder whose old holder's lists were kept,
 * compared; every machine's regions remembered for the next kill. */
void cp_rm_report(const struct cp_hashes *h)
{
	for (unsigned i = 0; i < NP_NM; i++) {
		if (!cp_is(cp_live, i))
			continue;
		struct cp_rm r = {0};
		for (unsigned k = 0; cp_rm_nkept[i] && k < h[i].n; k++) {
			r.copied += h[i].dr_bytes[k] != 0;
			bool kept = false;
			for (unsigned q = 0; q < cp_rm_nkept[i]; q++)
				kept |= cp_rm_kept[i][q] == h[i].region[k];
			if (!kept)
				continue;
			cp_rm_region(h[i].region[k], i, &r);
			r.fresh += h[i].dr_bytes[k];
			r.fresh_ns += h[i].dr_ns[k];
			r.regions++;
		}
		for (unsigned q = 0; q < cp_rm_nkept[i]; q++) {
			char pw[320];
			cp_was_path(pw, sizeof(pw), cp_rm_kept[i][q], i);
			(void)unlink(pw);
		}
		if (cp_rm_nkept[i]) {
			char who[64];
			snprintf(who, sizeof(who), "new holder of id %u", i);
			cp_rm_say(who, &r);
			cp_rm_add(&cp_rm_all, &r);
			cp_rm_say("so far", &cp_rm_all);
		}
		cp_rm_nkept[i] = 0;
		cp_rm_nlast[i] = FARM_MIN(h[i].n, RP_MAXREG);
		memcpy(cp_rm_last[i], h[i].region,
		       cp_rm_nlast[i] * sizeof(uint32_t));
	}
}
