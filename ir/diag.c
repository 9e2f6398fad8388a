/* Diagnostics: formats "file:line:col: error: msg", the source line and a
 * caret into the context's message buffer. */
#include "diag.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

static void oom_unwind(void *data) { ctx_out_of_memory(data); }

void ctx_init(Ctx *c) {
  memset(c, 0, sizeof *c);
  arena_init(&c->arena);
  c->arena.on_oom = oom_unwind;
  c->arena.on_oom_data = c;
  c->diag.max_errors = 20;
}

void ctx_free(Ctx *c) {
  arena_free(&c->arena);
  free(c->diag.text);
  c->diag.text = NULL;
}

static _Thread_local Ctx *current;

Ctx *ctx_current(void) { return current; }

int ctx_guard(Ctx *c, int (*fn)(Ctx *c, void *data), void *data) {
  jmp_buf here;
  jmp_buf *outer = c->fatal;
  Ctx *outer_current = current;
  int held = c->n_held;
  volatile int rc = -1;
  c->fatal = &here;
  current = c;
  if (setjmp(here) == 0) rc = fn(c, data);
  while (c->n_held > held) {
    c->n_held--;
    c->held[c->n_held].release(c->held[c->n_held].p);
  }
  c->fatal = outer;
  current = outer_current;
  return rc;
}

void ctx_hold_with(Ctx *c, void (*release)(void *), void *p) {
  if (c->n_held == CTX_MAX_HELD) {
    release(p);
    ctx_fatal(c, __FILE__, __LINE__, "more than %d blocks held", CTX_MAX_HELD);
  }
  c->held[c->n_held].release = release;
  c->held[c->n_held++].p = p;
}

void ctx_hold(Ctx *c, void *p) { ctx_hold_with(c, free, p); }

static void free_arena(void *a) { arena_free(a); }

void ctx_hold_arena(Ctx *c, Arena *a) { ctx_hold_with(c, free_arena, a); }

void ctx_release(Ctx *c, void *p) {
  for (int i = c->n_held - 1; i >= 0; i--)
    if (c->held[i].p == p) {
      c->held[i] = c->held[--c->n_held];
      return;
    }
}

/* Appending must not allocate from the arena (it may be what failed) and
 * must not fail loudly: on malloc failure the message is dropped. */
static void append(Diag *d, const char *s, size_t n) {
  if (d->len + n + 1 > d->cap) {
    size_t cap = d->cap ? d->cap : 256;
    while (cap < d->len + n + 1) cap *= 2;
    char *t = realloc(d->text, cap);
    if (!t) {
      d->lost = true;
      return;
    }
    d->text = t;
    d->cap = cap;
  }
  memcpy(d->text + d->len, s, n);
  d->len += n;
  d->text[d->len] = 0;
}

static void appendf(Diag *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void appendf(Diag *d, const char *fmt, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  if ((size_t)n < sizeof buf) {
    append(d, buf, (size_t)n);
    return;
  }
  char *big = malloc((size_t)n + 1);
  if (!big) {
    d->lost = true;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(big, (size_t)n + 1, fmt, ap);
  va_end(ap);
  append(d, big, (size_t)n);
  free(big);
}

_Noreturn void ctx_fatal(Ctx *c, const char *file, int line, const char *fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  appendf(&c->diag, "dlcc: internal error: %s (%s:%d)\n", buf, file, line);
  c->diag.errors++;
  if (c->fatal) longjmp(*c->fatal, 1);
  fputs(c->diag.text ? c->diag.text : "dlcc: internal error\n", stderr);
  abort();
}

_Noreturn void ctx_out_of_memory(Ctx *c) {
  append(&c->diag, "dlcc: error: out of memory\n", 27);
  c->diag.errors++;
  c->oom = true;
  if (c->fatal) longjmp(*c->fatal, 1);
  fputs("dlcc: error: out of memory\n", stderr);
  abort();
}

double ctx_now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

double ctx_stage(Ctx *c, const char *name, double since) {
  double now = ctx_now();
  int i = 0;
  while (i < c->n_stages && strcmp(c->stages[i].name, name) != 0) i++;
  if (i == c->n_stages) {
    if (i == CTX_MAX_STAGES) return now;
    c->stages[c->n_stages++] = (StageTime){name, 0};
  }
  c->stages[i].seconds += now - since;
  return now;
}

const SrcFile *ctx_add_file(Ctx *c, const char *name, const char *text, size_t len) {
  SrcFile *f = ARENA_NEW(&c->arena, SrcFile);
  f->name = arena_strdup(&c->arena, name);
  f->text = text;
  f->len = len;
  return f;
}

const SrcFile *ctx_load_file(Ctx *c, const char *path) {
  SrcLoc none = {0};
  FILE *f = fopen(path, "rb");
  if (!f) {
    diag_error(c, none, "cannot read '%s': %s", path, strerror(errno));
    return NULL;
  }
  struct stat st;
  if (fstat(fileno(f), &st) == 0 && S_ISDIR(st.st_mode)) {
    fclose(f);
    diag_error(c, none, "cannot read '%s': it is a directory", path);
    return NULL;
  }
  size_t cap = 1 << 16, len = 0;
  char *buf = malloc(cap);
  const char *why = buf ? NULL : "out of memory";
  while (buf) {
    size_t n = fread(buf + len, 1, cap - len - 1, f);
    len += n;
    if (n == 0) break;
    if (len + 1 == cap) {
      char *bigger = cap > ((size_t)1 << 30) ? NULL : realloc(buf, cap * 2);
      if (!bigger) {
        why = cap > ((size_t)1 << 30) ? "file too large" : "out of memory";
        free(buf);
        buf = NULL;
        break;
      }
      buf = bigger;
      cap *= 2;
    }
  }
  if (buf && ferror(f)) why = strerror(errno);
  fclose(f);
  if (why) {
    free(buf);
    diag_error(c, none, "cannot read '%s': %s", path, why);
    return NULL;
  }
  /* Held while the arena copies it: an allocation failure unwinds. */
  ctx_hold(c, buf);
  char *text = arena_strndup(&c->arena, buf, len);
  ctx_release(c, buf);
  free(buf);
  return ctx_add_file(c, path, text, len);
}

/* s with its control bytes but tab written as escapes (\\n, \\r, \\xHH): a
 * message quotes names from a model file, and a name must not end the
 * message's line or feed the terminal control sequences. */
static void append_visible(Diag *d, const char *s) {
  for (const char *run = s;; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '\t' || (ch >= 32 && ch != 127)) continue;
    append(d, run, (size_t)(s - run));
    if (!ch) return;
    char esc[8];
    snprintf(esc, sizeof esc, ch == '\n' ? "\\n" : ch == '\r' ? "\\r" : "\\x%02x", ch);
    append(d, esc, strlen(esc));
    run = s + 1;
  }
}

static void append_source_line(Diag *d, SrcLoc loc) {
  const SrcFile *f = loc.file;
  if (!f || !f->text || loc.line < 1) return;
  const char *p = f->text, *end = f->text + f->len;
  for (int l = 1; l < loc.line && p < end; p++)
    if (*p == '\n') l++;
  if (p >= end && loc.line > 1) return;
  const char *eol = memchr(p, '\n', (size_t)(end - p));
  if (!eol) eol = end;
  size_t n = (size_t)(eol - p);
  if (n > 400) return; /* a binary blob or minified line: the position says enough */
  append(d, "    ", 4);
  /* Replace unprintable bytes so the caret line stays aligned and the
   * terminal is not fed control codes from a file that is not text. */
  for (size_t i = 0; i < n; i++) {
    char ch = p[i];
    if (ch == '\r') continue;
    if (ch != '\t' && ((unsigned char)ch < 32 || ch == 127)) ch = '?';
    append(d, &ch, 1);
  }
  append(d, "\n    ", 5);
  for (int i = 1; i < loc.col && (size_t)(i - 1) < n; i++) append(d, p[i - 1] == '\t' ? "\t" : " ", 1);
  append(d, "^\n", 2);
}

void diag_report(Ctx *c, DiagLevel level, SrcLoc loc, const char *fmt, ...) {
  Diag *d = &c->diag;
  if (level == DIAG_ERROR) {
    d->errors++;
    if (d->errors > d->max_errors) {
      if (!d->truncated) {
        appendf(d, "dlcc: too many errors, stopping\n");
        d->truncated = true;
      }
      return;
    }
  } else if (level == DIAG_WARNING) {
    d->warnings++;
  } else if (d->truncated) {
    return;
  }
  static const char *const level_names[] = {"error", "warning", "note"};
  if (loc.file) {
    append_visible(d, loc.file->name);
    /* Line 0 names what made the node, not a place in a file ("loss
     * cross_entropy": dlcc --loss appended it). */
    if (loc.line > 0) appendf(d, ":%d:%d", loc.line, loc.col);
    appendf(d, ": %s: ", level_names[level]);
  } else {
    appendf(d, "dlcc: %s: ", level_names[level]);
  }
  char buf[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  append_visible(d, buf);
  append(d, "\n", 1);
  append_source_line(d, loc);
}

bool diag_should_stop(const Ctx *c) { return c->diag.errors >= c->diag.max_errors; }

const char *diag_text(const Ctx *c) {
  if (c->diag.lost && (!c->diag.text || !c->diag.text[0]))
    return "dlcc: error: out of memory (the messages could not be kept)\n";
  return c->diag.text ? c->diag.text : "";
}

void diag_clear(Ctx *c) {
  c->diag.len = 0;
  if (c->diag.text) c->diag.text[0] = 0;
  c->diag.errors = c->diag.warnings = 0;
  c->diag.truncated = c->diag.lost = false;
  c->oom = false;
}

static int edit_distance(const char *a, const char *b) {
  size_t la = strlen(a), lb = strlen(b);
  if (la > 64 || lb > 64) return 1000;
  int row[65];
  for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
  for (size_t i = 1; i <= la; i++) {
    int diag = row[0];
    row[0] = (int)i;
    for (size_t j = 1; j <= lb; j++) {
      int up = row[j];
      int best = diag + (a[i - 1] != b[j - 1]);
      if (up + 1 < best) best = up + 1;
      if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
      row[j] = best;
      diag = up;
    }
  }
  return row[lb];
}

const char *diag_suggest(const char *name, const char *const *candidates, int n) {
  const char *best = NULL;
  int best_d = 1000;
  int limit = (int)strlen(name) / 3 + 1;
  if (limit > 3) limit = 3;
  for (int i = 0; i < n; i++) {
    int dist = edit_distance(name, candidates[i]);
    if (dist < best_d) {
      best_d = dist;
      best = candidates[i];
    }
  }
  return best_d <= limit ? best : NULL;
}

DiagWords diag_word_list(const char *const *words, int n) {
  DiagWords w = {{0}};
  size_t at = 0;
  for (int k = 0; k < n && at < sizeof w.s; k++) {
    int len = snprintf(w.s + at, sizeof w.s - at, "%s%s", k == 0 ? "" : k == n - 1 ? " or " : ", ", words[k]);
    if (len < 0) break;
    at += (size_t)len;
  }
  return w;
}
