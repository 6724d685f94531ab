/* `ringkv replay FILE...`: replays golden operation traces (*.txt,
 * replay_trace.c) and attention-vector manifests (*.json, with the .bin of
 * the same stem beside them, replay_vectors.c) against ringkv, through the
 * public API only, and prints one PASS or FAIL line per trace or case, then
 * "N passed, M failed". The formats are those of shared/golden/README.md.
 * This file: the command, and what the two kinds share (replay.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "commands.h"
#include "escape.h"
#include "replay.h"
#include "trace.h"

void replay_pass(replay_tally *tl, const char *name, const char *detail) {
    if (detail && detail[0]) printf("PASS %s (%s)\n", rkv_tool_shown(name), detail);
    else printf("PASS %s\n", rkv_tool_shown(name));
    fflush(stdout);
    tl->passed++;
}

void replay_fail(replay_tally *tl, const char *name, const char *reason) {
    printf("FAIL %s: %s\n", rkv_tool_shown(name), reason);
    fflush(stdout);
    tl->failed++;
}

/* Writes the set slots of row[0..n) as "lo-hi,lo-hi" (or "none") into out,
 * ending in "..." when it does not fit. */
static void format_row(const uint8_t *row, int64_t n, char *out, size_t size) {
    out[0] = '\0';
    int any = 0;
    for (int64_t i = 0; i < n;) {
        if (!row[i]) {
            i++;
            continue;
        }
        int64_t j = i;
        while (j < n && row[j]) j++;
        size_t len = strlen(out);
        if (len + 48 >= size) {
            append(out, size, "...");
            return;
        }
        append(out, size, "%s%lld-%lld", any ? "," : "", (long long)i, (long long)j);
        any = 1;
        i = j;
    }
    if (!any) append(out, size, "none");
}

int replay_compare_rows(const char *what, const uint8_t *want, const uint8_t *got, int64_t n,
                        char *msg, size_t size) {
    for (int64_t i = 0; i < n; i++) {
        if ((want[i] != 0) == (got[i] != 0)) continue;
        char ew[512], gw[512];
        uint8_t *norm = malloc((size_t)n);
        format_row(want, n, ew, sizeof ew);
        if (norm) {
            for (int64_t j = 0; j < n; j++) norm[j] = got[j] != 0;
            format_row(norm, n, gw, sizeof gw);
            free(norm);
        } else {
            snprintf(gw, sizeof gw, "?");
        }
        return say(msg, size, "%s: slot %lld: expected %d, got %u; expected ranges %s, got %s",
                   what, (long long)i, want[i] != 0, (unsigned)got[i], ew, gw);
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* The command                                                               */
/* ------------------------------------------------------------------------ */

/* Prints the usage text. */
static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv replay FILE...\n\n"
            "Replays golden data against ringkv (formats: shared/golden/README.md):\n"
            "  *.txt   an operation trace: rebuilds the layer, runs every upsert and\n"
            "          reset, compares every visible row, then the whole K/V buffer\n"
            "          and the written bits\n"
            "  *.json  an attention-vector manifest (its .bin beside it): runs\n"
            "          ringkv's attention on each case with the case's vis row and\n"
            "          with its session and clock, against out_f64 and out_flex\n"
            "          (norm-wise relative error at most %g)\n\n"
            "Prints PASS or FAIL per trace or case, then 'N passed, M failed'.\n"
            "Exit status: 0 everything passed; 1 a trace or case failed (or none ran); 2 a\n"
            "bad option or a FILE that is missing, cannot be read or is not of its kind\n"
            "(nothing is replayed): a manifest (*.json) that is not a JSON object with\n"
            "\"cases\" or has no .bin beside it, a trace (any other FILE) whose first\n"
            "record is not a trace record. A trace cut short is a failure (1).\n",
            REPLAY_ATTN_TOLERANCE);
}

/* A FILE named *.json is an attention-vector manifest; any other a trace. */
static int is_manifest(const char *path) {
    const size_t n = strlen(path);
    return n >= 5 && !strcmp(path + n - 5, ".json");
}

int rkv_cmd_replay(int argc, char **argv) {
    /* the FILE arguments, in order (everything after "--" is a file) */
    const char **files = malloc((size_t)argc * sizeof *files);
    int nfiles = 0, rc = CLI_EXIT_USAGE;
    if (!files) {
        fprintf(stderr, "ringkv replay: out of memory\n");
        return CLI_EXIT_FAILURE;
    }
    const int parsed = cli_parse_options("replay", argc, argv, NULL, 0, NULL, files, &nfiles, usage);
    if (parsed >= 0) {
        rc = parsed;
        goto done;
    }
    if (nfiles == 0) {
        fprintf(stderr, "ringkv replay: no file given\n\n");
        usage(stderr);
        goto done;
    }
    /* every FILE must exist, be readable and be of its kind before any is
     * replayed: a trace whose first record is a trace record, a manifest that
     * is a JSON object with "cases" and its .bin beside it (cli.h's rule: an
     * input not of its kind is refused, 2) */
    for (int i = 0; i < nfiles; i++) {
        char err[4600];
        if (cli_check_input_file("file", files[i], "a trace or a manifest", err, sizeof err) ||
            (is_manifest(files[i]) ? replay_manifest_check(files[i], err, sizeof err)
                                   : rkv_trace_sniff(files[i], err, sizeof err))) {
            fprintf(stderr, "ringkv replay: %s\n", err);
            goto done;
        }
    }
    replay_tally tl = {0, 0};
    for (int i = 0; i < nfiles; i++) {
        if (is_manifest(files[i])) replay_manifest_file(files[i], &tl);
        else replay_trace_file(files[i], &tl);
    }
    printf("%d passed, %d failed\n", tl.passed, tl.failed);
    rc = (tl.failed == 0 && tl.passed > 0) ? CLI_EXIT_OK : CLI_EXIT_FAILURE;
done:
    free(files);
    return rc;
}
