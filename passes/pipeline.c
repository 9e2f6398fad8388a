/* The pass manager: takes a verified graph and PassOptions, runs the
 * pipeline they name (-O0/-O1/-O2 or an explicit --passes list) on it in
 * place, and writes what was asked along the way: IR dumps before and
 * after passes, a directory of numbered dumps, a timing table and
 * statistics.  Returns false after reporting errors. */
#include <errno.h>
#include <inttypes.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "passes/pass.h"

static const Pass pass_table[] = {
#define PASS(name, summary, fn) {name, summary, fn},
#include "passes.def"
#undef PASS
};
enum { N_PASSES = (int)ARRAY_LEN(pass_table) };

static const char *const pass_names[] = {
#define PASS(name, summary, fn) name,
#include "passes.def"
#undef PASS
};

const Pass *pass_find(const char *name) {
  for (int i = 0; i < N_PASSES; i++)
    if (strcmp(pass_table[i].name, name) == 0) return &pass_table[i];
  return NULL;
}

int pass_count(void) { return N_PASSES; }
const Pass *pass_at(int i) { return i >= 0 && i < N_PASSES ? &pass_table[i] : NULL; }

void pass_stat(PassCtx *pc, const char *name, int64_t delta) {
  for (int i = 0; i < pc->n_stats; i++)
    if (strcmp(pc->stats[i].name, name) == 0) {
      pc->stats[i].value += delta;
      return;
    }
  if (pc->n_stats == pc->cap_stats) {
    int cap = pc->cap_stats ? 2 * pc->cap_stats : 16;
    pc->stats = arena_realloc(&pc->ctx->arena, pc->stats, sizeof(PassStat) * (size_t)pc->cap_stats,
                              sizeof(PassStat) * (size_t)cap);
    pc->cap_stats = cap;
  }
  pc->stats[pc->n_stats++] = (PassStat){arena_strdup(&pc->ctx->arena, name), delta};
}

int pass_count_ops(const Graph *g) {
  int ops = 0;
  for (Node *n = g->first; n; n = n->next)
    ops += n->op != OP_INPUT && n->op != OP_PARAM && n->op != OP_CONST;
  return ops;
}

/* ---- pipelines ----
 * A stage is a pass; consecutive stages of one nonzero group repeat until
 * a round changes nothing (at most MAX_ROUNDS), since one cleanup often
 * opens the way for another.  An optional stage is skipped when its pass
 * is not built in (fuse arrives with its own change). */
typedef struct Stage {
  const char *pass;
  int group;
  bool optional;
} Stage;

enum { MAX_ROUNDS = 8 };

static const Stage pipeline_o1[] = {
    {"simplify", 1, false}, {"fold", 1, false}, {"cse", 1, false}, {"dce", 1, false},
};

/* bn-fold's folded weights are subgraphs over the params: codegen
 * computes them in the plan's init steps, once after the weights are
 * set (codegen/initgraph.c), so a run's convolution loads W' and adds b'
 * where it used to normalize every element.  Precision comes after it:
 * run first, it kept each batchnorm in f32 behind a cast of the half
 * convolution, out of bn-fold's reach, and every output divided by
 * sqrt(var + eps).  After it, W' and b' are computed in f32 at load and
 * then cast, and the cleanups below see the casts. */
static const Stage pipeline_o2[] = {
    {"simplify", 1, false}, {"fold", 1, false},      {"cse", 1, false},
    {"dce", 1, false},      {"bn-fold", 0, false},   {"scale-shift", 0, false},
    {"attention", 0, false}, {"precision", 0, false}, {"simplify", 2, false}, {"fold", 2, false},
    {"cse", 2, false},      {"dce", 2, false},       {"nhwc", 0, false},
    {"xent-join", 0, false}, {"recompute", 0, false},
    {"remat", 0, false},
    {"fuse", 0, true},
};

/* With --quantize=int8: the same, and the products go to int8 once the
 * graph is clean (bn-fold has put the batch norms into the weights that
 * get quantized), then the cleanups again for what quantize built. */
static const Stage pipeline_o2_int8[] = {
    {"simplify", 1, false}, {"fold", 1, false},     {"cse", 1, false},
    {"dce", 1, false},      {"bn-fold", 0, false},  {"scale-shift", 0, false},
    {"attention", 0, false}, {"simplify", 2, false}, {"fold", 2, false},     {"cse", 2, false},
    {"dce", 2, false},      {"quantize", 0, false}, {"fold", 3, false},
    {"cse", 3, false},      {"dce", 3, false},      {"nhwc", 0, false},
    {"xent-join", 0, false}, {"recompute", 0, false},
    {"remat", 0, false},
    {"fuse", 0, true},
};

/* ---- running ---- */

typedef struct Timing {
  const char *pass;
  double seconds;
  int runs, changed;
} Timing;

typedef struct Runner {
  Graph *g;
  const PassOptions *o;
  FILE *dump;
  PassCtx pc;
  int n_run; /* for --dump-dir numbering */
  Timing timings[64];
  int n_timings;
  bool failed;
} Runner;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void banner(Runner *r, const char *when, const char *pass) {
  if (!r->dump) return;
  fprintf(r->dump, "; *** IR Dump %s %s ***\n", when, pass);
  ir_print(r->dump, r->g);
}

static void dump_to_dir(Runner *r, const char *pass) {
  Ctx *c = r->g->ctx;
  const char *path = arena_printf(&c->arena, "%s/%03d_%s.ir", r->o->dump_dir, r->n_run, pass);
  FILE *f = fopen(path, "w");
  if (!f) {
    diag_error(c, (SrcLoc){0}, "cannot write '%s': %s", path, strerror(errno));
    r->failed = true;
    return;
  }
  ir_print(f, r->g);
  if (fclose(f) != 0) {
    diag_error(c, (SrcLoc){0}, "cannot write '%s': %s", path, strerror(errno));
    r->failed = true;
  }
}

static Timing *timing_of(Runner *r, const char *pass) {
  for (int i = 0; i < r->n_timings; i++)
    if (strcmp(r->timings[i].pass, pass) == 0) return &r->timings[i];
  if (r->n_timings == (int)ARRAY_LEN(r->timings)) return NULL;
  r->timings[r->n_timings] = (Timing){.pass = pass};
  return &r->timings[r->n_timings++];
}

/* One pass with everything around it.  Returns whether it changed g. */
static bool run_one(Runner *r, const Pass *p) {
  const PassOptions *o = r->o;
  Ctx *c = r->g->ctx;
  if (o->print_before && strcmp(o->print_before, p->name) == 0) banner(r, "Before", p->name);
  double t0 = now();
  bool changed = p->run(r->g, &r->pc);
  double dt = now() - t0;
  r->n_run++;
  Timing *t = timing_of(r, p->name);
  if (t) {
    t->seconds += dt;
    t->runs++;
    t->changed += changed;
  }
  if (o->print_after_all || (o->print_after && strcmp(o->print_after, p->name) == 0))
    banner(r, "After", p->name);
  if (o->dump_dir) dump_to_dir(r, p->name);
  if (o->verify_each && !ir_verify(r->g)) {
    diag_error(c, (SrcLoc){0}, "the graph does not verify after pass '%s'", p->name);
    r->failed = true;
  }
  return changed;
}

static void run_stages(Runner *r, const Stage *st, int n) {
  Ctx *c = r->g->ctx;
  for (int i = 0; i < n && !r->failed;) {
    if (r->o->stop_before && strcmp(st[i].pass, r->o->stop_before) == 0) return;
    int end = i + 1;
    if (st[i].group)
      while (end < n && st[end].group == st[i].group) end++;
    for (int round = 0; round < (st[i].group ? MAX_ROUNDS : 1) && !r->failed; round++) {
      bool changed = false;
      for (int k = i; k < end && !r->failed; k++) {
        /* In f32 the precision pass has nothing to do: not even a run. */
        if (r->o->precision == TY_F32 && strcmp(st[k].pass, "precision") == 0) continue;
        const Pass *p = pass_find(st[k].pass);
        if (!p) {
          if (st[k].optional) continue;
          dl_internal(c, "pipeline names unknown pass '%s'", st[k].pass);
        }
        changed |= run_one(r, p);
      }
      if (!changed) break;
    }
    i = end;
  }
}

static bool check_name(Ctx *c, const char *name, const char *flag) {
  if (pass_find(name)) return true;
  const char *best = diag_suggest(name, pass_names, N_PASSES);
  if (best)
    diag_error(c, (SrcLoc){0}, "unknown pass '%s' in %s; did you mean '%s'?", name, flag, best);
  else
    diag_error(c, (SrcLoc){0}, "unknown pass '%s' in %s (dlcc --help lists them)", name, flag);
  return false;
}

/* Splits --passes into names in the arena; NULL after reporting. */
static const char **split_passes(Ctx *c, const char *list, int *count) {
  int cap = 1;
  for (const char *p = list; *p; p++) cap += *p == ',';
  const char **names = ARENA_ARRAY(&c->arena, const char *, cap);
  int n = 0;
  bool ok = true;
  for (const char *p = list;;) {
    const char *comma = strchr(p, ',');
    size_t len = comma ? (size_t)(comma - p) : strlen(p);
    if (len == 0) {
      diag_error(c, (SrcLoc){0}, "--passes: empty pass name in '%s'", list);
      ok = false;
    } else {
      names[n] = arena_strndup(&c->arena, p, len);
      ok &= check_name(c, names[n], "--passes");
      n++;
    }
    if (!comma) break;
    p = comma + 1;
  }
  *count = n;
  return ok ? names : NULL;
}

static bool list_has(const char *list, const char *name) {
  size_t n = strlen(name);
  for (const char *p = list; p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
    if (strncmp(p, name, n) == 0 && (p[n] == ',' || !p[n])) return true;
  return false;
}

bool pass_check_options(Ctx *c, const PassOptions *o) {
  bool ok = true;
  if (o->passes) {
    int n;
    ok &= split_passes(c, o->passes, &n) != NULL;
  }
  if (o->print_before) ok &= check_name(c, o->print_before, "--print-before");
  if (o->print_after) ok &= check_name(c, o->print_after, "--print-after");
  if (o->precision != TY_F32 && o->precision != TY_F16 && o->precision != TY_BF16) {
    diag_error(c, (SrcLoc){0}, "unknown precision %s (expected f32, f16 or bf16)", ir_dtype_name(o->precision));
    ok = false;
  }
  if (o->quantize_int8 && o->precision != TY_F32) {
    diag_error(c, (SrcLoc){0}, "int8 quantization and --precision=%s do not combine: choose one",
               ir_dtype_name(o->precision));
    ok = false;
  }
  if (o->opt_level < 0 || o->opt_level > 2) {
    diag_error(c, (SrcLoc){0}, "unknown optimization level %d (expected 0, 1 or 2)", o->opt_level);
    ok = false;
  }
  return ok;
}

static void print_timings(Runner *r, double total) {
  FILE *f = r->dump;
  fprintf(f, "===-------------------------------------------------------------------===\n");
  fprintf(f, "                      ... Pass execution timing report ...\n");
  fprintf(f, "===-------------------------------------------------------------------===\n");
  fprintf(f, "  Total Execution Time: %.6f seconds\n\n", total);
  fprintf(f, "   ---Wall Time---   Runs  Changed  --- Name ---\n");
  for (int i = 0; i < r->n_timings; i++) {
    const Timing *t = &r->timings[i];
    fprintf(f, "   %.6f (%5.1f%%) %5d  %7d  %s\n", t->seconds,
            total > 0 ? 100.0 * t->seconds / total : 0.0, t->runs, t->changed, t->pass);
  }
  fprintf(f, "   %.6f (100.0%%)                Total\n", total);
}

/* Ops whose operands are, transitively, only params and consts: work on
 * the weights that a load-time prologue could do once. */
static int count_weight_only_ops(Graph *g) {
  bool *weight = pass_weight_only(g);
  int ops = 0;
  for (Node *n = g->first; n; n = n->next) ops += weight[n->id] && n->n_in > 0;
  return ops;
}

static void print_stats(Runner *r, int ops_before, int nodes_before) {
  FILE *f = r->dump;
  fprintf(f, "===-------------------------------------------------------------------===\n");
  fprintf(f, "                          ... Statistics Collected ...\n");
  fprintf(f, "===-------------------------------------------------------------------===\n");
  fprintf(f, "%10d graph: ops before\n", ops_before);
  fprintf(f, "%10d graph: ops after\n", pass_count_ops(r->g));
  fprintf(f, "%10d graph: ops after over weights only\n", count_weight_only_ops(r->g));
  fprintf(f, "%10d graph: nodes before\n", nodes_before);
  fprintf(f, "%10d graph: nodes after\n", r->g->n_nodes);
  fprintf(f, "%10d graph: passes run\n", r->n_run);
  CastKernels casts;
  pass_count_cast_kernels(r->g, &casts);
  fprintf(f, "%10d graph: cast kernels\n", casts.standalone);
  fprintf(f, "%10d graph: cast kernels for GEMM operands\n", casts.for_products);
  fprintf(f, "%10d graph: cast kernels over weights only\n", casts.over_weights);
  for (int i = 0; i < r->pc.n_stats; i++)
    fprintf(f, "%10" PRId64 " %s\n", r->pc.stats[i].value, r->pc.stats[i].name);
}

bool pass_fuses_attention(const PassOptions *o) {
  return o->passes ? list_has(o->passes, "attention") : o->opt_level == 2;
}

bool pass_run_pipeline(Graph *g, const PassOptions *o, FILE *dump) {
  Ctx *c = g->ctx;
  int errors = c->diag.errors;
  if (!pass_check_options(c, o)) return false;
  if (o->dump_dir && mkdir(o->dump_dir, 0777) != 0 && errno != EEXIST) {
    diag_error(c, (SrcLoc){0}, "cannot create --dump-dir '%s': %s", o->dump_dir, strerror(errno));
    return false;
  }
  Runner *r = ARENA_NEW(&c->arena, Runner);
  r->g = g;
  r->o = o;
  r->dump = dump;
  r->pc.ctx = c;
  r->pc.options = o;
  r->pc.unroll = o->unroll;
  r->pc.no_unroll = o->no_unroll;
  int ops_before = pass_count_ops(g), nodes_before = g->n_nodes;
  double t0 = now();
  /* --precision rewrites the graph before any optimization below -O2
   * (-O2 places it after bn-fold), unless --passes places the pass. */
  bool placed = o->passes ? list_has(o->passes, "precision") : o->opt_level == 2;
  if (o->precision != TY_F32 && !placed) run_one(r, pass_find("precision"));
  if (o->passes) {
    int n;
    const char **names = split_passes(c, o->passes, &n);
    for (int i = 0; names && i < n && !r->failed; i++) run_one(r, pass_find(names[i]));
  } else if (o->opt_level == 1) {
    run_stages(r, pipeline_o1, (int)ARRAY_LEN(pipeline_o1));
  } else if (o->opt_level == 2 && o->quantize_int8) {
    run_stages(r, pipeline_o2_int8, (int)ARRAY_LEN(pipeline_o2_int8));
  } else if (o->opt_level == 2) {
    run_stages(r, pipeline_o2, (int)ARRAY_LEN(pipeline_o2));
  }
  /* Below -O2 the products are quantized last, unless --passes places
   * the pass itself. */
  if (o->quantize_int8 && !r->failed && !(o->passes && list_has(o->passes, "quantize")) &&
      (o->passes || o->opt_level < 2))
    run_one(r, pass_find("quantize"));
  double total = now() - t0;
  if (dump && o->time_passes) print_timings(r, total);
  if (dump && o->stats) print_stats(r, ops_before, nodes_before);
  return !r->failed && c->diag.errors == errors;
}
