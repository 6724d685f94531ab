/* Subcommands of the `ringkv` tool. Each takes the arguments after its name
 * (argv[0] is the subcommand name) and returns the process exit status. */
#ifndef RKV_TOOLS_COMMANDS_H
#define RKV_TOOLS_COMMANDS_H

int rkv_cmd_replay(int argc, char **argv);  /* tools/replay.c  */
int rkv_cmd_rollout(int argc, char **argv); /* tools/rollout.c */
int rkv_cmd_plan(int argc, char **argv);    /* tools/plan.c    */
int rkv_cmd_bench(int argc, char **argv);   /* bench/bench.c   */
int rkv_cmd_inspect(int argc, char **argv); /* tools/inspect.c */

#endif
