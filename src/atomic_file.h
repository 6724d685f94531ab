/* Saving a file atomically: the one way ringkv replaces a file, for the
 * snapshot files (src/snapshot_file.c: rkv_model_save_session,
 * rkv_model_offload_file) and the rollout's picture and legend
 * (tools/sheet.c).
 *
 * The bytes go to a new temporary file next to the file replaced,
 * NAME.tmp-XXXXXX (mkstemp; .ringkv.tmp-XXXXXX in the same folder when NAME
 * is too long to take the suffix: NAME_MAX, 255 bytes on Linux file
 * systems), every write checked; then fsync, close, rename over the path
 * and fsync of the folder (best effort). A reader sees the old file or the
 * whole new one, never a part of it; a failure at any step (a full disk, a
 * file-size limit, an I/O error) removes the temporary file and leaves the
 * old file as it was. A symbolic link is followed (open(2)'s way, at most
 * 40 links): its final target is replaced and the link kept. The new file
 * takes the old one's permission bits, else 0644.
 *
 * Errors: RKV_ERR_IO (a folder, device, named pipe or socket at the path,
 * a missing folder, a link loop, a failed create, write, fsync, close or
 * rename; the message names the file and says why: strerror),
 * RKV_ERR_NO_MEMORY; each with "WHAT: " in front, the caller's name. Not
 * thread-safe per object; distinct objects may be used from distinct
 * threads. Private to the library and the `ringkv` command (not exported
 * from libringkv.so). */
#ifndef RKV_ATOMIC_FILE_H
#define RKV_ATOMIC_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"

/* One file being saved. Zero-initialized or after rkv__atomic_begin. */
typedef struct rkv__atomic_file {
    const char *what; /* the caller's name, first in every message (not owned) */
    char *target;     /* the path replaced: the path, or its link's final target */
    char *tmp;        /* the temporary file's path; NULL when none remains */
    int fd;           /* open for writing on tmp; -1 once closed */
    uint64_t off;     /* the file offset the next write goes to */
} rkv__atomic_file;

/* Checks `path` (after links: a regular file or a new name in an existing
 * folder) and creates the temporary file next to it. RKV_OK with f ready
 * for writing, or an error with nothing created (f then needs no abort, and
 * rkv__atomic_abort is harmless). */
rkv_status rkv__atomic_begin(rkv__atomic_file *f, const char *what, const char *path);

/* Appends n bytes (p: HOST memory) to the temporary file, all of them
 * (write(2) in a loop, EINTR retried). RKV_ERR_IO "WHAT: writing TMP failed
 * at byte OFF: REASON" (EFBIG, ENOSPC, EIO, ...); the file is then to be
 * aborted. */
rkv_status rkv__atomic_write(rkv__atomic_file *f, const void *p, size_t n);

/* fsync and close of the temporary file (its data on the disk); nothing
 * renamed yet. Lets a caller that saves several files finish all of them
 * before it renames any. Idempotent. On error the file is to be aborted. */
rkv_status rkv__atomic_finish(rkv__atomic_file *f);

/* rkv__atomic_finish when not done, then the rename over the target and the
 * folder's fsync; frees f's paths. On error the temporary file is removed
 * and the old file left as it was. */
rkv_status rkv__atomic_commit(rkv__atomic_file *f);

/* Closes and removes the temporary file, frees f's paths; harmless on a
 * zeroed, failed, committed or aborted f. */
void rkv__atomic_abort(rkv__atomic_file *f);

/* What a file of st_mode `mode` is, for messages: "a folder", "a named
 * pipe (FIFO)", "a character device", "a block device", "a socket", "a
 * symbolic link" (lstat), "a regular file". */
const char *rkv__file_kind(unsigned mode);

#endif
