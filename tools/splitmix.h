/* Deterministic hashing for `ringkv rollout`: every random choice (camera
 * path, noise) is a pure function of its coordinates (seed, session, frame,
 * token, ...), so a run is reproducible bit for bit. (The digest of the
 * attention outputs is XXH3-64, from xxHash: rollout.c.) */
#ifndef RKV_TOOLS_SPLITMIX_H
#define RKV_TOOLS_SPLITMIX_H

#include <stddef.h>
#include <stdint.h>

/* SplitMix64's finalizer (Steele, Lea, Flood 2014). */
static inline uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Hash of a tuple: fold each coordinate through splitmix64. */
static inline uint64_t hash_combine(uint64_t h, uint64_t v) {
    return splitmix64(h ^ splitmix64(v + 0x632BE59BD9B4E019ull));
}

static inline uint64_t hash4(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
    return hash_combine(hash_combine(hash_combine(splitmix64(a), b), c), d);
}

/* Uniform in [0, 1) from the top 24 bits (exact in float). */
static inline float hash_unit_float(uint64_t h) {
    return (float)(h >> 40) * (1.0f / 16777216.0f);
}

/* Uniform integer in [0, n), n >= 1 (modulo bias is irrelevant here). */
static inline int64_t hash_below(uint64_t h, int64_t n) {
    return (int64_t)(h % (uint64_t)n);
}

#endif
