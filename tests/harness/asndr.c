#include "asndr.h"

#include <fcntl.h>
#include <unistd.h>

#include "alloc/objhdr.h"

bool dr_copy_of(unsigned m, uint32_t region, struct farm_datarec_region *d)
{
	struct farm_datarec_region r[64];
	unsigned n = farm_txm_datarec_get(C.m[m].txm, r, 64);
	for (unsigned i = 0; i < n && i < 64; i++)
		if (r[i].region == region) {
			*d = r[i];
			return true;
		}
	return false;
}

void dr_reconfigure_placed(uint64_t cid, const struct farm_ring_machine *ms,
                           unsigned n, uint32_t gone)
{
	uint32_t ids[ASN_MAX];
	assert_true(n <= ASN_MAX);
	for (unsigned k = 0; k < n; k++)
		ids[k] = ms[k].id;
	for (unsigned k = 0; k < n; k++) {
		unsigned m = ids[k] - 1;
		if (gone)
			assert_int_equal(farm_fabric_revoke(C.m[m].fab, gone),
			                 0);
		assert_int_equal(farm_as_set_view_placed(C.m[m].as, cid, ms, n),
		                 0);
		assert_int_equal(farm_txm_reconfigure(C.m[m].txm, cid, &gone,
		                                      gone ? 1 : 0, ids, n,
		                                      ids[0]),
		                 0);
	}
	uint64_t t0 = farm_now_ns();
	for (bool all = false; !all && farm_now_ns() - t0 < 10000000000ull;) {
		asn_pump(&C);
		all = true;
		/* 0 from the reconfiguration until its round ends. */
		for (unsigned k = 0; k < n; k++)
			all &= txm_stats(ids[k] - 1).rec_t_active_ns != 0;
	}
	for (unsigned k = 0; k < n; k++)
		farm_txm_datarec_view(C.m[ids[k] - 1].txm);
}

void dr_reconfigure(uint64_t cid, const uint32_t *ids, unsigned n,
                    uint32_t gone)
{
	struct farm_ring_machine ms[ASN_MAX];
	assert_true(n <= ASN_MAX);
	for (unsigned k = 0; k < n; k++)
		ms[k] = (struct farm_ring_machine){.id = ids[k]};
	dr_reconfigure_placed(cid, ms, n, gone);
}

bool dr_pump_copy(unsigned m, uint32_t region, uint64_t after, uint64_t until,
                  uint64_t retries, struct farm_datarec_region *d)
{
	while (farm_now_ns() < until) {
		asn_pump(&C);
		if (dr_copy_of(m, region, d) && d->t_start_ns >= after &&
		    (retries ? d->retries >= retries
		             : d->state >= FARM_DATAREC_DONE))
			return true;
	}
	return false;
}

void dr_pump_for(uint64_t ns)
{
	for (uint64_t t = farm_now_ns(); farm_now_ns() - t < ns;)
		asn_pump(&C);
}

bool dr_obj_equal(unsigned ma, unsigned mb, farm_gaddr a)
{
	uint32_t region = farm_gaddr_region(a);
	farm_region *ra = farm_as_local_region(C.m[ma].as, region, NULL);
	farm_region *rb = farm_as_local_region(C.m[mb].as, region, NULL);
	if (!ra || !rb)
		return false;
	const uint8_t *pa =
	        (const uint8_t *)farm_region_base(ra) + farm_gaddr_offset(a);
	const uint8_t *pb =
	        (const uint8_t *)farm_region_base(rb) + farm_gaddr_offset(a);
	uint64_t w;
	memcpy(&w, pa + 8, 8);
	unsigned lines = w ? farm_incarn_lines(w) : 1;
	return memcmp(pa, pb, 64ull * lines) == 0;
}

static int log_fd = -1, saved_fd = -1;

void dr_log_capture(void)
{
	char path[] = "/tmp/farm_drlog_XXXXXX";
	log_fd = mkstemp(path);
	assert_true(log_fd >= 0);
	(void)unlink(path);
	saved_fd = dup(STDERR_FILENO);
	assert_true(saved_fd >= 0);
	assert_true(dup2(log_fd, STDERR_FILENO) >= 0);
}

unsigned dr_log_release(const char *needle)
{
	assert_true(dup2(saved_fd, STDERR_FILENO) >= 0);
	close(saved_fd);
	off_t len = lseek(log_fd, 0, SEEK_END);
	assert_true(len >= 0);
	char *buf = calloc(1, (size_t)len + 1);
	assert_non_null(buf);
	assert_int_equal(pread(log_fd, buf, (size_t)len, 0), len);
	close(log_fd);
	unsigned n = 0;
	for (char *line = buf, *e; *line; line = e + 1) {
		e = strchr(line, '\n');
		if (!e)
			e = line + strlen(line) - 1;
		char save = e[1];
		e[1] = '\0';
		n += strstr(line, needle) != NULL;
		e[1] = save;
		if (!save)
			break;
	}
	free(buf);
	return n;
}
