/* `dlcc memplan FILE.csv`: takes an allocation problem, one buffer a line
 * as id,lower,upper,size (live over steps [lower, upper), size in
 * bytes; optionally a fifth column, the alignment), returns the memory
 * planner's answer: id,offset per buffer, then the arena's size against
 * the lower bound and the heuristic that won.  A header line and
 * # comments are allowed; malformed lines are reported with their line
 * numbers, as many as there are (up to 20). */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "driver/driver.h"
#include "ir/diag.h"
#include "passes/memplan.h"

static const char memplan_usage[] =
    "usage: dlcc memplan FILE.csv [options]\n"
    "\n"
    "Places the buffers of an allocation problem in one arena so that buffers\n"
    "live at the same step never share a byte, with dlcc's memory planner.\n"
    "Each line of FILE (- for standard input) is one buffer:\n"
    "    id,lower,upper,size[,align]\n"
    "live over steps [lower, upper) (upper exclusive), size bytes, offset a\n"
    "multiple of align (default 1).  A header line and # comments are allowed.\n"
    "Prints id,offset for every buffer, then the arena size, the lower bound\n"
    "(the most bytes live at one step), their ratio and the heuristic that won.\n"
    "\n"
    "options:\n"
    "  --seed=S        seed of the improvement search (default fixed)\n"
    "  --budget=N      work units of the search (default 20000000; 0 none)\n"
    "  --time-ms=T     also stop the search after T ms (then not reproducible)\n"
    "  --greedy        greedy by size alone (best-fit), the baseline\n"
    "  --summary       only the summary lines, no offsets\n";

typedef struct CliOpts {
  const char *path;
  MemPlanOptions mp;
  bool summary;
} CliOpts;

typedef struct Problem {
  int n, cap;
  MemBuf *bufs;
  const char **ids;
  int errors;
  uint64_t total; /* sum of sizes padded to their alignment */
} Problem;

/* No arena is larger: offsets and sums stay far from overflowing. */
#define MAX_TOTAL_BYTES ((uint64_t)1 << 62)

static void line_error(Problem *p, FILE *err, const char *path, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void line_error(Problem *p, FILE *err, const char *path, int line, const char *fmt, ...) {
  if (++p->errors > 20) return;
  va_list ap;
  va_start(ap, fmt);
  fprintf(err, "%s:%d: error: ", path, line);
  vfprintf(err, fmt, ap);
  fputc('\n', err);
  va_end(ap);
}

static char *trim(char *s) {
  while (*s == ' ' || *s == '\t') s++;
  char *e = s + strlen(s);
  while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\r' || e[-1] == '\n')) e--;
  *e = 0;
  return s;
}

static bool parse_i64(const char *s, int64_t *v) {
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (!*s || *end || errno == ERANGE) return false;
  *v = x;
  return true;
}

/* Open addressing over the ids seen so far: duplicates are errors. */
typedef struct IdSet {
  int cap;
  int *slot; /* index into ids, -1 empty */
  int *line;
} IdSet;

static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}

static void idset_grow(Arena *a, IdSet *set, const Problem *p) {
  int cap = set->cap ? 2 * set->cap : 1024;
  int *slot = ARENA_ARRAY(a, int, cap), *line = ARENA_ARRAY(a, int, cap);
  for (int i = 0; i < cap; i++) slot[i] = -1;
  for (int i = 0; i < set->cap; i++) {
    if (set->slot[i] < 0) continue;
    uint64_t h = hash_str(p->ids[set->slot[i]]) & (uint64_t)(cap - 1);
    while (slot[h] >= 0) h = (h + 1) & (uint64_t)(cap - 1);
    slot[h] = set->slot[i], line[h] = set->line[i];
  }
  set->cap = cap, set->slot = slot, set->line = line;
}

/* The line where id was first seen, or 0 after adding it as index k. */
static int idset_add(Arena *a, IdSet *set, const Problem *p, const char *id, int k, int line) {
  if (2 * (k + 1) > set->cap) idset_grow(a, set, p);
  uint64_t h = hash_str(id) & (uint64_t)(set->cap - 1);
  while (set->slot[h] >= 0) {
    if (strcmp(p->ids[set->slot[h]], id) == 0) return set->line[h];
    h = (h + 1) & (uint64_t)(set->cap - 1);
  }
  set->slot[h] = k, set->line[h] = line;
  return 0;
}

static void read_problem(Arena *a, FILE *f, const char *path, Problem *p, FILE *err) {
  char *line = NULL;
  size_t cap = 0;
  int lineno = 0;
  bool seen_data = false;
  IdSet ids = {0};
  while (getline(&line, &cap, f) >= 0) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *s = trim(line);
    if (!*s) continue;
    char *field[6];
    int nf = 0;
    for (char *q = s;; q++) {
      char *comma = strchr(q, ',');
      if (nf < 6) field[nf] = trim(q);
      nf++;
      if (!comma) break;
      *comma = 0;
      q = comma;
    }
    int64_t v;
    if (!seen_data && nf >= 2 && !parse_i64(field[1], &v)) { /* id,lower,upper,size */
      seen_data = true;
      continue;
    }
    seen_data = true;
    if (nf < 4 || nf > 5) {
      line_error(p, err, path, lineno, "expected id,lower,upper,size[,align], got %d field%s", nf,
                 nf == 1 ? "" : "s");
      continue;
    }
    int64_t lo, hi, size, align = 1;
    const char *names[] = {"lower", "upper", "size", "align"};
    int64_t *dst[] = {&lo, &hi, &size, &align};
    bool ok = true;
    if (!*field[0]) {
      line_error(p, err, path, lineno, "empty id");
      ok = false;
    }
    for (int k = 0; k < nf - 1 && ok; k++)
      if (!parse_i64(field[k + 1], dst[k])) {
        line_error(p, err, path, lineno, "%s '%s' is not an integer", names[k], field[k + 1]);
        ok = false;
      }
    if (!ok) continue;
    if (lo < 0 || hi < 0) {
      line_error(p, err, path, lineno, "negative step in [%" PRId64 ", %" PRId64 ")", lo, hi);
      continue;
    }
    if (hi <= lo) {
      line_error(p, err, path, lineno,
                 "empty interval [%" PRId64 ", %" PRId64 "): upper is exclusive and must exceed lower",
                 lo, hi);
      continue;
    }
    if (size < 0) {
      line_error(p, err, path, lineno, "negative size %" PRId64, size);
      continue;
    }
    if (align < 1 || (align & (align - 1))) {
      line_error(p, err, path, lineno, "alignment %" PRId64 " is not a power of two", align);
      continue;
    }
    uint64_t padded = (uint64_t)size + (uint64_t)align - 1;
    if ((uint64_t)size >= MAX_TOTAL_BYTES || (uint64_t)align >= MAX_TOTAL_BYTES ||
        padded > MAX_TOTAL_BYTES - p->total) {
      line_error(p, err, path, lineno, "the sizes add up to more than 2^62 bytes, more than any arena");
      continue;
    }
    p->total += padded;
    if (p->n == p->cap) {
      int old = p->cap, c = old ? 2 * old : 1024;
      p->bufs = arena_realloc(a, p->bufs, sizeof(MemBuf) * (size_t)old, sizeof(MemBuf) * (size_t)c);
      p->ids = arena_realloc(a, p->ids, sizeof(char *) * (size_t)old, sizeof(char *) * (size_t)c);
      p->cap = c;
    }
    p->ids[p->n] = arena_strdup(a, field[0]);
    int first = idset_add(a, &ids, p, p->ids[p->n], p->n, lineno);
    if (first) {
      line_error(p, err, path, lineno, "duplicate id '%s' (first on line %d)", field[0], first);
      continue;
    }
    p->bufs[p->n] = (MemBuf){.id = p->n, .lower = lo, .upper = hi, .size = (uint64_t)size,
                             .align = (uint64_t)align};
    p->n++;
  }
  free(line);
}

static int parse_cli(int argc, char **argv, CliOpts *o, FILE *out, FILE *err) {
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    int64_t v;
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      fputs(memplan_usage, out);
      return 2;
    } else if (strncmp(a, "--seed=", 7) == 0 && parse_i64(a + 7, &v)) {
      o->mp.seed = (uint64_t)v;
    } else if (strncmp(a, "--budget=", 9) == 0 && parse_i64(a + 9, &v) && v >= 0) {
      o->mp.budget = v ? v : -1;
    } else if (strncmp(a, "--time-ms=", 10) == 0 && parse_i64(a + 10, &v) && v > 0) {
      o->mp.time_ms = (double)v;
    } else if (strcmp(a, "--greedy") == 0) {
      o->mp.greedy_only = true;
    } else if (strcmp(a, "--summary") == 0) {
      o->summary = true;
    } else if (a[0] == '-' && a[1]) {
      fprintf(err, "dlcc memplan: error: unknown or malformed option '%s' (see dlcc memplan --help)\n", a);
      return 1;
    } else if (o->path) {
      fprintf(err, "dlcc memplan: error: more than one problem file ('%s' and '%s')\n", o->path, a);
      return 1;
    } else {
      o->path = a;
    }
  }
  if (!o->path) {
    fputs("dlcc memplan: error: no problem file (see dlcc memplan --help)\n", err);
    return 1;
  }
  return 0;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

typedef struct Job {
  const CliOpts *o;
  FILE *in, *out, *err;
} Job;

static int solve(Ctx *ctx, void *data) {
  Job *job = data;
  const CliOpts *o = job->o;
  FILE *out = job->out, *err = job->err;
  Problem p = {0};
  read_problem(&ctx->arena, job->in, o->path, &p, err);
  if (p.errors) {
    if (p.errors > 20) fprintf(err, "%s: %d more errors not shown\n", o->path, p.errors - 20);
    return 1;
  }
  double t0 = now_ms();
  MemPlanResult r;
  pass_memplan_solve(&ctx->arena, p.bufs, p.n, &o->mp, &r);
  double ms = now_ms() - t0;
  int bi, bj;
  if (!pass_memplan_check(&ctx->arena, p.bufs, p.n, NULL, NULL, &bi, &bj)) {
    fprintf(err, "dlcc memplan: internal error: the plan puts '%s' over '%s'\n", p.ids[bi],
            bj >= 0 ? p.ids[bj] : "its alignment");
    return 1;
  }
  if (!o->summary) {
    fputs("id,offset\n", out);
    for (int i = 0; i < p.n; i++) fprintf(out, "%s,%" PRIu64 "\n", p.ids[i], p.bufs[i].offset);
  }
  double ratio = r.lower_bound ? (double)r.arena / (double)r.lower_bound : 1.0;
  double gratio = r.lower_bound ? (double)r.greedy / (double)r.lower_bound : 1.0;
  fprintf(out, "# buffers %d, arena %" PRIu64 " bytes, lower bound %" PRIu64 " bytes, ratio %.4f\n",
          p.n, r.arena, r.lower_bound, ratio);
  fprintf(out, "# heuristic %s (best greedy %" PRIu64 " bytes, ratio %.4f), %" PRId64
               " search moves, %.1f ms\n",
          r.heuristic, r.greedy, gratio, r.iterations, ms);
  return 0;
}

int driver_memplan_to(int argc, char **argv, FILE *out, FILE *err) {
  CliOpts o = {0};
  int rc = parse_cli(argc, argv, &o, out, err);
  if (rc) return rc == 2 ? 0 : 1;
  bool is_stdin = strcmp(o.path, "-") == 0;
  FILE *f = is_stdin ? stdin : fopen(o.path, "r");
  if (!f) {
    fprintf(err, "dlcc memplan: error: cannot read '%s': %s\n", o.path, strerror(errno));
    return 1;
  }
  Ctx c;
  ctx_init(&c);
  Job job = {&o, f, out, err};
  rc = ctx_guard(&c, solve, &job);
  fputs(diag_text(&c), err);
  ctx_free(&c);
  if (!is_stdin) fclose(f);
  return rc ? 1 : 0;
}

int driver_memplan(int argc, char **argv) { return driver_memplan_to(argc, argv, stdout, stderr); }
