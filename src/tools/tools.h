/* The `farm` tool's subcommands. */
#ifndef FARM_TOOLS_TOOLS_H
#define FARM_TOOLS_TOOLS_H

#include <stddef.h>
#include <stdint.h>

#include <farm/farm.h>

struct farm_config;

int farm_cmd_machine(int argc, char **argv);
int farm_cmd_cluster(int argc, char **argv, const char *self);
int farm_cmd_logs(int argc, char **argv);
struct farm_node;
/* The demo job (demo.c): register its handlers before the node starts,
 * run it once all @nmachines machines are in the view, free its state. */
int farm_demo_register(struct farm_node *node, void **state);
int farm_demo_job(struct farm_node *node, unsigned nmachines, void *state);
void farm_demo_free(void *state);

#endif
