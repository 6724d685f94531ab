/* tools/json_out.h */
#include "json_out.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length of the well-formed UTF-8 sequence at s[0..n) (Unicode
 * Table 3-7), or, when there is none, of its maximal ill-formed subpart
 * (at least 1) as a negative number. */
static long sequence(const unsigned char *s, size_t n) {
    const unsigned char c = s[0];
    if (c < 0x80) return 1;
    int len;
    unsigned char lo = 0x80, hi = 0xBF; /* the second byte's range */
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c == 0xE0) len = 3, lo = 0xA0;
    else if (c == 0xED) len = 3, hi = 0x9F;
    else if (c >= 0xE1 && c <= 0xEF) len = 3;
    else if (c == 0xF0) len = 4, lo = 0x90;
    else if (c == 0xF4) len = 4, hi = 0x8F;
    else if (c >= 0xF1 && c <= 0xF3) len = 4;
    else return -1; /* 80..C1, F5..FF: never a first byte */
    for (int i = 1; i < len; i++) {
        const unsigned char min = i == 1 ? lo : 0x80, max = i == 1 ? hi : 0xBF;
        if ((size_t)i >= n || s[i] < min || s[i] > max) return -i;
    }
    return len;
}

size_t cli_utf8_repair(const char *s, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const long k = sequence(p + i, n - i);
        if (k > 0) {
            memcpy(out + o, p + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3, i += (size_t)-k;
        }
    }
    out[o] = '\0';
    return o;
}

/* Whether s is valid UTF-8 already. */
static int valid(const char *s) {
    const size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        const long k = sequence((const unsigned char *)s + i, n - i);
        if (k < 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* A repaired copy of s (cJSON_malloc'ed), or NULL out of memory. */
static char *repaired(const char *s) {
    const size_t n = strlen(s);
    char *out = n <= (SIZE_MAX - 1) / 3 ? cJSON_malloc(3 * n + 1) : NULL;
    if (out) cli_utf8_repair(s, n, out);
    return out;
}

/* Repairs the strings of item and of everything under it; -1 out of memory. */
static int repair_tree(cJSON *item) {
    for (; item; item = item->next) {
        if (item->string && !valid(item->string)) {
            char *key = repaired(item->string);
            if (!key) return -1;
            if (!(item->type & cJSON_StringIsConst)) cJSON_free(item->string);
            item->string = key;
            item->type &= ~cJSON_StringIsConst;
        }
        if (cJSON_IsString(item) && item->valuestring && !valid(item->valuestring)) {
            char *value = repaired(item->valuestring);
            if (!value) return -1;
            if (!(item->type & cJSON_IsReference)) cJSON_free(item->valuestring);
            item->valuestring = value; /* owned now */
            item->type &= ~cJSON_IsReference;
        }
        if (item->child && repair_tree(item->child)) return -1;
    }
    return 0;
}

char *cli_json_print(cJSON *root, int formatted) {
    if (!root || repair_tree(root)) return NULL;
    return formatted ? cJSON_Print(root) : cJSON_PrintUnformatted(root);
}
