/* The one way every `ringkv` subcommand prints JSON (docs/json.md): the
 * strings it holds made valid UTF-8 first, since a path from the command
 * line or a text from the system may hold any bytes and JSON text is
 * UTF-8 (RFC 8259). */
#ifndef RKV_TOOLS_JSON_OUT_H
#define RKV_TOOLS_JSON_OUT_H

#include <stddef.h>

#include <cjson/cJSON.h>

/* s (n bytes) as valid UTF-8, into out (3 * n + 1 bytes hold any result,
 * NUL-terminated): each well-formed sequence kept, each maximal ill-formed
 * subsequence (an invalid byte, or the longest start of a sequence that
 * breaks off) replaced by U+FFFD (EF BF BD) -- Unicode's recommended
 * practice (chapter 3, "U+FFFD Substitution of Maximal Subparts"), what
 * Python's bytes.decode("utf-8", "replace") does. Overlong forms,
 * surrogates (ED A0..BF) and code points above U+10FFFF are ill-formed.
 * Returns the bytes written before the NUL. */
size_t cli_utf8_repair(const char *s, size_t n, char *out);

/* root printed as JSON text (formatted: cJSON_Print; else on one line,
 * cJSON_PrintUnformatted) after every string value and key in it was made
 * valid UTF-8 (cli_utf8_repair; strings already valid are left as they
 * are). The text is malloc'ed (free it with cJSON_free); NULL out of memory
 * (root is then partly repaired, still a valid tree). */
char *cli_json_print(cJSON *root, int formatted);

#endif
