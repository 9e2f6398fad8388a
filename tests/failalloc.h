/* A failing allocator for tests (the technique of Lua's and SQLite's test
 * builds): every malloc-family call of the process, the libraries', cJSON's
 * and the C library's own, and every arena allocation, counted together
 * while armed; the Nth fails.  Linking tests/failalloc.c into a test
 * program interposes malloc, calloc, realloc, free and their kin for the
 * whole process (under ASan too: it forwards to the allocator after it in
 * the search order).  It also keeps the blocks allocated while armed, so
 * a test can tell whether a failed call leaked. */
#ifndef DLCC_TESTS_FAILALLOC_H
#define DLCC_TESTS_FAILALLOC_H

#include <stdbool.h>
#include <stddef.h>

/* Counts from now; the nth allocation (n >= 1) fails, and every one
 * after it succeeds; n = 0 only counts.  Forgets the blocks kept before. */
void failalloc_arm(long n);
/* Stops counting (allocations succeed); returns how many were counted
 * since failalloc_arm.  The kept blocks stay until the next arm. */
long failalloc_disarm(void);
/* Whether the armed failure happened. */
bool failalloc_failed(void);
/* Stops and resumes counting while armed, for the test's own buffers. */
void failalloc_pause(void);
void failalloc_resume(void);
/* Blocks allocated while armed (not paused) and not freed since; one of
 * them described in one[len]: its size and who allocated it (a file and
 * an offset for addr2line).  The dynamic loader's own allocations are
 * neither counted, failed nor kept (see failalloc.c). */
long failalloc_live(char *one, size_t len);

#endif
