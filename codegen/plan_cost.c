/* The plan's cost: takes the steps plan_build.c appended, what each
 * launch's kernel touches and which node or fusion group each run of
 * steps computes, and returns every step's FLOPs and minimum bytes; and
 * prints them for --emit=plan and --stats.  docs/cost.md says what
 * counts. */
#include <inttypes.h>
#include <math.h>

#include "codegen.h"
#include "ir/names.h"
#include "kernel.h"

/* ---- what a kernel touches ---- */

enum { MAX_LOOPS = 16 };

typedef struct Traffic {
  const Kernel *k;
  double *loads, *stores; /* per parameter */
  double ops;
  /* the loops around the statement walked, innermost last (the first
   * MAX_LOOPS of n_loops) */
  const KStmt *loops[MAX_LOOPS];
  int n_loops;
} Traffic;

/* An extent's value when it is known at compile time (an immediate, a
 * scalar parameter, index arithmetic on those). */
static bool known(const Kernel *k, const KExpr *e, double *v) {
  double a, b;
  switch (e->kind) {
    case KE_INT: *v = (double)e->i; return true;
    case KE_VAR:
      for (int p = 0; p < k->n_params; p++)
        if (k->params[p].var == e->var && k->params[p].arg.kind != RT_ARG_F32) {
          *v = (double)k->params[p].arg.i;
          return true;
        }
      return false;
    case KE_IDX:
      if (!known(k, e->a[0], &a) || !known(k, e->a[1], &b)) return false;
      switch ((KIdxOp)e->sub) {
        case KI_ADD: *v = a + b; return true;
        case KI_SUB: *v = a - b; return true;
        case KI_MUL: *v = a * b; return true;
        case KI_DIV: *v = b ? trunc(a / b) : 0; return true;
        case KI_MOD: *v = b ? fmod(a, b) : 0; return true;
        case KI_MIN: *v = a < b ? a : b; return true;
        case KI_MAX: *v = a > b ? a : b; return true;
        case KI_XOR: *v = (double)((int64_t)a ^ (int64_t)b); return true;
      }
      return false;
    default: return false;
  }
}

/* Trips of a loop: an extent unknown here counts once. */
static double trips(const Kernel *k, const KExpr *extent) {
  double v;
  return extent && known(k, extent, &v) && v > 0 ? v : 1;
}

static void touch(Traffic *t, const KBuf *buf, double times, bool store) {
  for (int p = 0; p < t->k->n_params; p++)
    if (t->k->params[p].buf == buf) (store ? t->stores : t->loads)[p] += times;
}

static void walk_expr(Traffic *t, const KExpr *e, double times) {
  if (!e) return;
  switch (e->kind) {
    case KE_LOAD: touch(t, e->buf, times, false); break;
    case KE_PACK4: touch(t, e->buf, 4 * times, false); break;
    case KE_OP: t->ops += times; break;
    case KE_DP4A: t->ops += 8 * times; break;
    default: break;
  }
  for (int i = 0; i < 3; i++) walk_expr(t, e->a[i], times);
}

/* How many times fewer than its if statement the body of an if runs
 * whose condition (or a conjunct of it) picks one iteration of an
 * enclosing loop (tx == 0: one lane of a warp does the update). */
static double picked(const Traffic *t, const KExpr *c) {
  if (c->kind == KE_AND) {
    double a = picked(t, c->a[0]), b = picked(t, c->a[1]);
    return a > b ? a : b;
  }
  if (c->kind != KE_CMP || c->sub != KC_EQ || c->a[0]->kind != KE_VAR || c->a[1]->kind != KE_INT) return 1;
  for (int i = 0; i < t->n_loops && i < MAX_LOOPS; i++)
    if (t->loops[i]->var == c->a[0]->var) return trips(t->k, t->loops[i]->extent);
  return 1;
}

/* times: how often the block runs over the whole launch, counting each
 * iteration of a mapped loop once (threads that repeat work are not
 * more traffic, only more cache hits). */
static void walk_block(Traffic *t, const KBlock *blk, double times) {
  for (const KStmt *st = blk->first; st; st = st->next) {
    double inner = times * trips(t->k, st->extent);
    switch (st->kind) {
      case KS_LOOP:
        walk_expr(t, st->extent, times);
        if (t->n_loops < MAX_LOOPS) t->loops[t->n_loops] = st;
        t->n_loops++;
        walk_block(t, &st->body, inner);
        t->n_loops--;
        break;
      case KS_REDUCE:
        walk_expr(t, st->init, times);
        walk_expr(t, st->extent, times);
        walk_block(t, &st->body, inner);
        walk_expr(t, st->value, inner);
        t->ops += inner;
        break;
      case KS_LET:
      case KS_SET: walk_expr(t, st->value, times); break;
      case KS_STORE:
        walk_expr(t, st->index, times);
        walk_expr(t, st->value, times);
        touch(t, st->buf, times, true);
        break;
      case KS_IF:
        walk_expr(t, st->cond, times);
        walk_block(t, &st->body, times / picked(t, st->cond));
        walk_block(t, &st->orelse, times);
        break;
      case KS_BARRIER:
      case KS_ALLREDUCE: break;
      case KS_GRID_SYNC: touch(t, st->buf, 2 * times, true); break;
      case KS_LAST_ARRIVAL:
        walk_expr(t, st->index, times);
        touch(t, st->buf, times, true);
        break;
      case KS_VLOAD:
        walk_expr(t, st->cond, times);
        walk_expr(t, st->index, times);
        touch(t, st->buf, st->n_lanes * times, false);
        break;
      case KS_VSTORE:
        walk_expr(t, st->index, times);
        for (int i = 0; i < st->n_lanes; i++) walk_expr(t, st->lanes[i], times);
        touch(t, st->buf, st->n_lanes * times, true);
        break;
      case KS_CHUNK:
        walk_expr(t, st->index, times);
        for (int i = 0; i < st->count; i++) walk_expr(t, st->chunk[i], times);
        touch(t, st->buf, st->count * times, true);
        break;
      case KS_MMA:
        /* a warp's 16 x 8 x K products, a 32nd of them each lane's */
        t->ops += times * 2 * 16 * 8 * (st->tc == KTC_S8 ? 32 : st->tc == KTC_TF32 ? 8 : 16) / 32;
        break;
      case KS_CP_ASYNC:
        walk_expr(t, st->src_at, times);
        walk_expr(t, st->value, times);
        touch(t, st->src, times * st->count / ir_dtype_size(st->src->dtype), false);
        break;
      case KS_LDMATRIX:
      case KS_CP_COMMIT:
      case KS_CP_WAIT:
      case KS_TF32: break;
      case KS_PACK:
        for (int i = 0; i < st->count; i++) walk_expr(t, st->chunk[i], times);
        break;
      case KS_WG_IF: /* the same work either way: count the wgmma side (the H200's) */
        walk_block(t, &st->body, times);
        break;
      case KS_WG_MMA:
        /* a warpgroup's 64 x N x K products, a 128th of them each thread's */
        t->ops += times * 2 * 64 * st->count * (st->tc == KTC_S8 ? 32 : 16) / 128;
        break;
      case KS_WG_FENCE:
      case KS_WG_COMMIT:
      case KS_WG_WAIT:
      case KS_WG_ACC:
      case KS_PROXY_FENCE: break;
    }
  }
}

static double at_most(double v, double cap) { return v < cap ? v : cap; }

CgStepNote cg_note_kernel(const Kernel *k) {
  CgStepNote note = {0};
  int np = k->n_params;
  double *counts = ARENA_ARRAY(&k->ctx->arena, double, 2 * np + 1);
  Traffic t = {.k = k, .loads = counts, .stores = counts + np};
  walk_block(&t, &k->body, 1);
  for (int p = 0; p < np; p++) {
    const KBuf *b = k->params[p].buf;
    if (!b || b->space != KSP_GLOBAL) continue;
    double all = (double)b->numel, size = ir_dtype_size(b->dtype);
    note.bytes += (at_most(t.loads[p], all) + at_most(t.stores[p], all)) * size;
    note.reads = note.reads || t.loads[p] > 0;
  }
  note.ops = t.ops;
  return note;
}

/* ---- each step's cost ---- */

static double dtype_bytes(uint32_t dt) { return dt < RT_DT_COUNT ? ir_dtype_size((DType)dt) : 0; }

/* A GEMM: 2mnk per matrix; A and B read once (a zero stride shares one
 * matrix across the batch), C written (and read when beta is not 0). */
static IrCost gemm_cost(const RtGemm *g) {
  double batch = (double)g->batch, m = (double)g->m, n = (double)g->n, k = (double)g->k;
  double es = dtype_bytes(g->dtype), esc = g->dtype == RT_DT_I8 ? 4 : es;
  double na = g->stride_a || g->batch == 1 ? batch : 1, nb = g->stride_b || g->batch == 1 ? batch : 1;
  double c = batch * m * n * esc;
  return (IrCost){2 * batch * m * n * k, (na * m * k + nb * k * n) * es + (g->beta != 0 ? 2 : 1) * c};
}

static IrCost step_cost(const RtStep *s, const CgStepNote *note) {
  switch (s->kind) {
    case RT_STEP_GEMM: return gemm_cost(&s->gemm);
    case RT_STEP_COPY:
    case RT_STEP_ALLREDUCE: return (IrCost){0, 2 * (double)s->copy.nbytes};
    case RT_STEP_BRANCH:
    case RT_STEP_REPEAT: return (IrCost){0, 1}; /* the condition's byte */
    default: return (IrCost){0, note->bytes};
  }
}

static IrCost unit_cost(const CgUnit *u) {
  if (!u->group) return ir_cost(u->node);
  IrCost c = ir_cost_fused(u->group->members, u->group->n);
  /* The side outputs are stored too. */
  for (int i = 0; i < u->group->n_side; i++) {
    const Value *v = &u->group->side[i]->out[0];
    c.bytes += (double)ir_type_numel(&v->type) * (double)ir_dtype_size(v->type.dtype);
  }
  return c;
}

IrCost *cg_plan_costs(Ctx *c, const RtStep *steps, const CgStepNote *notes, int n_steps,
                      const CgUnit *units, int n_units) {
  IrCost *cost = ARENA_ARRAY(&c->arena, IrCost, n_steps + 1);
  /* a launch that runs several kernels (plan_build.c's merged launches)
   * is the step of each of their units: their costs add */
  bool *whole_set = ARENA_ARRAY(&c->arena, bool, n_steps + 1);
  for (int s = 0; s < n_steps; s++) cost[s] = step_cost(&steps[s], &notes[s]);
  for (int i = 0; i < n_units; i++) {
    const CgUnit *u = &units[i];
    IrCost whole = unit_cost(u);
    /* A batched GEMM computes its batch's other products in the unit of
     * the first member lowered: their bytes are the step's own. */
    whole.flops -= u->flops_elsewhere;
    if (u->flops_elsewhere != 0) whole.bytes = cost[u->first].bytes;
    const RtStep *one = &steps[u->first];
    if (u->end - u->first == 1 &&
        (one->kind == RT_STEP_GEMM || (one->kind == RT_STEP_LAUNCH && notes[u->first].reads))) {
      if (whole_set[u->first])
        cost[u->first].flops += whole.flops, cost[u->first].bytes += whole.bytes;
      else
        cost[u->first] = whole;
      whole_set[u->first] = true;
      continue;
    }
    /* Several steps: what the GEMMs do not compute is the launches'
     * (not the fills'), shared by the arithmetic their kernels run. */
    double rest = whole.flops, weight = 0;
    int n_launches = 0;
    for (int s = u->first; s < u->end; s++) {
      if (steps[s].kind == RT_STEP_GEMM) rest -= cost[s].flops;
      if (steps[s].kind == RT_STEP_LAUNCH && notes[s].reads) weight += notes[s].ops, n_launches++;
    }
    if (rest <= 0) continue;
    if (!n_launches) {
      cost[u->end - 1].flops += rest;
      continue;
    }
    for (int s = u->first; s < u->end; s++)
      if (steps[s].kind == RT_STEP_LAUNCH && notes[s].reads) {
        cost[s].flops += weight > 0 ? rest * notes[s].ops / weight : rest / n_launches;
        whole_set[s] = true;
      }
  }
  return cost;
}

/* ---- printing ---- */

static void print_amount(FILE *f, double v, const char *unit) {
  static const char *const prefix[] = {"", "k", "M", "G", "T", "P", "E"};
  int p = 0;
  while (fabs(v) >= 999.95 && p < 6) v /= 1000, p++;
  if (p == 0)
    fprintf(f, "%.0f %s", v, unit);
  else
    fprintf(f, "%.1f %s%s", v, prefix[p], unit);
}

void cg_print_cost(FILE *f, IrCost c) {
  print_amount(f, c.flops, "FLOP");
  fputc(' ', f);
  print_amount(f, c.bytes, "B");
}

static IrCost total(const IrCost *c, uint32_t n) {
  IrCost t = {0, 0};
  for (uint32_t i = 0; i < n; i++) t.flops += c[i].flops, t.bytes += c[i].bytes;
  return t;
}

/* More FLOPs first, then the earlier step. */
static bool ranks_before(const IrCost *c, int a, int b) {
  return c[a].flops > c[b].flops || (c[a].flops == c[b].flops && a < b);
}

static double intensity(IrCost c) { return c.bytes > 0 ? c.flops / c.bytes : 0; }

void cg_print_cost_stats(FILE *f, const CgResult *r, int top) {
  const RtPlan *p = r->plan;
  if (!r->step_costs) return;
  const IrCost *init = r->step_costs, *run = r->step_costs + p->n_init_steps;
  IrCost t = total(run, p->n_steps), ti = total(init, p->n_init_steps);
  fprintf(f, "%10.0f cost: FLOPs per run\n", t.flops);
  fprintf(f, "%10.0f cost: minimum bytes per run (each step's operands read once, results written once)\n",
          t.bytes);
  fprintf(f, "%10.3f cost: FLOPs per byte per run (arithmetic intensity)\n", intensity(t));
  fprintf(f, "%10.0f cost: FLOPs at init (once per change of the weights)\n", ti.flops);
  fprintf(f, "%10.0f cost: minimum bytes at init\n", ti.bytes);
  /* The top steps by FLOPs, ties in plan order: each pick is the best
   * of those that rank after the one before. */
  int prev = -1;
  for (int rank = 1; rank <= top; rank++) {
    int best = -1;
    for (int s = 0; s < (int)p->n_steps; s++)
      if (run[s].flops > 0 && (prev < 0 || ranks_before(run, prev, s)) &&
          (best < 0 || ranks_before(run, s, best)))
        best = s;
    if (best < 0) break;
    prev = best;
    fprintf(f, "%10d cost: top step %d: ", best, rank);
    cg_print_cost(f, run[best]);
    fprintf(f, ", %.1f FLOP/B, %.1f%% of the run's FLOPs (", intensity(run[best]),
            t.flops > 0 ? 100 * run[best].flops / t.flops : 0.0);
    /* a label may hold an output's name: data, kept on its line */
    ir_put_comment_text(f, p->steps[best].label);
    fputs(")\n", f);
  }
}
