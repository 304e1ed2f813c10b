/*
 * A machine's control socket (ctl.c): a unix stream socket, `ctl.sock` in
 * the machine's data directory (mode 0600; only its user and root are
 * answered), served by one thread of its own that sleeps in poll. A
 * client sends one request line and reads the answer until the machine
 * closes the connection; every answer is whole lines (the last one ends
 * with its newline too), so that a client tells a machine that went away
 * mid-answer from one that answered:
 *
 *   stats             the counters as text: "# machine ..." then
 *                     "<section>.<name> <value>" lines
 *   stats prometheus  the same in Prometheus' text exposition format
 *   regions           "machine <id>", "configuration <id>", "regions <n>",
 *                     then "region <id> primary|backup|filling
 *                     <replica>..." per region this machine holds, by id
 *                     (filling: a backup data recovery is still copying;
 *                     its replicas in the machine's view, primary first)
 *   leave [MS]        the graceful leave (farm_node_leave, MS default
 *                     300000): "left" once the configuration without
 *                     this machine is applied, after the handoff
 *   help              the requests
 *
 * Anything else (unknown, longer than 128 bytes, not one printable line,
 * not sent within 1 s) gets one "error <reason>" line and is counted
 * (ctl.bad_requests). One connection is served at a time; each has 1 s to
 * send its request and 1 s to take the answer. `farm stats`, `farm status`
 * and `farm leave` are the clients (src/tools). Internal; not installed.
 */
#ifndef FARM_NODE_CTL_H
#define FARM_NODE_CTL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <farm/node.h>

#define FARM_CTL_SOCKET "ctl.sock"

struct farm_ctl;
struct farm_ctl_out; /* an answer being written */

/* One counter of a stats struct: its name, what it counts, where. */
struct farm_ctl_field {
	const char *name;
	const char *help;
	size_t off; /* of a uint64_t in the struct */
	bool gauge; /* a level (goes up and down), not a counter */
};
#define FARM_CTL_COUNTER(type, field, help)                \
	{                                                  \
#field, help, offsetof(type, field), false \
	}
#define FARM_CTL_GAUGE(type, field, help)                 \
	{                                                 \
#field, help, offsetof(type, field), true \
	}

/* Add the @n fields of @st (a struct the fields describe) under @section
 * ("msg", "kv", ...: lower case, digits, '_'). */
void farm_ctl_put(struct farm_ctl_out *o, const char *section,
                  const struct farm_ctl_field *f, unsigned n, const void *st);

/*
 * Counters of a layer above the node (the KV store) in `stats`: @fn runs
 * on the control thread, under the control socket's lock, for each stats
 * request until farm_ctl_remove(@s) or farm_node_close. @s stays the
 * caller's (it is linked, not copied).
 */
struct farm_ctl_source {
	void (*fn)(void *ctx, struct farm_ctl_out *o);
	void *ctx;
	struct farm_ctl_source *next; /* the control socket's */
	struct farm_ctl *ctl;         /* NULL: not added, or removed */
};
void farm_ctl_add(struct farm_ctl *c, struct farm_ctl_source *s);
/* Remove @s (nothing when it is not added, or the node closed). */
void farm_ctl_remove(struct farm_ctl_source *s);
/* Testing, fault-injection builds only (else -ENOTSUP): farm_ctl_remove
 * without the lock while @on, so that it can return while an answer still
 * calls the source (the bug test_ctl must catch). */
int farm_ctl_testing_unlocked_remove(bool on);

/* The node's side: open the socket in @data_dir and start its thread
 * (NULL on failure, with a warning: the machine runs without one), and
 * stop, unlink and free it. */
struct farm_ctl *farm_ctl_open(farm_node *n, const char *data_dir);
void farm_ctl_close(struct farm_ctl *c);
/* Hold off answers (which read the layers' counters) while a loop
 * detaches from the transactions (node.c). A precaution only now: the
 * transactions' counters are per loop index in the manager
 * (farm_txm_stats_read reads no loop's own state). NULL is fine. */
void farm_ctl_lock(struct farm_ctl *c);
void farm_ctl_unlock(struct farm_ctl *c);

/*
 * farm_ctl_request() - the client: send @request to the control socket
 * in @data_dir and return the whole answer, NUL-terminated, in *@reply
 * (malloc'ed; its length without the NUL in *@len when non-NULL), within
 * @timeout_ms. Returns 0; -ENOENT (no socket there: no machine runs in
 * that directory); -ECONNREFUSED (a socket nobody serves: the machine
 * died); -ECONNRESET (the connection ended before a whole answer: nothing,
 * or a last line without its newline; the machine exited, crashed or gave
 * up sending); -ETIMEDOUT; -EPROTO (the machine answered "error ..."; the
 * answer is still returned); -EMSGSIZE (an answer over 16 MiB); -errno.
 * *@reply is set (never empty, ending with a newline) on 0 and -EPROTO
 * only.
 */
int farm_ctl_request(const char *data_dir, const char *request, char **reply,
                     size_t *len, int timeout_ms);

#endif
