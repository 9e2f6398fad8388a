/* Bump allocator in chunks.  Takes sizes, returns zeroed memory that lives
 * until arena_free. */
#include "arena.h"

#include "diag.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CHUNK_MIN = 64 * 1024, ALIGN = 16 };

struct ArenaChunk {
  ArenaChunk *next;
  size_t cap, used;
  _Alignas(16) unsigned char data[];
};

void arena_init(Arena *a) { memset(a, 0, sizeof *a); }

void arena_free(Arena *a) {
  ArenaChunk *c = a->head;
  while (c) {
    ArenaChunk *next = c->next;
    free(c);
    c = next;
  }
  a->head = NULL;
  a->used_bytes = 0;
}

static bool (*fail_hook)(void);

void arena_set_fail_hook(bool (*hook)(void)) { fail_hook = hook; }

static _Noreturn void out_of_memory(Arena *a) {
  if (a->on_oom) a->on_oom(a->on_oom_data);
  /* A scratch arena of its own (a checker's, a solver's) unwinds through
   * the guard of the compilation it serves. */
  Ctx *c = ctx_current();
  if (c) ctx_out_of_memory(c);
  /* Every entry point of the libraries runs under a guard, so only a
   * program that calls internals without one can get here. */
  fputs("dlcc: out of memory outside any ctx_guard\n", stderr);
  abort();
}

void *arena_alloc(Arena *a, size_t size) {
  if ((a->fail_after > 0 && --a->fail_after == 0) || (fail_hook && fail_hook())) out_of_memory(a);
  size = (size + ALIGN - 1) & ~(size_t)(ALIGN - 1);
  if (size == 0) size = ALIGN;
  ArenaChunk *c = a->head;
  if (!c || c->cap - c->used < size) {
    size_t cap = size > CHUNK_MIN ? size : CHUNK_MIN;
    if (cap > SIZE_MAX - sizeof(ArenaChunk)) out_of_memory(a);
    c = malloc(sizeof(ArenaChunk) + cap);
    if (!c) out_of_memory(a);
    c->cap = cap;
    c->used = 0;
    /* A big one-off block goes behind the head so the head keeps its
     * free space for the small allocations that follow. */
    if (a->head && cap == size) {
      c->next = a->head->next;
      a->head->next = c;
    } else {
      c->next = a->head;
      a->head = c;
    }
  }
  void *p = c->data + c->used;
  c->used += size;
  a->used_bytes += size;
  memset(p, 0, size);
  return p;
}

void *arena_realloc(Arena *a, void *old, size_t old_size, size_t new_size) {
  if (new_size <= old_size) return old;
  void *p = arena_alloc(a, new_size);
  if (old && old_size) memcpy(p, old, old_size);
  return p;
}

char *arena_strndup(Arena *a, const char *s, size_t n) {
  char *p = arena_alloc(a, n + 1);
  if (n) memcpy(p, s, n); /* s may be NULL when n is 0: an unset protobuf string */
  p[n] = 0;
  return p;
}

char *arena_strdup(Arena *a, const char *s) { return arena_strndup(a, s, strlen(s)); }

char *arena_vprintf(Arena *a, const char *fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  char *p = arena_alloc(a, (size_t)n + 1);
  vsnprintf(p, (size_t)n + 1, fmt, ap);
  return p;
}

char *arena_printf(Arena *a, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *p = arena_vprintf(a, fmt, ap);
  va_end(ap);
  return p;
}
