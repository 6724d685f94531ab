/* The `ringkv` command: dispatches to one subcommand per file. */
#include <stdio.h>
#include <string.h>

#include "commands.h"
#include "ringkv.h"

typedef struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} command;

static const command COMMANDS[] = {
    {"rollout", rkv_cmd_rollout,
     "stream sessions through every layer on real frames; speed, memory, recall"},
    {"replay", rkv_cmd_replay,
     "replay golden traces and attention-vector manifests against ringkv"},
    {"plan", rkv_cmd_plan, "memory per layer and session; sessions that fit"},
    {"bench", rkv_cmd_bench, "attention and upsert speed against this machine's ceilings"},
    {"inspect", rkv_cmd_inspect, "validate session snapshot files and print what they hold"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: ringkv COMMAND [OPTIONS]   (ringkv %s)\n\ncommands:\n",
            rkv_version());
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f, "\n'ringkv COMMAND --help' describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(argv[1], "--version")) {
        printf("ringkv %s\n", rkv_version());
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof COMMANDS[0]; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].run(argc - 1, argv + 1);
    fprintf(stderr, "ringkv: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
