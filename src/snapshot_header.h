/* Private: the snapshot header codec (src/snapshot_header.c), bytes in and
 * bytes out, no I/O. src/snapshot_file.c owns the files, the data section
 * and the model. The format is docs/snapshot-format.md. */
#ifndef RKV_SNAPSHOT_HEADER_H
#define RKV_SNAPSHOT_HEADER_H

#include "internal.h"

#define RKV__SNAP_MAX_HEADER ((uint64_t)16 << 20) /* a 256-layer header is ~80 KB */

/* Who is asking, for messages: "what: name: ..." (the API call and the
 * path, or "(memory)"). */
typedef struct rkv__snap_where {
    const char *what;
    const char *name;
} rkv__snap_where;

/* One tensor of the table: layer, kind (0 K, 1 V, 2 written), byte range
 * relative to the start of the data section. */
typedef struct rkv__snap_tensor {
    int64_t layer;
    int kind;
    uint64_t begin, end;
    bool seen;
} rkv__snap_tensor;

/* What a header says, once validated. */
typedef struct rkv__snap_header {
    rkv_snapshot_info info; /* everything but data_xxh3's verification  */
    uint64_t data_offset;   /* 8 + header length                        */
    rkv__snap_tensor *t;    /* [3 * n_layers]: layer i kind k at 3i + k */
    rkv__snap_tensor **order; /* [3 * n_layers]: t by data_offsets, i.e.
                                 in file order                           */
    bool borrowed;          /* t and order belong to a template          */
    uint64_t written_xxh3;  /* session metadata only: "written_xxh3"     */
} rkv__snap_header;

/* Stage 1: the header length from the first 8 bytes of an image of
 * file_size bytes (first8 is NULL when file_size < 8). RKV_ERR_FORMAT
 * ("truncated", "corrupted header length") or RKV_OK with *n. */
rkv_status rkv__snap_header_length(const rkv__snap_where *w, const uint8_t *first8,
                                   uint64_t file_size, uint64_t *n);

/* Validates the n header bytes h that follow first8 in an image of
 * file_size bytes: JSON, format and version (before the checksum, so that
 * another version is reported as such), header checksum, metadata
 * (geometry, clock, names), tensor table and its tiling of the data
 * section; with `session`, session metadata's (below). RKV_ERR_FORMAT or
 * RKV_ERR_NO_MEMORY with a message naming the class and the key; on RKV_OK
 * *out holds the header (free with rkv__snap_header_free). */
rkv_status rkv__snap_header_parse(const rkv__snap_where *w, const uint8_t first8[8],
                                  const uint8_t *h, uint64_t n, uint64_t file_size, bool session,
                                  rkv__snap_header *out);
void rkv__snap_header_free(rkv__snap_header *p);

/* Session metadata (docs/migration.md): 8 length bytes and a header alone
 * (its data section is the regions), with "session_meta_version" (read
 * before the checksum) and "written_xxh3" (into *out); "not ringkv session
 * metadata" for other bytes. Free *out with rkv__snap_header_free. */
rkv_status rkv__snap_meta_parse(const rkv__snap_where *w, const uint8_t *meta, size_t bytes,
                                rkv__snap_header *out);

/* RKV_OK, or "what: name: wrong geometry" (RKV_ERR_FORMAT; name may be
 * NULL) naming the first difference (rkv__geometry_differs, layer by layer;
 * num_sessions is not geometry) of theirs (the `noun`'s) from mine, with
 * both models' names when they differ (another preset is the usual cause). */
rkv_status rkv__snap_geometry_check(const char *what, const char *name, const char *noun,
                                   const rkv_model_config *theirs, const rkv_model_config *mine);

/* The header a writer emits, padded with spaces so that 8 + len is a
 * multiple of 8, both checksums "0000000000000000" until sealed. */
typedef struct rkv__snap_text {
    uint8_t first8[8];   /* the 8 bytes before it: len, little-endian  */
    char *text;          /* malloc'd, len bytes (not NUL-terminated)   */
    size_t len;
    size_t data_digits;  /* offset of data_xxh3's 16 digits in text    */
    size_t header_digits;
    uint64_t data_bytes; /* the tensors' bytes, in the order layer 0 k,
                            v, written, layer 1 ...                     */
} rkv__snap_text;

/* Builds the header of one session: the model's config, the session's
 * index, request id and clock; with written_xxh3 (not NULL), session
 * metadata's two keys too; padded to len bytes when that is longer (8 +
 * len a multiple of 8: JSON allows whitespace after the object).
 * RKV_ERR_NO_MEMORY (named after `what`). */
rkv_status rkv__snap_header_build(const rkv_model_config *cfg, int64_t session,
                                  const char *request_id, int64_t last_committed,
                                  const uint64_t *written_xxh3, size_t len, const char *what,
                                  rkv__snap_text *out);

/* Session metadata's size when the longest image header is `longest`
 * (rkv__snap_header_longest): 8 + longest + the two keys, rounded up to 8. */
size_t rkv__snap_meta_bytes(size_t longest);

/* The longest header any session of this config can have, padded (*len):
 * the header of session num_sessions - 1 with a 255-byte request id at its
 * longest (outside printable ASCII: hex) or escaped JSON, whichever is
 * longer, and the largest clock. Every in-memory image of a model
 * (rkv_model_snapshot) pads its header to *len, so that they all have one
 * size. RKV_ERR_NO_MEMORY. */
rkv_status rkv__snap_header_longest(const rkv_model_config *cfg, const char *what, size_t *len);

/* ---- the header of one (config, session, request id), any clock ----------
 * What makes the in-memory round trip (rkv_model_snapshot / _restore)
 * allocation-free once warm: the writer's header built once (the text and
 * its own parse), last_committed's digits and both checksums' digits the
 * only parts that vary.
 *  - emit: the header of any clock into a caller's buffer, no allocation;
 *  - match: whether a header read from an image is exactly the template's
 *    with some clock and checksum digits (every other byte equal, the
 *    varying parts canonical decimal / 16 lowercase hex, the rest blanks),
 *    and then its parse, validated as rkv__snap_header_parse would (clock
 *    >= -1, the header checksum, the data section's size), borrowing the
 *    template's tensor table. Anything else is no match: the caller parses
 *    in full. */
typedef struct rkv__snap_template {
    int64_t session;                     /* the key                          */
    char request_id[RKV_MAX_REQUEST_ID];
    char *text;                          /* the compact JSON, clock 0, sums 0 */
    size_t len, clock_at, data_digits, header_digits; /* clock "0": 1 digit */
    uint64_t data_bytes;
    rkv__snap_header parsed;             /* the template's own parse          */
} rkv__snap_template;

/* Builds *t for (cfg, session, request_id). RKV_ERR_NO_MEMORY (named after
 * `what`); RKV_ERR_FORMAT if its own parse refuses the writer's output (a
 * bug: the caller then takes the allocating path). Free with
 * rkv__snap_template_free (safe on a zeroed or failed one). */
rkv_status rkv__snap_template_build(const rkv_model_config *cfg, int64_t session,
                                    const char *request_id, const char *what,
                                    rkv__snap_template *t);
void rkv__snap_template_free(rkv__snap_template *t);
/* The header of clock last_committed padded with spaces to len bytes
 * (>= its length: rkv__snap_header_longest's) into out[len]: *hd describes
 * it (text = out, not to be freed). */
void rkv__snap_template_emit(const rkv__snap_template *t, int64_t last_committed, char *out,
                             size_t len, rkv__snap_text *hd);
/* true and *out (borrowed: rkv__snap_header_free leaves the table) when the
 * n header bytes h after first8, in an image of file_size bytes, match. */
bool rkv__snap_template_match(const rkv__snap_template *t, const uint8_t first8[8],
                              const uint8_t *h, uint64_t n, uint64_t file_size,
                              rkv__snap_header *out);

/* Fills in data_xxh3 and then header_xxh3 (over the 8 length bytes and the
 * text with its own digits read as '0'); returns header_xxh3. */
uint64_t rkv__snap_header_seal(rkv__snap_text *t, uint64_t data_xxh3);

#endif
