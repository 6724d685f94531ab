/* Checks of `ringkv rollout` made before the model is created and before
 * any frame: the default image, the output paths (--out, --snapshot-out) and
 * the memory a run needs against what the machine has available. Each
 * returns 0 to go on, else -1 with a message in err (check_memory: 2, the
 * message printed). */
#ifndef RKV_TOOLS_ROLLOUT_CHECKS_H
#define RKV_TOOLS_ROLLOUT_CHECKS_H

#include <stddef.h>
#include <stdint.h>

#include "ringkv.h"
#include "rollout_options.h"
#include "world.h"

/* A run is refused when it needs more than this share of the memory the
 * machine has available. */
#define MEMORY_SHARE 0.9

/* The default image: data/earth.jpg from the working directory, else beside
 * the repository the executable was built in (its folder and up to 3 above).
 * NULL when it is in none of them; `exe` receives the executable's path (or
 * ""). A file that exists but cannot be read is returned: the load says why. */
const char *rollout_default_image(char *buf, size_t n, char *exe, size_t exe_n);

/* Checks that the file `path` can be (over)written, its folder existing: when
 * it exists (after symbolic links), a writable regular file, not a folder,
 * device, named pipe or socket. 0, or -1 with a message. */
int rollout_check_output_file(const char *what, const char *path, char *err, size_t n);

/* --out DIR before the run: an existing folder we can write in, with its
 * picture and legend files savable (rollout_check_out_files), or a path
 * mkdir -p can create (the nearest existing folder above it writable by
 * access(); once made, rollout_check_out_files). Leaves nothing behind. 0,
 * or -1 with a message. */
int rollout_check_out_folder(const char *path, char *err, size_t n);

/* The picture and the legend in the existing folder --out `path`, savable
 * (rollout_check_saved_file: a link among them to a missing folder, dangling
 * or not, is refused; a file is really created and removed in the folder
 * they go in). 0, or -1 with a message. */
int rollout_check_out_files(const char *path, char *err, size_t n);

/* mkdir -p of path. *made: set to the length of path's prefix that names
 * the first (topmost) folder created, when one is; left as it is when
 * every folder was there. 0, or -1 with a message. */
int rollout_make_dirs(const char *path, int64_t *made, char *err, size_t err_len);

/* Undoes rollout_make_dirs: removes the folders of path from the deepest up
 * to the prefix of length made, each only when it is empty (rmdir); stops
 * at the first that stays. */
void rollout_remove_made_dirs(const char *path, int64_t made);

/* A file the run will save (--snapshot-out FILE; the picture and legend in
 * --out), before the run: not a folder nor any other file that is not a
 * regular one, in a folder we can write in (a probe file is created there
 * and removed: access() says yes to root in /proc or /sys; the save writes FILE.tmp-XXXXXX
 * there and renames it, src/atomic_file.c; for a symbolic link, dangling or
 * not, next to its final target: "WHAT 'FILE' (a link to 'TARGET'): folder
 * 'DIR': no such folder"). `what` names the option. 0, or -1 with a
 * message. */
int rollout_check_saved_file(const char *what, const char *path, char *err, size_t n);

/* What the rollout allocates besides the model, an upper bound of its large
 * buffers (see the buffers section of setup_run in rollout.c). */
typedef struct tool_memory {
    uint64_t per_session; /* tokens of a pass and a frame, the camera path's
                             last CAMERA_KEEP poses, clocks                  */
    uint64_t fixed;       /* pass latencies, the picture, the map            */
    uint64_t by_frames;   /* of both, what grows with --frames (the latencies) */
} tool_memory;

tool_memory rollout_tool_memory(const rkv_model_config *cfg, int64_t frames, const world_map *w);

/* Refuses a run that needs more than MEMORY_SHARE of the available memory:
 * 0 to go on, or 2 with a message naming both and what to change. */
int rollout_check_memory(const rollout_opts *o, size_t model_session, const tool_memory *tm);

#endif
