/* Text read from a file, made safe to print: a snapshot's request id and
 * model name may hold any bytes (rkv_snapshot_info in ringkv.h), and a
 * terminal obeys the control sequences among them. */
#ifndef RKV_TOOLS_ESCAPE_H
#define RKV_TOOLS_ESCAPE_H

#include <stddef.h>

/* s with bytes outside printable ASCII written as \xNN and a backslash as
 * \\ (so the form reads back unambiguously), into buf[size]; 4 * strlen(s)
 * + 1 bytes hold any s (longer text is cut). Returns buf. */
const char *rkv_tool_escape(char *buf, size_t size, const char *s);

#endif
