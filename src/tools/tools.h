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
int farm_cmd_stats(int argc, char **argv);
int farm_cmd_leave(int argc, char **argv);
int farm_cmd_status(int argc, char **argv);
/* For stats and status (stats.c): load a machine's configuration file and
 * the environment (messages to stderr, as "farm @cmd: ..."), and ask the
 * control socket in @dir (failures reported the same way; *@reply is
 * malloc'ed on success). */
int farm_tool_config(const char *cmd, const char *path, struct farm_config *c);
int farm_tool_ctl(const char *cmd, const char *dir, const char *req,
                  int timeout_ms, char **reply);
/* For the tools that take --dir or --config (stats.c): ask the control
 * socket of the machine in @dir, or of the one @config describes (its
 * data_dir), as farm_tool_ctl. */
int farm_tool_ctl_at(const char *cmd, const char *dir, const char *config,
                     const char *req, int timeout_ms, char **reply);
struct farm_node;
/* The demo job (demo.c): register its handlers before the node starts,
 * run it once all @nmachines machines are in the view, free its state. */
int farm_demo_register(struct farm_node *node, void **state);
int farm_demo_job(struct farm_node *node, unsigned nmachines, void *state);
void farm_demo_free(void *state);

#endif
