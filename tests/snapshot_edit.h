/*
 * Snapshot images damaged on purpose, for the tests and the fuzzer
 * (tests/test_snapshot_file.c, fuzz/fuzz_snapshot.c, fuzz/gen_seeds.c):
 * an edit of the JSON header, re-padded, with both checksums recomputed, so
 * that the loader's checks behind the checksums can be reached. Written
 * from docs/snapshot-format.md, without the library's help:
 *  - data_xxh3: XXH3-64 of the data section,
 *  - header_xxh3: XXH3-64 of the 8 length bytes and the header in which
 *    header_xxh3's own 16 digits read as '0'.
 * Header-only (static inline); bounds-checked on any bytes (the fuzzer
 * feeds it arbitrary input). Needs xxHash.
 */
#ifndef RKV_TESTS_SNAPSHOT_EDIT_H
#define RKV_TESTS_SNAPSHOT_EDIT_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <xxhash.h>

/* The header length the image's first 8 bytes give, capped to what the
 * image holds after them (0 for images under 8 bytes). */
static inline uint64_t tsnap_header_len(const uint8_t *img, size_t n)
{
    if (n < 8)
        return 0;
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--)
        hl = hl << 8 | img[i];
    return hl <= n - 8 ? hl : n - 8;
}

/* The first `needle` (nl bytes) in h[0, n), or NULL. */
static inline uint8_t *tsnap_find(uint8_t *h, size_t n, const char *needle, size_t nl)
{
    for (size_t i = 0; nl <= n && i <= n - nl; i++)
        if (!memcmp(h + i, needle, nl))
            return h + i;
    return NULL;
}

static inline int tsnap_blank(uint8_t c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

/* The 16 digits of the first "key" in the header that is followed by
 * blanks, ':', blanks and '"' (the rule of docs/snapshot-format.md), or
 * NULL when there is none. */
static inline uint8_t *tsnap_digits(uint8_t *img, size_t n, const char *key)
{
    const size_t hl = (size_t)tsnap_header_len(img, n), kl = strlen(key);
    uint8_t *h = img + 8, *end = h + hl;
    char quoted[64];
    snprintf(quoted, sizeof quoted, "\"%s\"", key);
    for (uint8_t *at = h; at < end; at++) {
        at = tsnap_find(at, (size_t)(end - at), quoted, kl + 2);
        if (!at)
            return NULL;
        uint8_t *p = at + kl + 2;
        while (p < end && tsnap_blank(*p))
            p++;
        if (p >= end || *p++ != ':')
            continue;
        while (p < end && tsnap_blank(*p))
            p++;
        if (p < end && *p == '"' && end - (p + 1) >= 16)
            return p + 1;
    }
    return NULL;
}

static inline void tsnap_hex16(uint64_t v, uint8_t *out)
{
    static const char digits[] = "0123456789abcdef";
    for (int i = 15; i >= 0; i--, v >>= 4)
        out[i] = (uint8_t)digits[v & 15];
}

/* Recomputes data_xxh3 and then header_xxh3 of the image in place (each
 * where its digits are found). 0 when both were found, -1 otherwise. */
static inline int tsnap_reseal(uint8_t *img, size_t n)
{
    if (n < 8)
        return -1;
    const size_t hl = (size_t)tsnap_header_len(img, n);
    uint8_t *d = tsnap_digits(img, n, "data_xxh3");
    uint8_t *h = tsnap_digits(img, n, "header_xxh3");
    if (d)
        tsnap_hex16(XXH3_64bits(img + 8 + hl, n - 8 - hl), d);
    if (h) {
        memset(h, '0', 16);
        tsnap_hex16(XXH3_64bits(img, 8 + hl), h);
    }
    return d && h ? 0 : -1;
}

/* A copy of the image with the first `from` in its header replaced by `to`
 * (any lengths), padded again with spaces so that 8 + the header length is
 * a multiple of 8, and, when `seal`, both checksums recomputed. NULL when
 * the header has no `from`; else malloc'd, *out_n its size. */
static inline uint8_t *tsnap_edit(const uint8_t *img, size_t n, const char *from, const char *to,
                                  int seal, size_t *out_n)
{
    const size_t hl = (size_t)tsnap_header_len(img, n), fl = strlen(from), tl = strlen(to);
    uint8_t *at = tsnap_find((uint8_t *)img + 8, hl, from, fl);
    if (n < 8 || !at)
        return NULL;
    size_t jl = hl;
    while (jl && img[8 + jl - 1] == ' ')
        jl--;
    const size_t pre = (size_t)(at - (img + 8));
    if (pre + fl > jl)
        jl = pre + fl;
    const size_t nl = jl - fl + tl, padded = (nl + 8 + 7) / 8 * 8 - 8, dn = n - 8 - hl;
    uint8_t *out = malloc(8 + padded + dn);
    if (!out)
        return NULL;
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    memcpy(out + 8, img + 8, pre);
    memcpy(out + 8 + pre, to, tl);
    memcpy(out + 8 + pre + tl, img + 8 + pre + fl, jl - pre - fl);
    memset(out + 8 + nl, ' ', padded - nl);
    memcpy(out + 8 + padded, img + 8 + hl, dn);
    *out_n = 8 + padded + dn;
    if (seal)
        tsnap_reseal(out, *out_n);
    return out;
}

#endif
