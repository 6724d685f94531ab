/* Status codes and the thread-local last-error message. */
#include <stdarg.h>
#include <stdio.h>

#include "internal.h"

static _Thread_local char last_error[512];

const char *rkv_version(void) { return RKV_VERSION_STRING; }

const char *rkv_status_str(rkv_status status) {
    static const char *const names[] = { /* indexed by -status */
        "RKV_OK",         "RKV_ERR_INVALID_ARG", "RKV_ERR_NULL",     "RKV_ERR_RANGE",
        "RKV_ERR_OVERFLOW", "RKV_ERR_NO_MEMORY", "RKV_ERR_DTYPE",    "RKV_ERR_CLOCK",
        "RKV_ERR_FULL",   "RKV_ERR_NOT_FOUND",   "RKV_ERR_STATE",    "RKV_ERR_FORMAT",
        "RKV_ERR_IO"};
    const unsigned i = 0u - (unsigned)status;
    return i < sizeof names / sizeof names[0] ? names[i] : "unknown status";
}

const char *rkv_last_error(void) { return last_error; }

rkv_status rkv_error_set(rkv_status status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

rkv_status rkv__check_sessions(const char *what, const int64_t *session_idx,
                               int64_t batch, int64_t num_sessions) {
    if (!session_idx) return rkv__fail(RKV_ERR_NULL, "%s: session_idx is NULL", what);
    /* Every row's range before any repeat: a call with both is the
     * reference's IndexError (its index_copy_ fails), whatever the rows. */
    for (int64_t b = 0; b < batch; b++) {
        int64_t s = session_idx[b];
        if (s < 0 || s >= num_sessions)
            return rkv__fail(RKV_ERR_RANGE,
                             "%s: session_idx[%lld] = %lld is out of range; expected 0..%lld",
                             what, (long long)b, (long long)s, (long long)(num_sessions - 1));
    }
    /* more rows than sessions: some session repeats; say the count */
    if (batch > num_sessions)
        return rkv__fail(RKV_ERR_INVALID_ARG,
                         "%s: batch B = %lld; expected 1..%lld (one frame per distinct session)",
                         what, (long long)batch, (long long)num_sessions);
    for (int64_t b = 0; b < batch; b++) {
        int64_t s = session_idx[b];
        for (int64_t a = 0; a < b; a++)
            if (session_idx[a] == s)
                return rkv__fail(RKV_ERR_INVALID_ARG,
                                 "%s: session %lld appears twice in one batch (rows %lld and "
                                 "%lld); expected distinct sessions",
                                 what, (long long)s, (long long)a, (long long)b);
    }
    return RKV_OK;
}
