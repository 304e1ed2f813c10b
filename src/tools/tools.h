/* The `farm` tool's subcommands. */
#ifndef FARM_TOOLS_TOOLS_H
#define FARM_TOOLS_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <farm/farm.h>

struct farm_config;

int farm_cmd_machine(int argc, char **argv);
int farm_cmd_cluster(int argc, char **argv, const char *self);
int farm_demo_job(const struct farm_config *cfg, farm_fabric *fab,
                  farm_region *region);
/* Read a machine's machine.info from its data directory (same host). */
int farm_read_machine_info(const char *dir, uint32_t *id, char *addr,
                           size_t addrlen, farm_mr_desc *desc);

#endif
