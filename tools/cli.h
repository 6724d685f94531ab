/* What every `ringkv` subcommand shares in how it talks to the user: the
 * exit-status rule, library messages in the user's terms, and the check of
 * an input file named on the command line. */
#ifndef RKV_TOOLS_CLI_H
#define RKV_TOOLS_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <cjson/cJSON.h>

#include "ringkv.h"

/* The exit-status rule of every subcommand (README "Exit status", `ringkv
 * help`):
 *   0  done (for replay and inspect: every file passed);
 *   1  a failure at run time: the work started and a library call, the GPU,
 *      memory or a write failed, or the work found a fault (replay: a
 *      comparison failed; inspect: a snapshot is invalid);
 *   2  refused before any work: an unknown command or option, an option
 *      given twice (cli_parse_options), a bad value,
 *      an input named on the command line that is missing, unreadable, not
 *      a regular file (cli_check_input_file), not of its kind or not
 *      matching the other options, an output path that cannot be written or
 *      names an existing file that is not a regular one, a run too big for
 *      the memory available, or
 *      --backend cuda where no GPU is seen.
 * "Not of its kind" is judged on what a file starts with, before any work:
 * a trace whose first record is not a trace record, a manifest that is not
 * a JSON object with "cases", a snapshot that is not a safetensors file of
 * the ringkv format, or too short to be a safetensors file at all
 * (cli_check_snapshot_kind), an image that does not
 * decode. A file of its kind that goes wrong later (a trace cut short, a
 * snapshot with a bad checksum) is a fault the work found: 1 (replay,
 * inspect), or 2 where it is checked before any work (rollout --resume). */
#define CLI_EXIT_OK 0
#define CLI_EXIT_FAILURE 1
#define CLI_EXIT_USAGE 2

/* The rule in words, for the help texts (one paragraph, ends in '\n'). */
extern const char CLI_EXIT_RULE[];

/* rkv_last_error() in the user's terms: without the library's leading
 * "rkv_function: " (the C call a command-line user never made), and then
 * without a leading "PATH: " when path is not NULL and the message starts
 * with it (the caller names the file itself; the library shows a path
 * escaped, as rkv_tool_shown does). Points into rkv_last_error's
 * thread-local buffer. Every text from outside the program that a command
 * prints, a file name or an argument from the command line included, is
 * printed escaped (rkv_tool_shown, escape.h): the library's messages
 * escape theirs. */
const char *cli_lib_detail(const char *path);

/* A refusal of the command line (exit status 2, CLI_EXIT_USAGE): prints
 * "ringkv CMD: MESSAGE" (printf-style) and the pointer to 'ringkv CMD --help'
 * on stderr; returns CLI_EXIT_USAGE. */
int cli_refuse(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* An input file named on the command line (`what` names it for the user,
 * e.g. "--resume" or "snapshot"): it exists, is a regular file (after
 * symbolic links) and can be opened for reading; never blocks (a named pipe
 * is refused before any open). 0, or -1 with "WHAT 'PATH': no such file"
 * (or "is a folder, not EXPECTED", "is a named pipe (FIFO), not EXPECTED",
 * or the system's reason) in err. */
int cli_check_input_file(const char *what, const char *path, const char *expected, char *err,
                         size_t n);

/* Whether the readable file at path is a ringkv snapshot at all (the rule
 * above: an input not of its kind is refused, 2): a safetensors file (an
 * 8-byte little-endian header length, then a JSON header that starts with
 * '{'), and, when that header parses, one whose __metadata__.format is
 * "ringkv-snapshot" (docs/snapshot-format.md). A file shorter than the
 * shortest safetensors file (10 bytes: the length and "{}") is not one:
 * nothing in it says it is (a 3-byte text, an empty file). A file whose
 * header is cut or does not parse passes: it is a snapshot gone wrong, the
 * library's full check says how (exit 1). 0, or -1 with "WHAT 'PATH' is not
 * a ringkv snapshot: ..." in err. */
int cli_check_snapshot_kind(const char *what, const char *path, char *err, size_t n);

/* ---- what the machine gave a command --------------------------------- */

/* The machine's load when a command starts (`rollout` and `bench` print it
 * beside their wall and CPU time, so that a busy machine can be told from
 * a slow library): the 1-, 5- and 15-minute load averages (getloadavg:
 * runnable and waiting threads, averaged) and the CPUs online to compare
 * them with. */
typedef struct cli_load {
    double avg[3]; /* 1, 5, 15 minutes; valid when known                  */
    int known;     /* getloadavg gave them (0 on a system without them)   */
    long cpus;     /* CPUs online (sysconf _SC_NPROCESSORS_ONLN); 0 unknown */
} cli_load;

void cli_load_read(cli_load *l);

/* Seconds of CPU time this process has had so far: user + system, every
 * thread, from its start (getrusage RUSAGE_SELF). Beside the wall time of
 * the same span: CPU / wall is how many CPUs it kept busy on average. */
double cli_cpu_seconds(void);

/* ---- options: one table per command, one parser for all ---------------- */

/* One option of a command (a row of its table). */
typedef struct cli_option cli_option;
struct cli_option {
    const char *name; /* "--frames"                                            */
    int takes_value;  /* 1: --name VALUE or --name=VALUE; 0: a flag             */
    /* Reads val (NULL for a flag) into the command's options at
     * opts + field. 0, or -1 for a bad value, optionally with why (a short
     * reason, shown in parentheses) in why[n]. */
    int (*set)(const cli_option *d, const char *val, void *opts, char *why, size_t n);
    size_t field;                /* offsetof(the command's options, ...)        */
    const char *expects;         /* the expected form, for "NAME expects EXPECTS,
                                    got 'VAL'": "an integer in 1..1024"         */
    int64_t lo, hi;              /* the range (cli_set_int64, _int, _real); for
                                    cli_set_text, hi > 0: the longest value     */
    /* The names it takes, NULL-terminated: cli_set_choice's; cli_set_text's
     * are only listed when the value is missing (--preset:
     * rkv_model_preset_names). NULL: none. */
    const char *const *(*choices)(void);
};

/* The setters (cli_option.set). Each writes the type named at opts + field:
 * flag: int 1; int64: int64_t in [lo, hi]; int: int in [lo, hi]; uint64:
 * uint64_t (any); real: double in [lo, hi]; text: const char * (not empty
 * when expects is set; at most hi bytes when hi > 0); choice: int, the
 * index of val in choices; dtype: cli_dtype. Numbers: cli_parse_*. */
int cli_set_flag(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_int64(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_int(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_uint64(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_real(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_text(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_choice(const cli_option *d, const char *val, void *opts, char *why, size_t n);
int cli_set_dtype(const cli_option *d, const char *val, void *opts, char *why, size_t n);

/* A --dtype option: given or not, and the dtype. */
typedef struct cli_dtype {
    int given;
    rkv_dtype dtype;
} cli_dtype;

/* --backend's names (cli_set_choice), indexed by CLI_BACKEND_*. */
const char *const *cli_backends(void);
#define CLI_BACKEND_CPU 0
#define CLI_BACKEND_CUDA 1

/* Parses argv[1..argc) of command `cmd` against table[0..n) (n <= 64) into
 * opts. Every option may be given once: a second one is refused ("--frames
 * given twice"), as an unknown option, a flag given a value, an option
 * without its value or a bad value are. When positional is not NULL (argc
 * entries), the arguments that are not options ("-" included, and every
 * argument after "--") are collected there in order and counted in
 * *n_positional; otherwise they are refused. --help or -h prints usage on
 * stdout. Returns -1 to go on, 0 after --help, or 2 (CLI_EXIT_USAGE) after
 * "ringkv CMD: what was wrong" and "(see 'ringkv CMD --help')" on stderr. */
int cli_parse_options(const char *cmd, int argc, char **argv, const cli_option *table, size_t n,
                      void *opts, const char **positional, int *n_positional,
                      void (*usage)(FILE *f));

/* The one reading of a number on the command line, in every command: the
 * whole argument, decimal only. No sign (but '-' when lo < 0), no spaces,
 * no hexadecimal, exponent, "inf" or "nan", nothing after the digits; then
 * the range. 0 with *out, or -1 (nothing written); the caller names the
 * option and the expected form in its message. */
int cli_parse_int64(const char *s, int64_t lo, int64_t hi, int64_t *out);
/* An integer in 0..2^64-1 (digits only). */
int cli_parse_uint64(const char *s, uint64_t *out);
/* A real number in [lo, hi] (lo >= 0): decimal digits, optionally a '.'
 * and more digits ("16", "0.5"; not ".5" nor "5.": no sign, no exponent,
 * README "Exit status"). */
int cli_parse_real(const char *s, double lo, double hi, double *out);

/* "local" for a layer that keeps every frame (pinned_dilation 1), "global"
 * for a dilated one (docs/json.md: `kind`). */
const char *cli_layer_kind(const rkv_layer_spec *l);

/* The first keys of every subcommand's JSON object: "command" (its name)
 * and "ringkv_version" (this program's). 0, or -1 out of memory. */
int cli_json_header(cJSON *obj, const char *command);

/* A model's description, the same in every subcommand (docs/json.md,
 * "model"): preset (the config's name), dtype, n_layers, n_q_heads,
 * n_kv_heads, d_head, tokens_per_frame and layers[] of {layer, kind,
 * ring_frames, ring_buckets, pinned_dilation, capacity_slots (one session,
 * scratch included), memory_bytes {per_session}}. Adds them to obj. 0, or
 * -1 out of memory or for a config the library refuses. */
int cli_json_model(cJSON *obj, const rkv_model_config *cfg);

#endif
