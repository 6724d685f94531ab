/* tools/escape.h */
#include "escape.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

const char *rkv_tool_escape(char *buf, size_t size, const char *s) {
    size_t o = 0;
    if (!size) return buf;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char one[5];
        const int k = *p == '\\'                ? snprintf(one, sizeof one, "\\\\")
                      : *p >= 0x20 && *p < 0x7f ? snprintf(one, sizeof one, "%c", *p)
                                                : snprintf(one, sizeof one, "\\x%02x", *p);
        if (o + (size_t)k >= size) break;
        memcpy(buf + o, one, (size_t)k);
        o += (size_t)k;
    }
    buf[o] = '\0';
    return buf;
}

const char *rkv_tool_shown(const char *s) {
    static char bufs[RKV_TOOL_SHOWN][4 * 4096 + 1];
    static unsigned next;
    char *buf = bufs[next++ % RKV_TOOL_SHOWN];
    const int saved = errno; /* callers read errno in the same call's arguments */
    rkv_tool_escape(buf, sizeof bufs[0], s ? s : "");
    errno = saved;
    return buf;
}
