/* `ringkv inspect FILE...`: validates snapshot files (docs/snapshot-format.md)
 * and prints what each holds (--json: docs/json.md). Exit status (cli.h) 0
 * when every file is valid, 1 when one is not (the reason goes to stderr:
 * truncated, corrupted header or data, unsupported version, I/O), 2 for a
 * bad option or a FILE that is missing, cannot be read or is not a snapshot
 * at all, one too short to be a safetensors file included
 * (cli_check_snapshot_kind; then no file is inspected). Texts from the file (the writer's version, the
 * model's name, the request id: any bytes) are printed escaped, in text and
 * in JSON (tools/escape.h); the library's messages escape file bytes
 * themselves. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "commands.h"
#include "escape.h"
#include "json_out.h"
#include "ringkv.h"

/* The texts of a snapshot, escaped for printing. */
typedef struct texts {
    char version[4 * sizeof(((rkv_snapshot_info *)0)->ringkv_version) + 1];
    char model[4 * RKV_MAX_NAME + 1];
    char request_id[4 * RKV_MAX_REQUEST_ID + 1];
} texts;

static void escape_texts(const rkv_snapshot_info *in, texts *t) {
    rkv_tool_escape(t->version, sizeof t->version, in->ringkv_version);
    rkv_tool_escape(t->model, sizeof t->model, in->config.name);
    rkv_tool_escape(t->request_id, sizeof t->request_id, in->request_id);
}

static void usage(FILE *f) {
    fprintf(f,
            "usage: ringkv inspect [--json] FILE...\n"
            "\n"
            "Validates ringkv session snapshots (safetensors files written by 'ringkv\n"
            "rollout --snapshot-out' or a program's session save) and prints what they hold:\n"
            "the model geometry, the saved clock (the next frame is last_committed + 1),\n"
            "the request id, sizes and both XXH3-64 checksums. Every byte is checked:\n"
            "header length, JSON header, format version, header checksum, tensor table,\n"
            "data checksum and the written bits.\n"
            "\n"
            "  --json   one JSON object per file on stdout (docs/json.md)\n"
            "\n"
            "Texts from the file (model name, request id, writer's version) are shown\n"
            "with bytes outside printable ASCII as \\xNN and a backslash as \\\\.\n"
            "\n"
            "Exit status: 0 all valid; 1 a snapshot is invalid (the reason on stderr:\n"
            "truncated, corrupted, another version); 2 a bad option or a FILE that is\n"
            "missing, cannot be read or is not a snapshot at all: not a safetensors file\n"
            "(one shorter than 10 bytes cannot be one), or one of another format (nothing\n"
            "is inspected).\n");
}

static void print_text(const char *path, const rkv_snapshot_info *in) {
    const rkv_model_config *c = &in->config;
    texts t;
    escape_texts(in, &t);
    printf("%s: valid ringkv snapshot (format %" PRId64 ", written by ringkv %s)\n",
           rkv_tool_shown(path),
           in->format_version, t.version[0] ? t.version : "?");
    printf("  model:      %s: %" PRId64 " layers, n_q_heads %" PRId64 ", n_kv_heads %" PRId64
           ", d_head %" PRId64 ", tokens_per_frame %" PRId64 ", %s\n",
           t.model[0] ? t.model : "(unnamed)", c->n_layers, c->n_q_heads, c->n_kv_heads,
           c->d_head, c->tokens_per_frame, rkv_dtype_name(c->dtype));
    printf("  request:    '%s' (session %" PRId64 " when saved)\n", t.request_id,
           in->source_session);
    if (in->last_committed == INT64_MAX)
        printf("  clock:      last committed frame %" PRId64 " (the largest clock: no next "
               "frame)\n",
               in->last_committed);
    else if (in->last_committed >= 0)
        printf("  clock:      last committed frame %" PRId64 "; the next frame is %" PRId64 "\n",
               in->last_committed, in->last_committed + 1);
    else
        printf("  clock:      none (no frame committed since the session was claimed or "
               "reset); the next frame may be any\n");
    printf("  bytes:      %" PRIu64 " (8 + header %" PRIu64 " + data %" PRIu64 ")\n",
           in->file_bytes, in->header_bytes, in->data_bytes);
    printf("  checksums:  header_xxh3 %016" PRIx64 ", data_xxh3 %016" PRIx64 " (verified)\n",
           in->header_xxh3, in->data_xxh3);
    printf("  layers:     ring_frames / ring_buckets / pinned_dilation, capacity (slots)\n");
    for (int64_t i = 0; i < c->n_layers; i++) {
        const rkv_layer_spec *s = &c->layers[i];
        printf("    %3" PRId64 ": %3" PRId64 " / %3" PRId64 " / %2" PRId64 "  %s  C %" PRId64
               "\n",
               i, s->ring_frames, s->ring_buckets, s->pinned_dilation,
               s->pinned_dilation > 1 ? "global" : "local ",
               (s->ring_frames + 1) * c->tokens_per_frame);
    }
}

/* Prints obj on one line and frees it; 0, or -1 out of memory. */
static int print_line(cJSON *obj, int ok) {
    char *text = ok ? cli_json_print(obj, 0) : NULL;
    if (text) puts(text);
    else fprintf(stderr, "ringkv inspect: out of memory\n");
    cJSON_free(text);
    cJSON_Delete(obj);
    return text ? 0 : -1;
}

static int print_json(const char *path, const rkv_snapshot_info *in) {
    char header_hex[17], data_hex[17];
    snprintf(header_hex, sizeof header_hex, "%016" PRIx64, in->header_xxh3);
    snprintf(data_hex, sizeof data_hex, "%016" PRIx64, in->data_xxh3);
    texts t;
    escape_texts(in, &t);
    cJSON *j = cJSON_CreateObject();
    int ok = j && !cli_json_header(j, "inspect") && cJSON_AddStringToObject(j, "file", path) &&
             cJSON_AddBoolToObject(j, "valid", 1) &&
             cJSON_AddNumberToObject(j, "format_version", (double)in->format_version) &&
             cJSON_AddStringToObject(j, "writer_version", t.version) &&
             cJSON_AddStringToObject(j, "request_id", t.request_id) &&
             cJSON_AddNumberToObject(j, "session", (double)in->source_session) &&
             cJSON_AddNumberToObject(j, "last_committed", (double)in->last_committed) &&
             !cli_json_model(j, &in->config) &&
             cJSON_ReplaceItemInObject(j, "preset", cJSON_CreateString(t.model)) &&
             cJSON_AddNumberToObject(j, "file_bytes", (double)in->file_bytes) &&
             cJSON_AddNumberToObject(j, "header_bytes", (double)in->header_bytes) &&
             cJSON_AddNumberToObject(j, "data_bytes", (double)in->data_bytes) &&
             cJSON_AddStringToObject(j, "header_xxh3", header_hex) &&
             cJSON_AddStringToObject(j, "data_xxh3", data_hex);
    return print_line(j, ok);
}

static int print_json_invalid(const char *path, rkv_status st) {
    cJSON *j = cJSON_CreateObject();
    int ok = j && !cli_json_header(j, "inspect") && cJSON_AddStringToObject(j, "file", path) &&
             cJSON_AddBoolToObject(j, "valid", 0) &&
             cJSON_AddStringToObject(j, "status", rkv_status_str(st)) &&
             cJSON_AddStringToObject(j, "error", cli_lib_detail(path));
    return print_line(j, ok);
}

static const cli_option OPTIONS[] = {
    {"--json", 0, cli_set_flag, 0, NULL, 0, 0, NULL},
};

int rkv_cmd_inspect(int argc, char **argv) {
    int json = 0, n_files = 0, bad = 0;
    /* the FILE arguments, in order (everything after "--" is a file) */
    const char **files = malloc((size_t)argc * sizeof *files);
    if (!files) {
        fprintf(stderr, "ringkv inspect: out of memory\n");
        return CLI_EXIT_FAILURE;
    }
    int rc = cli_parse_options("inspect", argc, argv, OPTIONS, 1, &json, files, &n_files, usage);
    if (rc < 0 && !n_files) {
        fprintf(stderr, "ringkv inspect: no file given\n\n");
        usage(stderr);
        rc = CLI_EXIT_USAGE;
    }
    /* every FILE must exist, be readable and be a snapshot at all before any
     * is inspected (cli.h: an input not of its kind is refused, 2); a
     * snapshot gone wrong is inspect's verdict (1) */
    char err[4600];
    for (int i = 0; i < n_files && rc < 0; i++)
        if (cli_check_input_file("snapshot", files[i], "a snapshot file", err, sizeof err) ||
            cli_check_snapshot_kind("file", files[i], err, sizeof err)) {
            fprintf(stderr, "ringkv inspect: %s\n", err);
            rc = CLI_EXIT_USAGE;
        }
    for (int i = 0; i < n_files && rc < 0; i++) {
        const char *path = files[i];
        rkv_snapshot_info info = RKV_SNAPSHOT_INFO_INIT;
        rkv_status st = rkv_snapshot_inspect(path, NULL, 0, &info);
        if (st != RKV_OK) {
            fprintf(stderr, "ringkv inspect: %s: invalid: %s\n", rkv_tool_shown(path),
                    cli_lib_detail(path));
            if (json && print_json_invalid(path, st)) rc = CLI_EXIT_FAILURE;
            bad = 1;
            continue;
        }
        if (json) {
            if (print_json(path, &info)) rc = CLI_EXIT_FAILURE;
        } else {
            print_text(path, &info);
        }
    }
    fflush(stdout);
    free(files);
    return rc >= 0 ? rc : bad ? CLI_EXIT_FAILURE : CLI_EXIT_OK;
}
