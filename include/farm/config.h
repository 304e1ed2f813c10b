/*
 * libfarm configurations built in memory: the same keys, values and checks
 * as the configuration file (docs/config.md), set one by one by a program
 * instead of read from a file. For programs that make their machines'
 * configurations themselves (tests, benchmarks, an application that keeps
 * its settings elsewhere):
 *
 *   farm_conf *c;
 *   if (farm_conf_new(&c)) ...                   (the file's defaults)
 *   if (farm_conf_set(c, "machine_id", "0") ||
 *       farm_conf_set(c, "data_dir", "/dev/shm/m0")) ...
 *                          farm_conf_error(c) says what was wrong
 *   rc = farm_node_open_conf(c, &node);          (c can be freed after)
 *   farm_conf_free(c);
 *
 * Unlike farm_node_open_file, no FARM_<KEY> environment override applies:
 * the program said every value itself. Errors are negative codes
 * (farm_strerror()). A farm_conf is not thread-safe; one thread at a time.
 */
#ifndef FARM_CONFIG_H
#define FARM_CONFIG_H

#include <farm/error.h>
#include <farm/node.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct farm_conf farm_conf;

/*
 * farm_conf_new() - a configuration holding every key's default (what an
 * empty configuration file gives). Returns 0 and it in *@out; -EINVAL
 * (@out NULL); -ENOMEM.
 */
FARM_API FARM_MUST_CHECK int farm_conf_new(farm_conf **out);

/*
 * farm_conf_set() - set @key to @value as the line "@key = @value" of a
 * configuration file would (docs/config.md: the keys, their units and
 * bounds); `peer` and `peer_domain` add one more entry each call. Returns
 * 0; on error @c is left as it was and farm_conf_error(@c) says why:
 * -EINVAL (NULL arguments, an unknown key, a malformed value), -ERANGE (a
 * number outside the key's bounds), -E2BIG (more peers than a cluster
 * has machines).
 */
FARM_API FARM_MUST_CHECK int farm_conf_set(farm_conf *c, const char *key,
                                           const char *value);

/*
 * farm_conf_check() - whether @c as a whole can open a machine (what
 * farm_node_open_conf checks first: a machine id, a data directory, keys
 * that agree with each other). Returns 0, or -EINVAL with the reason in
 * farm_conf_error(@c).
 */
FARM_API FARM_MUST_CHECK int farm_conf_check(farm_conf *c);

/* The reason the last failed call on @c gave ("" when none failed yet,
 * "NULL configuration" for NULL). Valid until the next call on @c. */
FARM_API const char *farm_conf_error(const farm_conf *c);

/* Free @c (NULL is fine). Machines opened from it keep their own copy. */
FARM_API void farm_conf_free(farm_conf *c);

/*
 * farm_node_open_conf() - open a machine from @c, as farm_node_open_file
 * does from a file (include/farm/node.h: what opening does, and the steps
 * after it). @c is only read; it can be freed or reused at once. Returns
 * 0 and the machine in *@out; -EINVAL for NULL arguments or a
 * configuration farm_conf_check refuses (the reason in
 * farm_conf_error(@c) and logged); or the first failing layer's code
 * (logged).
 */
FARM_API FARM_MUST_CHECK int farm_node_open_conf(farm_conf *c, farm_node **out);

#ifdef __cplusplus
}
#endif
#endif /* FARM_CONFIG_H */
