#include <farm/error.h>

#include <string.h>

const char *farm_strerror(int err)
{
	switch (err) {
	case 0: return "success";
	case FARM_EPEERDEAD: return "peer machine is dead or closed";
	case FARM_EFLUSHED:
		return "request flushed: an earlier request on the endpoint "
		       "failed";
	case FARM_EREMOTE_ACCESS:
		return "remote access outside the registration or not "
		       "permitted";
	case FARM_EREMOTE_KEY: return "unknown or stale remote descriptor";
	case FARM_ELOCAL_ACCESS: return "local buffer outside its registration";
	case FARM_EINJECTED: return "failure injected by a test";
	case FARM_ENODEVICE: return "no device for this fabric provider";
	case FARM_ECORRUPT: return "malformed data from a peer";
	case FARM_ECLOSED: return "object already closed or finished";
	case FARM_EUNAVAILABLE:
		return "coordination service (ZooKeeper) unreachable";
	case FARM_ECONFLICT:
		return "transaction conflict: an object was locked or changed";
	case FARM_EVALIDATION:
		return "transaction validation failed: an object read changed";
	case FARM_EFREED: return "the object was freed";
	case FARM_ELEASE:
		return "this machine's lease lapsed: it may have been removed "
		       "from the configuration";
	case FARM_EUNKNOWN:
		return "outcome unknown: the commit was given up at its "
		       "deadline and may have committed";
	case FARM_EFENCED:
		return "access revoked: this machine was removed from the "
		       "configuration";
	}
	if (err < 0 && err > -4096) {
		/* strerrordesc_np: glibc's thread-safe, locale-free table. */
		const char *s = strerrordesc_np(-err);
		if (s)
			return s;
	}
	return "unknown libfarm error";
}
