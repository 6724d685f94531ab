/* The `ringkv` command: dispatches to one subcommand per file. Help and
 * version: `ringkv help [COMMAND]`, `ringkv COMMAND --help`, `ringkv
 * version`, `ringkv --version`; `--help` of help and version too. Exit
 * statuses follow one rule (cli.h); a command whose stdout could not be
 * written exits 1 saying so. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cli.h"
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
#define N_COMMANDS (sizeof COMMANDS / sizeof COMMANDS[0])

static void usage(FILE *f) {
    fprintf(f, "usage: ringkv COMMAND [OPTIONS]   (ringkv %s)\n\ncommands:\n",
            rkv_version());
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-8s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
    fprintf(f,
            "  %-8s %s\n  %-8s %s\n\n"
            "'ringkv help COMMAND' or 'ringkv COMMAND --help' describes a command's options;\n"
            "--json output is described in docs/json.md.\n\n%s",
            "help", "this text, or a command's ('ringkv help COMMAND')", "version",
            "the version (as 'ringkv --version')", CLI_EXIT_RULE);
}

static const command *find_command(const char *name) {
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (!strcmp(name, COMMANDS[i].name)) return &COMMANDS[i];
    return NULL;
}

static int unknown_command(const char *name) {
    fprintf(stderr, "ringkv: unknown command '%s'\n\n", name);
    usage(stderr);
    return CLI_EXIT_USAGE;
}

static int version(void) {
    printf("ringkv %s\n", rkv_version());
    return CLI_EXIT_OK;
}

static void version_usage(void) {
    printf("usage: ringkv version   (or ringkv --version)\n\n"
           "Prints 'ringkv VERSION', the version of the ringkv library it was built with.\n\n"
           "Exit status: 0 done; 2 an argument given (it takes none).\n");
}

static int is_help(const char *a) { return !strcmp(a, "--help") || !strcmp(a, "-h"); }

/* The command's own work; then stdout checked, so that a report that could
 * not be written (a full disk, a closed pipe) is not a silent success. */
static int dispatch(int argc, char **argv) {
    const char *a = argv[1];
    if (!strcmp(a, "--version") || !strcmp(a, "version")) {
        if (argc == 3 && is_help(argv[2])) {
            version_usage();
            return CLI_EXIT_OK;
        }
        if (argc > 2) {
            fprintf(stderr, "ringkv %s: takes no arguments (got '%s')\n", a, argv[2]);
            return CLI_EXIT_USAGE;
        }
        return version();
    }
    if (is_help(a) || !strcmp(a, "help")) {
        /* 'ringkv help', 'ringkv help help' and 'ringkv help --help': this text */
        if (argc == 2 || !strcmp(argv[2], "help") || is_help(argv[2])) {
            if (argc > 3) {
                fprintf(stderr, "usage: ringkv help [COMMAND]\n");
                return CLI_EXIT_USAGE;
            }
            usage(stdout);
            return CLI_EXIT_OK;
        }
        if (argc > 3) {
            fprintf(stderr, "usage: ringkv help [COMMAND]\n");
            return CLI_EXIT_USAGE;
        }
        if (!strcmp(argv[2], "version")) {
            version_usage();
            return CLI_EXIT_OK;
        }
        const command *c = find_command(argv[2]);
        if (!c) return unknown_command(argv[2]);
        static char help_option[] = "--help";
        char *help_argv[] = {argv[2], help_option, NULL};
        return c->run(2, help_argv); /* the command's own --help */
    }
    const command *c = find_command(a);
    if (!c) return unknown_command(a);
    return c->run(argc - 1, argv + 1);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return CLI_EXIT_USAGE;
    }
    const int rc = dispatch(argc, argv);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "ringkv %s: writing the output failed: %s\n", argv[1], strerror(errno));
        return CLI_EXIT_FAILURE;
    }
    return rc;
}
