/* The plan as text (--emit=plan): takes an RtPlan (and its steps' costs),
 * writes its spaces, tensors, kernels, init steps and steps one a line,
 * in the order the runtime runs them.  Deterministic, so tests can diff
 * it.  Also each step as a line on the node it was made for, for
 * --emit=dot. */
#include <inttypes.h>
#include <string.h>

#include "codegen.h"
#include "ir/names.h"

static const char *dtype_name(uint32_t dt) {
  static const char *const names[RT_DT_COUNT] = {"f32", "f16", "bf16", "i8",  "i32", "i64", "bool",
                                                     "u8",  "f64", "i16",  "u16", "u32", "u64"};
  return dt < RT_DT_COUNT ? names[dt] : "?";
}

void cg_print_ref(FILE *f, RtRef r) {
  switch (r.space) {
    case RT_SPACE_WEIGHTS: fprintf(f, "weights+%" PRIu64, r.offset); return;
    case RT_SPACE_ARENA: fprintf(f, "arena+%" PRIu64, r.offset); return;
    case RT_SPACE_INPUT: fprintf(f, "in%" PRIu32 "+%" PRIu64, r.index, r.offset); return;
    case RT_SPACE_OUTPUT: fprintf(f, "out%" PRIu32 "+%" PRIu64, r.index, r.offset); return;
    case RT_SPACE_STATUS: fprintf(f, "status+%" PRIu64, r.offset); return;
    case RT_SPACE_SYNC: fprintf(f, "sync+%" PRIu64, r.offset); return;
  }
  fprintf(f, "?%" PRIu32 "+%" PRIu64, r.space, r.offset);
}

static void print_desc(FILE *f, const char *what, uint32_t i, const RtTensorDesc *d) {
  fprintf(f, "  %s%" PRIu32 " ", what, i);
  ir_put_c_string(f, d->name);
  fprintf(f, " %s[", dtype_name(d->dtype));
  for (uint32_t k = 0; k < d->rank; k++) fprintf(f, "%s%" PRId64, k ? ", " : "", d->dims[k]);
  fprintf(f, "] %" PRIu64 " bytes at ", d->nbytes);
  cg_print_ref(f, d->where);
  if (d->length_output)
    fprintf(f, ", axis %" PRIu32 " of run-time length (output %" PRIu32 ")", d->length_axis, d->length_output - 1);
  fputc('\n', f);
}

static void print_gemm(FILE *f, const RtGemm *g) {
  /* int8 products write an int32 C */
  fprintf(f, "gemm %s%s m=%" PRId64 " n=%" PRId64 " k=%" PRId64 " trans=%s%s", dtype_name(g->dtype),
          g->dtype == RT_DT_I8 ? "->i32" : g->tf32 ? " tf32" : "",
          g->m, g->n, g->k, g->trans_a ? "T" : "N", g->trans_b ? "T" : "N");
  fprintf(f, " ld=%" PRId64 ",%" PRId64 ",%" PRId64, g->lda, g->ldb, g->ldc);
  if (g->batch != 1)
    fprintf(f, " batch=%" PRId64 " strides=%" PRId64 ",%" PRId64 ",%" PRId64, g->batch, g->stride_a,
            g->stride_b, g->stride_c);
  if (g->alpha != 1.0f || (g->beta != 0.0f && g->beta != 1.0f)) fprintf(f, " alpha=%g beta=%g", g->alpha, g->beta);
  fputs(" a=", f);
  cg_print_ref(f, g->a);
  fputs(" b=", f);
  cg_print_ref(f, g->b);
  fputs(" c=", f);
  cg_print_ref(f, g->c);
  if (g->beta != 0.0f) {
    fputs(" + C=", f);
    cg_print_ref(f, g->c_in);
  }
  static const char *const epilogues[] = {"", "bias", "relu+bias", "gelu+bias", "bgrad"};
  _Static_assert(sizeof epilogues / sizeof epilogues[0] == RT_EPILOGUE_COUNT, "a name per epilogue");
  if (g->epilogue) {
    fprintf(f, " epilogue=%s bias=", g->epilogue < RT_EPILOGUE_COUNT ? epilogues[g->epilogue] : "?");
    cg_print_ref(f, g->bias);
    if (g->stride_bias) fprintf(f, " stride_bias=%" PRId64, g->stride_bias);
  }
}

static void print_step(FILE *f, const RtPlan *p, const RtStep *s, const IrCost *cost) {
  switch (s->kind) {
    case RT_STEP_LAUNCH: {
      const RtLaunch *l = &s->launch;
      fprintf(f,
              "launch %s grid=%" PRIu32 ",%" PRIu32 ",%" PRIu32 " block=%" PRIu32 ",%" PRIu32
              ",%" PRIu32,
              l->kernel < p->n_kernels ? p->kernels[l->kernel].name : "?", l->grid[0], l->grid[1],
              l->grid[2], l->block[0], l->block[1], l->block[2]);
      if (l->dynamic_shared_bytes) fprintf(f, " shared=%" PRIu32, l->dynamic_shared_bytes);
      fputs(" (", f);
      for (uint32_t a = 0; a < l->n_args; a++) {
        const RtArg *arg = &l->args[a];
        if (a) fputs(", ", f);
        switch (arg->kind) {
          case RT_ARG_PTR: cg_print_ref(f, arg->ref); break;
          case RT_ARG_I32: fprintf(f, "i32 %" PRId64, arg->i); break;
          case RT_ARG_I64: fprintf(f, "i64 %" PRId64, arg->i); break;
          case RT_ARG_F32: fprintf(f, "f32 %.9g", (double)arg->f); break;
          default: fputs("?", f);
        }
      }
      fputc(')', f);
      break;
    }
    case RT_STEP_GEMM: print_gemm(f, &s->gemm); break;
    case RT_STEP_ALLREDUCE:
      if (!s->copy.nbytes) {
        fputs("wait for the all-reduces", f);
        break;
      }
      /* fall through */
    case RT_STEP_COPY:
      fputs(s->kind == RT_STEP_COPY                 ? "copy "
            : s->copy.reduce == RT_REDUCE_SUM ? "allreduce_sum "
                                              : "allreduce_mean ",
            f);
      cg_print_ref(f, s->copy.dst);
      fputs(" <- ", f);
      cg_print_ref(f, s->copy.src);
      fprintf(f, " %" PRIu64 " bytes", s->copy.nbytes);
      break;
    case RT_STEP_BRANCH:
    case RT_STEP_REPEAT: {
      bool back = s->kind == RT_STEP_REPEAT; /* a loop's end: back over its steps */
      fputs(back ? "repeat while " : "branch unless ", f);
      cg_print_ref(f, s->branch.cond);
      fprintf(f, " is %s: %s %" PRIu32 " step%s", s->branch.when ? "true" : "false", back ? "back" : "skip",
              s->branch.skip, s->branch.skip == 1 ? "" : "s");
      break;
    }
    default: fprintf(f, "step kind %" PRIu32, s->kind);
  }
  /* A label may quote a model's names (a plan read from a model.so): one line, whatever they hold. */
  fputs("  ; ", f);
  ir_put_comment_text(f, s->label);
  if (cost) {
    fputs("  [", f);
    cg_print_cost(f, *cost);
    fputc(']', f);
  }
  fputc('\n', f);
}

void cg_print_plan(FILE *f, const RtPlan *p) { cg_print_plan_costs(f, p, NULL); }

void cg_print_plan_costs(FILE *f, const RtPlan *p, const IrCost *costs) {
  fputs("plan ", f);
  ir_put_c_string(f, p->model_name ? p->model_name : "");
  fprintf(f, " version %" PRIu32 "\n", p->version);
  fprintf(f, "weights %" PRIu64 " bytes, ", p->weights_bytes);
  if (p->derived_bytes) fprintf(f, "derived %" PRIu64 " bytes at weights+%" PRIu64 ", ", p->derived_bytes,
                                p->weights_bytes);
  fprintf(f, "arena %" PRIu64 " bytes", p->arena_bytes);
  if (p->status_bytes) fprintf(f, ", index reports %" PRIu64 " bytes", p->status_bytes);
  if (p->sync_bytes) fprintf(f, ", counters %" PRIu64 " bytes", p->sync_bytes);
  fputc('\n', f);
  if (p->n_code_parts > 1) fprintf(f, "code in %" PRIu32 " parts (compiled side by side)\n", p->n_code_parts);
  for (uint32_t i = 0; i < p->n_inputs; i++) print_desc(f, "input ", i, &p->inputs[i]);
  for (uint32_t i = 0; i < p->n_outputs; i++) print_desc(f, "output ", i, &p->outputs[i]);
  for (uint32_t i = 0; i < p->n_weights; i++) print_desc(f, "weight ", i, &p->weights[i]);
  for (uint32_t i = 0; i < p->n_kernels; i++) {
    const RtKernel *k = &p->kernels[i];
    fprintf(f, "  kernel %" PRIu32 " %s", i, k->name);
    if (k->uses_barriers) fputs(" barriers", f);
    if (k->static_shared_bytes) fprintf(f, " shared=%" PRIu32, k->static_shared_bytes);
    if (k->cooperative) fputs(k->cooperative == RT_COOP_STRIDE ? " cooperative=stride" : " cooperative", f);
    fputc('\n', f);
  }
  /* Apart from a run's steps ("  12  launch ..."), so that counting a
   * run's launches in this text does not count them. */
  if (p->n_init_steps) {
    fprintf(f, "init steps %" PRIu32 " (once per change of the weights)\n", p->n_init_steps);
    for (uint32_t i = 0; i < p->n_init_steps; i++) {
      fprintf(f, "  init %3" PRIu32 "  ", i);
      print_step(f, p, &p->init_steps[i], costs ? &costs[i] : NULL);
    }
  }
  fprintf(f, "steps %" PRIu32 "\n", p->n_steps);
  for (uint32_t i = 0; i < p->n_steps; i++) {
    fprintf(f, "  %3" PRIu32 "  ", i);
    print_step(f, p, &p->steps[i], costs ? &costs[p->n_init_steps + i] : NULL);
  }
}

/* "103.4 MFLOP 2.9 MB", or the bytes alone for a step that computes
 * nothing. */
static const char *cost_text(Arena *a, IrCost c) {
  char buf[64] = "";
  FILE *m = fmemopen(buf, sizeof buf, "w");
  if (m) {
    cg_print_cost(m, c);
    fclose(m);
  }
  /* "0 FLOP " says nothing about a copy */
  const char *s = strncmp(buf, "0 FLOP ", 7) == 0 ? buf + 7 : buf;
  return arena_strdup(a, s);
}

static const char *dims3(Arena *a, const uint32_t *d) {
  if (d[1] == 1 && d[2] == 1) return arena_printf(a, "%" PRIu32, d[0]);
  return arena_printf(a, "%" PRIu32 "x%" PRIu32 "x%" PRIu32, d[0], d[1], d[2]);
}

static const char *step_note(Arena *a, const RtStep *s, IrCost c, bool init) {
  const char *what;
  switch (s->kind) {
    case RT_STEP_LAUNCH:
      what = arena_printf(a, "launch %s of %s", dims3(a, s->launch.grid), dims3(a, s->launch.block));
      break;
    case RT_STEP_GEMM:
      what = s->gemm.batch > 1 ? arena_printf(a, "gemm %" PRId64 " of %" PRId64 "x%" PRId64 "x%" PRId64,
                                              s->gemm.batch, s->gemm.m, s->gemm.n, s->gemm.k)
                               : arena_printf(a, "gemm %" PRId64 "x%" PRId64 "x%" PRId64, s->gemm.m, s->gemm.n,
                                              s->gemm.k);
      break;
    case RT_STEP_BRANCH: what = "branch"; break;
    case RT_STEP_REPEAT: what = "repeat"; break;
    default:
      what = s->kind != RT_STEP_ALLREDUCE           ? "copy"
             : s->copy.reduce == RT_REDUCE_SUM ? "allreduce_sum"
                                               : "allreduce_mean";
      break;
  }
  return arena_printf(a, "%s%s: %s", init ? "init " : "", what, cost_text(a, c));
}

const char **cg_dot_notes(Graph *g, const CgResult *r) {
  Arena *a = &g->ctx->arena;
  const char **notes = ARENA_ARRAY(a, const char *, g->n_nodes + 1);
  const RtPlan *p = r->plan;
  uint32_t n = p->n_init_steps + p->n_steps;
  for (uint32_t i = 0; i < n; i++) {
    bool init = i < p->n_init_steps;
    const RtStep *s = init ? &p->init_steps[i] : &p->steps[i - p->n_init_steps];
    const Node *node = r->step_nodes[i];
    if (!node || node->id < 0 || node->id >= g->n_nodes) continue;
    IrCost c = r->step_costs ? r->step_costs[i] : (IrCost){0, 0};
    const char *line = step_note(a, s, c, init);
    const char **at = &notes[node->id];
    *at = *at ? arena_printf(a, "%s\n%s", *at, line) : line;
  }
  return notes;
}
