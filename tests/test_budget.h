/*
 * How much a test program runs (issue 10 s.6: the test command's time),
 * shared by the test programs (static inline only; plain C, no cmocka, so
 * that test_backend_parity.c can use it too).
 *
 *  - tu_sanitized(): 1 under AddressSanitizer, UndefinedBehaviorSanitizer or
 *    ThreadSanitizer, where the heavy tests run smaller sizes and fewer
 *    repetitions (every code path, dtype and edge case still runs, each
 *    assertion still holds; only the counts shrink). Known from the compiler
 *    (-fsanitize=address / thread); the environment variable RKV_SANITIZED
 *    overrides it: 1 = the small sizes (in any build), 0 = the full ones.
 *    scripts/test.sh sets RKV_SANITIZED=1 for its sanitizer build.
 *  - TU_SIZE(full, small): full in a plain build, small under a sanitizer.
 *  - tu_isa_entry_redundant(): the per-ISA ctest entries (RKV_ISA=x, in
 *    tests/CMakeLists.txt) test each CPU kernel once: an entry whose kernel
 *    this CPU lacks (RKV_ISA falls to a lower one, which its own entry
 *    tests), or whose kernel is the one this CPU picks unasked (the plain
 *    entry, without RKV_ISA, tests it), is redundant.
 */
#ifndef RKV_TEST_BUDGET_H
#define RKV_TEST_BUDGET_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ringkv.h"

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define TU_SANITIZER_BUILD 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) ||                    \
    __has_feature(undefined_behavior_sanitizer)
#define TU_SANITIZER_BUILD 1
#endif
#endif
#ifndef TU_SANITIZER_BUILD
#define TU_SANITIZER_BUILD 0
#endif

/* 1: run the sanitizer's sizes (see above). */
static inline int tu_sanitized(void)
{
    const char *env = getenv("RKV_SANITIZED");
    if (env && (env[0] == '0' || env[0] == '1') && env[1] == '\0')
        return env[0] == '1';
    return TU_SANITIZER_BUILD;
}

#define TU_SIZE(full, small) (tu_sanitized() ? (small) : (full))

/* The kernel this CPU picks without RKV_ISA, asked in a child process (the
 * library reads RKV_ISA once per process, so this one cannot ask twice).
 * Writes its name to out; "" when the child could not answer. Call it
 * before anything in this process picks a kernel. */
static inline void tu_default_isa(char *out, size_t n)
{
    int fd[2];
    out[0] = '\0';
    if (n == 0 || pipe(fd) != 0)
        return;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        unsetenv("RKV_ISA");
        const char *isa = rkv_attention_isa();
        ssize_t w = write(fd[1], isa, strlen(isa));
        _exit(w < 0 ? 1 : 0);
    }
    close(fd[1]);
    if (pid > 0) {
        size_t got = 0;
        ssize_t r;
        while (got + 1 < n && (r = read(fd[0], out + got, n - 1 - got)) > 0)
            got += (size_t)r;
        out[got] = '\0';
        int status = 0;
        if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
            out[0] = '\0';
    }
    close(fd[0]);
}

/* 1 when this process runs under RKV_ISA=x and that entry would test a
 * kernel another entry tests (see above); why then says which and why.
 * 0 without RKV_ISA, and whenever the default kernel cannot be asked (the
 * entry then runs: never a skip by accident). Call it first in main(). */
static inline int tu_isa_entry_redundant(char *why, size_t n)
{
    const char *want = getenv("RKV_ISA");
    if (!want || !*want)
        return 0;
    char dflt[32];
    tu_default_isa(dflt, sizeof dflt);
    if (!dflt[0])
        return 0;
    const char *isa = rkv_attention_isa();
    if (strcasecmp(isa, want) != 0) { /* RKV_ISA is read in any case */
        if (!strcmp(isa, dflt))
            snprintf(why, n,
                     "this CPU has no %s kernel: RKV_ISA=%s runs %s, the kernel it picks "
                     "without RKV_ISA, which the plain entry tests",
                     want, want, isa);
        else
            snprintf(why, n,
                     "this CPU has no %s kernel: RKV_ISA=%s runs %s, which the entry with "
                     "RKV_ISA=%s tests",
                     want, want, isa, isa);
        return 1;
    }
    if (!strcmp(isa, dflt)) {
        snprintf(why, n,
                 "%s is the kernel this CPU picks without RKV_ISA: the plain entry tests it",
                 isa);
        return 1;
    }
    return 0;
}

#endif /* RKV_TEST_BUDGET_H */
