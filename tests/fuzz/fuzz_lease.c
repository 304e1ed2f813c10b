/*
 * libFuzzer target for lease messages (src/recovery/lease.c): UDP
 * datagrams from any sender, taken as the lease thread takes them (a
 * datagram of another size is refused; the rest go to handle_msg, then
 * the thread's tick). The first 9 input bytes set this machine's role
 * (member or configuration manager, with or without a configuration) and
 * the clock; then each datagram is [length][bytes]. Besides memory
 * safety: the serve word (until when this machine may serve reads) never
 * moves back, whatever arrives, and nothing but a lapse is a suspicion of
 * a machine that is not a peer.
 */
#include "fuzz_quiet.h"
#include "recovery/lease.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void setup(farm_lease *l, uint8_t mode)
{
	memset(l, 0, sizeof(*l));
	l->a.self_id = 1;
	l->lease_ns = 10000000ull; /* 10 ms */
	l->sock = -1;              /* replies go nowhere (sendto fails) */
	l->evfd = -1;
	pthread_mutex_init(&l->mu, NULL);
	pthread_mutex_init(&l->probe_mu, NULL);
	pthread_cond_init(&l->probe_cv, NULL);
	l->serve = &l->own_serve;
	l->have_config = mode & 1;
	l->cm = (mode & 2) ? 1 : 2; /* the CM: this machine or machine 2 */
	l->config_id = 5;
	l->cm_since = 4;
	l->npeers = 3;
	for (unsigned i = 0; i < l->npeers; i++) {
		l->peers[i].id = i + 1;
		l->peers[i].sa.sin_family = AF_INET;
		l->peers[i].sa.sin_port = htons((uint16_t)(40000 + i));
		l->peers[i].sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	}
	l->nprobe = 2;
	l->probe_ids[0] = 2;
	l->probe_ids[1] = 3;
	l->probe_nonce = 77;
	l->muted = (mode & 4) != 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 9)
		return 0;
	static farm_lease l;
	setup(&l, data[0]);
	uint64_t now;
	memcpy(&now, data + 1, 8);
	now >>= 8; /* far from wrapping, as CLOCK_MONOTONIC is */
	data += 9;
	size -= 9;
	uint64_t serve = atomic_load(l.serve);
	struct sockaddr_in from = {.sin_family = AF_INET};
	while (size) {
		size_t n = data[0];
		data++;
		size--;
		if (n > size)
			n = size;
		struct lease_msg m;
		memset(&m, 0, sizeof(m));
		memcpy(&m, data, n < sizeof(m) ? n : sizeof(m));
		data += n;
		size -= n;
		struct events ev = {0};
		l.st.received++;
		if (n != sizeof(m))
			l.st.refused++;
		else
			handle_msg(&l, &m, &from, now, &ev);
		now += m.pad; /* time passes between datagrams */
		(void)tick(&l, now, &ev);
		for (unsigned i = 0; i < ev.nsuspect; i++)
			if (!find_peer(&l, ev.suspect[i]))
				abort(); /* suspected a machine it does not know
				          */
		uint64_t s = atomic_load(l.serve);
		if (s < serve)
			abort(); /* the serve word moved back */
		serve = s;
	}
	pthread_cond_destroy(&l.probe_cv);
	pthread_mutex_destroy(&l.probe_mu);
	pthread_mutex_destroy(&l.mu);
	return 0;
}
