/*
 * The public ways to configure a machine (include/farm/config.h,
 * farm_node_open_file in include/farm/node.h): both end in the same
 * parsed struct farm_config, set key by key through util/config.c's
 * table, so a key means the same in a file and in memory.
 */
#include <farm/config.h>

#include "node/node.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

struct farm_conf {
	struct farm_config cfg;
	/* Scratch for farm_conf_set: a key is set here first, so a value
	 * refused half-way (a peer's address after its id) leaves cfg as it
	 * was. */
	struct farm_config next;
	char err[512];
};

int farm_conf_new(farm_conf **out)
{
	if (!out)
		return -EINVAL;
	farm_conf *c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	farm_config_defaults(&c->cfg);
	*out = c;
	return 0;
}

int farm_conf_set(farm_conf *c, const char *key, const char *value)
{
	if (!c)
		return -EINVAL;
	if (!key || !value) {
		snprintf(c->err, sizeof(c->err), "NULL key or value");
		return -EINVAL;
	}
	c->next = c->cfg;
	int rc = farm_config_set(&c->next, key, value, c->err, sizeof(c->err));
	if (!rc)
		c->cfg = c->next;
	return rc;
}

int farm_conf_check(farm_conf *c)
{
	if (!c)
		return -EINVAL;
	return farm_config_validate(&c->cfg, c->err, sizeof(c->err));
}

const char *farm_conf_error(const farm_conf *c)
{
	return c ? c->err : "NULL configuration";
}

void farm_conf_free(farm_conf *c)
{
	free(c);
}

int farm_node_open_conf(farm_conf *c, farm_node **out)
{
	if (!c || !out)
		return -EINVAL;
	int rc = farm_conf_check(c);
	if (rc) {
		farm_err("node: %s", c->err);
		return rc;
	}
	return farm_node_open(&c->cfg, out);
}

int farm_node_open_file(const char *path, farm_node **out)
{
	if (!path || !out)
		return -EINVAL;
	struct farm_config *cfg = malloc(sizeof(*cfg));
	if (!cfg)
		return -ENOMEM;
	char err[512];
	farm_config_defaults(cfg);
	int rc = farm_config_load(cfg, path, err, sizeof(err));
	if (!rc)
		rc = farm_config_apply_env(cfg, err, sizeof(err));
	if (!rc)
		rc = farm_config_validate(cfg, err, sizeof(err));
	if (rc)
		farm_err("node: %s", err);
	else
		rc = farm_node_open(cfg, out);
	free(cfg);
	return rc;
}
