/* One arena per compilation: every token, AST node, IR node and string is
 * carved from it and dies with it.  Allocation failure never returns NULL:
 * it unwinds through on_oom, or without one through the guard active on
 * this thread (ctx_guard, see diag.h). */
#ifndef DLCC_ARENA_H
#define DLCC_ARENA_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>

typedef struct ArenaChunk ArenaChunk;

typedef struct Arena {
  ArenaChunk *head;
  size_t used_bytes;
  /* Test hook: when > 0, the Nth allocation from now fails. */
  long fail_after;
  /* Called on allocation failure; must not return.  NULL: unwind
   * through ctx_current()'s guard. */
  void (*on_oom)(void *data);
  void *on_oom_data;
} Arena;

/* Test hook for every arena of the process: when hook() returns true the
 * allocation fails (the failing-allocator sweep counts them with the
 * mallocs).  NULL, the default, turns it off. */
void arena_set_fail_hook(bool (*hook)(void));

void arena_init(Arena *a);
void arena_free(Arena *a);
void *arena_alloc(Arena *a, size_t size);          /* zeroed, 16-byte aligned */
void *arena_realloc(Arena *a, void *old, size_t old_size, size_t new_size);
char *arena_strdup(Arena *a, const char *s);
char *arena_strndup(Arena *a, const char *s, size_t n);
char *arena_printf(Arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
char *arena_vprintf(Arena *a, const char *fmt, va_list ap);

#define ARENA_NEW(a, T) ((T *)arena_alloc((a), sizeof(T)))
#define ARENA_ARRAY(a, T, n) ((T *)arena_alloc((a), sizeof(T) * (size_t)(n)))
#define ARRAY_LEN(x) (sizeof(x) / sizeof((x)[0]))

#endif
