/*
 * The ofi provider's fence: who may hold keys to this fabric's memory.
 *
 * libfabric's provider (tcp;ofi_rxm) executes a peer's RMA and atomics
 * without asking this code; all it refuses is a key it does not know. So
 * every peer process (a holder: machine id and reply address, admitted
 * at its HELLO) gets keys of its own: each registration is registered
 * again for it under tag << 32 | key, with the registration's remote
 * access, while the shared registration under the plain key has local
 * access only. Fencing a holder closes its registrations: every key it
 * knows is gone, and libfabric refuses its requests (by closing its
 * connection) before a byte moves. farm_fabric_revoke fences every
 * holder of an id and refuses its HELLOs; farm_fabric_admit lets a new
 * holder in from the one address its card gives, and fences every other
 * holder of the id (a zombie: the old holder, still running). A HELLO
 * refused is answered FARM_EFENCED: the endpoint is made, fenced, and
 * its requests fail FARM_EFENCED, as on shm and udp.
 *
 * Only with keys this code chooses (f->validate: the provider lets the
 * application pick keys); with provider keys, revoke and admit are
 * -ENOTSUP.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>

#include "fabric/ofi_int.h"
#include "util/fault.h"
#include "util/log.h"

_Atomic int farm_ofi_knob_fence = 1, farm_ofi_knob_heed_fence = 1;

static bool fence_on(void)
{
	return atomic_load(&farm_ofi_knob_fence) != 0;
}

/* Register table slot @slot (its entry filled in, f->lock held) for
 * holder @h. Slots without remote access need nothing. */
static int holder_reg(struct ofi_fabric *f, struct ofi_holder *h, unsigned slot,
                      uint64_t key)
{
	const struct ofi_tent *e = &f->table[slot];
	uint64_t fa = farm_ofi_access(e->access & ~FARM_ACCESS_LOCAL);
	if (!fa)
		return 0;
	int rc = fi_mr_reg(f->domain, (void *)(uintptr_t)e->addr, e->len, fa, 0,
	                   (uint64_t)h->tag << 32 | key, 0, &h->mr[slot], NULL);
	if (rc) {
		h->mr[slot] = NULL;
		farm_err("ofi: registering for machine %u: %s", h->id,
		         fi_strerror(-rc));
		return fi_to_errno(rc);
	}
	return 0;
}

static void holder_close(struct ofi_holder *h)
{
	for (unsigned k = 0; k < OFI_TABLE_N; k++)
		if (h->mr[k]) {
			fi_close(&h->mr[k]->fid);
			h->mr[k] = NULL;
		}
}

/* Whether table slot @k holds a registration (its key published). */
static bool slot_live(const struct ofi_fabric *f, unsigned k)
{
	uint64_t key = f->table[k].key;
	return key && key != UINT64_MAX;
}

/* A new holder (machine @id at @addr) with keys to every registration.
 * f->lock held. */
static int holder_new(struct ofi_fabric *f, uint32_t id, const char *addr,
                      struct ofi_holder **out)
{
	unsigned i = 0;
	while (i < OFI_HOLDERS && f->holders[i])
		i++;
	if (i == OFI_HOLDERS) {
		farm_err("ofi: more than %u peer processes hold keys",
		         OFI_HOLDERS);
		return -ENOSPC;
	}
	struct ofi_holder *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->id = id;
	snprintf(h->addr, sizeof(h->addr), "%s", addr);
	if (++f->tag_next == 0) /* tag 0: the plain keys */
		f->tag_next = 1;
	h->tag = f->tag_next;
	for (unsigned k = 0; k < OFI_TABLE_N; k++) {
		if (!slot_live(f, k))
			continue;
		int rc = holder_reg(f, h, k, f->table[k].key);
		if (rc) {
			holder_close(h);
			free(h);
			return rc;
		}
	}
	f->holders[i] = h;
	*out = h;
	return 0;
}

int farm_ofi_admission(struct ofi_fabric *f, uint32_t id, const char *addr,
                       uint64_t *tab_key)
{
	*tab_key = 0;
	if (!f->validate)
		return 0;
	pthread_mutex_lock(&f->lock);
	const struct ofi_peer *pe = id < OFI_MAX_PEERS ? &f->peers[id] : NULL;
	if (pe && fence_on() &&
	    (pe->revoked ||
	     (pe->admitted[0] && strcmp(pe->admitted, addr) != 0))) {
		pthread_mutex_unlock(&f->lock);
		farm_stat_add(&f->st.fenced, 1);
		return FARM_EFENCED;
	}
	struct ofi_holder *h = NULL;
	for (unsigned i = 0; i < OFI_HOLDERS && !h; i++)
		if (f->holders[i] && f->holders[i]->id == id &&
		    strcmp(f->holders[i]->addr, addr) == 0)
			h = f->holders[i];
	int rc = h ? 0 : holder_new(f, id, addr, &h);
	if (!rc)
		*tab_key = (uint64_t)h->tag << 32 | f->table[0].key;
	pthread_mutex_unlock(&f->lock);
	return rc;
}

int farm_ofi_holders_reg(struct ofi_fabric *f, unsigned slot, uint64_t key)
{
	for (unsigned i = 0; i < OFI_HOLDERS; i++) {
		if (!f->holders[i])
			continue;
		int rc = holder_reg(f, f->holders[i], slot, key);
		if (rc) {
			farm_ofi_holders_dereg(f, slot);
			return rc;
		}
	}
	return 0;
}

void farm_ofi_holders_dereg(struct ofi_fabric *f, unsigned slot)
{
	for (unsigned i = 0; i < OFI_HOLDERS; i++) {
		struct ofi_holder *h = f->holders[i];
		if (h && h->mr[slot]) {
			fi_close(&h->mr[slot]->fid);
			h->mr[slot] = NULL;
		}
	}
}

bool farm_ofi_holder_live(struct ofi_fabric *f, uint32_t id, uint32_t tag)
{
	if (!f->validate || !fence_on())
		return true;
	bool live = false;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < OFI_HOLDERS && !live; i++)
		live = f->holders[i] && f->holders[i]->id == id &&
		       f->holders[i]->tag == tag;
	pthread_mutex_unlock(&f->lock);
	return live;
}

void farm_ofi_holders_free(struct ofi_fabric *f)
{
	for (unsigned i = 0; i < OFI_HOLDERS; i++)
		if (f->holders[i]) {
			holder_close(f->holders[i]);
			free(f->holders[i]);
			f->holders[i] = NULL;
		}
}

/* A fenced holder, told so (best effort: one try, never waited for; a
 * zombie that is stopped or dead never hears it, and needs not: its keys
 * are gone). Drain lock held, f->lock not. */
static void tell_fenced(struct ofi_fabric *f, const char *addr, uint32_t id,
                        uint32_t tag)
{
	fi_addr_t fa;
	if (farm_ofi_av_lookup(f, addr, &fa))
		return;
	struct ofi_sendbuf *sb = farm_ofi_sendbuf_new(f, CTRL_FENCED, id, tag);
	if (!sb)
		return;
	ssize_t rc = fi_send(f->ep, &sb->msg, sizeof(sb->msg), NULL, fa, sb);
	if (rc)
		free(sb); /* freed at its completion otherwise */
}

/* Fence every holder of @id, or every one but the one at @keep: its
 * registrations closed, then told. Drain lock held, f->lock not. */
static void fence_holders(struct ofi_fabric *f, uint32_t id, const char *keep)
{
	struct ofi_holder *gone[OFI_HOLDERS];
	unsigned n = 0;
	pthread_mutex_lock(&f->lock);
	for (unsigned i = 0; i < OFI_HOLDERS; i++) {
		struct ofi_holder *h = f->holders[i];
		if (!h || h->id != id || (keep && strcmp(h->addr, keep) == 0))
			continue;
		holder_close(h);
		f->holders[i] = NULL;
		gone[n++] = h;
	}
	pthread_mutex_unlock(&f->lock);
	for (unsigned i = 0; i < n; i++) {
		tell_fenced(f, gone[i]->addr, id, gone[i]->tag);
		free(gone[i]);
	}
}

/* A request whose key was checked before its holder's registration was
 * closed may still land (libfabric checks a key once, when the request
 * arrives), as shm's request past its check does. */
int farm_ofi_revoke(farm_fabric *fab, uint32_t peer_id)
{
	struct ofi_fabric *f = F(fab);
	if (!f->validate)
		return -ENOTSUP;
	if (peer_id >= OFI_MAX_PEERS)
		return -ERANGE;
	if (!fence_on())
		return 0; /* testing: nothing fenced */
	pthread_mutex_lock(&f->drain);
	pthread_mutex_lock(&f->lock);
	f->peers[peer_id].revoked = true;
	pthread_mutex_unlock(&f->lock);
	fence_holders(f, peer_id, NULL);
	/* Our side too, as a queue pair torn down: posts to it fail
	 * (FARM_EPEERDEAD) until a new connect. */
	atomic_store(&f->peers[peer_id].dead, 1);
	pthread_mutex_unlock(&f->drain);
	return 0;
}

int farm_ofi_admit(farm_fabric *fab, uint32_t peer_id, const char *addr)
{
	struct ofi_fabric *f = F(fab);
	struct sockaddr_storage ss;
	socklen_t sl;
	if (!f->validate)
		return -ENOTSUP;
	if (peer_id >= OFI_MAX_PEERS)
		return -ERANGE;
	if (strlen(addr) >= sizeof(f->peers[0].admitted) ||
	    farm_ofi_parse_addr(addr, &ss, &sl))
		return -EINVAL;
	bool any = FARM_FAULT_SWITCH(FARM_FP_FABRIC_ADMIT_ANY) || !fence_on();
	pthread_mutex_lock(&f->drain);
	pthread_mutex_lock(&f->lock);
	struct ofi_peer *pe = &f->peers[peer_id];
	/* testing (any): no address, every holder let in */
	snprintf(pe->admitted, sizeof(pe->admitted), "%s", any ? "" : addr);
	pe->revoked = false;
	pthread_mutex_unlock(&f->lock);
	if (!any)
		fence_holders(f, peer_id, addr);
	pthread_mutex_unlock(&f->drain);
	return 0;
}

/* Target @from fenced our holder @tag there: our endpoints to it with
 * that tag fail FARM_EFENCED from now on. Drain lock held. */
void farm_ofi_on_fenced(struct ofi_fabric *f, uint32_t from, uint32_t tag)
{
	farm_stat_add(&f->st.fences_in, 1);
	if (!atomic_load(&farm_ofi_knob_heed_fence))
		return; /* testing: a zombie that did not hear it */
	for (unsigned k = 0; k < OFI_MAX_EPS; k++) {
		struct ofi_ep *ep = f->eps[k];
		if (ep && ep->base.peer == from && ep->tag == tag && tag)
			atomic_store(&ep->fenced, true);
	}
}
