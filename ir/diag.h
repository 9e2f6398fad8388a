/* Source locations, user-facing diagnostics and the compilation context.
 * Messages are collected as text on the context (a library never prints);
 * the CLI writes them to stderr.  Internal errors and allocation failure
 * unwind with longjmp to the one handler set at the API boundary. */
#ifndef DLCC_DIAG_H
#define DLCC_DIAG_H

#include <setjmp.h>
#include <stdbool.h>
#include <stddef.h>

#include "arena.h"

typedef struct SrcFile {
  const char *name;
  const char *text; /* NULL when only the name is known (IR loc comments) */
  size_t len;
} SrcFile;

typedef struct SrcLoc {
  const SrcFile *file; /* NULL: no location */
  /* 1-based; line 0: file names what built the node rather than a file
   * ("loss cross_entropy" for dlcc --loss), and messages show the name
   * alone. */
  int line, col;
} SrcLoc;

typedef enum { DIAG_ERROR, DIAG_WARNING, DIAG_NOTE } DiagLevel;

typedef struct Diag {
  char *text; /* malloc'd, NUL-terminated, everything reported so far */
  size_t len, cap;
  int errors, warnings;
  int max_errors; /* after this many, diag_error only counts */
  bool truncated; /* "too many errors" was reported */
  bool lost;      /* a message was dropped: no memory to keep it */
} Diag;

/* Wall time spent per compilation stage, for --time-stages. */
typedef struct StageTime {
  const char *name;
  double seconds;
} StageTime;

enum { CTX_MAX_STAGES = 16, CTX_MAX_HELD = 16 };

typedef struct Ctx {
  Arena arena;
  Diag diag;
  jmp_buf *fatal; /* set by the API boundary (ctx_guard) */
  bool oom;       /* what unwound was an allocation failure */
  int n_stages;
  StageTime stages[CTX_MAX_STAGES];
  /* What the guard frees when it unwinds (ctx_hold). */
  int n_held;
  struct {
    void (*release)(void *);
    void *p;
  } held[CTX_MAX_HELD];
} Ctx;

void ctx_init(Ctx *c);
void ctx_free(Ctx *c);

/* Runs fn(c, data) with the fatal handler armed.  Returns fn's result, or
 * -1 when an internal error or allocation failure unwound out of it (the
 * message is then in c->diag). */
int ctx_guard(Ctx *c, int (*fn)(Ctx *c, void *data), void *data);
/* A malloc'd block held across calls that may unwind (arena allocations,
 * internal errors): if the guard unwinds before ctx_release, it frees p.
 * At most CTX_MAX_HELD at once. */
void ctx_hold(Ctx *c, void *p);
/* The same for a scratch arena of a function's own: arena_free on unwind. */
void ctx_hold_arena(Ctx *c, Arena *a);
/* The same for anything else: release(p) on unwind (a DIR, a map). */
void ctx_hold_with(Ctx *c, void (*release)(void *), void *p);
/* p (a block or an arena) is the caller's again, to free or keep. */
void ctx_release(Ctx *c, void *p);
/* The context whose guard is active on this thread, or NULL: lets code far
 * from any Ctx (attribute getters) report a broken invariant. */
Ctx *ctx_current(void);

_Noreturn void ctx_fatal(Ctx *c, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reports "out of memory" and unwinds like ctx_fatal, with c->oom set. */
_Noreturn void ctx_out_of_memory(Ctx *c);
#define dl_internal(c, ...) ctx_fatal((c), __FILE__, __LINE__, __VA_ARGS__)
#define dl_unreachable(c) ctx_fatal((c), __FILE__, __LINE__, "unreachable")

/* Seconds on a monotonic clock. */
double ctx_now(void);
/* Adds the time since `since` (a ctx_now value) to the named stage and
 * returns ctx_now(), so stages chain: t = ctx_stage(c, "parse", t). */
double ctx_stage(Ctx *c, const char *name, double since);

const SrcFile *ctx_add_file(Ctx *c, const char *name, const char *text, size_t len);
/* Reads a whole file into the arena (NUL-terminated).  NULL after
 * reporting "cannot read 'path': reason" when it cannot. */
const SrcFile *ctx_load_file(Ctx *c, const char *path);

void diag_report(Ctx *c, DiagLevel level, SrcLoc loc, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define diag_error(c, loc, ...) diag_report((c), DIAG_ERROR, (loc), __VA_ARGS__)
#define diag_warning(c, loc, ...) diag_report((c), DIAG_WARNING, (loc), __VA_ARGS__)
#define diag_note(c, loc, ...) diag_report((c), DIAG_NOTE, (loc), __VA_ARGS__)
/* True once max_errors have been reported: stop producing more. */
bool diag_should_stop(const Ctx *c);
/* Everything reported, or when memory ran out before any of it could be
 * kept, a line that says so: never empty after a failure. */
const char *diag_text(const Ctx *c);
void diag_clear(Ctx *c);

/* Levenshtein-nearest candidate within a small distance, or NULL: for
 * "did you mean" hints. */
const char *diag_suggest(const char *name, const char *const *candidates, int n);
/* words joined for a message, "a, b or c" (cut to the size); returned
 * by value, so that each caller has its own: f(diag_word_list(...).s). */
typedef struct DiagWords {
  char s[256];
} DiagWords;
DiagWords diag_word_list(const char *const *words, int n);

#endif
