/* Text made safe to print: a snapshot's request id and model name may hold
 * any bytes (rkv_snapshot_info in ringkv.h), and so may a file name given on
 * the command line; a terminal obeys the control sequences among them. Every
 * such text a command prints (on stdout or stderr; JSON escapes its own) goes
 * through rkv_tool_escape. */
#ifndef RKV_TOOLS_ESCAPE_H
#define RKV_TOOLS_ESCAPE_H

#include <stddef.h>

/* s with bytes outside printable ASCII written as \xNN and a backslash as
 * \\ (so the form reads back unambiguously), into buf[size]; 4 * strlen(s)
 * + 1 bytes hold any s (longer text is cut). Returns buf. */
const char *rkv_tool_escape(char *buf, size_t size, const char *s);

/* rkv_tool_escape of s into the next of RKV_TOOL_SHOWN static buffers, used
 * in turn, so that one message can show that many texts (file names, for
 * "cannot save '%s' (a link to '%s')"); the result stays valid for the next
 * RKV_TOOL_SHOWN - 1 calls. Texts over 4096 bytes are cut. NULL gives "".
 * Leaves errno as it was (a message may read it in the same call).
 * Not thread-safe: for the command's messages, printed by its main thread. */
#define RKV_TOOL_SHOWN 4
const char *rkv_tool_shown(const char *s);

#endif
