/*
 * libFuzzer target for the files a machine reads back at a whole-cluster
 * restart (src/node/restart_man.c): its manifest (man_read: header, region
 * entries, kept blobs, trailer and checksum) and the region files it
 * names (check_region: size and allocator header). Whatever the files
 * hold, the machine must refuse them with an error and a reason, never
 * read outside them.
 *
 * The first input byte picks how the input becomes a manifest. Raw (bit 0
 * clear): the input is the file. Sealed (bit 0 set): the input is the
 * header and entries, and the harness sets the magic, layout, wire
 * version, machine, cluster and trailer (length and checksum) right unless
 * bits 1-3 or 6 say to spoil one, so the fuzzer reaches the entries. The
 * region files the manifest names exist when bit 4 is set, with the
 * input's first 16 bytes as their allocator header.
 */
#include "fuzz_quiet.h"
#include "node/restart_man.c"

#define FZ_REGION 4096u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char dir[64];

static int put(const char *name, const void *p, size_t n)
{
	char path[160];
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return -1;
	ssize_t w = write(fd, p, n);
	close(fd);
	return w == (ssize_t)n ? 0 : -1;
}

static void clear(void)
{
	if (!dir[0])
		return;
	DIR *d = opendir(dir);
	if (!d)
		return;
	struct dirent *e;
	while ((e = readdir(d)))
		if (e->d_name[0] != '.')
			unlinkat(dirfd(d), e->d_name, 0);
	closedir(d);
}

static void gone(void)
{
	clear();
	rmdir(dir);
}

static size_t seal(uint8_t *buf, size_t n, uint8_t mode)
{
	/* Room for a header, the entries the input's header names (at
	 * most 8 regions, all kept blobs), and the trailer. */
	struct man_hdr h;
	memcpy(&h, buf, sizeof(h));
	h.nregions %= 9;
	h.nkept %= FARM_RESTART_KEPT_N + 1;
	h.magic = (mode & 2) ? h.magic : MAN_MAGIC;
	h.layout = (mode & 4) ? h.layout : MAN_LAYOUT;
	h.wire = (mode & 64) ? h.wire : FARM_WIRE_VERSION;
	h.machine = 1;
	h.region_size = FZ_REGION;
	snprintf(h.cluster, sizeof(h.cluster), "/farm");
	if (h.nmembers > FARM_VIEW_MAX)
		h.nmembers %= FARM_VIEW_MAX + 1;
	memcpy(buf, &h, sizeof(h));
	size_t len = sizeof(h) + h.nregions * sizeof(struct man_region) +
	             h.nkept * sizeof(struct man_kept);
	if (len > n)
		memset(buf + n, 0, len - n);
	struct man_tail t = {.magic = MAN_END,
	                     .len = len + sizeof(t),
	                     .sum = farm_rst_fnv1a(buf, len)};
	if (mode & 8)
		t.sum ^= 1;
	memcpy(buf + len, &t, sizeof(t));
	return len + sizeof(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	if (!dir[0]) {
		/* tmpfs where there is one: a file per run. */
		snprintf(dir, sizeof(dir), "%s/fuzz_restart-XXXXXX",
		         access("/dev/shm", W_OK) ? "/tmp" : "/dev/shm");
		if (!mkdtemp(dir))
			abort();
		atexit(gone);
	}
	uint8_t mode = data[0];
	data++;
	size--;
	static uint8_t buf[sizeof(struct man_hdr) +
	                   8 * sizeof(struct man_region) +
	                   FARM_RESTART_KEPT_N * sizeof(struct man_kept) +
	                   sizeof(struct man_tail)];
	size_t n = size < sizeof(buf) ? size : sizeof(buf);
	memcpy(buf, data, n);
	if ((mode & 1) && n >= sizeof(struct man_hdr))
		n = seal(buf, n, mode);
	clear();
	if (put(FARM_MANIFEST_FILE, buf, n))
		return 0;
	static struct farm_restart rs;
	memset(&rs, 0, sizeof(rs));
	snprintf(rs.dir, sizeof(rs.dir), "%s", dir);
	snprintf(rs.cluster, sizeof(rs.cluster), "/farm");
	rs.me = 1;
	rs.region_size = FZ_REGION;
	struct farm_config cfg = {.machine_id = 1};
	char err[512];
	/* What a restart may hear from its manifest: accepted, damaged,
	 * another cluster's or machine's, or another build's; on tmpfs, no
	 * I/O error. */
	int rc = man_read(&rs, &cfg, err, sizeof(err));
	if (rc && rc != FARM_ECORRUPT && rc != -EXDEV && rc != -EPROTO &&
	    rc != -ENOMEM)
		abort();
	if (rc == 0) {
		static uint8_t region[FZ_REGION];
		memset(region, 0, sizeof(region));
		memcpy(region, data, size < 16 ? size : 16);
		for (uint32_t i = 0; i < rs.old.nregions; i++) {
			if ((mode & 16) && name_ok(rs.old_regs[i].file))
				put(rs.old_regs[i].file, region,
				    (mode & 32) ? FZ_REGION - 64 : FZ_REGION);
			/* A region file is sound or damaged (missing,
			 * wrong size, not its allocator header). */
			int crc = check_region(&rs, &rs.old_regs[i], err,
			                       sizeof(err));
			if (crc && crc != FARM_ECORRUPT)
				abort();
		}
	}
	free(rs.old_regs);
	return 0;
}
