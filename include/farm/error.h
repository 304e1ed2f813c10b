/*
 * libfarm error convention.
 *
 * Every function that can fail returns 0 (or a non-negative count) on
 * success and a negative code on failure: a negated errno value where errno
 * has a fitting one, otherwise one of the FARM_E* codes below. Completion
 * statuses of the fabric use the same codes. farm_strerror() names any code.
 */
#ifndef FARM_ERROR_H
#define FARM_ERROR_H

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define FARM_API        __attribute__((visibility("default")))
#define FARM_MUST_CHECK __attribute__((warn_unused_result))
#else
#define FARM_API
#define FARM_MUST_CHECK
#endif

/* Codes errno lacks. All are negative and below -4095 (outside errno). */
enum farm_error {
	FARM_EPEERDEAD = -10001,      /* the peer machine died or closed */
	FARM_EFLUSHED = -10002,       /* flushed: an earlier request on this
	                                 endpoint failed (verbs QP error state) */
	FARM_EREMOTE_ACCESS = -10003, /* remote range outside the registration,
	                                 or access right not granted */
	FARM_EREMOTE_KEY = -10004,    /* unknown or stale remote descriptor */
	FARM_ELOCAL_ACCESS = -10005, /* local buffer outside its registration */
	FARM_EINJECTED = -10006,     /* failure injected by a test */
	FARM_ENODEVICE = -10007,     /* no device for this provider */
	FARM_ECORRUPT = -10008,      /* malformed data from a peer */
	FARM_ECLOSED = -10009,       /* object already closed or finished */
	FARM_EUNAVAILABLE = -10010,  /* the coordination service (ZooKeeper)
	                                could not be reached in time */
	/* Transactions: why a commit aborted, and stale pointers. */
	FARM_ECONFLICT = -10011,   /* an object was locked or changed when the
	                              commit tried to lock it (retry) */
	FARM_EVALIDATION = -10012, /* an object read changed before commit
	                              (retry) */
	FARM_EFREED = -10013,      /* the object was freed (stale pointer) */
	/* Recovery. */
	FARM_EFENCED = -10014,  /* the target revoked this machine's access, or
	                           this machine knows it was removed from the
	                           configuration (not retryable) */
	FARM_ELEASE = -10015,   /* this machine's lease at the configuration
	                           manager lapsed: it serves no reads until
	                           renewed (it may have been removed) */
	FARM_EUNKNOWN = -10016, /* a blocking commit gave up at its deadline:
	                           it may have committed or may still commit
	                           (not retryable: read to learn) */
};

/* Human-readable text for any code returned by libfarm (never NULL). */
FARM_API const char *farm_strerror(int err);

#ifdef __cplusplus
}
#endif
#endif /* FARM_ERROR_H */
