/* rkv__copy_pieces_hashed (model_internal.h): the hashing thread takes each
 * piece from the last-level cache, where the copy left it, so that the
 * XXH3-64 costs next to nothing on top of the copy while it stays one
 * sequential stream (the image's data_xxh3). Small copies, or a machine
 * with one CPU, copy and hash in turns on the calling thread. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <unistd.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t */
#include <xxhash.h>

#include "model_internal.h"

/* Below this many bytes a helper thread costs more than it saves. */
#define PIPELINE_BYTES ((size_t)8 << 20)
/* Copy-then-hash chunk of the single-thread path (stays in L1/L2). */
#define CHUNK ((size_t)32 << 10)

typedef struct follower {
    const rkv__piece *p;
    size_t n;
    XXH3_state_t *hs;
    atomic_size_t done; /* pieces copied */
} follower;

static void *hash_behind(void *arg) {
    follower *f = arg;
    for (size_t k = 0; k < f->n; k++) {
        while (atomic_load_explicit(&f->done, memory_order_acquire) <= k) sched_yield();
        XXH3_64bits_update(f->hs, f->p[k].dst, f->p[k].bytes);
    }
    return NULL;
}

void rkv__copy_pieces_hashed(const rkv__piece *p, size_t n, void *xxh3_state) {
    XXH3_state_t *hs = xxh3_state;
    size_t total = 0;
    for (size_t k = 0; k < n; k++) total += p[k].bytes;
    follower f = {p, n, hs, 0};
    pthread_t t;
    if (hs && total >= PIPELINE_BYTES && sysconf(_SC_NPROCESSORS_ONLN) > 1 &&
        pthread_create(&t, NULL, hash_behind, &f) == 0) {
        for (size_t k = 0; k < n; k++) {
            memcpy(p[k].dst, p[k].src, p[k].bytes);
            atomic_store_explicit(&f.done, k + 1, memory_order_release);
        }
        pthread_join(t, NULL);
        return;
    }
    for (size_t k = 0; k < n; k++)
        for (size_t off = 0; off < p[k].bytes; off += CHUNK) {
            const size_t c = p[k].bytes - off < CHUNK ? p[k].bytes - off : CHUNK;
            memcpy(p[k].dst + off, p[k].src + off, c);
            if (hs) XXH3_64bits_update(hs, p[k].dst + off, c);
        }
}
