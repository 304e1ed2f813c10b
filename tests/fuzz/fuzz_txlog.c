/*
 * libFuzzer target for log records at rest: the log file a whole-cluster
 * restart checks and replays (farm_txlog_check, and the record walk and
 * region lists of src/txn/restart.c) and `farm logs` scans
 * (farm_txn_log_record_at, src/txn/log.c). The decoders must refuse damage
 * with FARM_ECORRUPT and never read outside the file.
 *
 * The first byte picks how the input becomes a file. Raw (bit 0 clear):
 * the input is the whole file, superblock included. Sealed (bit 0 set):
 * the harness writes a valid superblock for 1 or 2 coordinators of one
 * thread with 64 KiB rings, and the input is a list of records, each
 * [type, nobj, nreg, lines, flags, length in 64-byte units] + body bytes,
 * that the harness lays into the rings with their checksum and trailer
 * (unless flags say to spoil one), so the fuzzer spends its time on the
 * records' contents rather than on guessing checksums.
 */
#include <stdio.h>

#include "fuzz_quiet.h"
#include "txn/log.c"
#include "txn/restart.c"

#define FZ_R (64u << 10)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Cleared by seal() when it lays a record that a sound log would not
 * hold: a spoiled checksum, a type it does not seal, or counts of objects
 * and regions that do not fit the record's length. */
static bool sound;

static size_t seal(uint8_t *ring, const uint8_t **data, size_t *size,
                   uint64_t lap)
{
	size_t off = 0;
	while (*size >= 6 && off < FZ_R) {
		const uint8_t *d = *data;
		uint16_t type = (uint16_t)(d[0] % 8);
		uint32_t len = 64u * (1u + d[5] % 32u);
		if (len > FZ_R - off)
			len = (uint32_t)(FZ_R - off);
		struct rec_hdr h = {.len = len,
		                    .type = type,
		                    .nobj = d[1],
		                    .nreg = d[2],
		                    .txid = (uint64_t)d[3] << 56 | d[4],
		                    .cseq = d[3],
		                    .lw = d[4]};
		*data += 6;
		*size -= 6;
		size_t body = len - sizeof(h);
		if (body > *size)
			body = *size;
		memcpy(ring + off + sizeof(h), *data, body);
		*data += body;
		*size -= body;
		memcpy(ring + off, &h, sizeof(h));
		if (type < REC_LOCK || type > REC_PAD || (d[4] & 0x80) ||
		    (type != REC_PAD && rec_size(h.nobj, 0, h.nreg) > len))
			sound = false;
		if (type >= REC_LOCK && type <= REC_PAD) {
			uint64_t so = rec_sum_off(type, len);
			uint64_t sum = rec_sum(ring + off, so);
			if (d[4] & 0x80)
				sum ^= 1; /* damaged since it landed */
			memcpy(ring + off + so, &sum, 8);
			uint64_t tr = lap * FZ_R + off + 1;
			memcpy(ring + off + (type == REC_PAD ? 56 : len - 8),
			       &tr, 8);
		}
		off += len;
	}
	return off;
}

static void count_rec(void *ctx, const struct farm_txlog_rec *r)
{
	(void)r;
	(*(int *)ctx)++;
}

/* `farm logs`' reader on the same bytes, from a file as it reads them (on
 * tmpfs, so that a run costs no disk I/O): it answers with the records it
 * found, "not a log file" or FARM_ECORRUPT, never anything else, and
 * reports as many records as it returned. */
static void scan(const uint8_t *base, size_t len)
{
	static char path[64];
	if (!path[0])
		snprintf(path, sizeof(path), "/dev/shm/fuzz_txlog.%d",
		         (int)getpid());
	int fd = open(path, O_CREAT | O_TRUNC | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		return; /* no tmpfs: the in-memory walk still runs */
	bool whole = write(fd, base, len) == (ssize_t)len;
	/* The restart's check by the descriptor answers as the check of the
	 * same bytes in memory. */
	char e1[512], e2[512];
	if (whole &&
	    farm_txlog_check_fd(fd, len, "fuzz", e1, sizeof(e1)) !=
	            farm_txlog_check(base, len, "fuzz", e2, sizeof(e2)))
		abort();
	close(fd);
	int seen = 0;
	int rc = whole ? farm_txlog_scan_file(path, count_rec, &seen, NULL) : 0;
	unlink(path);
	if (rc < 0 && rc != FARM_ECORRUPT && rc != -ENOMSG)
		abort(); /* an answer `farm logs` does not expect */
	if (rc >= 0 && rc != seen)
		abort(); /* a count that is not the records it returned */
}

static void walk(const uint8_t *base, size_t len)
{
	char err[512];
	scan(base, len);
	if (farm_txlog_check(base, len, "fuzz", err, sizeof(err)))
		return;
	struct rs_rec *v = NULL;
	size_t n = 0, cap = 0;
	static uint64_t mark[0x40 * MAX_LOOPS];
	memset(mark, 0, sizeof(mark));
	if (collect(base, 0, &v, &n, &cap, mark, "fuzz", err, sizeof(err)) == 0)
		for (size_t i = 0; i < n; i++) {
			uint32_t regs[64];
			unsigned k = regs_of(&v[i], regs, 64);
			for (unsigned j = 0; j < k; j++)
				(void)covers(&v[i], regs[j]);
		}
	free(v);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (!size)
		return 0;
	uint8_t mode = data[0];
	data++;
	size--;
	if (!(mode & 1)) {
		/* An exact-size copy, so ASan sees a read past its end. */
		uint8_t *f = malloc(size ? size : 1);
		if (!f)
			return 0;
		memcpy(f, data, size);
		walk(f, size);
		free(f);
		return 0;
	}
	uint32_t M = 1 + (mode >> 1) % 2, T = 1;
	uint64_t hdr = (64 + (uint64_t)M * T * 64 + 4095) & ~4095ull;
	uint64_t total = hdr + (uint64_t)M * T * FZ_R;
	/* One buffer for every run (the file is 68 or 132 KiB), cleared
	 * where this run uses it. */
	static uint8_t *f;
	if (!f && !(f = malloc(4096 + 2 * FZ_R)))
		return 0;
	memset(f, 0, total);
	struct log_super sb = {.magic = LOG_SUPER_MAGIC,
	                       .layout = LOG_LAYOUT,
	                       .machine = (mode >> 2) % M,
	                       .M = M,
	                       .T = T,
	                       .R = FZ_R,
	                       .hdr_area = hdr,
	                       .total = total};
	memcpy(f, &sb, sizeof(sb));
	sound = true;
	for (uint32_t c = 0; c < M; c++)
		seal(f + hdr + (uint64_t)c * FZ_R, &data, &size,
		     (mode >> 3) & 3);
	walk(f, total);
	/* Every record whole, sealed and sized as a writer would: the
	 * restart's check must accept the file. */
	char err[512];
	if (sound && farm_txlog_check(f, total, "fuzz", err, sizeof(err)))
		abort();
	return 0;
}
